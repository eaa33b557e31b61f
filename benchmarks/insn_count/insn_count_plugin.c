/* A QEMU TCG plugin (plugin API version 1, as in QEMU 7.2's qemu-user) that counts the guest
 * instructions a program executes and prints "insns N" at exit, for benchmarks/bench_panel_insns.py.
 * Debian's qemu-user runs plugins but ships neither the API header nor its sample plugins, so the
 * few API declarations used here are written out (their signatures as QEMU's documented C API).
 * The count is inline (one add per translated block executed), not atomic: run one guest thread. */
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef uint64_t qemu_plugin_id_t;
typedef struct {
  const char* target_name;
  struct { int min, cur; } version;
  bool system_emulation;
  union { struct { int smp_vcpus, max_vcpus; } system; };
} qemu_info_t;
struct qemu_plugin_tb;
typedef void (*tb_trans_cb)(qemu_plugin_id_t, struct qemu_plugin_tb*);
typedef void (*udata_cb)(qemu_plugin_id_t, void*);
enum { INLINE_ADD_U64 = 0 };
void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t, tb_trans_cb);
void qemu_plugin_register_vcpu_tb_exec_inline(struct qemu_plugin_tb*, int op, void* ptr, uint64_t imm);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb*);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t, udata_cb, void*);
void qemu_plugin_outs(const char*);

__attribute__((visibility("default"))) int qemu_plugin_version = 1;
static uint64_t executed;

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb* tb) {
  (void)id;
  qemu_plugin_register_vcpu_tb_exec_inline(tb, INLINE_ADD_U64, &executed, qemu_plugin_tb_n_insns(tb));
}

static void on_exit(qemu_plugin_id_t id, void* unused) {
  (void)id;
  (void)unused;
  char line[64];
  snprintf(line, sizeof line, "insns %" PRIu64 "\n", executed);
  qemu_plugin_outs(line);
}

__attribute__((visibility("default"))) int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t* info, int argc,
                                                               char** argv) {
  (void)info;
  (void)argc;
  (void)argv;
  qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
  qemu_plugin_register_atexit_cb(id, on_exit, NULL);
  return 0;
}
