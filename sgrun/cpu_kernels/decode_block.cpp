// The decode forward's blocks between two attention calls, in C++: what llama.py's first_block /
// inner_block / layer_tail compute, for batches the matmul tiles serve (models/fused_decode.py
// drives it). Compiled after matmul.cpp, whose ops it calls, as one unit.
//
// Why: at one row a block's math is ~5 us of elementwise work around four matmuls, but calling it
// cost far more. Eager torch runs ~20 small ops a layer, and the torch.compile'd graph spends
// ~150 us a layer in its wrappers and guards (dynamo's cache lookup, AOT runtime wrappers,
// assert_size_stride on every argument): ~4.5 ms of a 12 ms batch-1 step. Here a block is one call
// with its weights already bound (a registry id from `decode_block_new`), so no compile, no
// guards, and nothing to warm up.
//
// Numbers: the residual stream, the norms and RoPE's arithmetic are float32; the GEMM inputs are
// rounded to the GEMM dtype once (bf16 or float32), where eager rounds after every op. Every row
// goes through the same code whatever the batch, as the tiles do, so a row is bit-identical alone
// and in any batch (speculative verify rows rely on it). The elementwise loops run over rows split
// across the thread team (for_row_chunks: one chunk at decode sizes, so a step stays on its thread);
// at a 2,048-token prefill they had been ~15% of the time on one core while the other waited.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <type_traits>
#include <unordered_map>
#include <unistd.h>
#include <utility>
#include <vector>

namespace decode_block {

inline uint16_t float_to_bf16(float f) {   // round to nearest even, NaN kept quiet
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// A tensor of the GEMM dtype (bf16 or float32) by raw pointer; `typed` below gives its elements.
struct Elems {
  void* p;
  bool bf16;
};

inline Elems elems(const at::Tensor& t) {
  return {t.data_ptr(), t.scalar_type() == at::kBFloat16};
}

// Element access with the dtype a template parameter: `typed(e, f)` calls f with a Typed<float>
// or a Typed<uint16_t>, so a loop over elements has no per-element dtype branch and GCC can
// vectorize it (a per-element branch kept the bias, norm, RoPE and residual loops scalar). The loops give
// the same bits either way: no loop below reassociates a sum, and RoPE's multiply-adds are written
// out as the scalar loop's contraction made them (see there).
template <class T>
struct Typed {
  T* p;
  float get(int64_t i) const {
    if constexpr (std::is_same_v<T, float>) return p[i];
    else return bf16_to_float(p[i]);
  }
  void set(int64_t i, float v) const {
    if constexpr (std::is_same_v<T, float>) p[i] = v;
    else p[i] = float_to_bf16(v);
  }
};

template <class F>
inline void typed(const Elems& e, F&& f) {
  if (e.bf16) f(Typed<uint16_t>{static_cast<uint16_t*>(e.p)});
  else f(Typed<float>{static_cast<float*>(e.p)});
}

// One weight in the tiles' layout. kind 0: int4 (a = codes, b = scales); 1: dense bf16 (a = packed);
// 2: int8 with float32 activations (a = blocked codes, b = blocked scales per column and group of 32). bias: optional.
struct Linear {
  int64_t kind = -1, n = 0;
  at::Tensor a, b, bias;

  // y = x W^T (+ bias) into y ([rows, n], the GEMM dtype; float32 for kind 2).
  void into(const at::Tensor& x, const at::Tensor& y) const {
    if (kind == 0) int4_mm_into(x, a, b, n, y);
    else if (kind == 1) bf16_mm_into(x, a, n, y);
    else int8_mm_f32_into(x, a, b, y);
    if (bias.defined()) {   // in place, in y's dtype, as eager's y + bias
      typed(elems(y), [&](auto e) {
        typed(elems(bias), [&](auto be) {
          for_row_chunks(at::get_num_threads(), y.size(0), n, [&](int64_t r0, int64_t r1) {
            for (int64_t r = r0; r < r1; ++r)
              for (int64_t i = 0; i < n; ++i) e.set(r * n + i, e.get(r * n + i) + be.get(i));
          });
        });
      });
    }
  }
};

// A block: [layer i's tail: o projection + residual, MLP] then [the next norm], then [layer i+1's
// q, k, v with RoPE]. The first block has no tail; the last has no q/k/v (its norm is the final one).
struct Block {
  bool tail = false, qkv_out = false;
  Linear o, gate_up, down, qkv;
  at::Tensor mlp_norm, next_norm;   // float32
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  double eps = 1e-6;
  at::ScalarType gemm = at::kBFloat16;
};

std::mutex registry_mutex;
std::unordered_map<int64_t, std::shared_ptr<const Block>> registry;
int64_t next_id = 1;

// out[r] = x[r] * rsqrt(mean(x[r]^2) + eps) * w, x and w float32; out in `out`'s dtype.
void rms_norm_rows(const float* x, const float* w, int64_t rows, int64_t dim, double eps, const Elems& out_elems) {
  typed(out_elems, [&](auto out) {
    for_row_chunks(at::get_num_threads(), rows, dim, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const float* xr = x + r * dim;
        float ss = 0.0f;
        for (int64_t i = 0; i < dim; ++i) ss += xr[i] * xr[i];   // in order: a vector sum would change bits
        const float inv = 1.0f / std::sqrt(ss / static_cast<float>(dim) + static_cast<float>(eps));
        for (int64_t i = 0; i < dim; ++i) out.set(r * dim + i, xr[i] * inv * w[i]);
      }
    });
  });
}

