// The AVX2 + FMA path of the decode kernel's chunk math (levels avx2 and avx512, and float32 pools
// or head dims without a bf16 tile at avx512_bf16): a few query heads of one kv head over one
// chunk of paged tokens, as paged_chunk_attention.cpp's portable path computes it (same walk,
// same online softmax over blocks of 16 tokens, same (m, l, acc) state), in hand-written AVX2 for
// float32 and bf16 pools, head dims 16, 32, 64, 128. Built after paged_rows.cpp (the paged walk)
// and before paged_chunk_attention.cpp (which dispatches to it). SG_PORTABLE_CHUNK leaves it out
// (benchmarks build the portable path that way for comparison).
//
// Nothing is converted into a scratch buffer: each key and value row is loaded straight from its
// page once per block and used by every head of the pass from registers. A bf16 row of 16 dims
// is one 256-bit load that widens to two float vectors with one shift (its even dims) and one
// mask (its odd dims), so for bf16 pools the query and the output accumulators are kept in that
// "lane order" (vector 2i: dims 16i + 2l, vector 2i + 1: dims 16i + 2l + 1) and put back in
// natural order at the end; float32 rows are simply two loads.
// - q.k: per token one accumulator per head (two FMA chains, added), stored; after the block a
//   horizontal-add tree turns each head's 16 partial vectors into its 16 scores (2 vectors);
// - P.V: per groups_per_pass() x 16 head dims the heads' accumulators stay in registers across
//   the block's tokens, one broadcast of p per head and token.
// float16 pools (a float32 model's fp16 KV cache) widen with F16C's vcvtph2ps, 8 values per
// instruction in natural order, so they keep float32's order.
// Row invariance: a head's instructions do not depend on which heads share its pass.
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) && !defined(SG_SIMD_CHUNK) && \
    !defined(SG_PORTABLE_CHUNK)
#define SG_SIMD_CHUNK "avx2"
#include <immintrin.h>

namespace {
namespace chunk_simd {

template <typename T>
struct Lanes;

template <>
struct Lanes<float> {
  static void get(const float* row, int i, __m256& a, __m256& b) {
    a = _mm256_loadu_ps(row + 16 * i);
    b = _mm256_loadu_ps(row + 16 * i + 8);
  }
  static void query(const float* q, float* out, int D, float scale) {   // natural order, scaled
    for (int d = 0; d < D; ++d) out[d] = q[d] * scale;
  }
  static void finish(float*, int) {}   // already in natural order
};

template <>
struct Lanes<at::BFloat16> {
  static void get(const at::BFloat16* row, int i, __m256& a, __m256& b) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 16 * i));
    a = _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
    b = _mm256_castsi256_ps(_mm256_and_si256(x, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
  }
  static void query(const float* q, float* out, int D, float scale) {   // lane order, scaled
    for (int i = 0; i < D / 16; ++i)
      for (int l = 0; l < 8; ++l) {
        out[16 * i + l] = q[16 * i + 2 * l] * scale;
        out[16 * i + 8 + l] = q[16 * i + 2 * l + 1] * scale;
      }
  }
  static void finish(float* acc, int D) {   // lane order back to natural, in place
    for (int i = 0; i < D / 16; ++i) {
      const __m256 a = _mm256_loadu_ps(acc + 16 * i), b = _mm256_loadu_ps(acc + 16 * i + 8);
      const __m256 lo = _mm256_unpacklo_ps(a, b), hi = _mm256_unpackhi_ps(a, b);
      _mm256_storeu_ps(acc + 16 * i, _mm256_permute2f128_ps(lo, hi, 0x20));
      _mm256_storeu_ps(acc + 16 * i + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
    }
  }
};

template <>
struct Lanes<at::Half> {
  static void get(const at::Half* row, int i, __m256& a, __m256& b) {
    a = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 16 * i)));
    b = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 16 * i + 8)));
  }
  static void query(const float* q, float* out, int D, float scale) { Lanes<float>::query(q, out, D, scale); }
  static void finish(float*, int) {}   // natural order
};

