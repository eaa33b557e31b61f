// Causal prefill attention over the paged KV pool on the CPU (built by prefill_attention_cpp.py;
// see that file for the design). Two phases per call (one layer, every prefill segment):
//   1. pack: each segment's context K and V are copied once out of the pages into the layouts
//      the bf16 dot-product instruction wants (K: 16 keys side by side per pair of head dims;
//      V: two consecutive keys interleaved per head dim), zero-padded to a 64-key boundary;
//   2. attend: work items of R query rows (positions x the GQA group's heads, which share one
//      kv head, so one packed K/V serves all of them) walk the keys in blocks of 64 with an
//      online softmax, up to their own causal limit (blocks above the diagonal are skipped).
// A portable path (any dtype, any head dim, no intrinsics) computes the same thing row by row.
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>
#if defined(__AVX512F__) && defined(__AVX512BF16__)
#include <immintrin.h>
#define SG_PREFILL_BF16 1
#endif

namespace {

constexpr int64_t kKeyBlock = 64;   // keys per online-softmax step (4 vectors of 16)

struct Segments {
  const int64_t* table;   // [S, table_stride] page ids
  int64_t table_stride;
  const int64_t* q_start;
  const int64_t* q_len;
  const int64_t* ctx_len;
  int64_t count;
};

// Runs `work(i)` for i in [0, n) on torch's thread pool; items are taken in order from a shared
// counter, so callers list the heaviest first and the threads finish together.
template <class F>
void run_dynamic(int64_t n, int64_t min_parallel, const F& work) {
  if (n <= 0) return;
  const int64_t threads = std::min<int64_t>(at::get_num_threads(), n);
  if (threads <= 1 || n < min_parallel) {
    for (int64_t i = 0; i < n; ++i) work(i);
    return;
  }
  std::atomic<int64_t> next{0};
  at::parallel_for(0, threads, 1, [&](int64_t, int64_t) {
    for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) work(i);
  });
}

// ---------------------------------------------------------------- portable path
// One work item per (segment, query row, head): scores over the causal context in float,
// a max-subtracted softmax, and the weighted sum of V, all in float.
template <class T>
void attend_portable(const T* q, int64_t q_stride, const T* kc, const T* vc, int64_t kv_head_stride,
                     int64_t page_stride, int64_t ps, const Segments& seg, int64_t H, int64_t KV, int64_t D,
                     float scale, T* out, int64_t out_stride) {
  const int64_t G = H / KV;
  std::vector<int64_t> first(seg.count + 1, 0);
  for (int64_t s = 0; s < seg.count; ++s) first[s + 1] = first[s] + seg.q_len[s] * H;
  run_dynamic(first[seg.count], 64, [&](int64_t item) {
    const int64_t s = std::upper_bound(first.begin(), first.end(), item) - first.begin() - 1;
    const int64_t t = (item - first[s]) / H, h = (item - first[s]) % H, kvh = h / G;
    const int64_t pos = seg.ctx_len[s] - seg.q_len[s] + t;
    const int64_t* pages = seg.table + s * seg.table_stride;
    const T* qr = q + (seg.q_start[s] + t) * q_stride + h * D;
    std::vector<float> score(pos + 1), acc(D, 0.0f);
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t c = 0; c <= pos; ++c) {
      const T* kr = kc + kvh * kv_head_stride + pages[c / ps] * page_stride + (c % ps) * D;
      float dot = 0.0f;
      for (int64_t d = 0; d < D; ++d) dot += static_cast<float>(qr[d]) * static_cast<float>(kr[d]);
      score[c] = dot * scale;
      mx = std::max(mx, score[c]);
    }
    float sum = 0.0f;
    for (int64_t c = 0; c <= pos; ++c) {
      const float p = std::exp(score[c] - mx);
      sum += p;
      const T* vr = vc + kvh * kv_head_stride + pages[c / ps] * page_stride + (c % ps) * D;
      for (int64_t d = 0; d < D; ++d) acc[d] += p * static_cast<float>(vr[d]);
    }
    T* o = out + (seg.q_start[s] + t) * out_stride + h * D;
    for (int64_t d = 0; d < D; ++d) o[d] = static_cast<T>(acc[d] / sum);
  });
}