// h[r] += y[r] (y in the GEMM dtype).
void add_rows(float* h, const at::Tensor& y) {
  const int64_t dim = y.size(1);
  typed(elems(y), [&](auto e) {
    for_row_chunks(at::get_num_threads(), y.size(0), dim, [&](int64_t r0, int64_t r1) {
      for (int64_t i = r0 * dim; i < r1 * dim; ++i) h[i] += e.get(i);
    });
  });
}

// A block call's activations: the norm's output x, the gate_up rows, the SiLU product, a
// projection's rows (o or down) and the q/k/v rows, with q, k and v as views of those. A decode
// step's blocks run one after another on one thread, so the one-call forward keeps one set per
// thread and shape (`for_rows`) and its layers allocate nothing and make no views: at batch 1 a
// block's ~8 allocations and ~10 views cost ~30 us with the caches cold from the weights' stream.
// A fresh Scratch (decode_block_run's) allocates as the calls did before.
struct Scratch {
  int64_t rows = -1, dim = 0, inter = 0, width = 0;
  at::ScalarType gemm = at::kFloat;
  at::Tensor x, gate_up, act, proj, qkv, q, k, v;

  // Sized for `rows` rows of block b (every block of a model has one shape); reallocated only when
  // that changes.
  void for_rows(const Block& b, int64_t rows_now, int64_t dim_now) {
    const int64_t inter_now = b.tail ? b.gate_up.n / 2 : inter, width_now = b.qkv_out ? b.qkv.n : width;
    if (rows_now == rows && dim_now == dim && inter_now == inter && width_now == width && b.gemm == gemm) return;
    rows = rows_now, dim = dim_now, inter = inter_now, width = width_now, gemm = b.gemm;
    const auto opts = at::TensorOptions().dtype(gemm);
    x = at::empty({rows, dim}, opts);
    proj = at::empty({rows, dim}, opts);
    gate_up = inter > 0 ? at::empty({rows, 2 * inter}, opts) : at::Tensor();
    act = inter > 0 ? at::empty({rows, inter}, opts) : at::Tensor();
    qkv = width > 0 ? at::empty({rows, width}, opts) : at::Tensor();
    q = k = v = at::Tensor();
  }
};

