// Whether this process may run AMX tile instructions, and the tile configuration's layout: the CPU has the tile unit and the wanted
// dot-product unit (CPUID leaf 7, EDX), and Linux granted the process the tile state (arch_prctl
// ARCH_REQ_XCOMP_PERM for XTILEDATA, Linux 5.16+; without it a tile instruction faults). Shared by
// the builds that have an AMX path (prefill_attention_amx.cpp, matmul_amx.cpp): listed in their
// SOURCES before those files. Portable C++ elsewhere: answers false off x86-64 Linux.
#ifndef SG_AMX_TILES_CPP
#define SG_AMX_TILES_CPP 1
#include <cstdint>
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace {
namespace amx_tiles {

constexpr unsigned kBf16 = 1u << 22, kTile = 1u << 24, kInt8 = 1u << 25;   // CPUID 7.0 EDX bits

// `units` (kBf16 / kInt8) and the tile unit on the CPU, and the state granted; asked once per set.
inline bool granted(unsigned units) {
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__)
  static const bool state = [] {
    constexpr long kReqXcompPerm = 0x1023, kXtileData = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXtileData) == 0;
  }();
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const unsigned want = units | kTile;
  return (d & want) == want && state;
#else
  (void)units;
  return false;
#endif
}

// LDTILECFG's 64-byte operand, palette 1: each tile's rows and bytes per row (`shape`), the rest 0.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
  TileConfig& shape(int tile, int tile_rows, int bytes_per_row) {
    rows[tile] = static_cast<uint8_t>(tile_rows);
    colsb[tile] = static_cast<uint16_t>(bytes_per_row);
    return *this;
  }
};

}  // namespace amx_tiles
}  // namespace
#endif