#ifdef SG_PREFILL_BF16
// ---------------------------------------------------------------- AVX512-BF16 path
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

// Packed context of one (segment, kv head): `keys` rounded up to kKeyBlock.
//   kp: [keys / 16][D / 2][16] words, a word = the bf16 pair (K[c][2j], K[c][2j+1]) of key c;
//   vp: [keys / 2][D] words, a word = (V[2i][d], V[2i+1][d]).
struct Packed {
  uint32_t* kp;
  uint32_t* vp;
};

void pack_block(const uint16_t* kc, const uint16_t* vc, int64_t kv_head_stride, int64_t page_stride, int64_t ps,
                const int64_t* pages, int64_t ctx, int64_t kvh, int64_t D, int64_t block, Packed dst) {
  const int64_t W = D / 2;
  uint32_t* kp = dst.kp + block * W * 16;
  uint32_t* vp = dst.vp + block * 8 * D;
  for (int64_t c = 0; c < 16; ++c) {
    const int64_t key = block * 16 + c;
    if (key >= ctx) {   // padding: zero, so masked-out (0-probability) keys add exactly 0
      for (int64_t j = 0; j < W; ++j) kp[j * 16 + c] = 0;
      uint16_t* vrow = reinterpret_cast<uint16_t*>(vp + (c / 2) * D) + (c % 2);
      for (int64_t d = 0; d < D; ++d) vrow[2 * d] = 0;
      continue;
    }
    const int64_t off = kvh * kv_head_stride + pages[key / ps] * page_stride + (key % ps) * D;
    uint32_t kw[64];
    std::memcpy(kw, kc + off, D * sizeof(uint16_t));
    for (int64_t j = 0; j < W; ++j) kp[j * 16 + c] = kw[j];
    const uint16_t* vsrc = vc + off;
    uint16_t* vrow = reinterpret_cast<uint16_t*>(vp + (c / 2) * D) + (c % 2);
    for (int64_t d = 0; d < D; ++d) vrow[2 * d] = vsrc[d];
  }
}

// R query rows of one (segment, kv head) against its packed context. ND = D / 16.
template <int ND, int R>
void attend_rows(const uint16_t* const* qrow, const int64_t* pos, int nrows, Packed pk, float scale_log2,
                 uint16_t* const* orow) {
  constexpr int D = ND * 16, W = D / 2;
  int64_t max_pos = pos[0], min_pos = pos[0];
  for (int r = 1; r < nrows; ++r) {
    max_pos = std::max(max_pos, pos[r]);
    min_pos = std::min(min_pos, pos[r]);
  }
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
  const int64_t blocks = max_pos / kKeyBlock + 1;
  for (int64_t kb = 0; kb < blocks; ++kb) {
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
    // Online softmax in base 2 (the scale folds log2 e in); keys past a row's position masked.
    const int64_t key0 = kb * kKeyBlock;
    const bool masked = key0 + kKeyBlock - 1 > min_pos;
    __mmask16 keep[R][4];
    for (int r = 0; r < R; ++r) {
      for (int v = 0; v < 4; ++v) {
        keep[r][v] = 0xFFFF;
        if (masked) {
          const __m512i key = _mm512_add_epi32(lane, _mm512_set1_epi32(static_cast<int>(key0 + 16 * v)));
          keep[r][v] = _mm512_cmple_epi32_mask(key, _mm512_set1_epi32(static_cast<int>(pos[r])));
          acc[r][v] = _mm512_mask_mov_ps(_mm512_set1_ps(-std::numeric_limits<float>::infinity()), keep[r][v],
                                         acc[r][v]);
        }
      }
      bm[r] = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(acc[r][0], acc[r][1]),
                                                 _mm512_max_ps(acc[r][2], acc[r][3])));
    }
    {   // every row's new max and rescale factor at once; block 0 holds key 0 <= pos, so finite
      const __m512 m_old = _mm512_load_ps(m), m_new = _mm512_max_ps(m_old, _mm512_load_ps(bm));
      _mm512_store_ps(alpha, exp2_ps(_mm512_mul_ps(_mm512_sub_ps(m_old, m_new), _mm512_set1_ps(scale_log2))));
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
  for (int r = 0; r < nrows; ++r) {
    const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(_mm512_load_ps(l[r])));
    for (int v = 0; v < ND; ++v) {
      const __m256bh y = _mm512_cvtneps_pbh(_mm512_mul_ps(_mm512_load_ps(o[r] + 16 * v), inv));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(orow[r] + 16 * v), reinterpret_cast<__m256i>(y));
    }
  }
}

