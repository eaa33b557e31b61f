// The AMX-INT8 int4 x int8-activation matmul (level amx, inside the avx512_bf16 build): the VNNI
// tile's arithmetic (matmul_avx512_vnni.cpp) with each group's integer dot products on AMX tiles,
// for float32 activations of kMinRows rows and more (a prefill chunk). Compiled after
// matmul_avx512_vnni.cpp under a target pragma (amx-tile, amx-int8); it runs only where `enabled()`:
// Python asked for it (`set_amx`, at the amx level) and the CPU has AMX-TILE / AMX-INT8 and Linux
// granted this process the tile state (arch_prctl ARCH_REQ_XCOMP_PERM).
//
// Why: at amx the float32 model (auto's choice there) runs every prefill chunk's linears on the VNNI
// tile, one 16-lane 4-k dot product per instruction; they were most of a 2,048-token prefill. One
// TDPBUSD multiplies a 16 x 32 tile of unsigned bytes by a 32 x 16 tile of signed ones (8,192 exact
// multiply-adds) into a 16 x 16 int32 tile.
//
// Layout: C^T = W X^T per group of 32 k, so the unsigned operand (A, tmm4/5) is the int4 codes:
// 16 output columns x 32 k, one code per byte (decoded once per column block from the nibble
// pairs); the signed one (B, tmm6) is 16 rows of quantized activations x 32 k in the VNNI layout
// (8 rows of 4 k x 16 rows, packed once per call). C (tmm0/1 and tmm2/3, two column blocks, the
// pairs alternating by group) is 16 columns x 16 rows of exact int32 group dots. A row tile's dots
// for every group are taken first, then their float steps: the tile unit runs ahead instead of
// waiting for each group's float work.
//
// Exactness: a group's dot is the same exact integer as the VNNI tile's, and the float32 steps after
// it are that tile's, element for element and group after group (acc = fma(float(dot), s * d, acc),
// then acc = fma(min, sum, acc); s * d is one rounded product either way round), so every output is
// bit-identical to the VNNI and AVX2 tiles'. The tests hold the levels to that.
#if defined(SGRUN_Q8_TILES_512) && defined(__x86_64__) && defined(__GNUC__) && !defined(SGRUN_AMX_Q8)
#define SGRUN_AMX_Q8 1
#include <atomic>

#pragma GCC push_options
#pragma GCC target("amx-tile,amx-int8")
#include <immintrin.h>

namespace {
namespace amx_q8 {

constexpr int64_t kMinRows = 256;   // below it the VNNI tile was as fast or faster (docs/cpu_kernels.md)
constexpr int64_t kTileRows = 16;

// The CPU's AMX-INT8 tiles, granted to this process (amx_tiles.cpp); asked once.
inline bool ready() {
  static const bool ok = amx_tiles::granted(amx_tiles::kInt8);
  return ok;
}

inline std::atomic<bool>& wanted() {
  static std::atomic<bool> w{false};
  return w;
}

// Calls served on the tiles, so a test can tell they ran (their output bits are the VNNI tile's).
inline std::atomic<int64_t>& calls() {
  static std::atomic<int64_t> n{0};
  return n;
}

inline bool enabled() { return wanted().load(std::memory_order_relaxed) && ready(); }

// tmm0-3: C, 16 x 16 int32 (two pairs, alternate groups); tmm4/5: A, 16 columns x 32 codes; tmm6: B, 8 x (16 rows x 4 k).
inline amx_tiles::TileConfig tile_config() {
  amx_tiles::TileConfig cfg;
  for (int t : {0, 1, 2, 3}) cfg.shape(t, 16, 64);
  for (int t : {4, 5}) cfg.shape(t, 16, 32);
  return cfg.shape(6, 8, 64);
}

// One column block's codes, one byte each, as A tiles: [groups][16 columns][32 k].
inline void decode_block(const uint8_t* codes, int64_t groups, uint8_t* a) {
  const __m128i low = _mm_set1_epi8(0x0F);
  for (int64_t g = 0; g < groups; ++g) {
    uint8_t* ag = a + g * LANES * GROUP;
    for (int64_t p = 0; p < PAIRS_PER_GROUP; ++p) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + (g * PAIRS_PER_GROUP + p) * LANES));
      const __m128i lo = _mm_and_si128(v, low), hi = _mm_and_si128(_mm_srli_epi16(v, 4), low);
      alignas(16) uint16_t both[16];   // column c: (code 2p, code 2p + 1)
      _mm_store_si128(reinterpret_cast<__m128i*>(both), _mm_unpacklo_epi8(lo, hi));
      _mm_store_si128(reinterpret_cast<__m128i*>(both + 8), _mm_unpackhi_epi8(lo, hi));
      for (int c = 0; c < LANES; ++c) std::memcpy(ag + c * GROUP + 2 * p, both + c, 2);
    }
  }
}

