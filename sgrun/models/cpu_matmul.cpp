// Weight-only matmuls for small batches on the CPU: y[M, N] = x[M, K] (bf16) @ W[N, K]^T, W kept
// as int4 codes in groups of 32 (a scale and a minimum per group, fp16) or as dense bf16; and the
// int8 lm_head with float32 activations.
// Built by cpu_matmul.py; see that file for why and for the layouts.
//
// Layout ("column blocks"): W's output columns are cut into blocks of 16 (one AVX-512 lane per
// column), and inside a block the input dim runs in pairs, so one 512-bit dot-product step
// (_mm512_dpbf16_ps) adds w[n, 2p] x[2p] + w[n, 2p+1] x[2p+1] for 16 columns n at once, with the
// pair x[2p], x[2p+1] broadcast. No horizontal sums are needed; the int4 group scale is one fma
// per group per lane.
//   int4: codes [N/16, K/2, 16] uint8, byte = code[n, 2p] | code[n, 2p+1] << 4;
//         scales [N/16, K/32, 2, 16] fp16: 16 scales, then 16 minimums (w = scale * code + min).
//   bf16: weights [N/16, K/2, 16, 2].
//   int8 (float32 activations, the lm_head): weights [N/16, K, 16], one float32 scale per column.
//
// Row invariance: every row of x goes through the same instruction sequence whatever M is, how
// rows are blocked and how columns are split over threads (no split-K), so a row's result is
// bit-identical at M = 1 and inside any larger batch. Speculative verification relies on it.
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512BF16__)
#define SGRUN_BF16_DOT 1
#include <immintrin.h>
#endif

namespace {

constexpr int64_t LANES = 16;   // columns per block
constexpr int64_t GROUP = 32;   // int4 group along K
constexpr int64_t PAIRS_PER_GROUP = GROUP / 2;
constexpr int ROW_BLOCK = 8;    // rows per pass over a column block (3 accumulators a row)

void check_x(const at::Tensor& x, int64_t k_multiple) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kBFloat16, "x must be a 2-D bf16 tensor");
  TORCH_CHECK(x.size(1) % k_multiple == 0, "x's inner dim must be a multiple of ", k_multiple);
}

// Work split: units of `unit_blocks` column blocks, and enough multiply-adds per thread (~8M,
// ~100 us on one core) that waking a second thread pays: a worker asleep under
// OMP_WAIT_POLICY=PASSIVE (or descheduled on a shared machine) takes ~10-30 us to join, which at
// one row is as long as a whole layer's matmul. Measured on two threads at load ~1.1 (median
// step): splitting from 0.5M per thread gave 11.6 ms at batch 1, from 2M 9.0 / 12.3 / 14.9 /
// 19.8 / 29.3 ms at batch 1 / 2 / 4 / 8 / 16, from 8M 9.2 / 11.4 / 12.5 / 16.8 / 24.3 ms.
int64_t grain_for(int64_t m, int64_t k, int64_t unit_blocks) {
  constexpr int64_t kMinWorkPerThread = 8 << 20;
  const int64_t work = m * k * LANES * unit_blocks;
  const int64_t g = (kMinWorkPerThread + work - 1) / (work > 0 ? work : 1);
  return g > 0 ? g : 1;
}

#ifdef SGRUN_BF16_DOT

inline __m512bh as_bh(__m512i v) { return reinterpret_cast<__m512bh>(v); }

// Per row, the sum of x over each group of 32 (the minimum's term): xs[r * G + g].
void group_sums(const uint16_t* x, int64_t m, int64_t k, float* xs) {
  const int64_t groups = k / GROUP;
  const __m512i ones = _mm512_set1_epi16(0x3F80);   // bf16 1.0
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const __m512i v = _mm512_loadu_si512(x + r * k + g * GROUP);
      xs[r * groups + g] = _mm512_reduce_add_ps(_mm512_dpbf16_ps(_mm512_setzero_ps(), as_bh(v), as_bh(ones)));
    }
  }
}

