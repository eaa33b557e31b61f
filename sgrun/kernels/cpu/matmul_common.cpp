// Shared, torch-free parts of the weight-only matmuls (matmul.cpp is the driver; one file per ISA
// holds the tiles: matmul_avx512_bf16.cpp, matmul_avx2.cpp, matmul_neon.cpp). The sources are
// compiled as one unit in that order, each ISA file guarded by the macros its level's flags set.
//
// Layout ("column blocks"), the same at every level: W's output columns are cut into blocks of
// 16, and inside a block the input dim runs in pairs, so a tile multiplies 16 columns at once with
// an activation pair broadcast: no horizontal sums, the int4 group scale one multiply per lane.
//   int4: codes [N/16, K/2, 16] uint8, byte = code[n, 2p] | code[n, 2p+1] << 4;
//         scales [N/16, K/32, 2, 16] fp16: 16 scales, then 16 minimums (w = scale * code + min).
//   bf16: weights [N/16, K/2, 16, 2].
//   int8 (float32 activations, the lm_head): weights [N/16, K, 16]; scales [N/16, ceil(K/32), 16] fp16,
//         one per column and group of 32 k (a GGUF Q8_0 table's own blocks, kept exactly).
//
// Row invariance: every row of x goes through the same instruction sequence whatever M is, how
// rows are blocked and how columns are split over threads (no split-K), so a row's result is
// bit-identical at M = 1 and inside any larger batch. Speculative verification relies on it.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>
#if defined(__AVX2__)
#include <immintrin.h>
#elif defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>
#endif

