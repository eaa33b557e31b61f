// The one signature two kernel modules share: a decode layer's attention (KV write + paged decode)
// for an all-decode batch, which the paged-decode module (paged_decode.cpp) implements and the
// matmul module's decode forward (decode_block.cpp) calls through a function pointer between its
// blocks, so a batch-1 step crosses from Python into C++ once rather than ~4 times a layer.
// Why a pointer and not the attention's sources compiled into the matmul module as well: a
// decode row must get bitwise the same attention whichever path runs it (the Python loop for a
// mixed or cascade batch, the C++ loop otherwise; speculative verify rows rely on it), and one
// compiled copy of the kernel guarantees that where two builds with other flags would not.
// Compiled into both modules, after torch's headers; the struct holds only tensors and numbers,
// so both sides agree on its layout (they are built against the same torch).
namespace sgrun_abi {

struct DecodeAttention {
  const at::Tensor* k_caches = nullptr;   // [layers] of [KV, N, ps, D], the pool's
  const at::Tensor* v_caches = nullptr;
  int64_t layers = 0;
  at::Tensor write_pages, write_offsets;  // int64 [R]: where each row's new K/V goes
  at::Tensor table, lens, starts;         // paged_decode's page table [R, P], context lengths, cascade starts
  double scale = 1.0;
  at::Tensor out, lse;                    // float32 [R, H * D] and [R, H]: the layer's attention output
  const int64_t* windows = nullptr;       // [layers]: each layer's sliding window (0: global); null: all global
};

// Writes layer `layer`'s new k / v ([R, KV, D] views) into the pool and attends q ([R, H, D]) into
// a.out / a.lse. Called without the GIL.
using DecodeLayerFn = void (*)(const DecodeAttention& a, int64_t layer, const at::Tensor& q, const at::Tensor& k,
                               const at::Tensor& v);

// Runs fn(ctx, begin, end) over [0, n), one item a chunk, on the matmul module's thread team
// (thread_team.cpp), the caller among its threads. The paged-decode module takes its items through
// it once set (paged_decode.cpp's set_parallel): that module's own at::parallel_for wakes sleeping
// OpenMP workers (~30 us) on the engine thread, so it kept batch-1 attention on one thread while
// the team's worker spun idle beside it.
using ItemsFn = void (*)(void* ctx, int64_t begin, int64_t end);
using ParallelFn = void (*)(int64_t n, ItemsFn fn, void* ctx);

}  // namespace sgrun_abi