// The 16 bf16 pairs (128 + code[2p], 128 + code[2p+1]) of 16 columns from 16 bytes: bf16 bits
// 0x4300 | c is exactly 128 + c for c < 128, so decoding is a widen, a shift, an or and a mask;
// the 128 * sum(x) it adds is taken back with the group's minimum.
inline __m512i decode_pairs(const uint8_t* bytes) {
  const __m512i d = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes)));
  const __m512i t = _mm512_or_si512(d, _mm512_slli_epi32(d, 12));
  // (t & 0x000F000F) | 0x43004300
  return _mm512_ternarylogic_epi32(t, _mm512_set1_epi32(0x000F000F), _mm512_set1_epi32(0x43004300), 0xEA);
}

// R rows x NB column blocks. Two accumulator chains per (row, block) over even and odd pairs,
// so the dot-product latency is hidden even at one row; the same for every R, so rows stay
// invariant.
template <int R, int NB>
void int4_tile(const uint8_t* codes, const uint16_t* scales, int64_t block_stride_codes,
               int64_t block_stride_scales, const uint32_t* xpairs, int64_t k, const float* xs,
               int64_t groups, uint16_t* y, int64_t n_total) {
  __m512 acc[R][NB];
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NB; ++b) acc[r][b] = _mm512_setzero_ps();
  const int64_t kp = k / 2;
  for (int64_t g = 0; g < groups; ++g) {
    __m512 even[R][NB], odd[R][NB];
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < NB; ++b) even[r][b] = odd[r][b] = _mm512_setzero_ps();
    for (int64_t p = 0; p < PAIRS_PER_GROUP; p += 2) {
      const int64_t pair = g * PAIRS_PER_GROUP + p;
      __m512i w0[NB], w1[NB];
      for (int b = 0; b < NB; ++b) {
        const uint8_t* base = codes + b * block_stride_codes + pair * LANES;
        w0[b] = decode_pairs(base);
        w1[b] = decode_pairs(base + LANES);
      }
      for (int r = 0; r < R; ++r) {
        const __m512i x0 = _mm512_set1_epi32(static_cast<int>(xpairs[r * kp + pair]));
        const __m512i x1 = _mm512_set1_epi32(static_cast<int>(xpairs[r * kp + pair + 1]));
        for (int b = 0; b < NB; ++b) {
          even[r][b] = _mm512_dpbf16_ps(even[r][b], as_bh(w0[b]), as_bh(x0));
          odd[r][b] = _mm512_dpbf16_ps(odd[r][b], as_bh(w1[b]), as_bh(x1));
        }
      }
    }
    for (int b = 0; b < NB; ++b) {
      const uint16_t* sg = scales + b * block_stride_scales + g * 2 * LANES;
      const __m512 s = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sg)));
      const __m512 mn = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sg + LANES)));
      const __m512 shifted_min = _mm512_fnmadd_ps(s, _mm512_set1_ps(128.0f), mn);   // min - 128 scale
      for (int r = 0; r < R; ++r) {
        acc[r][b] = _mm512_fmadd_ps(_mm512_add_ps(even[r][b], odd[r][b]), s, acc[r][b]);
        acc[r][b] = _mm512_fmadd_ps(shifted_min, _mm512_set1_ps(xs[r * groups + g]), acc[r][b]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NB; ++b)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + r * n_total + b * LANES),
                          reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(acc[r][b])));
}

