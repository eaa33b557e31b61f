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
//
// The architectures beyond Llama set options (decode_block_configure, decode_block_moe) before the
// block first runs; each is a per-block choice taken outside the element loops:
// - tail: the MLP's activation (SiLU or GELU-tanh), sandwich norms (the o projection's and the
//   MLP's outputs RMSNormed before their residual add: Gemma 3), or routed experts in place of the
//   MLP (MoE below);
// - q/k/v: q and k RMSNormed after the projection (and its bias), before RoPE, per head ("head":
//   Qwen3, Gemma 3) or over all heads together ("full": OLMoE); RoPE over the first rotary_dim
//   dims of each head (the rest pass through), from the forward's table `rope`, or none (-1: a NoPE
//   layer, SmolLM3).
enum class Act : int64_t { silu = 0, gelu_tanh = 1 };
enum class QkNorm : int64_t { none = 0, head = 1, full = 2 };

// Routed experts (Qwen3-MoE, OLMoE, Mixtral): router [E, hidden] float32 over the float32 normed
// MLP input; softmax over the E logits, the top_k (ties: the lower expert first), renormalised to
// sum 1 when norm_topk; the output is the chosen experts' down(act(gate) * up) weighted and summed
// in float32 in ascending expert order. Each expert's fused gate|up and down stay in their packed
// tiles (int4 / bf16 / int8 as the other linears): a step reads only the experts its rows chose.
struct MoE {
  at::Tensor router;                   // float32 [E, hidden], contiguous
  std::vector<Linear> gate_up, down;   // E each
  int64_t top_k = 0, inter = 0;
  bool norm_topk = false;
};

struct Block {
  bool tail = false, qkv_out = false;
  Linear o, gate_up, down, qkv;
  at::Tensor mlp_norm, next_norm;   // float32
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  double eps = 1e-6;
  at::ScalarType gemm = at::kBFloat16;
  // decode_block_configure's options (defaults: Llama's)
  Act act = Act::silu;
  at::Tensor post_attn_norm, post_mlp_norm;   // float32 [hidden], or undefined
  QkNorm qk_norm = QkNorm::none;
  at::Tensor q_norm, k_norm;                  // float32: [head_dim] (head) or [H * D] / [KV * D] (full)
  int64_t rotary_dim = 0;                     // 0: head_dim
  int64_t rope = 0;                           // index of the forward's cos / sin tables; -1: no RoPE
  std::shared_ptr<const MoE> moe;             // set: the tail's MLP is these experts
};

std::mutex registry_mutex;
std::unordered_map<int64_t, std::shared_ptr<Block>> registry;   // options are set before a block first runs
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

// h[r] += rmsnorm(y[r]) * w (y in the GEMM dtype, the norm in float32): a sandwich norm's residual add.
void add_normed_rows(float* h, const at::Tensor& y, const float* w, double eps) {
  const int64_t dim = y.size(1);
  typed(elems(y), [&](auto e) {
    for_row_chunks(at::get_num_threads(), y.size(0), dim, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        float ss = 0.0f;
        for (int64_t i = 0; i < dim; ++i) ss += e.get(r * dim + i) * e.get(r * dim + i);   // in order
        const float inv = 1.0f / std::sqrt(ss / static_cast<float>(dim) + static_cast<float>(eps));
        for (int64_t i = 0; i < dim; ++i) h[r * dim + i] += e.get(r * dim + i) * inv * w[i];
      }
    });
  });
}

// GELU with tanh's approximation, as torch's gelu(approximate="tanh"): 0.5 x (1 + tanh(c (x + 0.044715 x^3))).
inline float gelu_tanh(float x) {
  constexpr float kC = 0.7978845608028654f;   // sqrt(2 / pi)
  return 0.5f * x * (1.0f + std::tanh(kC * (x + 0.044715f * x * x * x)));
}

