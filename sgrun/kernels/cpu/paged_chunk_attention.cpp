// Softmax attention of a few query heads of one kv head over one chunk of paged context tokens:
// the chunk's running max m, sum of exponentials l and unnormalised output acc per head
// (paged_decode.cpp folds the chunks of a context together). Built after paged_rows.cpp and
// the ISA chunk paths (paged_chunk_avx2.cpp, paged_chunk_neon.cpp) and before paged_decode.cpp,
// as one unit by paged_decode.py, with the level's flags and -ffp-contract=off.
//
// Row invariance: each query head goes through the same instruction sequence whichever heads
// share its pass (a GQA group, a cascade's stacked queries, a group of 1), so its result depends
// only on its own query and context. Heads in one pass share the K/V loads, nothing else.
//
// Three implementations, the best the level compiled taken per call (chunk_path): on CPUs with
// AVX512-BF16 and a bf16 cache of head dim 32, 64 or 128, q.k runs on the bf16 keys directly
// (_mm512_dpbf16ps; a float32 query is split into three bf16 parts, so nothing is lost), and V
// is widened inside the P.V loop; at AVX2 and above, float32 and bf16 caches of head dim 16-128
// take the hand-written AVX2 path (paged_chunk_avx2.cpp, built before this file; float16 caches
// too, a float32 model's fp16 KV cache, at every level), on aarch64 the
// NEON one (paged_chunk_neon.cpp); elsewhere, portable GCC vector code converts each block of 16
// keys and values to float32 once.
#if defined(__AVX512F__) && defined(__AVX512BF16__)
#include <immintrin.h>
#define SG_BF16_KERNEL 1
#endif
#include <string>
#include <vector>