// Dense bf16: the same walk without decoding. Sums run in blocks of 32 k (16 pairs) added into
// the total, as the int4 groups are: sequential float32 sums over K ~ 1,536 lost ~3x more bits
// than oneDNN's blocked GEMM on real activations (outlier features cancel), which showed as
// drift against the float32 model.
template <int R, int NB>
void bf16_tile(const uint32_t* w, int64_t block_stride, const uint32_t* xpairs, int64_t k, uint16_t* y,
               int64_t n_total) {
  const int64_t kp = k / 2;
  __m512 acc[R][NB];
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NB; ++b) acc[r][b] = _mm512_setzero_ps();
  for (int64_t p0 = 0; p0 < kp; p0 += PAIRS_PER_GROUP) {
    const int64_t p_end = p0 + PAIRS_PER_GROUP < kp ? p0 + PAIRS_PER_GROUP : kp;
    __m512 even[R][NB], odd[R][NB];
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < NB; ++b) even[r][b] = odd[r][b] = _mm512_setzero_ps();
    int64_t p = p0;
    for (; p + 1 < p_end; p += 2) {
      __m512i w0[NB], w1[NB];
      for (int b = 0; b < NB; ++b) {
        w0[b] = _mm512_loadu_si512(w + b * block_stride + p * LANES);
        w1[b] = _mm512_loadu_si512(w + b * block_stride + (p + 1) * LANES);
      }
      for (int r = 0; r < R; ++r) {
        const __m512i x0 = _mm512_set1_epi32(static_cast<int>(xpairs[r * kp + p]));
        const __m512i x1 = _mm512_set1_epi32(static_cast<int>(xpairs[r * kp + p + 1]));
        for (int b = 0; b < NB; ++b) {
          even[r][b] = _mm512_dpbf16_ps(even[r][b], as_bh(w0[b]), as_bh(x0));
          odd[r][b] = _mm512_dpbf16_ps(odd[r][b], as_bh(w1[b]), as_bh(x1));
        }
      }
    }
    if (p < p_end) {   // an odd number of pairs in the last block
      for (int r = 0; r < R; ++r) {
        const __m512i x0 = _mm512_set1_epi32(static_cast<int>(xpairs[r * kp + p]));
        for (int b = 0; b < NB; ++b)
          even[r][b] = _mm512_dpbf16_ps(even[r][b], as_bh(_mm512_loadu_si512(w + b * block_stride + p * LANES)),
                                        as_bh(x0));
      }
    }
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < NB; ++b) acc[r][b] = _mm512_add_ps(acc[r][b], _mm512_add_ps(even[r][b], odd[r][b]));
  }
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NB; ++b)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + r * n_total + b * LANES),
                          reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(acc[r][b])));
}

// int8 weights (one scale per output column) times float32 activations, float32 out: the
// lm_head, whose logits are never rounded to bf16. Two chains over even and odd k, blocked sums
// as bf16_tile; the column scale is applied once at the end.
template <int R, int NB>
void int8_f32_tile(const int8_t* q, int64_t block_stride, const float* x, int64_t k, const float* scale,
                   float* y, int64_t n_total) {
  __m512 acc[R][NB];
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NB; ++b) acc[r][b] = _mm512_setzero_ps();
  auto column = [&](int b, int64_t kk) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + b * block_stride + kk * LANES))));
  };
  for (int64_t k0 = 0; k0 < k; k0 += GROUP) {   // blocked sums, as bf16_tile
    const int64_t k_end = k0 + GROUP < k ? k0 + GROUP : k;
    __m512 even[R][NB], odd[R][NB];
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < NB; ++b) even[r][b] = odd[r][b] = _mm512_setzero_ps();
    int64_t kk = k0;
    for (; kk + 1 < k_end; kk += 2) {
      __m512 w0[NB], w1[NB];
      for (int b = 0; b < NB; ++b) {
        w0[b] = column(b, kk);
        w1[b] = column(b, kk + 1);
      }
      for (int r = 0; r < R; ++r) {
        const __m512 x0 = _mm512_set1_ps(x[r * k + kk]);
        const __m512 x1 = _mm512_set1_ps(x[r * k + kk + 1]);
        for (int b = 0; b < NB; ++b) {
          even[r][b] = _mm512_fmadd_ps(w0[b], x0, even[r][b]);
          odd[r][b] = _mm512_fmadd_ps(w1[b], x1, odd[r][b]);
        }
      }
    }
    if (kk < k_end) {
      for (int r = 0; r < R; ++r) {
        const __m512 x0 = _mm512_set1_ps(x[r * k + kk]);
        for (int b = 0; b < NB; ++b) even[r][b] = _mm512_fmadd_ps(column(b, kk), x0, even[r][b]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < NB; ++b) acc[r][b] = _mm512_add_ps(acc[r][b], _mm512_add_ps(even[r][b], odd[r][b]));
  }
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NB; ++b)
      _mm512_storeu_ps(y + r * n_total + b * LANES, _mm512_mul_ps(acc[r][b], _mm512_loadu_ps(scale + b * LANES)));
}

