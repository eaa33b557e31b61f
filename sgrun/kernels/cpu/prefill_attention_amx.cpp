// The AMX path of the prefill attention (level amx; bf16 and float32 pools, head dims 32, 64, 96,
// 128): the AVX512-BF16 path's packed walk (prefill_attention_avx512_bf16.cpp, whose packed K and V
// layouts are already the B operands of the tile instruction TDPBF16PS) with its two products on
// AMX tiles instead of _mm512_dpbf16ps. Built after that file, inside the same avx512_bf16 build:
// the tile code is compiled for amx-tile / amx-bf16 by a target pragma, and runs only where the
// driver is asked for it (the amx level) and `amx_ready()` says the CPU has the tiles and the
// kernel granted this process their state (arch_prctl ARCH_REQ_XCOMP_PERM, Linux 5.16+).
//
// Why: at amx, the dpbf16ps walk was half of a 2,048-token prefill (docs/cpu_kernels.md): one
// 16-lane dot product per instruction. One TDPBF16PS multiplies a 16 x 32 bf16 tile by a 32 x 16 one
// (8,192 multiply-adds) into a 16 x 16 float32 tile.
//
// A tile is 16 query rows (positions x the GQA group's heads of one kv head, as the other paths).
// Per block of 64 keys:
//   S = Q K^T: C tiles tmm0-3 (16 rows x 16 keys each) += Q's 32-dim slices (tmm4) x K's (tmm5);
//   the online softmax on S with AVX-512 (the AVX512-BF16 path's code: base 2, float32 scores and
//   sums, keys past a row's position masked to probability 0), P rounded to bf16;
//   P V: up to 4 C tiles of 16 head dims += P's 32-key halves (tmm4) x V's (tmm5), stored, then
//   O = alpha O + P V in float32 vectors (a tile cannot be scaled in place).
// Every row's result depends on its own query, position and context alone (a tile's rows are
// independent rows of each product), so the tiling changes nothing a row gets. The products are
// bf16 x bf16 summed in float32 as on the AVX512-BF16 path; only the order of the sums differs (and
// TDPBF16PS treats bf16 denormals as 0: probabilities below 2^-126, which weigh nothing).
#if defined(SG_PREFILL_BF16) && defined(__x86_64__) && defined(__GNUC__) && !defined(SG_PREFILL_AMX)
#define SG_PREFILL_AMX 1
#pragma GCC push_options
#pragma GCC target("amx-tile,amx-bf16")
#include <immintrin.h>