namespace {

// ---- portable path: GCC vectors of 16 floats; head dims that are a multiple of 16 ----
typedef float vf16 __attribute__((vector_size(64)));
typedef int32_t vi16 __attribute__((vector_size(64)));

inline vf16 load16(const float* p) { vf16 x; std::memcpy(&x, p, sizeof(x)); return x; }
inline void store16(float* p, vf16 x) { std::memcpy(p, &x, sizeof(x)); }
inline vf16 splat16(float x) { return vf16{} + x; }

#if defined(__clang__)
#define SG_SHUF(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define SG_SHUF(a, b, ...) __builtin_shuffle(a, b, (vi16){__VA_ARGS__})
#endif

// Lane sums of 16 vectors as one vector: out[t] = sum of a[t]'s lanes (a transposing tree:
// 15 adds and 30 two-source shuffles instead of 16 separate horizontal sums).
inline vf16 transpose_sum16(const vf16* a) {
  vf16 b[8], c[4], d[2];
  for (int i = 0; i < 8; ++i)
    b[i] = SG_SHUF(a[2 * i], a[2 * i + 1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23)
         + SG_SHUF(a[2 * i], a[2 * i + 1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
  for (int i = 0; i < 4; ++i)
    c[i] = SG_SHUF(b[2 * i], b[2 * i + 1], 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27)
         + SG_SHUF(b[2 * i], b[2 * i + 1], 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
  for (int i = 0; i < 2; ++i)
    d[i] = SG_SHUF(c[2 * i], c[2 * i + 1], 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29)
         + SG_SHUF(c[2 * i], c[2 * i + 1], 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31);
  return SG_SHUF(d[0], d[1], 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30)
       + SG_SHUF(d[0], d[1], 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
}

inline float hmax16(vf16 x) {
  float m = x[0];
  for (int i = 1; i < 16; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

inline vf16 exp16(vf16 x) {   // exp_nonpos on 16 lanes
  x = x < -87.0f ? splat16(-87.0f) : x;
  const vf16 t = x * 1.4426950408889634f;
  const vf16 rounded = (t + 12582912.0f) - 12582912.0f;
  const vf16 f = (t - rounded) * 0.6931471805599453f;
  const vf16 p = exp_frac_series(f);
  const vi16 bits = (__builtin_convertvector(rounded, vi16) + 127) << 23;
  vf16 scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

// Per-thread buffers for one chunk pass over up to `heads` query heads.
struct ChunkScratch {
  std::vector<float> kf, vfb, qs, s;
  ChunkScratch(int64_t D, int64_t heads) : kf(kBlock * D), vfb(kBlock * D), qs(heads * D), s(kBlock) {}
};

// The online softmax over one chunk, 16 tokens at a time; each block of keys and values is
// converted to float once and used by every head. q: [gn, D] float32, unscaled.
template <typename T, int C>
void chunk_portable(const float* q, int64_t gn, const ChunkSource<T>& src, float scale, ChunkScratch& w,
                    float* m, float* l, float* acc) {
  constexpr int D = 16 * C;
  const float ninf = -std::numeric_limits<float>::infinity();
  float* qs = w.qs.data();
  for (int64_t i = 0; i < gn * D; ++i) qs[i] = q[i] * scale;
  float *kf = w.kf.data(), *vfb = w.vfb.data();
  BlockRows<T> br(src);
  for (int64_t t0 = src.t0; t0 < src.t1; t0 += kBlock) {
    const int nt = br.fill(src, t0);
    for (int t = 0; t < kBlock; ++t) {   // rows past nt repeat a real row: finite, masked below
      to_float(src.k + br.rows[t] * D, kf + t * D, D);
      to_float(src.v + br.rows[t] * D, vfb + t * D, D);
    }
    vf16 lane_ok;
    for (int t = 0; t < 16; ++t) lane_ok[t] = t < nt ? 0.0f : ninf;
    for (int64_t g = 0; g < gn; ++g) {
      vf16 qv[C];
      for (int c = 0; c < C; ++c) qv[c] = load16(qs + g * D + 16 * c);
      vf16 a[16];
      for (int t = 0; t < 16; ++t) {
        vf16 x = qv[0] * load16(kf + t * D);
        for (int c = 1; c < C; ++c) x += qv[c] * load16(kf + t * D + 16 * c);
        a[t] = x;
      }
      const vf16 sc = transpose_sum16(a) + lane_ok;
      const float mo = m[g];
      const float bm = hmax16(sc);
      const float mn = bm > mo ? bm : mo;
      const float alpha = mo == ninf ? 0.0f : exp_nonpos(mo - mn);
      vf16 p = exp16(sc - mn);
      p = lane_ok == 0.0f ? p : vf16{};
      float pa[16];
      store16(pa, p);
      float sum = 0.0f;
      for (int t = 0; t < 16; ++t) sum += pa[t];
      l[g] = l[g] * alpha + sum;
      m[g] = mn;
      vf16 o[C];
      for (int c = 0; c < C; ++c) o[c] = load16(acc + g * D + 16 * c) * alpha;
      for (int t = 0; t < nt; ++t)
        for (int c = 0; c < C; ++c) o[c] += pa[t] * load16(vfb + t * D + 16 * c);
      for (int c = 0; c < C; ++c) store16(acc + g * D + 16 * c, o[c]);
    }
  }
}

// Any head dim: the same walk with scalar-per-row code (the compiler still vectorizes over D).
template <typename T>
void chunk_any(const float* q, int64_t gn, const ChunkSource<T>& src, float scale, ChunkScratch& w,
               float* m, float* l, float* acc) {
  const int64_t D = src.D;
  const float ninf = -std::numeric_limits<float>::infinity();
  float *qs = w.qs.data(), *kf = w.kf.data(), *vfb = w.vfb.data(), *s = w.s.data();
  for (int64_t i = 0; i < gn * D; ++i) qs[i] = q[i] * scale;
  BlockRows<T> br(src);
  for (int64_t t0 = src.t0; t0 < src.t1; t0 += kBlock) {
    const int nt = br.fill(src, t0);
    for (int t = 0; t < nt; ++t) {
      to_float(src.k + br.rows[t] * D, kf + t * D, D);
      to_float(src.v + br.rows[t] * D, vfb + t * D, D);
    }
    for (int64_t g = 0; g < gn; ++g) {
      const float* qg = qs + g * D;
      float bm = ninf;
      for (int t = 0; t < nt; ++t) {
        float dot = 0.0f;
        #pragma omp simd reduction(+:dot)
        for (int64_t d = 0; d < D; ++d) dot += qg[d] * kf[t * D + d];
        s[t] = dot;
        bm = dot > bm ? dot : bm;
      }
      const float mn = bm > m[g] ? bm : m[g];
      const float alpha = m[g] == ninf ? 0.0f : exp_nonpos(m[g] - mn);
      float sum = 0.0f;
      for (int t = 0; t < nt; ++t) { s[t] = exp_nonpos(s[t] - mn); sum += s[t]; }
      l[g] = l[g] * alpha + sum;
      m[g] = mn;
      float* ag = acc + g * D;
      for (int64_t d = 0; d < D; ++d) ag[d] *= alpha;
      for (int t = 0; t < nt; ++t) {
        #pragma omp simd
        for (int64_t d = 0; d < D; ++d) ag[d] += s[t] * vfb[t * D + d];
      }
    }
  }
}

#ifdef SG_BF16_KERNEL
// ---- AVX512-BF16 path: bf16 cache, head dim 32 * C ----

// One query head as bf16 pairs, in 16-dim pieces broadcast to both 256-bit halves (a piece
// meets two tokens' keys in one dpbf16). A float32 query is the sum of three bf16 parts (8 + 8
// + 8 mantissa bits: exact), a bf16 query is its first part alone.
template <int C, int PARTS>
struct QueryBf16 {
  __m512bh part[PARTS][2 * C];
};

inline __m512 bf16_to_float(__m256i x) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(x), 16)); }

template <int C, int PARTS>
inline void load_query(const float* q, QueryBf16<C, PARTS>& out) {
  for (int c = 0; c < 2 * C; ++c) {
    __m512 x = _mm512_loadu_ps(q + 16 * c);
    for (int i = 0; i < PARTS; ++i) {
      const __m256i b = (__m256i)_mm512_cvtneps_pbh(x);
      out.part[i][c] = (__m512bh)_mm512_broadcast_i64x4(b);
      x = _mm512_sub_ps(x, bf16_to_float(b));
    }
  }
}

// e^x for x <= 0 on 16 lanes: 2^n * e^f, e^f by the same series, 2^n by scalef.
inline __m512 exp512(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
  const __m512 t = _mm512_mul_ps(x, _mm512_set1_ps(1.4426950408889634f));
  const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_mul_ps(_mm512_sub_ps(t, n), _mm512_set1_ps(0.6931471805599453f));
  const float c[8] = {1.0f / 5040.0f, 1.0f / 720.0f, 1.0f / 120.0f, 1.0f / 24.0f, 1.0f / 6.0f, 0.5f, 1.0f, 1.0f};
  __m512 p = _mm512_set1_ps(c[0]);
  for (int i = 1; i < 8; ++i) p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(c[i]));
  return _mm512_scalef_ps(p, n);
}

// Scores of NH heads against 16 keys. Keys go in pairs: a 512-bit operand holds 16 dims of
// token a (low half) and of token b (high half), so one dpbf16 gives 8 partial sums for each;
// a shuffle tree then sums the partials, leaving token 4j + q in lane 4q + j (undone by one permute).
template <int C, int NH, int PARTS>
inline void scores_bf16(const QueryBf16<C, PARTS>* q, const uint16_t* k, const int64_t* rows, __m512* s) {
  constexpr int D = 32 * C;
  __m512 y[NH][4];
  for (int i = 0; i < 4; ++i) {
    __m512 x[NH][2];
    for (int j = 0; j < 2; ++j) {
      const uint16_t* ka = k + rows[4 * i + 2 * j] * D;
      const uint16_t* kb = k + rows[4 * i + 2 * j + 1] * D;
      for (int h = 0; h < NH; ++h) x[h][j] = _mm512_setzero_ps();
      for (int c = 0; c < 2 * C; ++c) {
        const __m512i lo = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(ka + 16 * c)));
        const __m512bh kk = (__m512bh)_mm512_inserti64x4(lo, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kb + 16 * c)), 1);
        for (int h = 0; h < NH; ++h) {
          for (int i = 0; i < PARTS; ++i) x[h][j] = _mm512_dpbf16_ps(x[h][j], q[h].part[i][c], kk);
        }
      }
    }
    for (int h = 0; h < NH; ++h)   // quarter q of y: token 4i + q's 4 partial sums
      y[h][i] = _mm512_add_ps(_mm512_shuffle_f32x4(x[h][0], x[h][1], 0x88), _mm512_shuffle_f32x4(x[h][0], x[h][1], 0xDD));
  }
  const __m512i perm = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  for (int h = 0; h < NH; ++h) {
    const __m512 z0 = _mm512_add_ps(_mm512_shuffle_ps(y[h][0], y[h][1], 0x88), _mm512_shuffle_ps(y[h][0], y[h][1], 0xDD));
    const __m512 z1 = _mm512_add_ps(_mm512_shuffle_ps(y[h][2], y[h][3], 0x88), _mm512_shuffle_ps(y[h][2], y[h][3], 0xDD));
    const __m512 w = _mm512_add_ps(_mm512_shuffle_ps(z0, z1, 0x88), _mm512_shuffle_ps(z0, z1, 0xDD));
    s[h] = _mm512_permutexvar_ps(perm, w);
  }
}

// One pass of NH heads over the chunk. The output accumulators hold even and odd dims apart
// (a bf16 pair widens to two floats with one shift and one mask); they are interleaved at the end.
template <int C, int NH, int PARTS>
void chunk_bf16_heads(const float* q, const ChunkSource<at::BFloat16>& src, float scale, float* m, float* l, float* acc) {
  constexpr int D = 32 * C;
  const float ninf = -std::numeric_limits<float>::infinity();
  QueryBf16<C, PARTS> qb[NH];
  for (int h = 0; h < NH; ++h) load_query<C, PARTS>(q + h * D, qb[h]);
  __m512 ev[NH][C], od[NH][C];
  for (int h = 0; h < NH; ++h)
    for (int c = 0; c < C; ++c) ev[h][c] = od[h][c] = _mm512_setzero_ps();
  const uint16_t* k = reinterpret_cast<const uint16_t*>(src.k);
  const uint16_t* v = reinterpret_cast<const uint16_t*>(src.v);
  const __m512i high = _mm512_set1_epi32(static_cast<int32_t>(0xFFFF0000u));
  BlockRows<at::BFloat16> br(src);
  for (int64_t t0 = src.t0; t0 < src.t1; t0 += kBlock) {
    const int nt = br.fill(src, t0);
    const __mmask16 valid = static_cast<__mmask16>((1u << nt) - 1u);
    __m512 s[NH];
    scores_bf16<C, NH, PARTS>(qb, k, br.rows, s);
    alignas(64) float pa[NH][kBlock];
    for (int h = 0; h < NH; ++h) {
      const __m512 sc = _mm512_mask_mov_ps(_mm512_set1_ps(ninf), valid, _mm512_mul_ps(s[h], _mm512_set1_ps(scale)));
      const float bm = _mm512_reduce_max_ps(sc);
      const float mo = m[h];
      const float mn = bm > mo ? bm : mo;
      const float alpha = mo == ninf ? 0.0f : exp_nonpos(mo - mn);
      const __m512 p = _mm512_maskz_mov_ps(valid, exp512(_mm512_sub_ps(sc, _mm512_set1_ps(mn))));
      l[h] = l[h] * alpha + _mm512_reduce_add_ps(p);
      m[h] = mn;
      _mm512_store_ps(pa[h], p);
      const __m512 a = _mm512_set1_ps(alpha);
      for (int c = 0; c < C; ++c) { ev[h][c] = _mm512_mul_ps(ev[h][c], a); od[h][c] = _mm512_mul_ps(od[h][c], a); }
    }
    for (int t = 0; t < nt; ++t) {
      const uint16_t* vr = v + br.rows[t] * D;
      for (int c = 0; c < C; ++c) {
        const __m512i x = _mm512_loadu_si512(vr + 32 * c);
        const __m512 e = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
        const __m512 o = _mm512_castsi512_ps(_mm512_and_si512(x, high));
        for (int h = 0; h < NH; ++h) {
          const __m512 pt = _mm512_set1_ps(pa[h][t]);
          ev[h][c] = _mm512_fmadd_ps(pt, e, ev[h][c]);
          od[h][c] = _mm512_fmadd_ps(pt, o, od[h][c]);
        }
      }
    }
  }
  for (int h = 0; h < NH; ++h)
    for (int c = 0; c < C; ++c) {
      alignas(64) float e[16], o[16];
      _mm512_store_ps(e, ev[h][c]);
      _mm512_store_ps(o, od[h][c]);
      for (int i = 0; i < 16; ++i) { acc[h * D + 32 * c + 2 * i] = e[i]; acc[h * D + 32 * c + 2 * i + 1] = o[i]; }
    }
}

// Heads in passes of 3 (the GQA group of the default model; registers allow no more), the rest
// by 2 or 1; every head's arithmetic is the same whichever pass it is in.
template <int C, int PARTS>
void chunk_bf16(const float* q, int64_t gn, const ChunkSource<at::BFloat16>& src, float scale, float* m, float* l,
                float* acc) {
  constexpr int D = 32 * C;
  int64_t g = 0;
  for (; g + 3 <= gn; g += 3) chunk_bf16_heads<C, 3, PARTS>(q + g * D, src, scale, m + g, l + g, acc + g * D);
  if (gn - g == 2) chunk_bf16_heads<C, 2, PARTS>(q + g * D, src, scale, m + g, l + g, acc + g * D);
  else if (gn - g == 1) chunk_bf16_heads<C, 1, PARTS>(q + g * D, src, scale, m + g, l + g, acc + g * D);
}
#endif

// m = -inf, l = 0, acc = 0 for gn heads, then one chunk of tokens into them. q: [gn, D] float32
// unscaled; `q_is_bf16`: its values are exactly bf16 (the bf16 path then needs one part, not three).
template <typename T>
void attend_chunk(const float* q, int64_t gn, bool q_is_bf16, const ChunkSource<T>& src, float scale,
                  ChunkScratch& w, float* m, float* l, float* acc) {
  const int64_t D = src.D;
  for (int64_t g = 0; g < gn; ++g) { m[g] = -std::numeric_limits<float>::infinity(); l[g] = 0.0f; }
  std::fill(acc, acc + gn * D, 0.0f);
#ifdef SG_BF16_KERNEL
  if constexpr (std::is_same_v<T, at::BFloat16>) {
    switch (D * (q_is_bf16 ? 1 : -1)) {
      case 32: return chunk_bf16<1, 1>(q, gn, src, scale, m, l, acc);
      case 64: return chunk_bf16<2, 1>(q, gn, src, scale, m, l, acc);
      case 128: return chunk_bf16<4, 1>(q, gn, src, scale, m, l, acc);
      case -32: return chunk_bf16<1, 3>(q, gn, src, scale, m, l, acc);
      case -64: return chunk_bf16<2, 3>(q, gn, src, scale, m, l, acc);
      case -128: return chunk_bf16<4, 3>(q, gn, src, scale, m, l, acc);
      default: break;
    }
  }
#endif
#ifdef SG_SIMD_CHUNK
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, at::BFloat16> || std::is_same_v<T, at::Half>) {
    switch (D) {
      case 16: return chunk_simd::chunk<T, 1>(q, gn, src, scale, m, l, acc);
      case 32: return chunk_simd::chunk<T, 2>(q, gn, src, scale, m, l, acc);
      case 64: return chunk_simd::chunk<T, 4>(q, gn, src, scale, m, l, acc);
      case 128: return chunk_simd::chunk<T, 8>(q, gn, src, scale, m, l, acc);
      default: break;
    }
  }
#endif
  switch (D) {
    case 16: return chunk_portable<T, 1>(q, gn, src, scale, w, m, l, acc);
    case 32: return chunk_portable<T, 2>(q, gn, src, scale, w, m, l, acc);
    case 64: return chunk_portable<T, 4>(q, gn, src, scale, w, m, l, acc);
    case 128: return chunk_portable<T, 8>(q, gn, src, scale, w, m, l, acc);
    default: return chunk_any<T>(q, gn, src, scale, w, m, l, acc);
  }
}

// The path attend_chunk takes for a pool dtype and head dim (a bf16 query; a float32 query on a
// bf16 pool takes the same one): "avx512_bf16", SG_SIMD_CHUNK ("avx2", "neon"), "portable" (GCC
// vectors) or "any".
inline std::string chunk_path(at::ScalarType dt, int64_t D) {
#ifdef SG_BF16_KERNEL
  if (dt == at::kBFloat16 && (D == 32 || D == 64 || D == 128)) return "avx512_bf16";
#endif
#ifdef SG_SIMD_CHUNK
  if ((dt == at::kFloat || dt == at::kBFloat16 || dt == at::kHalf) && (D == 16 || D == 32 || D == 64 || D == 128))
    return SG_SIMD_CHUNK;
#endif
  return D == 16 || D == 32 || D == 64 || D == 128 ? "portable" : "any";
}

}  // namespace