template <int V>
using Const = std::integral_constant<int, V>;

// Calls tile(rows, blocks, first) with compile-time rows and blocks: min(left, ROW_BLOCK) rows
// over the unit's 2 column blocks (or its 1). Two blocks at once give one or two rows enough
// independent chains; from 3 rows the rows do, and 2 blocks x 3 accumulators a row would not fit
// the 32 vector registers (with 4 rows the spills made 7 rows cost 7x one row), so the blocks then
// go one at a time. Any row count runs the same per-row instruction sequence.
template <class Tile>
inline void with_rows(int64_t left, bool two_blocks, Tile&& tile) {
  const int rows = left < ROW_BLOCK ? static_cast<int>(left) : ROW_BLOCK;
  auto blocks = [&](auto r) {
    if (!two_blocks) {
      tile(r, Const<1>{}, 0);
    } else if constexpr (decltype(r)::value <= 2) {
      tile(r, Const<2>{}, 0);
    } else {
      tile(r, Const<1>{}, 0);
      tile(r, Const<1>{}, 1);
    }
  };
  switch (rows) {
    case 1: blocks(Const<1>{}); break;
    case 2: blocks(Const<2>{}); break;
    case 3: blocks(Const<3>{}); break;
    case 4: blocks(Const<4>{}); break;
    case 5: blocks(Const<5>{}); break;
    case 6: blocks(Const<6>{}); break;
    case 7: blocks(Const<7>{}); break;
    default: blocks(Const<ROW_BLOCK>{}); break;
  }
}

// Runs tile(rows, blocks, first block, first row) over every tile of an M x N output: units of two
// column blocks split across threads (grain_for), rows in blocks of ROW_BLOCK (with_rows).
template <class Tile>
void for_each_tile(int64_t m, int64_t k, int64_t blocks, Tile&& tile) {
  const int64_t units = (blocks + 1) / 2;
  at::parallel_for(0, units, grain_for(m, k, 2), [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u) {
      const int64_t b0 = u * 2;
      for (int64_t r = 0; r < m; r += ROW_BLOCK)
        with_rows(m - r, b0 + 1 < blocks, [&](auto rows, auto nb, int64_t first) { tile(rows, nb, b0 + first, r); });
    }
  });
}

#endif  // SGRUN_BF16_DOT

}  // namespace

bool fast_path() {
#ifdef SGRUN_BF16_DOT
  return true;
#else
  return false;
#endif
}

at::Tensor int4_mm(const at::Tensor& x, const at::Tensor& codes, const at::Tensor& scales, int64_t n) {
  check_x(x, GROUP);
  TORCH_CHECK(n % LANES == 0, "n must be a multiple of 16");
  const int64_t m = x.size(0), k = x.size(1), blocks = n / LANES, groups = k / GROUP;
  TORCH_CHECK(codes.scalar_type() == at::kByte && codes.is_contiguous() && codes.numel() == n * k / 2,
              "codes do not match x and n");
  TORCH_CHECK(scales.scalar_type() == at::kHalf && scales.is_contiguous() && scales.numel() == n * groups * 2,
              "scales do not match x and n");
  at::Tensor out = at::empty({m, n}, x.options());
#ifdef SGRUN_BF16_DOT
  at::Tensor xc = x.contiguous();
  const uint16_t* xb = reinterpret_cast<const uint16_t*>(xc.data_ptr<at::BFloat16>());
  std::vector<float> xs(static_cast<size_t>(m * groups));
  group_sums(xb, m, k, xs.data());
  const uint32_t* xp = reinterpret_cast<const uint32_t*>(xb);
  const uint8_t* cb = codes.data_ptr<uint8_t>();
  const uint16_t* sb = reinterpret_cast<const uint16_t*>(scales.data_ptr<at::Half>());
  uint16_t* yb = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>());
  const int64_t cs = k / 2 * LANES, ss = groups * 2 * LANES;
  for_each_tile(m, k, blocks, [&](auto rows, auto nb, int64_t b, int64_t r) {
    int4_tile<decltype(rows)::value, decltype(nb)::value>(cb + b * cs, sb + b * ss, cs, ss, xp + r * (k / 2), k,
                                                          xs.data() + r * groups, groups, yb + r * n + b * LANES, n);
  });