// out lane t = the sum of vector t's lanes, for 8 vectors stored contiguously.
inline __m256 lane_sums8(const float* a) {
  const __m256 h01 = _mm256_hadd_ps(_mm256_load_ps(a), _mm256_load_ps(a + 8));
  const __m256 h23 = _mm256_hadd_ps(_mm256_load_ps(a + 16), _mm256_load_ps(a + 24));
  const __m256 h45 = _mm256_hadd_ps(_mm256_load_ps(a + 32), _mm256_load_ps(a + 40));
  const __m256 h67 = _mm256_hadd_ps(_mm256_load_ps(a + 48), _mm256_load_ps(a + 56));
  const __m256 q0 = _mm256_hadd_ps(h01, h23), q1 = _mm256_hadd_ps(h45, h67);
  return _mm256_add_ps(_mm256_permute2f128_ps(q0, q1, 0x20), _mm256_permute2f128_ps(q0, q1, 0x31));
}

inline float hmax8(__m256 x) {
  __m128 y = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  y = _mm_max_ps(y, _mm_movehl_ps(y, y));
  return _mm_cvtss_f32(_mm_max_ss(y, _mm_movehdup_ps(y)));
}
inline float hsum8(__m256 x) {
  __m128 y = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  y = _mm_add_ps(y, _mm_movehl_ps(y, y));
  return _mm_cvtss_f32(_mm_add_ss(y, _mm_movehdup_ps(y)));
}

// e^x for x <= 0 on 8 lanes: exp_nonpos's method (2^n * e^f, degree-7 series), n by rounding.
inline __m256 exp8(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
  const __m256 t = _mm256_mul_ps(x, _mm256_set1_ps(1.4426950408889634f));
  const __m256 n = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_mul_ps(_mm256_sub_ps(t, n), _mm256_set1_ps(0.6931471805599453f));
  const float c[8] = {1.0f / 5040.0f, 1.0f / 720.0f, 1.0f / 120.0f, 1.0f / 24.0f, 1.0f / 6.0f, 0.5f, 1.0f, 1.0f};
  __m256 p = _mm256_set1_ps(c[0]);
  for (int i = 1; i < 8; ++i) p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(c[i]));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// 16-dim groups per P.V pass: the pass's accumulators (NH heads x 2 vectors x groups) stay in
// registers with the row's vectors and the broadcasts (16 ymm registers; 32 with AVX-512's EVEX).
template <int C, int NH>
constexpr int groups_per_pass() {
#ifdef __AVX512F__
  return C % 4 == 0 && NH <= 3 ? 4 : C % 2 == 0 ? 2 : 1;
#else
  return C % 2 == 0 && NH <= 3 ? 2 : 1;
#endif
}