// out[r] = act(gate[r]) * up[r] for rows of fused gate|up ([rows, 2 * inter]); out [rows, inter].
// Both in the GEMM dtype; the activation is the block's, chosen once outside the loop.
void act_rows(Act act, const at::Tensor& gu, const at::Tensor& out, int64_t rows, int64_t inter) {
  typed(elems(gu), [&](auto g) {
    const decltype(g) a{static_cast<decltype(g.p)>(out.data_ptr())};
    auto loop = [&](auto f) {
      for_row_chunks(at::get_num_threads(), rows, inter, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t i = 0; i < inter; ++i)
            a.set(r * inter + i, f(g.get(r * 2 * inter + i)) * g.get(r * 2 * inter + inter + i));
      });
    };
    if (act == Act::gelu_tanh) loop([](float x) { return gelu_tanh(x); });
    else loop([](float x) { return x / (1.0f + std::exp(-x)); });   // SiLU; libm's expf: its bits
  });
}

// q and k of each row RMSNormed in place in the q|k|v rows ([rows, width], the GEMM dtype):
// segments of `seg` elements from the row's start (q: H * D elements, then k: KV * D), each
// normed over itself in float32 with q_norm / k_norm ([seg], or [H * D] / [KV * D] for one segment).
void qk_norm_rows(const Block& b, const at::Tensor& qkv, int64_t rows) {
  const int64_t H = b.heads, KV = b.kv_heads, D = b.head_dim, width = qkv.size(1);
  const bool head = b.qk_norm == QkNorm::head;
  const float* qw = b.q_norm.data_ptr<float>();
  const float* kw = b.k_norm.data_ptr<float>();
  const float eps = static_cast<float>(b.eps);
  typed(elems(qkv), [&](auto e) {
    auto norm = [&](int64_t base, int64_t n, const float* w) {
      float ss = 0.0f;
      for (int64_t i = 0; i < n; ++i) ss += e.get(base + i) * e.get(base + i);   // in order
      const float inv = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
      for (int64_t i = 0; i < n; ++i) e.set(base + i, e.get(base + i) * inv * w[i]);
    };
    for_row_chunks(at::get_num_threads(), rows, (H + KV) * D, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        if (head) {
          for (int64_t j = 0; j < H + KV; ++j) norm(r * width + j * D, D, j < H ? qw : kw);
        } else {
          norm(r * width, H * D, qw);
          norm(r * width + H * D, KV * D, kw);
        }
      }
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
  // MoE tails' (moe_for): the float32 normed rows (the router's input), the router's
  // probabilities, the float32 sum of the experts, and one expert's gathered rows, gate|up, product
  // and output.
  int64_t moe_rows = -1, moe_dim = 0, moe_inter = 0, moe_experts = 0;
  at::ScalarType moe_gemm = at::kFloat;
  at::Tensor xf, probs, acc, ex, egu, eact, eout;

  // Sized for `rows` rows of block b (every block of a model has one shape); reallocated only when
  // that changes. An MoE tail keeps the dense MLP's buffers (a model may mix both kinds of layer).
  void for_rows(const Block& b, int64_t rows_now, int64_t dim_now) {
    const int64_t inter_now = b.tail && !b.moe ? b.gate_up.n / 2 : inter, width_now = b.qkv_out ? b.qkv.n : width;
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

  void moe_for(const MoE& m, at::ScalarType gemm_now, int64_t rows_now, int64_t dim_now) {
    const int64_t experts = m.router.size(0);
    if (rows_now == moe_rows && dim_now == moe_dim && m.inter == moe_inter && experts == moe_experts &&
        gemm_now == moe_gemm)
      return;
    moe_rows = rows_now, moe_dim = dim_now, moe_inter = m.inter, moe_experts = experts, moe_gemm = gemm_now;
    const auto f32 = at::TensorOptions().dtype(at::kFloat), opts = at::TensorOptions().dtype(gemm_now);
    xf = at::empty({rows_now, dim_now}, f32);
    acc = at::empty({rows_now, dim_now}, f32);
    probs = at::empty({rows_now, experts}, f32);
    ex = at::empty({rows_now, dim_now}, opts);
    egu = at::empty({rows_now, 2 * m.inter}, opts);
    eact = at::empty({rows_now, m.inter}, opts);
    eout = at::empty({rows_now, dim_now}, opts);
  }
};

// The routed experts on the normed rows: s.x (the GEMM dtype, the experts' input) and s.xf
// (float32, the router's); their weighted sum into s.acc ([rows, dim] float32).
//
// Grouped per expert: the rows that chose expert e are gathered (in row order) into one matrix and
// its gate|up and down run once over them, so each chosen expert's packed weights stream once per
// step and an expert no row chose is never read (at batch 1: only the top_k chosen). Batch
// invariance: a row's router logits, softmax and top-k are its own; the tiles give a row the same
// bits whatever rows share the call; and each row's sum is accumulated in ascending expert order
// from zero, so it is the same sequence of float32 operations alone or in any batch.
void moe_into(const Block& b, const MoE& m, int64_t rows, int64_t dim, Scratch& s) {
  const int64_t E = m.router.size(0), K = m.top_k, inter = m.inter;
  const float* x = s.xf.data_ptr<float>();
  const float* router = m.router.data_ptr<float>();
  float* probs = s.probs.data_ptr<float>();
  // Router logits (dots in a fixed order: 8 partial sums, then folded in a fixed tree) and softmax.
  typedef float v8 __attribute__((vector_size(32)));
  for_row_chunks(at::get_num_threads(), rows, E * dim, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * dim;
      float* pr = probs + r * E;
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t e = 0; e < E; ++e) {
        const float* we = router + e * dim;
        v8 part = {};
        int64_t i = 0;
        for (; i + 8 <= dim; i += 8) {
          v8 a, w;
          std::memcpy(&a, xr + i, sizeof(a));
          std::memcpy(&w, we + i, sizeof(w));
          part += a * w;
        }
        float dot = ((part[0] + part[4]) + (part[2] + part[6])) + ((part[1] + part[5]) + (part[3] + part[7]));
        for (; i < dim; ++i) dot += xr[i] * we[i];
        pr[e] = dot;
        mx = dot > mx ? dot : mx;
      }
      float sum = 0.0f;
      for (int64_t e = 0; e < E; ++e) sum += (pr[e] = std::exp(pr[e] - mx));
      for (int64_t e = 0; e < E; ++e) pr[e] /= sum;
    }
  });
  // Each row's top_k (ties: the lower expert index) and weights; the rows of each expert.
  std::vector<int64_t> count(E, 0), chosen(rows * K);
  std::vector<float> weight(rows * K);
  for (int64_t r = 0; r < rows; ++r) {
    const float* pr = probs + r * E;
    float total = 0.0f;
    for (int64_t j = 0; j < K; ++j) {
      int64_t best = -1;
      for (int64_t e = 0; e < E; ++e) {
        bool taken = false;
        for (int64_t i = 0; i < j; ++i) taken |= chosen[r * K + i] == e;
        if (!taken && (best < 0 || pr[e] > pr[best])) best = e;
      }
      chosen[r * K + j] = best;
      weight[r * K + j] = pr[best];
      total += pr[best];
    }
    if (m.norm_topk)
      for (int64_t j = 0; j < K; ++j) weight[r * K + j] /= total;
    for (int64_t j = 0; j < K; ++j) ++count[chosen[r * K + j]];
  }
  std::vector<int64_t> first(E + 1, 0);
  for (int64_t e = 0; e < E; ++e) first[e + 1] = first[e] + count[e];
  std::vector<int64_t> fill(first.begin(), first.end() - 1), member(rows * K);
  std::vector<float> member_w(rows * K);
  for (int64_t r = 0; r < rows; ++r)   // rows ascending within each expert
    for (int64_t j = 0; j < K; ++j) {
      const int64_t at_ = fill[chosen[r * K + j]]++;
      member[at_] = r, member_w[at_] = weight[r * K + j];
    }
  float* acc = s.acc.data_ptr<float>();
  std::fill(acc, acc + rows * dim, 0.0f);
  const int64_t es = s.x.element_size();
  const char* xs = static_cast<const char*>(s.x.data_ptr());
  char* exs = static_cast<char*>(s.ex.data_ptr());
  for (int64_t e = 0; e < E; ++e) {
    const int64_t n = count[e];
    if (n == 0) continue;
    for (int64_t i = 0; i < n; ++i) std::memcpy(exs + i * dim * es, xs + member[first[e] + i] * dim * es, dim * es);
    const at::Tensor ex = n == rows ? s.ex : s.ex.narrow(0, 0, n), egu = n == rows ? s.egu : s.egu.narrow(0, 0, n);
    const at::Tensor eact = n == rows ? s.eact : s.eact.narrow(0, 0, n), eout = n == rows ? s.eout : s.eout.narrow(0, 0, n);
    m.gate_up[e].into(ex, egu);
    act_rows(b.act, egu, eact, n, inter);
    m.down[e].into(eact, eout);
    typed(elems(eout), [&](auto y) {   // acc[r] += w * y, rows in their order, experts ascending
      for (int64_t i = 0; i < n; ++i) {
        float* ar = acc + member[first[e] + i] * dim;
        const float w = member_w[first[e] + i];
        for (int64_t d = 0; d < dim; ++d) ar[d] += w * y.get(i * dim + d);
      }
    });
  }
}

