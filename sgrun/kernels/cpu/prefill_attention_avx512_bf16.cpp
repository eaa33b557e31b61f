// The AVX512-BF16 path of the prefill attention (level avx512_bf16 / amx; bf16 and float32 pools,
// head dims 32, 64, 96, 128): K and V packed as bf16 pairs in the layouts _mm512_dpbf16ps reads (K: 16 keys
// side by side per pair of head dims; V: two consecutive keys interleaved per head dim), scores
// and sums in float32, probabilities rounded to bf16 for P V as flash attention does. Built
// after prefill_attention_common.cpp (the packed walk it plugs into).
//
// A float32 pool's rows at positions >= bf16_from (the driver splits them off) take it too: their Q,
// K and V are rounded to bf16 (to nearest even) as they are packed, and their output stays float32:
// the products are bf16 x bf16 (exact in float32), every sum float32. Why:
// the float32 FMA path (prefill_attention_avx2.cpp) ran at ~170 GFLOP/s on two Zen 4 cores, near
// their float32 FMA peak, and was a third of a 2,048-token prefill; a bf16 dot product does twice
// the multiply-adds per instruction. The rounding is the precision llama.cpp's default f16 KV cache
// keeps (a little less: 8 bits of mantissa against 11), and decodes keep float32
// (paged_chunk_attention.cpp). docs/cpu_kernels.md has the measurements.
#if defined(__AVX512F__) && defined(__AVX512BF16__) && !defined(SG_PREFILL_BF16)
#define SG_PREFILL_BF16 1
#include <immintrin.h>

#include <type_traits>

namespace {
namespace bf16dot {

// 2^x for x <= 0 (x = -inf gives ~2^-127; callers mask such lanes to 0): 2^n * 2^f with
// n = round(x), |f| <= 0.5, 2^f = e^(f ln 2) by a degree-5 Taylor series (relative error
// ~3e-6, far below the bf16 rounding of the probabilities that follows).
inline __m512 exp2_ps(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-127.0f));
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_mul_ps(_mm512_sub_ps(x, n), _mm512_set1_ps(0.6931471805599453f));
  __m512 p = _mm512_set1_ps(1.0f / 120.0f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

inline __m512bh as_bh(__m512i x) { return reinterpret_cast<__m512bh>(x); }

// n (a multiple of 16) elements as bf16 bits: a bf16 pool's are copied, a float32 pool's rounded
// to nearest even (_mm512_cvtneps_pbh, as torch's float -> bf16 conversion).
inline void to_bf16(const uint16_t* src, int64_t n, uint16_t* dst) { std::memcpy(dst, src, n * sizeof(uint16_t)); }
inline void to_bf16(const float* src, int64_t n, uint16_t* dst) {
  for (int64_t i = 0; i < n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_loadu_ps(src + i))));
}

// Packed context of one (segment, kv head): `keys` rounded up to kKeyBlock.
//   kp: [keys / 16][D / 2][16] words, a word = the bf16 pair (K[c][2j], K[c][2j+1]) of key c;
//   vp: [keys / 2][D] words, a word = (V[2i][d], V[2i+1][d]).
struct Packed {
  uint32_t* kp;
  uint32_t* vp;
};

template <class Elem>
void pack_block(const Elem* kc, const Elem* vc, int64_t kv_head_stride, int64_t page_stride, int64_t ps,
                const int64_t* pages, int64_t ctx, int64_t first, int64_t kvh, int64_t D, int64_t block, Packed dst) {
  const int64_t W = D / 2;
  uint32_t* kp = dst.kp + block * W * 16;
  uint32_t* vp = dst.vp + block * 8 * D;
  for (int64_t c = 0; c < 16; ++c) {
    const int64_t key = first + block * 16 + c;
    if (key >= ctx) {   // padding: zero, so masked-out (0-probability) keys add exactly 0
      for (int64_t j = 0; j < W; ++j) kp[j * 16 + c] = 0;
      uint16_t* vrow = reinterpret_cast<uint16_t*>(vp + (c / 2) * D) + (c % 2);
      for (int64_t d = 0; d < D; ++d) vrow[2 * d] = 0;
      continue;
    }
    const int64_t off = kvh * kv_head_stride + pages[key / ps] * page_stride + (key % ps) * D;
    alignas(64) uint32_t kw[64];   // key c's bf16 pairs
    alignas(64) uint16_t vb[128];
    to_bf16(kc + off, D, reinterpret_cast<uint16_t*>(kw));
    to_bf16(vc + off, D, vb);
    for (int64_t j = 0; j < W; ++j) kp[j * 16 + c] = kw[j];
    uint16_t* vrow = reinterpret_cast<uint16_t*>(vp + (c / 2) * D) + (c % 2);
    for (int64_t d = 0; d < D; ++d) vrow[2 * d] = vb[d];
  }
}