// Block b on h ([rows, dim] float32, updated in place: the residual stream) with the attention
// output o ([rows, H * D] or [rows, H, D] in the GEMM dtype; undefined for the first block).
// Returns the normed rows (the last block: float32, newly allocated, the lm_head's input) or leaves
// q, k, v (RoPE applied) in s.q / s.k / s.v.
at::Tensor block_into(const Block& b, float* hp, int64_t rows, int64_t dim, const at::Tensor& o, const at::Tensor& cos,
                      const at::Tensor& sin, Scratch& s) {
  s.for_rows(b, rows, dim);
  if (b.tail) {
    TORCH_CHECK(o.scalar_type() == b.gemm && o.size(0) == rows, "o must be [T, H, D] in the GEMM dtype");
    b.o.into(o.dim() == 2 ? o : o.reshape({rows, -1}), s.proj);
    add_rows(hp, s.proj);
    rms_norm_rows(hp, b.mlp_norm.data_ptr<float>(), rows, dim, b.eps, elems(s.x));
    b.gate_up.into(s.x, s.gate_up);
    const int64_t inter = s.inter;
    typed(elems(s.gate_up), [&](auto g) {   // act has gu's dtype, the GEMM dtype
      const decltype(g) a{static_cast<decltype(g.p)>(s.act.data_ptr())};
      for_row_chunks(at::get_num_threads(), rows, inter, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t i = 0; i < inter; ++i) {
            const float gate = g.get(r * 2 * inter + i), up = g.get(r * 2 * inter + inter + i);
            a.set(r * inter + i, gate / (1.0f + std::exp(-gate)) * up);   // libm's expf: its bits
          }
      });
    });
    b.down.into(s.act, s.proj);
    add_rows(hp, s.proj);
  }
  if (!b.qkv_out) {   // the last block: the final norm, float32 (the lm_head's input)
    at::Tensor x = at::empty({rows, dim}, at::TensorOptions().dtype(at::kFloat));
    rms_norm_rows(hp, b.next_norm.data_ptr<float>(), rows, dim, b.eps, elems(x));
    return x;
  }
  rms_norm_rows(hp, b.next_norm.data_ptr<float>(), rows, dim, b.eps, elems(s.x));
  b.qkv.into(s.x, s.qkv);
  const int64_t H = b.heads, KV = b.kv_heads, D = b.head_dim, half = D / 2, width = (H + 2 * KV) * D;
  TORCH_CHECK(s.width == width && cos.size(0) == rows && cos.size(1) == D && cos.scalar_type() == b.gemm &&
                  sin.sizes() == cos.sizes() && sin.scalar_type() == b.gemm && cos.is_contiguous() && sin.is_contiguous(),
              "cos/sin must be contiguous [T, head_dim] in the GEMM dtype");
  // RoPE on q's and k's heads: (x1, x2) -> (x1 c - x2 s, x2 c + x1 s); cos, sin and qkv share the
  // GEMM dtype. The multiply-adds are written out: GCC contracted the scalar loop's expressions
  // into these two fmas, and left to itself it fuses the other product once the loop vectorizes,
  // which moved logprobs by up to 0.15 through the int8 activation rounding downstream (found 5 December 2026).
  typed(elems(s.qkv), [&](auto e) {
    const decltype(e) ce{static_cast<decltype(e.p)>(cos.data_ptr())}, se{static_cast<decltype(e.p)>(sin.data_ptr())};
    for_row_chunks(at::get_num_threads(), rows, (H + KV) * D, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t j = 0; j < H + KV; ++j) {
          const int64_t base = r * width + j * D;
          for (int64_t i = 0; i < half; ++i) {
            const float x1 = e.get(base + i), x2 = e.get(base + half + i);
            e.set(base + i, std::fma(-x2, se.get(r * D + i), x1 * ce.get(r * D + i)));
            e.set(base + half + i, std::fma(x1, se.get(r * D + half + i), x2 * ce.get(r * D + half + i)));
          }
        }
    });
  });
  // Views made once per Scratch shape and head layout (two models may share a qkv width with
  // other head counts: then they are made again).
  if (!s.q.defined() || s.q.size(1) != H || s.q.size(2) != D || s.k.size(1) != KV) {
    s.q = s.qkv.narrow(1, 0, H * D).view({rows, H, D});
    s.k = s.qkv.narrow(1, H * D, KV * D).view({rows, KV, D});
    s.v = s.qkv.narrow(1, (H + KV) * D, KV * D).view({rows, KV, D});
  }
  return at::Tensor();
}