// One pass of NH heads over the chunk; acc: [NH, D], zero on entry, natural order on exit.
template <typename T, int C, int NH>
void chunk_heads(const float* q, const ChunkSource<T>& src, float scale, float* m, float* l, float* acc) {
  constexpr int D = 16 * C, GP = groups_per_pass<C, NH>();
  const float ninf = -std::numeric_limits<float>::infinity();
  alignas(32) float qs[NH][D];
  alignas(32) float part[NH][kBlock][8];   // per token, its 8 partial dot products
  alignas(32) float pa[NH][kBlock];
  for (int h = 0; h < NH; ++h) Lanes<T>::query(q + h * D, qs[h], D, scale);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  BlockRows<T> br(src);
  for (int64_t t0 = src.t0; t0 < src.t1; t0 += kBlock) {
    const int nt = br.fill(src, t0);
    for (int t = 0; t < nt; ++t) {
      const T* kr = src.k + br.rows[t] * D;
      __m256 a[NH][2];
      for (int h = 0; h < NH; ++h) a[h][0] = a[h][1] = _mm256_setzero_ps();
      for (int i = 0; i < C; ++i) {
        __m256 x0, x1;
        Lanes<T>::get(kr, i, x0, x1);
        for (int h = 0; h < NH; ++h) {
          a[h][0] = _mm256_fmadd_ps(_mm256_load_ps(qs[h] + 16 * i), x0, a[h][0]);
          a[h][1] = _mm256_fmadd_ps(_mm256_load_ps(qs[h] + 16 * i + 8), x1, a[h][1]);
        }
      }
      for (int h = 0; h < NH; ++h) _mm256_store_ps(part[h][t], _mm256_add_ps(a[h][0], a[h][1]));
    }
    for (int t = nt; t < kBlock; ++t)   // past the chunk's end: any finite value, masked below
      for (int h = 0; h < NH; ++h) _mm256_store_ps(part[h][t], _mm256_setzero_ps());
    const __m256 valid0 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(nt), lane));
    const __m256 valid1 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(nt - 8), lane));
    float alpha[NH];
    for (int h = 0; h < NH; ++h) {
      const __m256 s0 = _mm256_blendv_ps(_mm256_set1_ps(ninf), lane_sums8(part[h][0]), valid0);
      const __m256 s1 = _mm256_blendv_ps(_mm256_set1_ps(ninf), lane_sums8(part[h][8]), valid1);
      const float bm = hmax8(_mm256_max_ps(s0, s1));
      const float mo = m[h];
      const float mn = bm > mo ? bm : mo;
      alpha[h] = mo == ninf ? 0.0f : exp_nonpos(mo - mn);
      const __m256 shift = _mm256_set1_ps(mn);
      const __m256 p0 = _mm256_and_ps(exp8(_mm256_sub_ps(s0, shift)), valid0);
      const __m256 p1 = _mm256_and_ps(exp8(_mm256_sub_ps(s1, shift)), valid1);
      l[h] = l[h] * alpha[h] + hsum8(_mm256_add_ps(p0, p1));
      m[h] = mn;
      _mm256_store_ps(pa[h], p0);
      _mm256_store_ps(pa[h] + 8, p1);
    }
    for (int i0 = 0; i0 < C; i0 += GP) {
      __m256 o[NH][GP][2];
      for (int h = 0; h < NH; ++h) {
        const __m256 a = _mm256_set1_ps(alpha[h]);
        for (int g = 0; g < GP; ++g) {
          o[h][g][0] = _mm256_mul_ps(_mm256_loadu_ps(acc + h * D + 16 * (i0 + g)), a);
          o[h][g][1] = _mm256_mul_ps(_mm256_loadu_ps(acc + h * D + 16 * (i0 + g) + 8), a);
        }
      }
      for (int t = 0; t < nt; ++t) {
        const T* vr = src.v + br.rows[t] * D;
        for (int g = 0; g < GP; ++g) {
          __m256 x0, x1;
          Lanes<T>::get(vr, i0 + g, x0, x1);
          for (int h = 0; h < NH; ++h) {
            const __m256 p = _mm256_broadcast_ss(pa[h] + t);
            o[h][g][0] = _mm256_fmadd_ps(p, x0, o[h][g][0]);
            o[h][g][1] = _mm256_fmadd_ps(p, x1, o[h][g][1]);
          }
        }
      }
      for (int h = 0; h < NH; ++h)
        for (int g = 0; g < GP; ++g) {
          _mm256_storeu_ps(acc + h * D + 16 * (i0 + g), o[h][g][0]);
          _mm256_storeu_ps(acc + h * D + 16 * (i0 + g) + 8, o[h][g][1]);
        }
    }
  }
  for (int h = 0; h < NH; ++h) Lanes<T>::finish(acc + h * D, D);
}

// Heads in passes of 3 (the default model's GQA group), the rest by 2 or 1.
template <typename T, int C>
void chunk(const float* q, int64_t gn, const ChunkSource<T>& src, float scale, float* m, float* l, float* acc) {
  constexpr int D = 16 * C;
  int64_t g = 0;
  for (; g + 3 <= gn; g += 3) chunk_heads<T, C, 3>(q + g * D, src, scale, m + g, l + g, acc + g * D);
  if (gn - g == 2) chunk_heads<T, C, 2>(q + g * D, src, scale, m + g, l + g, acc + g * D);
  else if (gn - g == 1) chunk_heads<T, C, 1>(q + g * D, src, scale, m + g, l + g, acc + g * D);
}

}  // namespace chunk_simd
}  // namespace
#endif
