// The AVX512-BF16 tiles of the weight-only matmuls (levels avx512_bf16 and amx): bf16
// activations against int4 codes decoded to bf16 pairs, or dense bf16, with _mm512_dpbf16_ps
// (16 output columns per instruction); and the int8 lm_head with float32 activations. Layouts:
// matmul_common.cpp. Compiled after it, as one unit with matmul.cpp.
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512BF16__)
#define SGRUN_BF16_DOT 1
#include <immintrin.h>

namespace {

namespace bf16dot {

constexpr int kRowBlock = 8;       // rows per pass over a column block (3 accumulators a row)
constexpr int kTwoBlockRows = 2;   // 2 blocks x 3 accumulators from 3 rows would spill the 32 registers


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

// int8 weights (one fp16 scale per output column and group of 32 k: a GGUF Q8_0 table's own values)
// times float32 activations, float32 out: the lm_head, whose logits are never rounded to bf16.
// Two chains over even and odd k, blocked sums as bf16_tile, each group's scaled into the total.
// scale: [groups, 16] per block.
//
// Prefetch: the next unit of two column blocks (2 * block_stride on, the same offset) into L2, one
// 64-byte line per four k, and its scales once per group, as the AVX2 tile does (matmul_avx2.cpp has
// why). At batch 1 the 28 MB lm_head streams from DRAM; without it this tile read ~19 GB/s of the
// ~35 GB/s two Zen 4 cores read (1.6 ms a step), the AVX2 tile's prefetch having been left out here.
template <int R, int NB>
void int8_f32_tile(const int8_t* q, int64_t block_stride, const float* x, int64_t k, const uint16_t* scale,
                   int64_t block_stride_scales, float* y, int64_t n_total) {
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
    for (int b = 0; b < NB; ++b)
      _mm_prefetch(reinterpret_cast<const char*>(scale + (2 + b) * block_stride_scales + (k0 / GROUP) * LANES),
                   _MM_HINT_T1);
    int64_t kk = k0;
    for (; kk + 1 < k_end; kk += 2) {
      __m512 w0[NB], w1[NB];
      for (int b = 0; b < NB; ++b) {
        if ((kk & 3) == 0)   // one 64-byte line per four k (16 bytes each)
          _mm_prefetch(reinterpret_cast<const char*>(q + (2 + b) * block_stride + kk * LANES), _MM_HINT_T1);
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
    for (int b = 0; b < NB; ++b) {
      const __m512 sg = _mm512_cvtph_ps(_mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(scale + b * block_stride_scales + (k0 / GROUP) * LANES)));
      for (int r = 0; r < R; ++r) acc[r][b] = _mm512_fmadd_ps(_mm512_add_ps(even[r][b], odd[r][b]), sg, acc[r][b]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NB; ++b) _mm512_storeu_ps(y + r * n_total + b * LANES, acc[r][b]);
}


// One column block of the int4 weight as bf16 W^T rows (prefill chunks multiply it with oneDNN's
// GEMM): the 16 columns of one k are 32 contiguous bytes of the [K, N] output, so no transpose;
// w = s * c + min in float32, rounded once.
void int4_dequantize_block(const uint8_t* codes, const uint16_t* scales, int64_t n, int64_t k, int64_t blk,
                           uint16_t* out) {
  const int64_t groups = k / GROUP;
  const __m512i low = _mm512_set1_epi32(15);
  const uint8_t* c = codes + blk * (k / 2) * LANES;
  const uint16_t* sg = scales + blk * groups * 2 * LANES;
  uint16_t* col = out + blk * LANES;
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

}  // namespace bf16dot
}  // namespace
#endif  // SGRUN_BF16_DOT