// Block b as decode_block_run gives it: h_in left as it was (a tail works on a copy), fresh
// tensors out: [h, q, k, v], or [h, normed x] for the last block.
std::vector<at::Tensor> run_block(const Block& b, const at::Tensor& h_in, const at::Tensor& o, const at::Tensor& cos,
                                  const at::Tensor& sin) {
  TORCH_CHECK(h_in.dim() == 2 && h_in.scalar_type() == at::kFloat && h_in.is_contiguous(),
              "h must be a contiguous 2-D float32 tensor");
  const int64_t rows = h_in.size(0), dim = h_in.size(1);
  at::Tensor h = b.tail ? h_in.clone() : h_in;   // the caller's h is left as it was
  Scratch s;
  const at::Tensor x = block_into(b, h.data_ptr<float>(), rows, dim, o, b.qkv_out ? cos.contiguous() : cos,
                                  b.qkv_out ? sin.contiguous() : sin, s);
  if (!b.qkv_out) return {h, x};
  return {h, s.q, s.k, s.v};
}

Linear linear_of(int64_t kind, const at::Tensor& a, const at::Tensor& b, const c10::optional<at::Tensor>& bias,
                 int64_t n) {
  TORCH_CHECK(kind >= 0 && kind <= 2, "linear kind must be 0 (int4), 1 (bf16) or 2 (int8)");
  Linear l;
  l.kind = kind, l.n = n, l.a = a, l.b = b;
  if (bias.has_value() && bias->defined()) l.bias = bias->contiguous();
  return l;
}

}  // namespace decode_block

// Registers a block and returns its id. `linears`: [o, gate_up, down, qkv] as (kind, a, b, n) with
// `biases` [o, gate_up, down, qkv] (None where absent); a block without a tail passes kind -1 for
// o/gate_up/down, the last block -1 for qkv. `gemm_bf16`: the GEMM dtype is bf16 (else float32).
int64_t decode_block_new(std::vector<int64_t> kinds, std::vector<at::Tensor> a, std::vector<at::Tensor> b,
                         std::vector<int64_t> ns, std::vector<c10::optional<at::Tensor>> biases,
                         c10::optional<at::Tensor> mlp_norm, at::Tensor next_norm, int64_t heads, int64_t kv_heads,
                         int64_t head_dim, double eps, bool gemm_bf16) {
  using namespace decode_block;
  TORCH_CHECK(kinds.size() == 4 && a.size() == 4 && b.size() == 4 && ns.size() == 4 && biases.size() == 4,
              "a block takes 4 linears: o, gate_up, down, qkv");
  auto blk = std::make_shared<Block>();
  blk->tail = kinds[0] >= 0;
  blk->qkv_out = kinds[3] >= 0;
  if (blk->tail) {
    TORCH_CHECK(mlp_norm.has_value() && mlp_norm->scalar_type() == at::kFloat, "a tail needs the float32 MLP norm");
    blk->o = linear_of(kinds[0], a[0], b[0], biases[0], ns[0]);
    blk->gate_up = linear_of(kinds[1], a[1], b[1], biases[1], ns[1]);
    blk->down = linear_of(kinds[2], a[2], b[2], biases[2], ns[2]);
    blk->mlp_norm = mlp_norm->contiguous();
  }
  if (blk->qkv_out) blk->qkv = linear_of(kinds[3], a[3], b[3], biases[3], ns[3]);
  TORCH_CHECK(next_norm.scalar_type() == at::kFloat, "the next norm must be float32");
  blk->next_norm = next_norm.contiguous();
  blk->heads = heads, blk->kv_heads = kv_heads, blk->head_dim = head_dim, blk->eps = eps;
  TORCH_CHECK(head_dim % 2 == 0, "head_dim must be even");
  blk->gemm = gemm_bf16 ? at::kBFloat16 : at::kFloat;
  std::lock_guard<std::mutex> lock(registry_mutex);
  const int64_t id = next_id++;
  registry.emplace(id, std::move(blk));
  return id;
}