namespace {

constexpr int64_t LANES = 16;   // columns per block
constexpr int64_t GROUP = 32;   // int4 group along K, and the activation quantization block
constexpr int64_t PAIRS_PER_GROUP = GROUP / 2;

template <int V>
using Const = std::integral_constant<int, V>;

inline float half_to_float(uint16_t h) {   // IEEE fp16 -> float32, exact
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1F, mant = h & 0x3FF, bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {   // subnormal: normalise
    exp = 113;
    while (!(mant & 0x400)) { mant <<= 1; --exp; }
    bits = sign | (exp << 23) | ((mant & 0x3FF) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

inline float bf16_to_float(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// Activations quantized for the integer dot products (llama.cpp's Q8_1 blocks): per row and group
// of 32, q = round(x / d) in [-127, 127] with d = max |x| / 127, and `sum` = d * sum(q), the
// quantized x's sum, for the int4 minimum's term. Both terms must see the same rounded x: then a
// rounding error e_i multiplies the weight w_i = s c_i + min, which is centred. With the exact sum
// in the minimum's term (as this file did until 2 December 2026) it multiplies s c_i, the weight's
// distance from its group minimum (~8 s on average), and one matmul's error on real activations
// was 1.5% against 0.66% (a simulation of both on SmolLM2's layer 5 qkv, 64 rows), the drift 5x llama.cpp's.
struct QuantRows {
  std::vector<int8_t> q;     // [M, K]
  std::vector<float> d;      // [M, K / 32]
  std::vector<float> sum;    // [M, K / 32]
};

// f(first row, end row) over `rows` rows of elementwise work, split over `threads` of the team
// (thread_team.cpp) in chunks of at least ~64K elements, so a decode's few rows stay on the calling
// thread and a prefill chunk's use every core. A row's arithmetic never depends on the split.
template <class F>
void for_row_chunks(int threads, int64_t rows, int64_t elems_per_row, F&& f) {
  constexpr int64_t kMinElems = 1 << 16;
  const int64_t grain = kMinElems / (elems_per_row > 0 ? elems_per_row : 1);
  team::parallel_for(threads, rows, grain > 0 ? grain : 1, f);
}

// max |x| over a group of 32 through the bit patterns: for floats that are not NaN, |x|'s bits order
// as |x| does, and an integer max vectorizes where a float max with C++'s NaN rules stays scalar.
inline float group_abs_max(const float* x) {
  int32_t amax_bits = 0;
  for (int i = 0; i < GROUP; ++i) {
    int32_t bits;
    std::memcpy(&bits, &x[i], sizeof(bits));
    bits &= 0x7fffffff;
    amax_bits = bits > amax_bits ? bits : amax_bits;
  }
  float amax;
  std::memcpy(&amax, &amax_bits, sizeof(amax));
  return amax;
}

// std::rint (the default round-to-nearest-even, as nearbyint) vectorizes; nearbyint was a libm
// call per element, ~10% of a 2,048-token prefill with the tiles below (py-spy, Zen 4).
inline void fit_rows(QuantRows& out, int64_t m, int64_t k) {
  out.q.resize(static_cast<size_t>(m * k));
  out.d.resize(static_cast<size_t>(m * (k / GROUP)));
  out.sum.resize(static_cast<size_t>(m * (k / GROUP)));
}

template <class Load>
void quantize_rows(int64_t m, int64_t k, Load load, QuantRows& out, int threads = 1) {
  const int64_t groups = k / GROUP;
  fit_rows(out, m, k);
  for_row_chunks(threads, m, k, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t g = 0; g < groups; ++g) {
        float x[GROUP];
        for (int i = 0; i < GROUP; ++i) x[i] = load(r, g * GROUP + i);
        const float amax = group_abs_max(x);
        const float d = amax / 127.0f, inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        int8_t* q = out.q.data() + r * k + g * GROUP;
        int32_t qsum = 0;
        for (int i = 0; i < GROUP; ++i) {
          q[i] = static_cast<int8_t>(std::rint(x[i] * inv));
          qsum += q[i];
        }
        out.d[r * groups + g] = d;
        out.sum[r * groups + g] = d * static_cast<float>(qsum);
      }
    }
  });
}

#if defined(__AVX2__)
// quantize_rows' arithmetic for one group of 32 float32 activations, in AVX2 vectors: the same max
// over |x|'s bit patterns, the same d and 1/d, x * (1/d) rounded to the nearest even by the
// conversion (MXCSR's default mode, as std::rint in quantize_rows), and the exact integer sum, so
// every finite group gives quantize_rows' bytes, d and sum (a non-finite group's row is NaN or
// inf either way). Why: GCC's code for quantize_rows' loops ran ~1 ns an element at AVX2 (0.4 at
// AVX-512), 6.8% of a 64-request mix at forced AVX2 once the int4 panel had sped up the linears
// (perf, Zen 4); this runs 0.19 ns (timed standalone, 2,048 x 1,536, bytes compared).
#define SGRUN_QUANTIZE_GROUP_SIMD 1
inline void quantize_group_simd(const float* x, int8_t* q, float* d_out, float* sum_out) {
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8), v2 = _mm256_loadu_ps(x + 16),
               v3 = _mm256_loadu_ps(x + 24);
  auto bits = [&](__m256 v) { return _mm256_castps_si256(_mm256_and_ps(v, magnitude)); };
  const __m256i mx = _mm256_max_epi32(_mm256_max_epi32(bits(v0), bits(v1)), _mm256_max_epi32(bits(v2), bits(v3)));
  __m128i m4 = _mm_max_epi32(_mm256_castsi256_si128(mx), _mm256_extracti128_si256(mx, 1));
  m4 = _mm_max_epi32(m4, _mm_shuffle_epi32(m4, 0x4E));
  m4 = _mm_max_epi32(m4, _mm_shuffle_epi32(m4, 0xB1));
  const float amax = _mm_cvtss_f32(_mm_castsi128_ps(m4));
  const float d = amax / 127.0f, inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  const __m256 vi = _mm256_set1_ps(inv);
  const __m256i q0 = _mm256_cvtps_epi32(_mm256_mul_ps(v0, vi)), q1 = _mm256_cvtps_epi32(_mm256_mul_ps(v1, vi));
  const __m256i q2 = _mm256_cvtps_epi32(_mm256_mul_ps(v2, vi)), q3 = _mm256_cvtps_epi32(_mm256_mul_ps(v3, vi));
  const __m256i s = _mm256_add_epi32(_mm256_add_epi32(q0, q1), _mm256_add_epi32(q2, q3));
  __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
  // |q| <= 127, so the saturating packs are exact; they interleave 128-bit lanes, the permute undoes it.
  const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(q0, q1), _mm256_packs_epi32(q2, q3));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q),
                      _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  *d_out = d;
  *sum_out = d * static_cast<float>(_mm_cvtsi128_si32(s4));
}
#endif

