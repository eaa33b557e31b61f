// The AVX2 + FMA + F16C path of the prefill attention (levels avx2 and avx512, and float32 pools
// or head dims without a bf16 tile at avx512_bf16): the `simd` path every non-BF16 level provides,
// for bf16 and float32 pools, head dims that are a multiple of 16 up to 256. Everything is float32:
// bf16 keys and values are widened once, when packed (a 16-bit shift), the output rounded to the
// pool's dtype at the end. Built after prefill_attention_common.cpp (the packed walk it plugs into).
//
// Packed context of one (segment, kv head), `keys` rounded up to kKeyBlock, in floats:
//   K: [keys / 16][D][16]: for each head dim, 16 consecutive keys side by side (two vectors);
//   V: [keys][D]: the rows as they are.
// A tile is 6 query rows (two positions of a 3-head GQA group). S = Q K^T is a 6 x 16 register
// block per 16 keys (12 accumulators, two K loads and a broadcast of Q per head dim); P V is
// 6 rows x 16 head dims per pass over the block's keys (two V loads and a broadcast of P per key),
// both GEMM micro-kernels over L1-resident data. The online softmax is base 2 (log2 e folded into
// the query scale) over blocks of 64 keys, stopping at the tile's last causal key, inside the
// last block too (16-key steps for Q K^T, single keys for P V).
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) && !defined(SG_PREFILL_SIMD)
#define SG_PREFILL_SIMD "avx2"
#include <immintrin.h>

namespace {
namespace simd {

constexpr int kRows = 6;
constexpr int64_t kMaxHeadDim = 256;

// Pool dtypes (float16 only under float32 queries: a float32 model's fp16 KV cache) and head dims.
inline bool supports(at::ScalarType dt, int64_t D) {
  return (dt == at::kFloat || dt == at::kBFloat16 || dt == at::kHalf) && D > 0 && D % 16 == 0 && D <= kMaxHeadDim;
}

inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) {   // 8 bf16 widened to float32: the bits move up 16
  const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(x), 16));
}
inline __m256 load8(const at::Half* p) {   // 8 float16 widened to float32 (F16C), exactly
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline void store8(float* p, __m256 x) { _mm256_storeu_ps(p, x); }
inline void store8(uint16_t* p, __m256 x) {   // float32 to bf16, rounded to nearest even
  __m256i b = _mm256_castps_si256(x);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
  b = _mm256_srli_epi32(_mm256_add_epi32(b, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), odd)), 16);
  const __m256i words = _mm256_permute4x64_epi64(_mm256_packus_epi32(b, b), 0x08);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(words));
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

// 2^x for x <= 0: 2^n * e^(f ln 2), n = round(x), |f| <= 1/2, by the degree-7 Taylor series
// (relative error ~5e-9, below float32's rounding); lanes below -126 (masked scores, -inf
// included) give exactly 0, and 2^0 is exactly 1.
inline __m256 exp2_8(__m256 x) {
  const __m256 keep = _mm256_cmp_ps(x, _mm256_set1_ps(-126.0f), _CMP_GE_OQ);
  x = _mm256_max_ps(x, _mm256_set1_ps(-126.0f));
  const __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_mul_ps(_mm256_sub_ps(x, n), _mm256_set1_ps(0.6931471805599453f));
  const float c[8] = {1.0f / 5040.0f, 1.0f / 720.0f, 1.0f / 120.0f, 1.0f / 24.0f, 1.0f / 6.0f, 0.5f, 1.0f, 1.0f};
  __m256 p = _mm256_set1_ps(c[0]);
  for (int i = 1; i < 8; ++i) p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(c[i]));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), keep);
}

template <class E>
inline void widen_row(const E* src, float* dst, int64_t D) {
  for (int64_t d = 0; d < D; d += 8) store8(dst + d, load8(src + d));
}

// E: the query's and the output's element, KV the pool's: float, or uint16_t holding bf16 bits
// (a bf16 pool under float32 queries: Path<float, uint16_t>).
template <class E, class KV = E>
struct Path {
  using Elem = E;
  using KVElem = KV;
  using Word = float;
  static constexpr int kRows = simd::kRows;
  static int64_t words(int64_t keys, int64_t D) { return 2 * keys * D; }