// Runs block `id`: returns [h, q, k, v] ([h, normed x] for the last block). o / cos / sin may be
// None where the block does not use them (the first block has no o; the last uses no cos/sin).
std::vector<at::Tensor> decode_block_run(int64_t id, const at::Tensor& h, const c10::optional<at::Tensor>& o,
                                         const c10::optional<at::Tensor>& cos, const c10::optional<at::Tensor>& sin) {
  using namespace decode_block;
  std::shared_ptr<const Block> blk;
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    auto it = registry.find(id);
    TORCH_CHECK(it != registry.end(), "no decode block ", id);
    blk = it->second;
  }
  TORCH_CHECK(!blk->tail || o.has_value(), "this block needs the attention output o");
  TORCH_CHECK(!blk->qkv_out || (cos.has_value() && sin.has_value()), "this block needs cos and sin");
  static const at::Tensor none;
  return run_block(*blk, h, o.has_value() ? *o : none, cos.has_value() ? *cos : none, sin.has_value() ? *sin : none);
}

// The next decode step's first weights, read into the cache by the thread team's idle worker while
// the engine thread runs Python between steps (thread_team.cpp's post_idle). Why: a batch-1 step
// streams every weight from DRAM (~96 MB for SmolLM2 through a 32 MiB L3), and between two steps
// the engine thread spends ~0.8 ms in Python (schedule, sampling, postprocess) while the worker only
// spins and the memory bus idles. Reading the first blocks' weights then (in the forward's order)
// lets the next step start on cached weights. decode_logits posts it after its lm_head (whose 28 MB
// stream would otherwise evict them) and cancels it when the next forward starts. The budget is
// small on purpose: in-process A/Bs on Zen 4 (docs/cpu_kernels.md) read the step 3-4% shorter with
// 2-4 MB and 1-4% longer with 8-16 MB, where the worker's stream delays Python's own cache misses
// (~0.2 ms more Python a step). SGRUN_PREFETCH_MB sets it (0: off); the default is 4 MB, at most a
// quarter of the L3 the OS reports (2 MB where it reports none).
namespace decode_block {

struct WeightPrefetch {
  std::vector<int64_t> ids;                          // the forward this plan is for
  int64_t budget = 0;                                // the bytes it was cut to
  std::vector<std::shared_ptr<const Block>> blocks;  // keep the weights alive while a piece reads them
  std::vector<std::pair<const char*, int64_t>> ranges;
  std::vector<int64_t> starts;                       // each range's offset in the concatenation
  int64_t total = 0;
};

constexpr int64_t kPrefetchPiece = 64 << 10;   // bytes a worker reads between checks for a job

// Read at every post, so a benchmark can switch it within one process (an A/B alternated per
// request, bench_decode_ab.py); the L3's size once.
int64_t prefetch_budget() {
  if (const char* v = std::getenv("SGRUN_PREFETCH_MB"); v != nullptr && *v != '\0')
    return std::max<int64_t>(0, std::atoll(v)) << 20;
  static const int64_t by_l3 = [] {
    long l3 = -1;
#ifdef _SC_LEVEL3_CACHE_SIZE
    l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
    constexpr int64_t kMost = int64_t(4) << 20;
    return l3 > 0 ? std::min<int64_t>(kMost, static_cast<int64_t>(l3) / 4) : int64_t(2) << 20;
  }();
  return by_l3;
}

// sgrun team::PieceFn: reads one byte of every cache line of piece `piece` (volatile loads: the
// lines come in; nothing is written).
std::atomic<int64_t> prefetched_bytes{0};   // read so far, for tests and reports

bool prefetch_piece(void* ctx, int64_t piece) {
  const auto* p = static_cast<const WeightPrefetch*>(ctx);
  int64_t at = piece * kPrefetchPiece;
  if (at >= p->total) return false;
  const int64_t end = std::min(at + kPrefetchPiece, p->total);
  prefetched_bytes.fetch_add(end - at, std::memory_order_relaxed);
  size_t r = static_cast<size_t>(std::upper_bound(p->starts.begin(), p->starts.end(), at) - p->starts.begin()) - 1;
  while (at < end && r < p->ranges.size()) {
    const int64_t in = at - p->starts[r], len = std::min(end - at, p->ranges[r].second - in);
    const volatile char* bytes = p->ranges[r].first + in;
    for (int64_t i = 0; i < len; i += 64) (void)bytes[i];
    at += len;
    ++r;
  }
  return true;
}

// The posted plan, guarded by prefetch_mutex. Never destroyed, as the team is not: at exit a worker
// may still be reading while static destructors run, and this keeps its weights alive until then.
std::mutex& prefetch_mutex = *new std::mutex();
std::unique_ptr<WeightPrefetch>& prefetch_plan = *new std::unique_ptr<WeightPrefetch>();

// The plan for the forward over `blocks` (ids `ids`): their linears' weights in the order the
// forward reads them, up to the budget.
std::unique_ptr<WeightPrefetch> plan_for(const std::vector<int64_t>& ids,
                                         const std::vector<std::shared_ptr<const Block>>& blocks, int64_t budget) {
  auto p = std::make_unique<WeightPrefetch>();
  p->ids = ids;
  p->budget = budget;
  p->blocks = blocks;
  auto add = [&](const at::Tensor& t) {
    if (!t.defined() || p->total >= budget) return;
    if (!p->ranges.empty() && p->ranges.back().first == static_cast<const char*>(t.data_ptr())) return;
    const int64_t bytes = std::min<int64_t>(static_cast<int64_t>(t.nbytes()), budget - p->total);
    p->ranges.emplace_back(static_cast<const char*>(t.data_ptr()), bytes);
    p->starts.push_back(p->total);
    p->total += bytes;
  };
  for (const auto& b : blocks) {
    if (b->tail)
      for (const Linear* l : {&b->o, &b->gate_up, &b->down}) add(l->a), add(l->b);
    if (b->qkv_out) add(b->qkv.a), add(b->qkv.b);
  }
  return p;
}

// Posts the weights' read for the next forward over blocks `ids` (decode_logits, after its lm_head).
void post_weight_prefetch(const std::vector<int64_t>& ids) {
  const int64_t budget = prefetch_budget();
  if (budget <= 0 || at::get_num_threads() < 2) return;
  std::lock_guard<std::mutex> lock(prefetch_mutex);
  if (!prefetch_plan || prefetch_plan->ids != ids || prefetch_plan->budget != budget) {
    std::vector<std::shared_ptr<const Block>> blocks;
    {
      std::lock_guard<std::mutex> reg(registry_mutex);
      for (int64_t id : ids) {
        auto it = registry.find(id);
        if (it == registry.end()) return;   // freed meanwhile: nothing to read
        blocks.push_back(it->second);
      }
    }
    std::unique_ptr<WeightPrefetch> plan = plan_for(ids, blocks, budget);
    team::get().post_idle(nullptr, nullptr);   // no worker reads the old plan past this
    prefetch_plan = std::move(plan);
  }
  team::get().post_idle(prefetch_piece, prefetch_plan.get());
}

// Stops the read (a forward starts: its own stream takes over), keeping the plan for the next post.
void cancel_weight_prefetch(bool drop_plan) {
  std::lock_guard<std::mutex> lock(prefetch_mutex);
  if (!prefetch_plan) return;
  team::get().post_idle(nullptr, nullptr);
  if (drop_plan) prefetch_plan.reset();
}

}  // namespace decode_block