#if defined(__aarch64__) && defined(__ARM_NEON)
// The AVX2 group's steps in NEON vectors (every aarch64 level): the max over |x|'s bit
// patterns, the same d and 1/d, x * (1/d) rounded to the nearest even by FCVTNS (as std::rint in
// the default rounding mode), the exact integer sum, narrowing that cannot saturate.
#define SGRUN_QUANTIZE_GROUP_SIMD 1
inline void quantize_group_simd(const float* x, int8_t* q, float* d_out, float* sum_out) {
  float32x4_t v[8];
  int32x4_t mx = vdupq_n_s32(0);
  for (int i = 0; i < 8; ++i) {
    v[i] = vld1q_f32(x + 4 * i);
    mx = vmaxq_s32(mx, vreinterpretq_s32_u32(vandq_u32(vreinterpretq_u32_f32(v[i]), vdupq_n_u32(0x7fffffffu))));
  }
  const int32_t amax_bits = vmaxvq_s32(mx);
  float amax;
  std::memcpy(&amax, &amax_bits, sizeof(amax));
  const float d = amax / 127.0f, inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  int32x4_t qi[8], s = vdupq_n_s32(0);
  for (int i = 0; i < 8; ++i) {
    qi[i] = vcvtnq_s32_f32(vmulq_f32(v[i], vdupq_n_f32(inv)));
    s = vaddq_s32(s, qi[i]);
  }
  for (int h = 0; h < 2; ++h) {
    const int16x8_t a = vcombine_s16(vqmovn_s32(qi[4 * h]), vqmovn_s32(qi[4 * h + 1]));
    const int16x8_t b = vcombine_s16(vqmovn_s32(qi[4 * h + 2]), vqmovn_s32(qi[4 * h + 3]));
    vst1q_s8(q + 16 * h, vcombine_s8(vqmovn_s16(a), vqmovn_s16(b)));
  }
  *d_out = d;
  *sum_out = d * static_cast<float>(vaddvq_s32(s));
}
#endif

// quantize_rows of a contiguous float32 [m, k]: the vector group above where the build has one.
inline void quantize_float_rows(int64_t m, int64_t k, const float* x, QuantRows& out, int threads) {
#if defined(SGRUN_QUANTIZE_GROUP_SIMD)
  const int64_t groups = k / GROUP;
  fit_rows(out, m, k);
  for_row_chunks(threads, m, k, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t g = 0; g < groups; ++g)
        quantize_group_simd(x + r * k + g * GROUP, out.q.data() + r * k + g * GROUP, out.d.data() + r * groups + g,
                            out.sum.data() + r * groups + g);
  });
#else
  quantize_rows(m, k, [&](int64_t r, int64_t i) { return x[r * k + i]; }, out, threads);
#endif
}

// Activations for the int8 lm_head's integer tiles (int8_x16_tile in matmul_avx512_vnni.cpp,
// matmul_avx2.cpp and matmul_neon.cpp): per row and group of 32, X = rint(x / d) with d = max |x| / 32512 (127 * 256), a
// 16-bit integer, and X's split X = 256 * hi + lo into two int8 halves (hi in [-127, 127], lo in
// [-128, 127]) for the VNNI byte dot products. Why integers: the float FMA tiles spent a widening, a
// conversion and an FMA per 16 weights (8 at AVX2), so a batch's lm_head was instruction-bound (in
// cache, 6,144 x 576, two threads, Zen 4: 81 -> 41-48 us at one row, 2,100 -> 1,500 us at 64 rows;
// docs/cpu_kernels.md). Why 16 bits and not llama.cpp's 8: x stays within 1/65,024 of its group's
// largest value, where 8 bits (1/254) would add to the int4 path's drift. Every tile sums the same
// exact integer dot w . X per column and group and applies it in float32 in one order
// (acc += float(dot) * (scale * d)), so every level gives the same bits.
// `corr` is 128 * sum(X): the VNNI tile multiplies the codes as unsigned bytes (w + 128).
struct Quant16Rows {
  std::vector<int16_t> x16;   // [M, K]
  std::vector<int8_t> hi, lo; // [M, K]
  std::vector<float> d;       // [M, K / 32]
  std::vector<int32_t> corr;  // [M, K / 32]
};