// The first nrows of R rows' results: O / (the sum of their lane-wise sums l), as the output's element.
template <int ND, int R, class Elem>
void write_rows(const float (*o)[ND * 16], const float (*l)[16], int nrows, Elem* const* orow) {
  for (int r = 0; r < nrows; ++r) {
    const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(_mm512_load_ps(l[r])));
    for (int v = 0; v < ND; ++v) {
      const __m512 y = _mm512_mul_ps(_mm512_load_ps(o[r] + 16 * v), inv);
      if constexpr (std::is_same_v<Elem, float>) {
        _mm512_storeu_ps(orow[r] + 16 * v, y);
      } else {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(orow[r] + 16 * v),
                            reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(y)));
      }
    }
  }
}

// The key range a tile's rows attend, in packed keys: row r takes [lo[r], pos[r]].
struct TileSpan {
  int64_t min_pos, max_pos, min_lo, max_lo;
  TileSpan(const int64_t* pos, const int64_t* lo, int nrows)
      : min_pos(pos[0]), max_pos(pos[0]), min_lo(lo[0]), max_lo(lo[0]) {
    for (int r = 1; r < nrows; ++r) {
      max_pos = std::max(max_pos, pos[r]);
      min_pos = std::min(min_pos, pos[r]);
      min_lo = std::min(min_lo, lo[r]);
      max_lo = std::max(max_lo, lo[r]);
    }
  }
  int64_t first_block() const { return min_lo / kKeyBlock; }   // blocks before every row's window: skipped
  int64_t end_block() const { return max_pos / kKeyBlock + 1; }
  // Whether some row has a key of the block starting at key0 outside its window.
  bool masks(int64_t key0) const { return key0 + kKeyBlock - 1 > min_pos || key0 < max_lo; }
};

// Which of the 16 keys from key (a vector of their numbers) a row attends: lo <= key <= pos.
inline __mmask16 in_window(__m512i key, int64_t lo, int64_t pos) {
  return _mm512_cmple_epi32_mask(key, _mm512_set1_epi32(static_cast<int>(pos))) &
         _mm512_cmpge_epi32_mask(key, _mm512_set1_epi32(static_cast<int>(lo)));
}