// The bytes the idle worker has read ahead in this process (post_weight_prefetch above).
int64_t weight_prefetch_bytes() { return decode_block::prefetched_bytes.load(std::memory_order_relaxed); }

// The whole decode forward of an all-decode batch in one call: block, attention, block, ... with
// the attention a layer's KV write and paged decode in the paged-decode module, reached through
// `attention_fn` (the address decode_layer_address gives, a sgrun_abi::DecodeLayerFn). `ids`: the
// first block, the inner blocks, the last; h: the embedded rows [R, hidden] float32; cos / sin
// [R, head_dim] in the GEMM dtype; the pool's caches per layer and the batch's attention tensors
// as CppPagedAttention prepared them (out / lse: its float32 kernel outputs). Returns the final
// norm's rows [R, hidden] float32 (the lm_head's input). The same arithmetic as the Python loop
// over decode_block_run and CppPagedAttention (fused_decode.py), so the logits are bitwise the
// same; what goes is ~30 us of Python a layer, and the GIL is released for the whole forward.
namespace decode_block {

// decode_forward's work, on a thread that does not hold the GIL.
at::Tensor forward_without_gil(const std::vector<int64_t>& ids, const at::Tensor& h, const at::Tensor& cos,
                               const at::Tensor& sin, int64_t attention_fn, std::vector<at::Tensor>& k_caches,
                               std::vector<at::Tensor>& v_caches, const at::Tensor& write_pages,
                               const at::Tensor& write_offsets, const at::Tensor& table, const at::Tensor& lens,
                               const at::Tensor& starts, double scale, const at::Tensor& out, const at::Tensor& lse) {
  std::vector<std::shared_ptr<const Block>> blocks;
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    for (int64_t id : ids) {
      auto it = registry.find(id);
      TORCH_CHECK(it != registry.end(), "no decode block ", id);
      blocks.push_back(it->second);
    }
  }
  const int64_t layers = static_cast<int64_t>(blocks.size()) - 1;
  TORCH_CHECK(layers >= 1 && !blocks.front()->tail && blocks.front()->qkv_out && !blocks.back()->qkv_out,
              "ids: the first block, the inner blocks, then the last");
  TORCH_CHECK(static_cast<int64_t>(k_caches.size()) == layers && static_cast<int64_t>(v_caches.size()) == layers,
              "one k and one v cache per layer");
  TORCH_CHECK(attention_fn != 0, "attention_fn: the address decode_layer_address gives");
  const auto attend = reinterpret_cast<sgrun_abi::DecodeLayerFn>(attention_fn);
  sgrun_abi::DecodeAttention a;
  a.k_caches = k_caches.data(), a.v_caches = v_caches.data(), a.layers = layers;
  a.write_pages = write_pages, a.write_offsets = write_offsets, a.table = table, a.lens = lens, a.starts = starts;
  a.scale = scale, a.out = out, a.lse = lse;
  const at::ScalarType gemm = blocks.front()->gemm;
  TORCH_CHECK(h.dim() == 2 && h.scalar_type() == at::kFloat, "h must be a 2-D float32 tensor");
  const int64_t rows = h.size(0), dim = h.size(1);
  const at::Tensor hs = h.clone(), cc = cos.contiguous(), sc = sin.contiguous();   // the residual stream, in place
  float* hp = hs.data_ptr<float>();
  thread_local Scratch scratch;   // a step's layers share it; the next step on this thread reuses it
  block_into(*blocks.front(), hp, rows, dim, at::Tensor(), cc, sc, scratch);
  // The kernel's float32 rows as the next block's input: out itself, or a copy in the GEMM dtype.
  const at::Tensor o_gemm = gemm == at::kFloat ? out : at::empty(out.sizes(), out.options().dtype(gemm));
  at::Tensor x;
  for (int64_t layer = 0; layer < layers; ++layer) {
    attend(a, layer, scratch.q, scratch.k, scratch.v);
    if (gemm != at::kFloat) o_gemm.copy_(out);
    x = block_into(*blocks[layer + 1], hp, rows, dim, o_gemm, cc, sc, scratch);
  }
  return x;
}

}  // namespace decode_block