inline void quantize16_rows(int64_t m, int64_t k, const float* x, Quant16Rows& out) {
  const int64_t groups = k / GROUP;
  out.x16.resize(static_cast<size_t>(m * k));
  out.hi.resize(static_cast<size_t>(m * k));
  out.lo.resize(static_cast<size_t>(m * k));
  out.d.resize(static_cast<size_t>(m * groups));
  out.corr.resize(static_cast<size_t>(m * groups));
  for (int64_t r = 0; r < m; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      const float* xg = x + r * k + g * GROUP;
      const float amax = group_abs_max(xg);
      const float inv = amax > 0.0f ? 32512.0f / amax : 0.0f;
      const int64_t at = r * k + g * GROUP;
      int32_t sum = 0;
      for (int i = 0; i < GROUP; ++i) {
        float v = std::rint(xg[i] * inv);
        // 1 ulp of the product past the range; NaN (a non-finite row) as 0, its d is NaN or inf
        v = v > 32512.0f ? 32512.0f : v < -32512.0f ? -32512.0f : v == v ? v : 0.0f;
        const int32_t q = static_cast<int32_t>(v);
        const int32_t h = (q + 128) >> 8;   // floor((q + 128) / 256): lo = q - 256 h in [-128, 127]
        out.x16[at + i] = static_cast<int16_t>(q);
        out.hi[at + i] = static_cast<int8_t>(h);
        out.lo[at + i] = static_cast<int8_t>(q - 256 * h);
        sum += q;
      }
      out.d[r * groups + g] = amax / 32512.0f;
      out.corr[r * groups + g] = 128 * sum;
    }
}

// Calls tile(rows, blocks, first) with compile-time rows and blocks: min(left, MaxRows) rows over
// the unit's 2 column blocks (or its 1). Two blocks at once give up to TwoBlockRows rows enough
// independent chains; more rows give them themselves, and their accumulators would not fit the
// registers (spills made 7 rows cost 7x one row with AVX-512), so the blocks then go one at a
// time. Any row count runs the same per-row instruction sequence.
template <int MaxRows, int TwoBlockRows, class Tile>
inline void with_rows(int64_t left, bool two_blocks, Tile&& tile) {
  static_assert(MaxRows >= 1 && MaxRows <= 8, "row blocks of 1..8");
  const int rows = left < MaxRows ? static_cast<int>(left) : MaxRows;
  auto blocks = [&](auto r) {
    if constexpr (decltype(r)::value <= MaxRows) {
      if (!two_blocks) {
        tile(r, Const<1>{}, 0);
      } else if constexpr (decltype(r)::value <= TwoBlockRows) {
        tile(r, Const<2>{}, 0);
      } else {
        tile(r, Const<1>{}, 0);
        tile(r, Const<1>{}, 1);
      }
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
    default: blocks(Const<8>{}); break;
  }
}

// The int4 weight as float32 W^T [K, N] (portable: the levels without an AVX-512 version use it
// for prefill chunks); w = s * c + min in float32.
void int4_dequantize_portable(const uint8_t* codes, const uint16_t* scales, int64_t n, int64_t k, int64_t blk,
                              float* out) {
  const int64_t groups = k / GROUP;
  const uint8_t* c = codes + blk * (k / 2) * LANES;
  const uint16_t* sg = scales + blk * groups * 2 * LANES;
  for (int64_t g = 0; g < groups; ++g) {
    float s[LANES], mn[LANES];
    for (int i = 0; i < LANES; ++i) {
      s[i] = half_to_float(sg[g * 2 * LANES + i]);
      mn[i] = half_to_float(sg[g * 2 * LANES + LANES + i]);
    }
    for (int64_t p = 0; p < PAIRS_PER_GROUP; ++p) {
      const int64_t pair = g * PAIRS_PER_GROUP + p;
      float* lo = out + (2 * pair) * n + blk * LANES;
      float* hi = lo + n;
      for (int i = 0; i < LANES; ++i) {
        const uint8_t b = c[pair * LANES + i];
        lo[i] = s[i] * static_cast<float>(b & 15) + mn[i];
        hi[i] = s[i] * static_cast<float>(b >> 4) + mn[i];
      }
    }
  }
}

}  // namespace