// Rows [16 t, 16 t + 16) of the quantized activations as B tiles: [groups][8][16 rows][4 k], rows
// past m zero; and their d and sum per group, transposed: [groups][16 rows].
inline void pack_rows(const QuantRows& qx, int64_t m, int64_t k, int64_t t, int8_t* b, float* d, float* sum) {
  const int64_t groups = k / GROUP;
  for (int64_t i = 0; i < kTileRows; ++i) {
    const int64_t r = t * kTileRows + i;
    for (int64_t g = 0; g < groups; ++g) {
      int8_t* bg = b + g * GROUP * kTileRows;
      for (int64_t q = 0; q < GROUP / 4; ++q) {
        if (r < m) std::memcpy(bg + (q * kTileRows + i) * 4, qx.q.data() + r * k + g * GROUP + 4 * q, 4);
        else std::memset(bg + (q * kTileRows + i) * 4, 0, 4);
      }
      d[g * kTileRows + i] = r < m ? qx.d[r * groups + g] : 0.0f;
      sum[g * kTileRows + i] = r < m ? qx.sum[r * groups + g] : 0.0f;
    }
  }
}

// The packed activations, grown as needed and never initialised.
struct Buffers {
  std::unique_ptr<int8_t[]> q;
  std::unique_ptr<float[]> d, sum;
  int64_t q_size = 0, d_size = 0;
  void fit(int64_t q_need, int64_t d_need) {
    if (q_need > q_size) q.reset(new int8_t[q_need]), q_size = q_need;
    if (d_need > d_size) d.reset(new float[d_need]), sum.reset(new float[d_need]), d_size = d_need;
  }
};

// acc[c] (column c of the block, 16 rows) += the VNNI tile's float steps for one group's dots.
inline void apply_group(const int32_t* dots, const float* s, const float* mn, const float* d, const float* sum,
                        __m512* acc) {
  const __m512 dv = _mm512_loadu_ps(d), sv = _mm512_loadu_ps(sum);
  for (int c = 0; c < LANES; ++c) {
    const __m512 dot = _mm512_cvtepi32_ps(_mm512_loadu_si512(dots + c * kTileRows));
    acc[c] = _mm512_fmadd_ps(dot, _mm512_mul_ps(_mm512_set1_ps(s[c]), dv), acc[c]);
    acc[c] = _mm512_fmadd_ps(_mm512_set1_ps(mn[c]), sv, acc[c]);
  }
}