#else
  TORCH_CHECK(false, "int4_mm needs a CPU with AVX512-BF16");
#endif
  return out;
}

at::Tensor bf16_mm(const at::Tensor& x, const at::Tensor& w, int64_t n) {
  check_x(x, 2);
  TORCH_CHECK(n % LANES == 0, "n must be a multiple of 16");
  const int64_t m = x.size(0), k = x.size(1), blocks = n / LANES;
  TORCH_CHECK(w.scalar_type() == at::kBFloat16 && w.is_contiguous() && w.numel() == n * k,
              "w does not match x and n");
  at::Tensor out = at::empty({m, n}, x.options());
#ifdef SGRUN_BF16_DOT
  at::Tensor xc = x.contiguous();
  const uint32_t* xp = reinterpret_cast<const uint32_t*>(xc.data_ptr<at::BFloat16>());
  const uint32_t* wb = reinterpret_cast<const uint32_t*>(w.data_ptr<at::BFloat16>());
  uint16_t* yb = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>());
  const int64_t ws = k / 2 * LANES;   // 32-bit pairs per column block
  for_each_tile(m, k, blocks, [&](auto rows, auto nb, int64_t b, int64_t r) {
    bf16_tile<decltype(rows)::value, decltype(nb)::value>(wb + b * ws, ws, xp + r * (k / 2), k, yb + r * n + b * LANES, n);
  });
#else
  TORCH_CHECK(false, "bf16_mm needs a CPU with AVX512-BF16");
#endif
  return out;
}

at::Tensor int8_mm_f32(const at::Tensor& x, const at::Tensor& q, const at::Tensor& scale) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat, "x must be a 2-D float32 tensor");
  const int64_t m = x.size(0), k = x.size(1), n = scale.numel(), blocks = n / LANES;
  TORCH_CHECK(n % LANES == 0 && q.scalar_type() == at::kChar && q.is_contiguous() && q.numel() == n * k,
              "q does not match x and scale");
  TORCH_CHECK(scale.scalar_type() == at::kFloat && scale.is_contiguous(), "scale must be contiguous float32");
  at::Tensor out = at::empty({m, n}, x.options());
#ifdef SGRUN_BF16_DOT
  at::Tensor xc = x.contiguous();
  const float* xb = xc.data_ptr<float>();
  const int8_t* qb = q.data_ptr<int8_t>();
  const float* sb = scale.data_ptr<float>();
  float* yb = out.data_ptr<float>();
  const int64_t qs = k * LANES;
  for_each_tile(m, k, blocks, [&](auto rows, auto nb, int64_t b, int64_t r) {
    int8_f32_tile<decltype(rows)::value, decltype(nb)::value>(qb + b * qs, qs, xb + r * k, k, sb + b * LANES,
                                                             yb + r * n + b * LANES, n);
  });
#else
  TORCH_CHECK(false, "int8_mm_f32 needs a CPU with AVX512-BF16");
#endif
  return out;
}