  static void pack(const KV* kc, const KV* vc, int64_t kv_head_stride, int64_t page_stride, int64_t ps,
                   const int64_t* pages, int64_t ctx, int64_t first, int64_t kvh, int64_t D, int64_t block,
                   float* base, int64_t keys) {
    float* kp = base + block * D * 16;
    float* vp = base + keys * D + block * 16 * D;
    alignas(32) float row[kMaxHeadDim];
    for (int64_t c = 0; c < 16; ++c) {
      const int64_t key = first + block * 16 + c;
      if (key >= ctx) {   // padding: zero, so masked-out (0-probability) keys add exactly 0
        for (int64_t d = 0; d < D; ++d) kp[d * 16 + c] = 0.0f;
        std::memset(vp + c * D, 0, D * sizeof(float));
        continue;
      }
      const int64_t off = kvh * kv_head_stride + pages[key / ps] * page_stride + (key % ps) * D;
      widen_row(kc + off, row, D);
      for (int64_t d = 0; d < D; ++d) kp[d * 16 + c] = row[d];
      widen_row(vc + off, vp + c * D, D);
    }
  }

  static void attend(const E* const* qrow, const int64_t* pos, const int64_t* lo, int nrows, const float* base,
                     int64_t keys, int64_t D, float scale_log2, E* const* orow) {
    constexpr int R = kRows;
    static_assert(R <= 8, "one vector holds the tile's row maxima");
    const float* kpk = base;
    const float* vpk = base + keys * D;
    int64_t max_pos = pos[0], min_pos = pos[0], min_lo = lo[0], max_lo = lo[0];
    for (int r = 1; r < R; ++r) {
      max_pos = std::max(max_pos, pos[r]);
      min_pos = std::min(min_pos, pos[r]);
      min_lo = std::min(min_lo, lo[r]);
      max_lo = std::max(max_lo, lo[r]);
    }
    const float ninf = -std::numeric_limits<float>::infinity();
    alignas(32) float qf[R][kMaxHeadDim], o[R][kMaxHeadDim], s[R][kKeyBlock];
    alignas(32) float m[8], bm[8], alpha[8], l[R];
    for (int r = 0; r < 8; ++r) m[r] = bm[r] = r < R ? ninf : 0.0f;
    const __m256 sl = _mm256_set1_ps(scale_log2);
    for (int r = 0; r < R; ++r) {
      l[r] = 0.0f;
      for (int64_t d = 0; d < D; d += 8) {
        _mm256_store_ps(qf[r] + d, _mm256_mul_ps(load8(qrow[r] + d), sl));
        _mm256_store_ps(o[r] + d, _mm256_setzero_ps());
      }
    }
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const int64_t blocks = max_pos / kKeyBlock + 1;
    for (int64_t kb = min_lo / kKeyBlock; kb < blocks; ++kb) {   // blocks before every row's window: skipped
      const int64_t key0 = kb * kKeyBlock;
      const int nk = static_cast<int>(std::min<int64_t>(kKeyBlock, max_pos - key0 + 1));   // keys any row attends
      const int nsub = (nk + 15) / 16;
      // 16-key steps before every row's window start: skipped too (their probabilities are 0 in every row).
      const int sub0 = static_cast<int>(std::max<int64_t>(0, min_lo - key0) / 16);
      // S = Q K^T (scaled, base 2), 16 keys at a time.
      for (int sb = sub0; sb < nsub; ++sb) {
        const float* kp = kpk + (key0 / 16 + sb) * D * 16;
        __m256 acc[R][2];
        for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
        for (int64_t d = 0; d < D; ++d) {
          const __m256 k0 = _mm256_loadu_ps(kp + d * 16), k1 = _mm256_loadu_ps(kp + d * 16 + 8);
          for (int r = 0; r < R; ++r) {
            const __m256 qv = _mm256_broadcast_ss(qf[r] + d);
            acc[r][0] = _mm256_fmadd_ps(qv, k0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(qv, k1, acc[r][1]);
          }
        }
        for (int r = 0; r < R; ++r) {
          _mm256_store_ps(s[r] + 16 * sb, acc[r][0]);
          _mm256_store_ps(s[r] + 16 * sb + 8, acc[r][1]);
        }
      }
      // Keys outside a row's window [lo, pos] masked to -inf; each row's block maximum.
      const int v0 = 2 * sub0, nv = 2 * nsub;
      const bool masked = key0 + 16 * nsub - 1 > min_pos || key0 + 16 * sub0 < max_lo;
      for (int r = 0; r < R; ++r) {
        __m256 mx = _mm256_set1_ps(ninf);
        const __m256i limit = _mm256_set1_epi32(static_cast<int>(pos[r] - key0));
        const __m256i start = _mm256_set1_epi32(static_cast<int>(std::max<int64_t>(lo[r] - key0, -1)));
        for (int v = v0; v < nv; ++v) {
          __m256 x = _mm256_load_ps(s[r] + 8 * v);
          if (masked) {
            const __m256i key = _mm256_add_epi32(lane, _mm256_set1_epi32(8 * v));
            const __m256i out = _mm256_or_si256(_mm256_cmpgt_epi32(key, limit), _mm256_cmpgt_epi32(start, key));
            x = _mm256_blendv_ps(x, _mm256_set1_ps(ninf), _mm256_castsi256_ps(out));
            _mm256_store_ps(s[r] + 8 * v, x);
          }
          mx = _mm256_max_ps(mx, x);
        }
        bm[r] = hmax8(mx);
      }
      {   // every row's new max and rescale factor at once. A row whose window has not begun keeps
          // m = -inf: its alpha (2^NaN) and probabilities (2^(-inf + inf)) come out 0, o and l stay 0.
        const __m256 m_old = _mm256_load_ps(m), m_new = _mm256_max_ps(m_old, _mm256_load_ps(bm));
        _mm256_store_ps(alpha, exp2_8(_mm256_sub_ps(m_old, m_new)));
        _mm256_store_ps(m, m_new);
      }
      for (int r = 0; r < R; ++r) {
        const __m256 shift = _mm256_set1_ps(m[r]);
        __m256 sum = _mm256_setzero_ps();
        for (int v = v0; v < nv; ++v) {
          const __m256 p = exp2_8(_mm256_sub_ps(_mm256_load_ps(s[r] + 8 * v), shift));
          sum = _mm256_add_ps(sum, p);
          _mm256_store_ps(s[r] + 8 * v, p);
        }
        l[r] = l[r] * alpha[r] + hsum8(sum);
      }
      // O = alpha O + P V over the block's keys [16 sub0, nk) (the rest have probability 0 in every row).
      const float* vb = vpk + key0 * D;
      for (int64_t dc = 0; dc < D; dc += 16) {
        __m256 ov[R][2];
        for (int r = 0; r < R; ++r) {
          const __m256 a = _mm256_set1_ps(alpha[r]);
          ov[r][0] = _mm256_mul_ps(_mm256_load_ps(o[r] + dc), a);
          ov[r][1] = _mm256_mul_ps(_mm256_load_ps(o[r] + dc + 8), a);
        }
        for (int k = 16 * sub0; k < nk; ++k) {
          const __m256 v0 = _mm256_loadu_ps(vb + k * D + dc), v1 = _mm256_loadu_ps(vb + k * D + dc + 8);
          for (int r = 0; r < R; ++r) {
            const __m256 p = _mm256_broadcast_ss(s[r] + k);
            ov[r][0] = _mm256_fmadd_ps(p, v0, ov[r][0]);
            ov[r][1] = _mm256_fmadd_ps(p, v1, ov[r][1]);
          }
        }
        for (int r = 0; r < R; ++r) {
          _mm256_store_ps(o[r] + dc, ov[r][0]);
          _mm256_store_ps(o[r] + dc + 8, ov[r][1]);
        }
      }
    }
    for (int r = 0; r < nrows; ++r) {
      const __m256 inv = _mm256_set1_ps(1.0f / l[r]);
      for (int64_t d = 0; d < D; d += 8) store8(orow[r] + d, _mm256_mul_ps(_mm256_load_ps(o[r] + d), inv));
    }
  }
};

}  // namespace simd
}  // namespace
#endif