at::Tensor decode_forward(std::vector<int64_t> ids, at::Tensor h, at::Tensor cos, at::Tensor sin, int64_t attention_fn,
                          std::vector<at::Tensor> k_caches, std::vector<at::Tensor> v_caches, at::Tensor write_pages,
                          at::Tensor write_offsets, at::Tensor table, at::Tensor lens, at::Tensor starts, double scale,
                          at::Tensor out, at::Tensor lse) {
  pybind11::gil_scoped_release no_gil;   // the engine thread must not stall the server's threads
  decode_block::cancel_weight_prefetch(false);
  return decode_block::forward_without_gil(ids, h, cos, sin, attention_fn, k_caches, v_caches, write_pages,
                                           write_offsets, table, lens, starts, scale, out, lse);
}

// decode_logits' tables, bound once like a block's weights: the int8 embedding and lm_head in
// int8_mm_f32's layout (Int8Linear's blocked codes and fp16 scales) and the cos / sin tables by
// position. Registered beside the blocks (the same ids, freed by decode_block_free).
namespace decode_block {

struct TokenTables {
  at::Tensor embed_q, embed_scale, cos, sin, head_q, head_scale;
};

std::unordered_map<int64_t, std::shared_ptr<const TokenTables>> tables_registry;

}  // namespace decode_block