template <int ND, int R>
void attend_bf16(const uint16_t* q, int64_t q_stride, const uint16_t* kc, const uint16_t* vc, int64_t kv_head_stride,
                 int64_t page_stride, int64_t ps, const Segments& seg, int64_t H, int64_t KV, float scale,
                 uint16_t* out, int64_t out_stride) {
  constexpr int64_t D = ND * 16;
  const int64_t G = H / KV;
  // Phase 1: pack every (segment, kv head)'s context.
  std::vector<int64_t> keys(seg.count), base(seg.count + 1, 0);
  for (int64_t s = 0; s < seg.count; ++s) {
    keys[s] = (seg.ctx_len[s] + kKeyBlock - 1) / kKeyBlock * kKeyBlock;
    base[s + 1] = base[s] + KV * keys[s] * D;   // words of K plus words of V, per segment
  }
  // Uninitialized: pack_block writes every word, the padding included.
  std::unique_ptr<uint32_t[]> scratch(new uint32_t[base[seg.count]]);
  auto packed = [&](int64_t s, int64_t kvh) {
    uint32_t* k0 = scratch.get() + base[s] + kvh * keys[s] * D;
    return Packed{k0, k0 + keys[s] * D / 2};
  };
  std::vector<int64_t> pack_first(seg.count + 1, 0);
  for (int64_t s = 0; s < seg.count; ++s) pack_first[s + 1] = pack_first[s] + KV * (keys[s] / 16);
  run_dynamic(pack_first[seg.count], 16, [&](int64_t item) {
    const int64_t s = std::upper_bound(pack_first.begin(), pack_first.end(), item) - pack_first.begin() - 1;
    const int64_t nb = keys[s] / 16, kvh = (item - pack_first[s]) / nb, block = (item - pack_first[s]) % nb;
    pack_block(kc, vc, kv_head_stride, page_stride, ps, seg.table + s * seg.table_stride, seg.ctx_len[s], kvh, D,
               block, packed(s, kvh));
  });
  // Phase 2: tiles of R rows (row = position * G + head in group), the longest contexts first
  // within each (segment, kv head).
  std::vector<int64_t> tiles(seg.count), first(seg.count + 1, 0);
  for (int64_t s = 0; s < seg.count; ++s) {
    tiles[s] = (seg.q_len[s] * G + R - 1) / R;
    first[s + 1] = first[s] + KV * tiles[s];
  }
  const float scale_log2 = scale * 1.4426950408889634f;
  run_dynamic(first[seg.count], 4, [&](int64_t item) {
    const int64_t s = std::upper_bound(first.begin(), first.end(), item) - first.begin() - 1;
    const int64_t kvh = (item - first[s]) / tiles[s], tile = tiles[s] - 1 - (item - first[s]) % tiles[s];
    const int64_t rows = seg.q_len[s] * G;
    const uint16_t* qrow[R];
    uint16_t* orow[R];
    int64_t pos[R];
    int n = 0;
    for (int r = 0; r < R; ++r) {
      const int64_t row = std::min(tile * R + r, rows - 1);   // a short last tile repeats its last row
      if (tile * R + r < rows) ++n;
      const int64_t t = row / G, h = kvh * G + row % G;
      qrow[r] = q + (seg.q_start[s] + t) * q_stride + h * D;
      orow[r] = out + (seg.q_start[s] + t) * out_stride + h * D;
      pos[r] = seg.ctx_len[s] - seg.q_len[s] + t;
    }
    attend_rows<ND, R>(qrow, pos, n, packed(s, kvh), scale_log2, orow);
  });
}
#endif

}  // namespace