// R query rows of one (segment, kv head) against its packed context, row r attending packed keys
// [lo[r], pos[r]]. ND = D / 16. Elem: the pool's element (uint16_t: bf16 bits; float), which q and
// the output rows share.
template <int ND, int R, class Elem>
void attend_rows(const Elem* const* q_in, const int64_t* pos, const int64_t* lo, int nrows, Packed pk,
                 float scale_log2, Elem* const* orow) {
  constexpr int D = ND * 16, W = D / 2;
  alignas(64) uint16_t q_bits[std::is_same_v<Elem, float> ? R : 1][D];   // a float32 pool's queries as bf16
  const uint16_t* qrow[R];
  for (int r = 0; r < R; ++r) {
    if constexpr (std::is_same_v<Elem, float>) {   // rounded once per tile
      to_bf16(q_in[r], D, q_bits[r]);
      qrow[r] = q_bits[r];
    } else {
      qrow[r] = q_in[r];   // a bf16 pool's rows are read in place
    }
  }
  const TileSpan span(pos, lo, nrows);
  static_assert(R <= 16, "one vector holds the tile's row maxima");
  alignas(64) float m[16], alpha[16], bm[16];   // row max so far (raw scores), rescale factors
  alignas(64) float l[R][16];                   // row sums, lane-wise (one horizontal sum at the end)
  alignas(64) float o[R][D];
  alignas(64) uint16_t pb[R][kKeyBlock];
  for (int r = 0; r < 16; ++r) m[r] = bm[r] = r < R ? -std::numeric_limits<float>::infinity() : 0.0f;
  for (int r = 0; r < R; ++r) {
    for (int i = 0; i < 16; ++i) l[r][i] = 0.0f;
    for (int d = 0; d < D; ++d) o[r][d] = 0.0f;
  }
  const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  for (int64_t kb = span.first_block(); kb < span.end_block(); ++kb) {
    // S = Q K^T for 64 keys: one broadcast pair of Q per row, 4 packed K vectors per pair.
    __m512 acc[R][4];
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < 4; ++v) acc[r][v] = _mm512_setzero_ps();
    const uint32_t* kp = pk.kp + kb * 4 * W * 16;
    for (int j = 0; j < W; ++j) {
      __m512i kv[4];
      for (int v = 0; v < 4; ++v) kv[v] = _mm512_loadu_si512(kp + (v * W + j) * 16);
      for (int r = 0; r < R; ++r) {
        uint32_t qw;
        std::memcpy(&qw, qrow[r] + 2 * j, sizeof(qw));
        const __m512bh qb = as_bh(_mm512_set1_epi32(static_cast<int>(qw)));
        for (int v = 0; v < 4; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], qb, as_bh(kv[v]));
      }
    }
    // Online softmax in base 2 (the scale folds log2 e in); keys outside a row's window masked.
    const int64_t key0 = kb * kKeyBlock;
    const bool masked = span.masks(key0);
    __mmask16 keep[R][4];
    for (int r = 0; r < R; ++r) {
      for (int v = 0; v < 4; ++v) {
        keep[r][v] = 0xFFFF;
        if (masked) {
          const __m512i key = _mm512_add_epi32(lane, _mm512_set1_epi32(static_cast<int>(key0 + 16 * v)));
          keep[r][v] = in_window(key, lo[r], pos[r]);
          acc[r][v] = _mm512_mask_mov_ps(_mm512_set1_ps(-std::numeric_limits<float>::infinity()), keep[r][v],
                                         acc[r][v]);
        }
      }
      bm[r] = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(acc[r][0], acc[r][1]),
                                                 _mm512_max_ps(acc[r][2], acc[r][3])));
    }
    {   // every row's new max and rescale factor at once. A row whose window has not begun keeps
        // m = -inf and alpha 1 (o and l stay 0; its probabilities, 2^NaN, are masked to 0 below).
      const __m512 m_old = _mm512_load_ps(m), m_new = _mm512_max_ps(m_old, _mm512_load_ps(bm));
      const __mmask16 begun = _mm512_cmp_ps_mask(m_new, _mm512_set1_ps(-std::numeric_limits<float>::infinity()),
                                                 _CMP_NEQ_OQ);
      _mm512_store_ps(alpha, _mm512_mask_blend_ps(begun, _mm512_set1_ps(1.0f),
                                                  exp2_ps(_mm512_mul_ps(_mm512_sub_ps(m_old, m_new),
                                                                        _mm512_set1_ps(scale_log2)))));
      _mm512_store_ps(m, m_new);
    }
    const __m512 sl = _mm512_set1_ps(scale_log2);
    for (int r = 0; r < R; ++r) {
      const __m512 shift = _mm512_set1_ps(-m[r] * scale_log2);
      __m512 p[4];
      for (int v = 0; v < 4; ++v) {
        p[v] = exp2_ps(_mm512_fmadd_ps(acc[r][v], sl, shift));
        if (masked) p[v] = _mm512_maskz_mov_ps(keep[r][v], p[v]);
      }
      const __m512 sum = _mm512_add_ps(_mm512_add_ps(p[0], p[1]), _mm512_add_ps(p[2], p[3]));
      _mm512_store_ps(l[r], _mm512_fmadd_ps(_mm512_load_ps(l[r]), _mm512_set1_ps(alpha[r]), sum));
      _mm512_store_si512(pb[r], reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(p[1], p[0])));
      _mm512_store_si512(pb[r] + 32, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(p[3], p[2])));
    }
    // O = alpha O + P V: one broadcast pair of P per row, ND packed V vectors per key pair.
    __m512 ov[R][ND];
    for (int r = 0; r < R; ++r) {
      const __m512 a = _mm512_set1_ps(alpha[r]);
      for (int v = 0; v < ND; ++v) ov[r][v] = _mm512_mul_ps(_mm512_load_ps(o[r] + 16 * v), a);
    }
    const uint32_t* vp = pk.vp + kb * (kKeyBlock / 2) * D;
    for (int i = 0; i < kKeyBlock / 2; ++i) {
      __m512i vv[ND];
      for (int v = 0; v < ND; ++v) vv[v] = _mm512_loadu_si512(vp + i * D + 16 * v);
      for (int r = 0; r < R; ++r) {
        uint32_t pw;
        std::memcpy(&pw, pb[r] + 2 * i, sizeof(pw));
        const __m512bh pbv = as_bh(_mm512_set1_epi32(static_cast<int>(pw)));
        for (int v = 0; v < ND; ++v) ov[r][v] = _mm512_dpbf16_ps(ov[r][v], pbv, as_bh(vv[v]));
      }
    }
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < ND; ++v) _mm512_store_ps(o[r] + 16 * v, ov[r][v]);
  }
  write_rows<ND, R>(o, l, nrows, orow);
}

// The path as attend_packed (prefill_attention_common.cpp) runs it. ND = D / 16; E: the query's
// and the output's element, KV the pool's (a bf16 pool under float32 queries: E float, KV uint16_t).
template <int ND, int R, class E, class KV = E>
struct Path {
  using Elem = E;
  using KVElem = KV;
  using Word = uint32_t;
  static constexpr int kRows = R;
  static int64_t words(int64_t keys, int64_t D) { return keys * D; }   // K: keys * D / 2, V: the same
  static Packed split(uint32_t* base, int64_t keys, int64_t D) { return Packed{base, base + keys * D / 2}; }
  static void pack(const KV* kc, const KV* vc, int64_t kv_head_stride, int64_t page_stride, int64_t ps,
                   const int64_t* pages, int64_t ctx, int64_t first, int64_t kvh, int64_t D, int64_t block,
                   uint32_t* base, int64_t keys) {
    pack_block(kc, vc, kv_head_stride, page_stride, ps, pages, ctx, first, kvh, D, block, split(base, keys, D));
  }
  static void attend(const Elem* const* qrow, const int64_t* pos, const int64_t* lo, int n, uint32_t* base,
                     int64_t keys, int64_t D, float scale_log2, Elem* const* orow) {
    attend_rows<ND, R, Elem>(qrow, pos, lo, n, split(base, keys, D), scale_log2, orow);
  }
};

}  // namespace bf16dot
}  // namespace
#endif