int64_t decode_tables_new(at::Tensor embed_q, at::Tensor embed_scale, at::Tensor cos, at::Tensor sin, at::Tensor head_q,
                          at::Tensor head_scale) {
  using namespace decode_block;
  TORCH_CHECK(cos.dim() == 2 && sin.sizes() == cos.sizes(), "cos and sin must be [positions, head_dim] tables");
  auto t = std::make_shared<TokenTables>();
  t->embed_q = embed_q, t->embed_scale = embed_scale, t->cos = cos, t->sin = sin;
  t->head_q = head_q, t->head_scale = head_scale;
  std::lock_guard<std::mutex> lock(registry_mutex);
  const int64_t id = next_id++;
  tables_registry.emplace(id, std::move(t));
  return id;
}

// An all-decode batch from its tokens to its logits in one call: decode_forward between the
// embedding lookup (matmul.cpp's int8_table_rows, as Int8Linear.rows), the cos / sin rows of the
// positions, and the lm_head over every row (int8 with float32 activations, int8_mm_f32), with the
// tables of `tables_id` (decode_tables_new). It takes decode_forward's arguments with the tables'
// id, the tokens and their positions in place of h, cos and sin. The same ops as FusedDecode's
// Python around decode_forward, so the same bits; what goes is ~10 torch calls a step, 0.1-0.2 ms
// of a batch-1 step that runs them with cold caches after the weights' stream (docs/cpu_kernels.md).
at::Tensor decode_logits(std::vector<int64_t> ids, int64_t tables_id, at::Tensor tokens, at::Tensor positions,
                         int64_t attention_fn, std::vector<at::Tensor> k_caches, std::vector<at::Tensor> v_caches,
                         at::Tensor write_pages, at::Tensor write_offsets, at::Tensor table, at::Tensor lens,
                         at::Tensor starts, double scale, at::Tensor out, at::Tensor lse) {
  using namespace decode_block;
  TORCH_CHECK(tokens.dim() == 1 && tokens.scalar_type() == at::kLong && positions.sizes() == tokens.sizes() &&
                  positions.scalar_type() == at::kLong,
              "tokens and positions must be 1-D int64 tensors of one length");
  std::shared_ptr<const TokenTables> t;
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    auto it = tables_registry.find(tables_id);
    TORCH_CHECK(it != tables_registry.end(), "no decode tables ", tables_id);
    t = it->second;
  }
  pybind11::gil_scoped_release no_gil;
  cancel_weight_prefetch(false);   // this forward's own stream takes over
  const at::Tensor h = int8_table_rows(t->embed_q, t->embed_scale, tokens);
  const at::Tensor cos = t->cos.index_select(0, positions), sin = t->sin.index_select(0, positions);
  const at::Tensor x = forward_without_gil(ids, h, cos, sin, attention_fn, k_caches, v_caches, write_pages,
                                           write_offsets, table, lens, starts, scale, out, lse);
  at::Tensor logits = int8_mm_f32(x, t->head_q, t->head_scale);
  post_weight_prefetch(ids);   // read while the engine thread is in Python until the next step
  return logits;
}

// Drops blocks and token tables (their weights' references with them).
void decode_block_free(std::vector<int64_t> ids) {
  {
    std::lock_guard<std::mutex> lock(decode_block::registry_mutex);
    for (int64_t id : ids) {
      decode_block::registry.erase(id);
      decode_block::tables_registry.erase(id);
    }
  }
  // Then the read and its plan, which may hold these blocks: erased first, no later post can find them.
  decode_block::cancel_weight_prefetch(true);
}

namespace {

// sgrun_abi::ParallelFn over this module's team.
void team_items(int64_t n, sgrun_abi::ItemsFn fn, void* ctx) {
  team::parallel_for(at::get_num_threads(), n, 1, [&](int64_t begin, int64_t end) { fn(ctx, begin, end); });
}

}  // namespace

// The address of a sgrun_abi::ParallelFn running items on this module's thread team, for the
// paged-decode module's set_parallel.
int64_t team_parallel_address() { return reinterpret_cast<int64_t>(&team_items); }