// Block b on h ([rows, dim] float32, updated in place: the residual stream) with the attention
// output o ([rows, H * D] or [rows, H, D] in the GEMM dtype; undefined for the first block).
// Returns the normed rows (the last block: float32, newly allocated, the lm_head's input) or leaves
// q, k, v (RoPE applied) in s.q / s.k / s.v.
at::Tensor block_into(const Block& b, float* hp, int64_t rows, int64_t dim, const at::Tensor& o, const at::Tensor& cos,
                      const at::Tensor& sin, Scratch& s) {
  s.for_rows(b, rows, dim);
  if (b.tail) {
    TORCH_CHECK(b.moe || b.gate_up.kind >= 0, "a tail needs its MLP: gate_up and down, or experts (decode_block_moe)");
    TORCH_CHECK(o.scalar_type() == b.gemm && o.size(0) == rows, "o must be [T, H, D] in the GEMM dtype");
    b.o.into(o.dim() == 2 ? o : o.reshape({rows, -1}), s.proj);
    if (b.post_attn_norm.defined()) add_normed_rows(hp, s.proj, b.post_attn_norm.data_ptr<float>(), b.eps);
    else add_rows(hp, s.proj);
    rms_norm_rows(hp, b.mlp_norm.data_ptr<float>(), rows, dim, b.eps, elems(s.x));
    if (b.moe) {
      s.moe_for(*b.moe, b.gemm, rows, dim);
      rms_norm_rows(hp, b.mlp_norm.data_ptr<float>(), rows, dim, b.eps, elems(s.xf));   // the router's input
      moe_into(b, *b.moe, rows, dim, s);
      const float* acc = s.acc.data_ptr<float>();
      if (b.post_mlp_norm.defined()) {
        add_normed_rows(hp, s.acc, b.post_mlp_norm.data_ptr<float>(), b.eps);
      } else {
        for_row_chunks(at::get_num_threads(), rows, dim, [&](int64_t r0, int64_t r1) {
          for (int64_t i = r0 * dim; i < r1 * dim; ++i) hp[i] += acc[i];
        });
      }
    } else {
      b.gate_up.into(s.x, s.gate_up);
      act_rows(b.act, s.gate_up, s.act, rows, s.inter);   // act has gu's dtype, the GEMM dtype
      b.down.into(s.act, s.proj);
      if (b.post_mlp_norm.defined()) add_normed_rows(hp, s.proj, b.post_mlp_norm.data_ptr<float>(), b.eps);
      else add_rows(hp, s.proj);
    }
  }
  if (!b.qkv_out) {   // the last block: the final norm, float32 (the lm_head's input)
    at::Tensor x = at::empty({rows, dim}, at::TensorOptions().dtype(at::kFloat));
    rms_norm_rows(hp, b.next_norm.data_ptr<float>(), rows, dim, b.eps, elems(x));
    return x;
  }
  rms_norm_rows(hp, b.next_norm.data_ptr<float>(), rows, dim, b.eps, elems(s.x));
  b.qkv.into(s.x, s.qkv);
  const int64_t H = b.heads, KV = b.kv_heads, D = b.head_dim, width = (H + 2 * KV) * D;
  const int64_t R = b.rotary_dim > 0 ? b.rotary_dim : D, half = R / 2;
  TORCH_CHECK(s.width == width, "the q/k/v rows' width differs from the heads'");
  if (b.qk_norm != QkNorm::none) qk_norm_rows(b, s.qkv, rows);
  if (b.rope >= 0) {
    TORCH_CHECK(cos.defined() && cos.size(0) == rows && cos.size(1) == R && cos.scalar_type() == b.gemm &&
                    sin.sizes() == cos.sizes() && sin.scalar_type() == b.gemm && cos.is_contiguous() && sin.is_contiguous(),
                "cos/sin must be contiguous [T, rotary_dim] in the GEMM dtype");
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
              e.set(base + i, std::fma(-x2, se.get(r * R + i), x1 * ce.get(r * R + i)));
              e.set(base + half + i, std::fma(x1, se.get(r * R + half + i), x2 * ce.get(r * R + half + i)));
            }
          }
      });
    });
  }
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
                 int64_t n, bool optional = false) {
  if (optional && kind < 0) return Linear();
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
    // gate_up / down: kind -1 on an MoE layer, whose experts decode_block_moe then binds.
    blk->gate_up = linear_of(kinds[1], a[1], b[1], biases[1], ns[1], true);
    blk->down = linear_of(kinds[2], a[2], b[2], biases[2], ns[2], true);
    TORCH_CHECK((blk->gate_up.kind < 0) == (blk->down.kind < 0), "gate_up and down: both or neither");
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

namespace decode_block {

std::shared_ptr<Block> block_to_configure(int64_t id) {
  auto it = registry.find(id);
  TORCH_CHECK(it != registry.end(), "no decode block ", id);
  return it->second;
}

at::Tensor float_vector(const c10::optional<at::Tensor>& t, int64_t n, const char* what) {
  if (!t.has_value() || !t->defined()) return at::Tensor();
  TORCH_CHECK(t->scalar_type() == at::kFloat && t->numel() == n, what, " must be float32 with ", n, " elements");
  return t->contiguous();
}

}  // namespace decode_block

// Sets block `id`'s options beyond Llama's (Block's comment), before it first runs. act: 0 SiLU,
// 1 GELU-tanh; post_attn_norm / post_mlp_norm: a tail's sandwich norms (float32 [hidden] or None);
// qk_norm: 0 none, 1 per head, 2 over all heads, with q_norm / k_norm float32 ([head_dim], or
// [H * D] / [KV * D]); rotary_dim: RoPE's dims per head (0: head_dim; even); rope: which of the
// forward's cos / sin tables this block's q and k take (-1: none).
void decode_block_configure(int64_t id, int64_t act, c10::optional<at::Tensor> post_attn_norm,
                            c10::optional<at::Tensor> post_mlp_norm, int64_t qk_norm, c10::optional<at::Tensor> q_norm,
                            c10::optional<at::Tensor> k_norm, int64_t rotary_dim, int64_t rope) {
  using namespace decode_block;
  std::lock_guard<std::mutex> lock(registry_mutex);
  const std::shared_ptr<Block> b = block_to_configure(id);
  TORCH_CHECK(act == 0 || act == 1, "act must be 0 (SiLU) or 1 (GELU-tanh)");
  TORCH_CHECK(qk_norm >= 0 && qk_norm <= 2, "qk_norm must be 0 (none), 1 (per head) or 2 (all heads)");
  const int64_t H = b->heads, KV = b->kv_heads, D = b->head_dim, hidden = b->next_norm.numel();
  TORCH_CHECK(rotary_dim == 0 || (rotary_dim > 0 && rotary_dim <= D && rotary_dim % 2 == 0),
              "rotary_dim must be 0 (head_dim) or even and at most head_dim");
  b->act = static_cast<Act>(act);
  b->post_attn_norm = b->tail ? float_vector(post_attn_norm, hidden, "post_attn_norm") : at::Tensor();
  b->post_mlp_norm = b->tail ? float_vector(post_mlp_norm, hidden, "post_mlp_norm") : at::Tensor();
  b->qk_norm = b->qkv_out ? static_cast<QkNorm>(qk_norm) : QkNorm::none;
  if (b->qk_norm != QkNorm::none) {
    const bool head = b->qk_norm == QkNorm::head;
    b->q_norm = float_vector(q_norm, head ? D : H * D, "q_norm");
    b->k_norm = float_vector(k_norm, head ? D : KV * D, "k_norm");
    TORCH_CHECK(b->q_norm.defined() && b->k_norm.defined(), "qk_norm needs q_norm and k_norm");
  }
  b->rotary_dim = rotary_dim;
  b->rope = rope < 0 ? -1 : rope;
}

// Makes block `id`'s MLP routed experts (MoE's comment), before it first runs: router float32
// [E, hidden]; kinds / a / b / ns: the E experts' gate_up linears, then their E down linears, as
// decode_block_new's (no biases); top_k; norm_topk: renormalise the chosen weights to sum 1.
void decode_block_moe(int64_t id, at::Tensor router, std::vector<int64_t> kinds, std::vector<at::Tensor> a,
                      std::vector<at::Tensor> b, std::vector<int64_t> ns, int64_t top_k, bool norm_topk) {
  using namespace decode_block;
  std::lock_guard<std::mutex> lock(registry_mutex);
  const std::shared_ptr<Block> blk = block_to_configure(id);
  TORCH_CHECK(blk->tail && blk->gate_up.kind < 0, "experts replace a tail's MLP: register it with gate_up/down kind -1");
  TORCH_CHECK(router.dim() == 2 && router.scalar_type() == at::kFloat && router.size(1) == blk->next_norm.numel(),
              "router must be float32 [experts, hidden]");
  const int64_t E = router.size(0);
  TORCH_CHECK(E > 0 && top_k > 0 && top_k <= E, "top_k must be in [1, experts]");
  TORCH_CHECK(static_cast<int64_t>(kinds.size()) == 2 * E && a.size() == kinds.size() && b.size() == kinds.size() &&
                  ns.size() == kinds.size(),
              "2 * experts linears: every expert's gate_up, then every expert's down");
  auto m = std::make_shared<MoE>();
  m->router = router.contiguous(), m->top_k = top_k, m->norm_topk = norm_topk;
  m->inter = ns[0] / 2;
  const int64_t hidden = router.size(1);
  for (int64_t e = 0; e < E; ++e) {
    m->gate_up.push_back(linear_of(kinds[e], a[e], b[e], c10::nullopt, ns[e]));
    m->down.push_back(linear_of(kinds[E + e], a[E + e], b[E + e], c10::nullopt, ns[E + e]));
    TORCH_CHECK(ns[e] == 2 * m->inter && ns[E + e] == hidden, "every expert: gate_up [2 * inter], down [hidden]");
  }
  blk->moe = std::move(m);
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
  TORCH_CHECK(!blk->qkv_out || blk->rope < 0 || (cos.has_value() && sin.has_value()), "this block needs cos and sin");
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
    if (b->tail) {   // an MoE tail: its router (which experts the next step reads is not known yet)
      for (const Linear* l : {&b->o, &b->gate_up, &b->down}) add(l->a), add(l->b);
      if (b->moe) add(b->moe->router);
    }
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
at::Tensor forward_without_gil(const std::vector<int64_t>& ids, const at::Tensor& h, const std::vector<at::Tensor>& cos,
                               const std::vector<at::Tensor>& sin, int64_t attention_fn, std::vector<at::Tensor>& k_caches,
                               std::vector<at::Tensor>& v_caches, const at::Tensor& write_pages,
                               const at::Tensor& write_offsets, const at::Tensor& table, const at::Tensor& lens,
                               const at::Tensor& starts, double scale, const at::Tensor& out, const at::Tensor& lse,
                               const std::vector<int64_t>& windows) {
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
  TORCH_CHECK(windows.empty() || static_cast<int64_t>(windows.size()) == layers, "windows: none, or one per layer");
  a.windows = windows.empty() ? nullptr : windows.data();
  const at::ScalarType gemm = blocks.front()->gemm;
  TORCH_CHECK(h.dim() == 2 && h.scalar_type() == at::kFloat, "h must be a 2-D float32 tensor");
  TORCH_CHECK(cos.size() == sin.size(), "one sin table per cos table");
  const int64_t rows = h.size(0), dim = h.size(1);
  const at::Tensor hs = h.clone();   // the residual stream, in place
  std::vector<at::Tensor> cc, sc;
  for (size_t i = 0; i < cos.size(); ++i) cc.push_back(cos[i].contiguous()), sc.push_back(sin[i].contiguous());
  // The rows of the table block b's q and k take (none for a NoPE layer or the last block).
  const at::Tensor none;
  auto table_of = [&](const Block& b, const std::vector<at::Tensor>& t) -> const at::Tensor& {
    if (!b.qkv_out || b.rope < 0) return none;
    TORCH_CHECK(b.rope < static_cast<int64_t>(t.size()), "a block's rope table is not among the forward's");
    return t[b.rope];
  };
  float* hp = hs.data_ptr<float>();
  thread_local Scratch scratch;   // a step's layers share it; the next step on this thread reuses it
  block_into(*blocks.front(), hp, rows, dim, at::Tensor(), table_of(*blocks.front(), cc), table_of(*blocks.front(), sc),
             scratch);
  // The kernel's float32 rows as the next block's input: out itself, or a copy in the GEMM dtype.
  const at::Tensor o_gemm = gemm == at::kFloat ? out : at::empty(out.sizes(), out.options().dtype(gemm));
  at::Tensor x;
  for (int64_t layer = 0; layer < layers; ++layer) {
    attend(a, layer, scratch.q, scratch.k, scratch.v);
    if (gemm != at::kFloat) o_gemm.copy_(out);
    const Block& b = *blocks[layer + 1];
    x = block_into(b, hp, rows, dim, o_gemm, table_of(b, cc), table_of(b, sc), scratch);
  }
  return x;
}

}  // namespace decode_block

// cos / sin: one [R, rotary_dim] pair per rope table of the model (a block takes its `rope`'s);
// windows: each layer's sliding window (0: global), or empty (every layer global).
at::Tensor decode_forward(std::vector<int64_t> ids, at::Tensor h, std::vector<at::Tensor> cos, std::vector<at::Tensor> sin,
                          int64_t attention_fn, std::vector<at::Tensor> k_caches, std::vector<at::Tensor> v_caches,
                          at::Tensor write_pages, at::Tensor write_offsets, at::Tensor table, at::Tensor lens,
                          at::Tensor starts, double scale, at::Tensor out, at::Tensor lse, std::vector<int64_t> windows) {
  pybind11::gil_scoped_release no_gil;   // the engine thread must not stall the server's threads
  decode_block::cancel_weight_prefetch(false);
  return decode_block::forward_without_gil(ids, h, cos, sin, attention_fn, k_caches, v_caches, write_pages,
                                           write_offsets, table, lens, starts, scale, out, lse, windows);
}

// decode_logits' tables, bound once like a block's weights: the int8 embedding and lm_head in
// int8_mm_f32's layout (Int8Linear's blocked codes and fp16 scales) and the cos / sin tables by
// position. Registered beside the blocks (the same ids, freed by decode_block_free).
namespace decode_block {

struct TokenTables {
  at::Tensor embed_q, embed_scale, head_q, head_scale;
  std::vector<at::Tensor> cos, sin;   // the model's rope tables, [positions, rotary_dim] each
  float embed_mul = 1.0f;             // the embedding rows' scale (Gemma: sqrt(hidden)); 1: none
};

std::unordered_map<int64_t, std::shared_ptr<const TokenTables>> tables_registry;

}  // namespace decode_block

// cos / sin: the model's rope tables; embed_mul: the factor on every embedding row (1: none),
// multiplied in float32 as FusedDecode.forward does.
int64_t decode_tables_new(at::Tensor embed_q, at::Tensor embed_scale, std::vector<at::Tensor> cos,
                          std::vector<at::Tensor> sin, at::Tensor head_q, at::Tensor head_scale, double embed_mul) {
  using namespace decode_block;
  TORCH_CHECK(cos.size() == sin.size(), "one sin table per cos table");
  for (size_t i = 0; i < cos.size(); ++i)
    TORCH_CHECK(cos[i].dim() == 2 && sin[i].sizes() == cos[i].sizes(), "cos and sin must be [positions, rotary_dim] tables");
  auto t = std::make_shared<TokenTables>();
  t->embed_q = embed_q, t->embed_scale = embed_scale, t->cos = cos, t->sin = sin;
  t->head_q = head_q, t->head_scale = head_scale, t->embed_mul = static_cast<float>(embed_mul);
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
                         at::Tensor starts, double scale, at::Tensor out, at::Tensor lse, std::vector<int64_t> windows) {
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
  if (t->embed_mul != 1.0f) h.mul_(t->embed_mul);   // float32 by float32, as FusedDecode.forward's
  std::vector<at::Tensor> cos, sin;
  for (size_t i = 0; i < t->cos.size(); ++i)
    cos.push_back(t->cos[i].index_select(0, positions)), sin.push_back(t->sin[i].index_select(0, positions));
  const at::Tensor x = forward_without_gil(ids, h, cos, sin, attention_fn, k_caches, v_caches, write_pages,
                                           write_offsets, table, lens, starts, scale, out, lse, windows);
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