bool fast_path_available() {
#ifdef SG_PREFILL_BF16
  return true;
#else
  return false;
#endif
}

// q [T, H, D] (rows may be strided; heads contiguous), k_cache / v_cache [KV, pages, ps, D],
// tables [S, max_pages] int64, q_starts / q_lens / ctx_lens [S] int64: segment s's q_len rows
// start at row q_starts[s] and are the last q_len positions of its ctx_len-token context.
// Writes those rows of `out` (same shape and dtype as q, contiguous).
void prefill_attention(torch::Tensor q, torch::Tensor k_cache, torch::Tensor v_cache, torch::Tensor tables,
                       torch::Tensor q_starts, torch::Tensor q_lens, torch::Tensor ctx_lens, double scale,
                       torch::Tensor out, bool portable) {
  TORCH_CHECK(q.dim() == 3 && k_cache.dim() == 4 && v_cache.sizes() == k_cache.sizes(), "bad shapes");
  TORCH_CHECK(q.scalar_type() == k_cache.scalar_type() && v_cache.scalar_type() == q.scalar_type() &&
              out.scalar_type() == q.scalar_type(), "q, caches and out must share a dtype");
  TORCH_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous() && out.is_contiguous(), "contiguous caches/out");
  TORCH_CHECK(q.stride(2) == 1 && q.stride(1) == q.size(2), "q's heads must be contiguous [H, D] rows");
  TORCH_CHECK(out.sizes() == q.sizes(), "out must have q's shape");
  for (const auto& t : {tables, q_starts, q_lens, ctx_lens})
    TORCH_CHECK(t.scalar_type() == torch::kLong && t.is_contiguous(), "tables and lengths must be contiguous int64");
  const int64_t H = q.size(1), D = q.size(2), KV = k_cache.size(0), ps = k_cache.size(2);
  TORCH_CHECK(k_cache.size(3) == D && H % KV == 0, "head dims disagree");
  Segments seg{tables.data_ptr<int64_t>(), tables.size(1), q_starts.data_ptr<int64_t>(), q_lens.data_ptr<int64_t>(),
               ctx_lens.data_ptr<int64_t>(), q_starts.size(0)};
  const int64_t head_stride = k_cache.stride(0), page_stride = k_cache.stride(1);
  const float sc = static_cast<float>(scale);
  // A 2,048-token chunk takes ~10 ms per layer: let the server's Python threads run meanwhile
  // (torch's own ops release the GIL too; nothing below touches a Python object).
  pybind11::gil_scoped_release no_gil;
#ifdef SG_PREFILL_BF16
  if (!portable && q.scalar_type() == torch::kBFloat16 && (D == 32 || D == 64 || D == 96 || D == 128)) {
    auto* qp = reinterpret_cast<const uint16_t*>(q.data_ptr());
    auto* kp = reinterpret_cast<const uint16_t*>(k_cache.data_ptr());
    auto* vp = reinterpret_cast<const uint16_t*>(v_cache.data_ptr());
    auto* op = reinterpret_cast<uint16_t*>(out.data_ptr());
    const int64_t qs = q.stride(0), os = out.stride(0);
    if (D == 32) attend_bf16<2, 6>(qp, qs, kp, vp, head_stride, page_stride, ps, seg, H, KV, sc, op, os);
    if (D == 64) attend_bf16<4, 6>(qp, qs, kp, vp, head_stride, page_stride, ps, seg, H, KV, sc, op, os);
    if (D == 96) attend_bf16<6, 4>(qp, qs, kp, vp, head_stride, page_stride, ps, seg, H, KV, sc, op, os);
    if (D == 128) attend_bf16<8, 3>(qp, qs, kp, vp, head_stride, page_stride, ps, seg, H, KV, sc, op, os);
    return;
  }
#endif
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, q.scalar_type(), "prefill_attention", [&] {
    attend_portable<scalar_t>(q.data_ptr<scalar_t>(), q.stride(0), k_cache.data_ptr<scalar_t>(),
                              v_cache.data_ptr<scalar_t>(), head_stride, page_stride, ps, seg, H, KV, D, sc,
                              out.data_ptr<scalar_t>(), out.stride(0));
  });
}