// The int4 weight as dense bf16 for prefill chunks (they multiply with oneDNN's GEMM): written
// as W^T, [K, N], because then the 16 columns of one k are 32 contiguous bytes and no transpose
// is needed; the caller hands F.linear its .t() view. w = s * c + min in float32, rounded once.
at::Tensor int4_dequantize_t(const at::Tensor& codes, const at::Tensor& scales, int64_t n, int64_t k) {
  TORCH_CHECK(n % LANES == 0 && k % GROUP == 0, "n must be a multiple of 16 and k of 32");
  TORCH_CHECK(codes.is_contiguous() && scales.is_contiguous() && codes.numel() == n * k / 2 &&
              scales.numel() == n * k / GROUP * 2, "codes/scales do not match n, k");
  at::Tensor out = at::empty({k, n}, codes.options().dtype(at::kBFloat16));
#ifdef SGRUN_BF16_DOT
  const uint8_t* cb = codes.data_ptr<uint8_t>();
  const uint16_t* sb = reinterpret_cast<const uint16_t*>(scales.data_ptr<at::Half>());
  uint16_t* ob = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>());
  const int64_t groups = k / GROUP, blocks = n / LANES;
  at::parallel_for(0, blocks, 4, [&](int64_t begin, int64_t end) {
    const __m512i low = _mm512_set1_epi32(15);
    for (int64_t blk = begin; blk < end; ++blk) {
      const uint8_t* c = cb + blk * (k / 2) * LANES;
      const uint16_t* sg = sb + blk * groups * 2 * LANES;
      uint16_t* col = ob + blk * LANES;
      for (int64_t g = 0; g < groups; ++g) {
        const __m512 s = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sg + g * 2 * LANES)));
        const __m512 mn = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sg + g * 2 * LANES + LANES)));
        for (int64_t p = 0; p < PAIRS_PER_GROUP; ++p) {
          const int64_t pair = g * PAIRS_PER_GROUP + p;
          const __m512i d = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c + pair * LANES)));
          const __m512 lo = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_and_si512(d, low)), s, mn);
          const __m512 hi = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(d, 4)), s, mn);
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(col + (2 * pair) * n), reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(lo)));
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(col + (2 * pair + 1) * n), reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(hi)));
        }
      }
    }
  });
#else
  TORCH_CHECK(false, "int4_dequantize_t needs a CPU with AVX512-BF16");
#endif
  return out;
}

// The dense bf16 weight back as W^T, [K, N], for chunks above the kernel's row limit (oneDNN's
// GEMM takes the .t() view): each (block, pair) holds 16 interleaved (even k, odd k) pairs, one
// permute splits them into the 16 columns of k and of k + 1.
at::Tensor bf16_unpack_t(const at::Tensor& w, int64_t n, int64_t k) {
  TORCH_CHECK(n % LANES == 0 && k % 2 == 0 && w.is_contiguous() && w.numel() == n * k, "w does not match n, k");
  at::Tensor out = at::empty({k, n}, w.options());
#ifdef SGRUN_BF16_DOT
  const uint16_t* wb = reinterpret_cast<const uint16_t*>(w.data_ptr<at::BFloat16>());
  uint16_t* ob = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>());
  const int64_t blocks = n / LANES, kp = k / 2;
  alignas(64) int16_t order[32];
  for (int i = 0; i < 16; ++i) {
    order[i] = static_cast<int16_t>(2 * i);           // even k of lane i
    order[16 + i] = static_cast<int16_t>(2 * i + 1);  // odd k of lane i
  }
  const __m512i idx = _mm512_load_si512(order);
  at::parallel_for(0, blocks, 4, [&](int64_t begin, int64_t end) {
    for (int64_t blk = begin; blk < end; ++blk) {
      for (int64_t p = 0; p < kp; ++p) {
        const __m512i v = _mm512_permutexvar_epi16(idx, _mm512_loadu_si512(wb + (blk * kp + p) * 2 * LANES));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(ob + (2 * p) * n + blk * LANES), _mm512_castsi512_si256(v));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(ob + (2 * p + 1) * n + blk * LANES), _mm512_extracti64x4_epi64(v, 1));
      }
    }
  });
#else
  TORCH_CHECK(false, "bf16_unpack_t needs a CPU with AVX512-BF16");
#endif
  return out;
}

TORCH_LIBRARY_FRAGMENT(sgrun, lib) {
  lib.def("int4_mm(Tensor x, Tensor codes, Tensor scales, int n) -> Tensor");
  lib.def("bf16_mm(Tensor x, Tensor w, int n) -> Tensor");
  lib.def("int8_mm_f32(Tensor x, Tensor q, Tensor scale) -> Tensor");
}

TORCH_LIBRARY_IMPL(sgrun, CPU, lib) {
  lib.impl("int4_mm", &int4_mm);
  lib.impl("bf16_mm", &bf16_mm);
  lib.impl("int8_mm_f32", &int8_mm_f32);
}