namespace {
namespace amx {

using bf16dot::exp2_ps;
using bf16dot::Packed;

constexpr int kTileRows = 16;   // query rows per tile: a tile register's rows

// The CPU's AMX-BF16 tiles, granted to this process (amx_tiles.cpp); asked once.
inline bool ready() {
  static const bool ok = amx_tiles::granted(amx_tiles::kBf16);
  return ok;
}

// All eight tiles 16 rows x 64 bytes.
inline amx_tiles::TileConfig tile_config() {
  amx_tiles::TileConfig cfg;
  for (int t = 0; t < 8; ++t) cfg.shape(t, kTileRows, 64);
  return cfg;
}

// A tile's number is part of its instruction (GCC's _tile_* macros paste it into the asm), so the
// four C tiles are spelled out: SG_AMX_EACH(n, OP) runs OP(0) .. OP(n - 1), OP a macro.
#define SG_AMX_EACH(N, OP) \
  do {                     \
    if ((N) > 0) OP(0);    \
    if ((N) > 1) OP(1);    \
    if ((N) > 2) OP(2);    \
    if ((N) > 3) OP(3);    \
  } while (0)
#define SG_AMX_ZERO(c) _tile_zero(c)

// kTileRows query rows of one (segment, kv head) against its packed context (the AVX512-BF16 path's
// layouts). ND = D / 16; Elem: q's and the output's element (uint16_t: bf16 bits; float).
template <int ND, class Elem>
void attend_rows(const Elem* const* q_in, const int64_t* pos, const int64_t* lo, int nrows, Packed pk,
                 float scale_log2, Elem* const* orow) {
  constexpr int R = kTileRows, D = ND * 16, W = D / 2, KS = D / 32;
  static_assert(D % 32 == 0, "a tile's row is 32 bf16 head dims");
  alignas(64) uint16_t qt[R][D];   // the A operand of S: the rows' queries as bf16
  for (int r = 0; r < R; ++r) {
    if constexpr (std::is_same_v<Elem, float>) bf16dot::to_bf16(q_in[r], D, qt[r]);
    else std::memcpy(qt[r], q_in[r], D * sizeof(uint16_t));
  }
  const bf16dot::TileSpan span(pos, lo, nrows);
  alignas(64) float m[R], alpha[R], bm[R];
  alignas(64) float l[R][16];
  alignas(64) float o[R][D];
  alignas(64) float s[R][kKeyBlock];    // S of one block, out of tmm0-3
  alignas(64) float pv[R][D];           // P V of one block
  alignas(64) uint16_t pb[R][kKeyBlock];
  for (int r = 0; r < R; ++r) {
    m[r] = bm[r] = -std::numeric_limits<float>::infinity();
    for (int i = 0; i < 16; ++i) l[r][i] = 0.0f;
    for (int d = 0; d < D; ++d) o[r][d] = 0.0f;
  }
  const amx_tiles::TileConfig cfg = tile_config();
  _tile_loadconfig(&cfg);
  const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  for (int64_t kb = span.first_block(); kb < span.end_block(); ++kb) {
    // S = Q K^T: K's block of 16 keys, head dims [32 ks, 32 ks + 32), is 16 rows of 64 bytes.
    SG_AMX_EACH(4, SG_AMX_ZERO);
    const uint32_t* kp = pk.kp + kb * 4 * W * 16;
    for (int ks = 0; ks < KS; ++ks) {
      _tile_loadd(4, qt[0] + 32 * ks, D * sizeof(uint16_t));
#define SG_AMX_QK(c)                                    \
  {                                                     \
    _tile_loadd(5, kp + (c * W + 16 * ks) * 16, 64);    \
    _tile_dpbf16ps(c, 4, 5);                            \
  }
      SG_AMX_EACH(4, SG_AMX_QK);
#undef SG_AMX_QK
    }
#define SG_AMX_STORE_S(c) _tile_stored(c, s[0] + 16 * c, kKeyBlock * sizeof(float))
    SG_AMX_EACH(4, SG_AMX_STORE_S);
#undef SG_AMX_STORE_S
    // Online softmax, as the AVX512-BF16 path.
    const int64_t key0 = kb * kKeyBlock;
    const bool masked = span.masks(key0);
    const __m512 sl = _mm512_set1_ps(scale_log2);
    for (int r = 0; r < R; ++r) {
      __m512 acc[4];
      __mmask16 keep[4];
      for (int v = 0; v < 4; ++v) {
        acc[v] = _mm512_load_ps(s[r] + 16 * v);
        keep[v] = 0xFFFF;
        if (masked) {
          const __m512i key = _mm512_add_epi32(lane, _mm512_set1_epi32(static_cast<int>(key0 + 16 * v)));
          keep[v] = bf16dot::in_window(key, lo[r], pos[r]);
          acc[v] = _mm512_mask_mov_ps(_mm512_set1_ps(-std::numeric_limits<float>::infinity()), keep[v], acc[v]);
        }
      }
      bm[r] = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(acc[0], acc[1]), _mm512_max_ps(acc[2], acc[3])));
      // a row whose window has not begun keeps m = -inf and alpha 1 (o and l stay 0; its
      // probabilities, 2^NaN, are masked to 0 below)
      const float m_new = std::max(m[r], bm[r]);
      alpha[r] = m[r] == m_new ? 1.0f : std::exp2((m[r] - m_new) * scale_log2);
      m[r] = m_new;
      const __m512 shift = _mm512_set1_ps(-m_new * scale_log2);
      __m512 p[4];
      for (int v = 0; v < 4; ++v) {
        p[v] = exp2_ps(_mm512_fmadd_ps(acc[v], sl, shift));
        if (masked) p[v] = _mm512_maskz_mov_ps(keep[v], p[v]);
      }
      const __m512 sum = _mm512_add_ps(_mm512_add_ps(p[0], p[1]), _mm512_add_ps(p[2], p[3]));
      _mm512_store_ps(l[r], _mm512_fmadd_ps(_mm512_load_ps(l[r]), _mm512_set1_ps(alpha[r]), sum));
      _mm512_store_si512(pb[r], reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(p[1], p[0])));
      _mm512_store_si512(pb[r] + 32, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(p[3], p[2])));
    }
    // P V, 64 head dims (4 C tiles) at a time: V's 32 keys (16 pair rows) x 16 head dims is 16 rows
    // of 64 bytes, D words apart.
    const uint32_t* vp = pk.vp + kb * (kKeyBlock / 2) * D;
    for (int g = 0; g < D; g += 64) {
      constexpr int kMaxC = 4;
      const int nc = std::min(kMaxC, (D - g) / 16);
      SG_AMX_EACH(nc, SG_AMX_ZERO);
      for (int kh = 0; kh < 2; ++kh) {
        _tile_loadd(4, pb[0] + 32 * kh, kKeyBlock * sizeof(uint16_t));
#define SG_AMX_PV(c)                                                      \
  {                                                                       \
    _tile_loadd(5, vp + 16 * kh * D + g + 16 * c, D * sizeof(uint32_t));  \
    _tile_dpbf16ps(c, 4, 5);                                              \
  }
        SG_AMX_EACH(nc, SG_AMX_PV);
#undef SG_AMX_PV
      }
#define SG_AMX_STORE_PV(c) _tile_stored(c, pv[0] + g + 16 * c, D * sizeof(float))
      SG_AMX_EACH(nc, SG_AMX_STORE_PV);
#undef SG_AMX_STORE_PV
    }
    for (int r = 0; r < R; ++r) {
      const __m512 a = _mm512_set1_ps(alpha[r]);
      for (int v = 0; v < ND; ++v)
        _mm512_store_ps(o[r] + 16 * v, _mm512_fmadd_ps(_mm512_load_ps(o[r] + 16 * v), a,
                                                       _mm512_load_ps(pv[r] + 16 * v)));
    }
  }
  _tile_release();
  bf16dot::write_rows<ND, R>(o, l, nrows, orow);
}
#undef SG_AMX_EACH
#undef SG_AMX_ZERO

// The path as attend_packed runs it: the AVX512-BF16 path's packing, these tiles.
template <int ND, class E, class KV = E>
struct Path : bf16dot::Path<ND, kTileRows, E, KV> {
  using Base = bf16dot::Path<ND, kTileRows, E, KV>;
  static void attend(const E* const* qrow, const int64_t* pos, const int64_t* lo, int n, uint32_t* base,
                     int64_t keys, int64_t D, float scale_log2, E* const* orow) {
    attend_rows<ND, E>(qrow, pos, lo, n, Base::split(base, keys, D), scale_log2, orow);
  }
};

}  // namespace amx
}  // namespace
#pragma GCC pop_options
#endif