// y[m, n] (float32) = the quantized rows qx times the int4 codes, as int4_mm_into's VNNI tile.
template <class ParallelFor>
void int4_q8(const uint8_t* cb, const uint16_t* sb, int64_t cs, int64_t ss, const QuantRows& qx, int64_t m,
             int64_t k, int64_t n, float* y, ParallelFor&& parallel_for) {
  calls().fetch_add(1, std::memory_order_relaxed);
  const int64_t groups = k / GROUP, blocks = n / LANES, tiles = (m + kTileRows - 1) / kTileRows;
  // Every row tile's B operands, d and sums, packed once (pack_rows writes every byte: kept
  // between calls and never zero-filled, which had cost ~15% of a 2,048-row call).
  thread_local Buffers kept;
  Buffers& buf = kept;
  buf.fit(tiles * kTileRows * k, tiles * groups * kTileRows);
  int8_t* const bq = buf.q.get();
  float* const bd = buf.d.get();
  float* const bs = buf.sum.get();
  parallel_for(tiles, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      pack_rows(qx, m, k, t, bq + t * kTileRows * k, bd + t * groups * kTileRows, bs + t * groups * kTileRows);
  });
  // Units of two column blocks: their codes decoded, then every row tile against them.
  const int64_t units = (blocks + 1) / 2;
  parallel_for(units, [&](int64_t u0, int64_t u1) {
    const amx_tiles::TileConfig cfg = tile_config();
    _tile_loadconfig(&cfg);
    std::vector<uint8_t> a(static_cast<size_t>(2 * groups * LANES * GROUP));
    std::vector<float> scale(static_cast<size_t>(2 * groups * 2 * LANES));   // [block][group][s | min][16]
    std::unique_ptr<int32_t[]> dots_kept(new int32_t[groups * 2 * LANES * kTileRows]);   // [group][block][16][16]
    int32_t* const dots = dots_kept.get();
    alignas(64) float out[LANES][kTileRows];
    for (int64_t u = u0; u < u1; ++u) {
      const int nb = 2 * u + 1 < blocks ? 2 : 1;
      for (int j = 0; j < nb; ++j) {
        const int64_t b = 2 * u + j;
        decode_block(cb + b * cs, groups, a.data() + j * groups * LANES * GROUP);
        for (int64_t i = 0; i < groups * 2; ++i)
          _mm512_storeu_ps(scale.data() + (j * groups * 2 + i) * LANES,
                           _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + b * ss + i * LANES))));
      }
      for (int64_t t = 0; t < tiles; ++t) {
        const int8_t* bt = bq + t * kTileRows * k;
        const float* dt = bd + t * groups * kTileRows;
        const float* st = bs + t * groups * kTileRows;
        // Every group's dots first, alternating between two pairs of C tiles, so the tile unit
        // runs ahead without waiting on the float steps (which read the dots from memory).
#define SG_AMX_GROUP(c0, c1)                                                  \
  {                                                                           \
    int32_t* out0 = dots + (g * 2) * LANES * kTileRows;                \
    _tile_loadd(6, bt + g * GROUP * kTileRows, 64);                           \
    _tile_zero(c0);                                                           \
    _tile_loadd(4, a.data() + g * LANES * GROUP, GROUP);                      \
    _tile_dpbusd(c0, 4, 6);                                                   \
    _tile_stored(c0, out0, 64);                                               \
    if (nb == 2) {                                                            \
      _tile_zero(c1);                                                         \
      _tile_loadd(5, a.data() + (groups + g) * LANES * GROUP, GROUP);         \
      _tile_dpbusd(c1, 5, 6);                                                 \
      _tile_stored(c1, out0 + LANES * kTileRows, 64);                         \
    }                                                                         \
  }
        for (int64_t g = 0; g < groups; ++g) {
          if (g & 1) SG_AMX_GROUP(2, 3) else SG_AMX_GROUP(0, 1)
        }
#undef SG_AMX_GROUP
        const int64_t rows = std::min<int64_t>(kTileRows, m - t * kTileRows);
        for (int j = 0; j < nb; ++j) {   // then the float steps, block by block, groups in order
          __m512 acc[LANES];
          for (int c = 0; c < LANES; ++c) acc[c] = _mm512_setzero_ps();
          for (int64_t g = 0; g < groups; ++g) {
            const float* sc = scale.data() + (j * groups + g) * 2 * LANES;
            apply_group(dots + (g * 2 + j) * LANES * kTileRows, sc, sc + LANES, dt + g * kTileRows,
                        st + g * kTileRows, acc);
          }
          for (int c = 0; c < LANES; ++c) _mm512_store_ps(out[c], acc[c]);
          float* yb = y + t * kTileRows * n + (2 * u + j) * LANES;
          for (int64_t i = 0; i < rows; ++i)
            for (int c = 0; c < LANES; ++c) yb[i * n + c] = out[c][i];
        }
      }
    }
    _tile_release();
  });
}

}  // namespace amx_q8
}  // namespace
#pragma GCC pop_options
#endif
