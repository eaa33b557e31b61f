// The AVX2 + FMA + F16C tiles of the weight-only matmuls (level avx2, and avx512 /
// avx512_bf16 for what their own tiles lack), the `simd` tile set every non-BF16 level provides
// (matmul_neon.cpp is the aarch64 one):
// - int4_q8_tile: int4 codes x activations quantized to int8 per group of 32 (llama.cpp's way on
//   AVX2): _mm256_maddubs_epi16 multiplies 32 unsigned codes by 32 signed activations and adds
//   pairs, so one instruction is 16 columns x one activation pair, for two pairs at once; the
//   int16 sums of a group cannot overflow (8 adds of at most 2 * 15 * 127 per lane), and the
//   group's scale and minimum are applied once per group in float32.
// - int8_f32_tile: the int8 lm_head (an fp16 scale per column and group of 32), float32 activations and FMA;
//   int8_x16_tile: the same weights against 16-bit integer activations (k a multiple of 32), madd_epi16.
// - bf16_f32_tile: dense bf16 weights widened to float32 (a shift or a mask) and FMA.
// Layouts: matmul_common.cpp. Every row runs the same instructions whatever the row count.
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) && !defined(SGRUN_SIMD_TILES)
#define SGRUN_SIMD_TILES "avx2"
#define SGRUN_INT8_X16 1   // simd::int8_x16_tile
#include <immintrin.h>

namespace {
namespace simd {

constexpr int kRowBlock = 4;       // rows per pass over a column block
constexpr int kTwoBlockRows = 1;   // 16 ymm registers: two blocks at once only for one row

// Software prefetch of the weights the next unit of column blocks reads (for_each_tile walks units
// of two blocks in order, so that is `2 * block_stride` elements on, at the same offset). Why: the
// weights stream from DRAM at batch 1 (a SmolLM2 step reads ~95 MB through a 32 MiB L3), and the
// hardware prefetcher did not run far enough ahead to overlap the stream with the tile's compute:
// a block that took 82 us with its weights in cache took 152-192 us streaming them, about the sum
// of its compute and its bytes at the measured bandwidth, as if every miss waited (AMD EPYC Zen 3,
// AVX2, 3 December 2026). Prefetching a whole unit ahead (~9 KB for k = 576) into L2 hides it.
template <class T>
inline void prefetch_next_unit(const T* at, int64_t block_stride) {
  _mm_prefetch(reinterpret_cast<const char*>(at + 2 * block_stride), _MM_HINT_T1);
}

inline __m256 half8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

// R rows x NB column blocks. xq: int8 activations [R, K] (row stride k); xd, xsum: per row and
// group their scale and the quantized x's sum d * sum(q) (row stride `groups`). y: float32, row stride n_total.
template <int R, int NB>
void int4_q8_tile(const uint8_t* codes, const uint16_t* scales, int64_t block_stride_codes,
                  int64_t block_stride_scales, const int8_t* xq, const float* xd, const float* xsum, int64_t k,
                  int64_t groups, float* y, int64_t n_total) {
  const __m256i low = _mm256_set1_epi8(0x0F);
  // A broadcast dword (q[2p], q[2p+1], q[2p+2], q[2p+3]) -> pair p in the low lane, p+1 in the high.
  const __m256i spread = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,
                                          2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3);
  // Several rows keep their float sums in y between groups: 2R int16 group sums, 2R float sums
  // and the operands do not fit 16 ymm registers, and GCC spilled group sums inside the inner loop.
  // Loads and stores of y change no bit (the same float adds in the same order). Measured
  // (`python benchmarks/bench_matmul.py --rows 1,4,512 --levels avx2`, old and new alternated twice,
  // AMD EPYC Zen 4, 6 December 2026): gate_up at 512 rows 7.38-7.79 -> 6.24-6.34 ms, down 4.02-4.09 ->
  // 3.62-3.66 ms, qkv 2.54-2.90 -> 2.10-2.41 ms; 4 rows 3-9% faster; one row keeps its registers.
  // On Zen 1 (5 December 2026) the same change measured 2% slower at 512 rows: the multiply pipe, not the
  // spills, bounds that core. AVX-512 builds of this code (the avx512 level) have 32 registers and
  // keep the sums there.
#ifdef __AVX512F__
  constexpr bool kSumsInY = false;
#else
  constexpr bool kSumsInY = R > 1;
#endif
  __m256 acc[R][NB][2];   // never read when the sums live in y (the compiler drops it)
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NB; ++b) acc[r][b][0] = acc[r][b][1] = _mm256_setzero_ps();
  if constexpr (kSumsInY) {
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < NB; ++b) {
        _mm256_storeu_ps(y + r * n_total + b * LANES, _mm256_setzero_ps());
        _mm256_storeu_ps(y + r * n_total + b * LANES + 8, _mm256_setzero_ps());
      }
  }
  for (int64_t g = 0; g < groups; ++g) {
    // Lanes: [pair p, columns 0-7 | pair p+1, columns 0-7] and the same for columns 8-15.
    __m256i lo_cols[R][NB], hi_cols[R][NB];
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < NB; ++b) lo_cols[r][b] = hi_cols[r][b] = _mm256_setzero_si256();
    for (int b = 0; b < NB; ++b) prefetch_next_unit(scales + b * block_stride_scales + g * 2 * LANES, block_stride_scales);
    for (int64_t p = 0; p < PAIRS_PER_GROUP; p += 2) {
      const int64_t pair = g * PAIRS_PER_GROUP + p;
      __m256i wa[NB], wb[NB];
      for (int b = 0; b < NB; ++b) {
        const uint8_t* at = codes + b * block_stride_codes + pair * LANES;
        if ((p & 3) == 0) prefetch_next_unit(at, block_stride_codes);   // one 64-byte line per two loads
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at));
        const __m256i even = _mm256_and_si256(v, low), odd = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
        wa[b] = _mm256_unpacklo_epi8(even, odd);   // (c[n, 2p], c[n, 2p+1]) for columns 0-7
        wb[b] = _mm256_unpackhi_epi8(even, odd);   // columns 8-15
      }
      for (int r = 0; r < R; ++r) {
        int32_t quad;
        std::memcpy(&quad, xq + r * k + 2 * pair, sizeof(quad));
        const __m256i xv = _mm256_shuffle_epi8(_mm256_set1_epi32(quad), spread);
        for (int b = 0; b < NB; ++b) {
          lo_cols[r][b] = _mm256_add_epi16(lo_cols[r][b], _mm256_maddubs_epi16(wa[b], xv));
          hi_cols[r][b] = _mm256_add_epi16(hi_cols[r][b], _mm256_maddubs_epi16(wb[b], xv));
        }
      }
    }
    for (int b = 0; b < NB; ++b) {
      const uint16_t* sg = scales + b * block_stride_scales + g * 2 * LANES;
      const __m256 s0 = half8(sg), s1 = half8(sg + 8), m0 = half8(sg + LANES), m1 = half8(sg + LANES + 8);
      for (int r = 0; r < R; ++r) {
        const __m256i a = lo_cols[r][b], c = hi_cols[r][b];
        const __m256i dot0 = _mm256_add_epi32(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(a)),
                                              _mm256_cvtepi16_epi32(_mm256_extracti128_si256(a, 1)));
        const __m256i dot1 = _mm256_add_epi32(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(c)),
                                              _mm256_cvtepi16_epi32(_mm256_extracti128_si256(c, 1)));
        const __m256 d = _mm256_set1_ps(xd[r * groups + g]), sum = _mm256_set1_ps(xsum[r * groups + g]);
        float* yr = y + r * n_total + b * LANES;
        __m256 a0 = kSumsInY ? _mm256_loadu_ps(yr) : acc[r][b][0];
        __m256 a1 = kSumsInY ? _mm256_loadu_ps(yr + 8) : acc[r][b][1];
        a0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot0), _mm256_mul_ps(s0, d), a0);
        a1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot1), _mm256_mul_ps(s1, d), a1);
        a0 = _mm256_fmadd_ps(m0, sum, a0);
        a1 = _mm256_fmadd_ps(m1, sum, a1);
        if constexpr (kSumsInY) {
          _mm256_storeu_ps(yr, a0);
          _mm256_storeu_ps(yr + 8, a1);
        } else {
          acc[r][b][0] = a0;
          acc[r][b][1] = a1;
        }
      }
    }
  }
  if constexpr (!kSumsInY)
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < NB; ++b) {
        _mm256_storeu_ps(y + r * n_total + b * LANES, acc[r][b][0]);
        _mm256_storeu_ps(y + r * n_total + b * LANES + 8, acc[r][b][1]);
      }
}

// int8 weights (one fp16 scale per output column and group of 32 k: a GGUF Q8_0 table's own values)
// x float32 activations: each group's sum is scaled into the total (blocked sums, as the AVX-512
// tile: long sequential float sums lose bits on real activations). scale: [groups, 16] per block.
template <int R, int NB>
void int8_f32_tile(const int8_t* q, int64_t block_stride, const float* x, int64_t k, const uint16_t* scale,
                   int64_t block_stride_scales, float* y, int64_t n_total) {
  __m256 acc[R][NB][2];
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NB; ++b) acc[r][b][0] = acc[r][b][1] = _mm256_setzero_ps();
  for (int64_t k0 = 0; k0 < k; k0 += GROUP) {
    const int64_t k_end = k0 + GROUP < k ? k0 + GROUP : k;
    __m256 part[R][NB][2];
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < NB; ++b) part[r][b][0] = part[r][b][1] = _mm256_setzero_ps();
    for (int64_t kk = k0; kk < k_end; ++kk) {
      __m256 w[NB][2];
      for (int b = 0; b < NB; ++b) {
        const int8_t* at = q + b * block_stride + kk * LANES;
        if ((kk & 3) == 0) prefetch_next_unit(at, block_stride);   // one 64-byte line per four loads
        const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(at));
        w[b][0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes));
        w[b][1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(bytes, 8)));
      }
      for (int r = 0; r < R; ++r) {
        const __m256 xv = _mm256_set1_ps(x[r * k + kk]);
        for (int b = 0; b < NB; ++b) {
          part[r][b][0] = _mm256_fmadd_ps(w[b][0], xv, part[r][b][0]);
          part[r][b][1] = _mm256_fmadd_ps(w[b][1], xv, part[r][b][1]);
        }
      }
    }
    const uint16_t* group_scale = scale + (k0 / GROUP) * LANES;
    for (int b = 0; b < NB; ++b) {
      const __m256 s0 = half8(group_scale + b * block_stride_scales);
      const __m256 s1 = half8(group_scale + b * block_stride_scales + 8);
      for (int r = 0; r < R; ++r) {
        acc[r][b][0] = _mm256_fmadd_ps(part[r][b][0], s0, acc[r][b][0]);
        acc[r][b][1] = _mm256_fmadd_ps(part[r][b][1], s1, acc[r][b][1]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NB; ++b) {
      _mm256_storeu_ps(y + r * n_total + b * LANES, acc[r][b][0]);
      _mm256_storeu_ps(y + r * n_total + b * LANES + 8, acc[r][b][1]);
    }
}

// The int8 lm_head against 16-bit activations X (matmul_common.cpp's Quant16Rows: why 16 bits, and
// the order every level applies a group in); arguments as q8x512::int8_x16_tile's, k a multiple of
// 32. The codes of k and k+1 widen to int16 and interleave (per 128-bit lane: 4 columns' pairs), and
// _mm256_madd_epi16 against the pair (X[k], X[k+1]) broadcast gives 8 columns' exact int32 sums:
// 16 columns x 2 k in 8 instructions, where the float FMA tile takes 12 (a widening, a conversion and
// an FMA per 8 weights). The lanes hold columns 0-3 | 8-11 and 4-7 | 12-15; a group's end puts them
// in order. The float sums live in y (R rows' int32 and float sums would not fit 16 registers).
// Two rows a pass, their blocks one at a time (two blocks only at one row): in cache (6,144 x 576,
// two threads, forced avx2 on Zen 4) 50 / 149 / 655 / 2,474 us at 1 / 4 / 16 / 64 rows, against 50 /
// 167 / 656 / 2,640 at four rows a pass and 56 / 193 / 724 / 2,827 with two blocks up to two rows; the
// float tile took 81 / 169 / 656 / 2,780.
constexpr int kX16RowBlock = 2, kX16TwoBlockRows = 1;
template <int R, int NB>
void int8_x16_tile(const int8_t* q, int64_t block_stride, const int16_t* x16, const int8_t*, const int8_t*,
                   const float* xd, const int32_t*, int64_t k, int64_t groups, const uint16_t* scale,
                   int64_t block_stride_scales, float* y, int64_t n_total) {
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NB; ++b) {
      _mm256_storeu_ps(y + r * n_total + b * LANES, _mm256_setzero_ps());
      _mm256_storeu_ps(y + r * n_total + b * LANES + 8, _mm256_setzero_ps());
    }
  for (int64_t g = 0; g < groups; ++g) {
    __m256i lo[R][NB], hi[R][NB];   // columns 0-3 | 8-11 and 4-7 | 12-15
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < NB; ++b) lo[r][b] = hi[r][b] = _mm256_setzero_si256();
    for (int b = 0; b < NB; ++b) prefetch_next_unit(scale + b * block_stride_scales + g * LANES, block_stride_scales);
    for (int64_t kk = g * GROUP; kk < (g + 1) * GROUP; kk += 2) {
      __m256i wl[NB], wh[NB];
      for (int b = 0; b < NB; ++b) {
        const int8_t* at = q + b * block_stride + kk * LANES;
        if ((kk & 3) == 0) prefetch_next_unit(at, block_stride);   // one 64-byte line per two pairs
        const __m256i w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(at)));
        const __m256i w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(at + LANES)));
        wl[b] = _mm256_unpacklo_epi16(w0, w1);
        wh[b] = _mm256_unpackhi_epi16(w0, w1);
      }
      for (int r = 0; r < R; ++r) {
        int32_t pair;
        std::memcpy(&pair, x16 + r * k + kk, sizeof(pair));
        const __m256i xv = _mm256_set1_epi32(pair);
        for (int b = 0; b < NB; ++b) {
          lo[r][b] = _mm256_add_epi32(lo[r][b], _mm256_madd_epi16(wl[b], xv));
          hi[r][b] = _mm256_add_epi32(hi[r][b], _mm256_madd_epi16(wh[b], xv));
        }
      }
    }
    for (int b = 0; b < NB; ++b) {
      const uint16_t* sg = scale + b * block_stride_scales + g * LANES;
      const __m256 s0 = half8(sg), s1 = half8(sg + 8);
      for (int r = 0; r < R; ++r) {
        const __m256 d = _mm256_set1_ps(xd[r * groups + g]);
        float* yr = y + r * n_total + b * LANES;
        const __m256i c0 = _mm256_permute2x128_si256(lo[r][b], hi[r][b], 0x20);   // columns 0-7
        const __m256i c1 = _mm256_permute2x128_si256(lo[r][b], hi[r][b], 0x31);   // columns 8-15
        _mm256_storeu_ps(yr, _mm256_fmadd_ps(_mm256_cvtepi32_ps(c0), _mm256_mul_ps(s0, d), _mm256_loadu_ps(yr)));
        _mm256_storeu_ps(yr + 8, _mm256_fmadd_ps(_mm256_cvtepi32_ps(c1), _mm256_mul_ps(s1, d), _mm256_loadu_ps(yr + 8)));
      }
    }
  }
}

// Dense bf16 weights [pairs][16 columns][2] x bf16 activations: a pair word widens to the even
// k (shifted up) and the odd k (masked), sums blocked by 16 pairs; float32 out.
template <int R, int NB>
void bf16_f32_tile(const uint32_t* w, int64_t block_stride, const uint16_t* x, int64_t k, float* y, int64_t n_total) {
  const int64_t kp = k / 2;
  const __m256i high = _mm256_set1_epi32(static_cast<int32_t>(0xFFFF0000u));
  __m256 acc[R][NB][2];
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NB; ++b) acc[r][b][0] = acc[r][b][1] = _mm256_setzero_ps();
  for (int64_t p0 = 0; p0 < kp; p0 += PAIRS_PER_GROUP) {
    const int64_t p_end = p0 + PAIRS_PER_GROUP < kp ? p0 + PAIRS_PER_GROUP : kp;
    __m256 part[R][NB][2];
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < NB; ++b) part[r][b][0] = part[r][b][1] = _mm256_setzero_ps();
    for (int64_t p = p0; p < p_end; ++p) {
      __m256 we[NB][2], wo[NB][2];
      for (int b = 0; b < NB; ++b)
        for (int h = 0; h < 2; ++h) {
          const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + b * block_stride + p * LANES + 8 * h));
          we[b][h] = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
          wo[b][h] = _mm256_castsi256_ps(_mm256_and_si256(v, high));
        }
      for (int r = 0; r < R; ++r) {
        const __m256 xe = _mm256_set1_ps(bf16_to_float(x[r * k + 2 * p]));
        const __m256 xo = _mm256_set1_ps(bf16_to_float(x[r * k + 2 * p + 1]));
        for (int b = 0; b < NB; ++b)
          for (int h = 0; h < 2; ++h)
            part[r][b][h] = _mm256_fmadd_ps(wo[b][h], xo, _mm256_fmadd_ps(we[b][h], xe, part[r][b][h]));
      }
    }
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < NB; ++b)
        for (int h = 0; h < 2; ++h) acc[r][b][h] = _mm256_add_ps(acc[r][b][h], part[r][b][h]);
  }
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NB; ++b)
      for (int h = 0; h < 2; ++h) _mm256_storeu_ps(y + r * n_total + b * LANES + 8 * h, acc[r][b][h]);
}

// The int4 x int8-activation panel: int4_q8_tile's numbers for six rows and more (a prefill chunk,
// a batch's decode step), about twice as fast. Each column block's codes are decoded once per
// pass into "quads" (one dword per column holding its codes for 4 consecutive k, the layout the
// AVX512-VNNI tile builds in registers), and then every row of the pass multiplies them:
// _mm256_maddubs_epi16 against the row's 4 activations broadcast as one dword gives, per column,
// two int16 pair sums side by side, and one _mm256_madd_epi16 by ones at the group's end adds
// them into the group's int32 dot. Against int4_q8_tile per 4 k, block and row: 4 instructions
// instead of 5 plus a share of the decode (6 per block and 4 rows), and 2 widening instructions per
// group instead of 8. Measured (a standalone timing of the real tiles, one thread, AMD EPYC Zen 4 at
// forced AVX2, 7 December 2026): 960 x 576 at 240 rows 2,146 -> 1,130-1,180 us (61 -> 112-117
// GMAC/s); at 2 threads (bench_matmul.py) 1.06-1.16x at 6 rows, 1.3-1.5x from 64 (docs/cpu_kernels.md).
//
// Exactness: a group's integer dot is the same exact integer (an int16 lane sums 8 pair sums of at
// most 2 * 15 * 127, as int4_q8_tile's), and the float32 steps after it are int4_q8_tile's, in its
// order, so every output is bit-identical to that tile's and so to every x86 level's: rows stay
// invariant whichever of the two serves a row count.
// The driver that runs it (row chunks, threads, the switch) is matmul_panel.cpp's, shared with NEON.
#define SGRUN_SIMD_PANEL 1
using PanelQuad = __m256i;                // 8 columns' quads
constexpr int64_t kPanelQuadsPer4K = 2;   // PanelQuads a column block holds per 4 k
constexpr int64_t kPanelMinRows = 6;      // below it int4_q8_tile (the panel 0.94-0.98x at 4 rows, 1.06-1.16x at 6)
constexpr int kPanelRows = 3;             // rows per pass: 6 int16 sums, 2 quads, 1 broadcast (4 spilled more)

// One column block's codes as quads: out[2q] the dwords of columns 0-7 for k = 4q..4q+3, out[2q+1]
// those of columns 8-15 (bytes c[n, 4q], c[n, 4q+1], c[n, 4q+2], c[n, 4q+3]); codes in the
// column-block layout (pairs 2q and 2q+1, 16 bytes each). t = b0 | b1 << 16 puts pair 2q's byte
// in bytes 0 and pair 2q+1's in byte 2 of each dword; t | t << 4 copies every high nibble into the
// byte above; the mask keeps the low nibbles.
inline void decode_block_quads(const uint8_t* codes, int64_t k, __m256i* out) {
  const __m256i low = _mm256_set1_epi32(0x0F0F0F0F);
  for (int64_t q = 0; q < k / 4; ++q) {
    const uint8_t* pairs = codes + 2 * q * LANES;
    for (int h = 0; h < 2; ++h) {
      const __m256i b0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(pairs + 8 * h)));
      const __m256i b1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(pairs + LANES + 8 * h)));
      const __m256i t = _mm256_or_si256(b0, _mm256_slli_epi32(b1, 16));
      out[2 * q + h] = _mm256_and_si256(_mm256_or_si256(t, _mm256_slli_epi32(t, 4)), low);
    }
  }
}

// R rows x one column block against its quads (decode_block_quads); the other arguments as
// int4_q8_tile's. The float sums live in y between groups (int4_q8_tile's kSumsInY, same bits).
template <int R>
void int4_q8_panel_tile(const __m256i* quads, const uint16_t* scales, const int8_t* xq, const float* xd,
                        const float* xsum, int64_t k, int64_t groups, float* y, int64_t n_total) {
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t g = 0; g < groups; ++g) {
    __m256i lo[R], hi[R];   // int16 pair sums, columns 0-7 and 8-15
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) lo[r] = hi[r] = _mm256_setzero_si256();
    // Two of the group's 8 quads per iteration: fully unrolled, GCC spilled the sums.
#pragma GCC unroll 2
    for (int j = 0; j < 8; ++j) {
      const int64_t q = g * 8 + j;
      const __m256i w0 = _mm256_load_si256(quads + 2 * q), w1 = _mm256_load_si256(quads + 2 * q + 1);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        int32_t quad;
        std::memcpy(&quad, xq + r * k + 4 * q, sizeof(quad));
        const __m256i xv = _mm256_set1_epi32(quad);
        lo[r] = _mm256_add_epi16(lo[r], _mm256_maddubs_epi16(w0, xv));
        hi[r] = _mm256_add_epi16(hi[r], _mm256_maddubs_epi16(w1, xv));
      }
    }
    const uint16_t* sg = scales + g * 2 * LANES;
    const __m256 s0 = half8(sg), s1 = half8(sg + 8), m0 = half8(sg + LANES), m1 = half8(sg + LANES + 8);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256i dot0 = _mm256_madd_epi16(lo[r], ones), dot1 = _mm256_madd_epi16(hi[r], ones);
      const __m256 d = _mm256_set1_ps(xd[r * groups + g]), sum = _mm256_set1_ps(xsum[r * groups + g]);
      float* yr = y + r * n_total;
      __m256 a0 = g == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(yr);
      __m256 a1 = g == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(yr + 8);
      a0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot0), _mm256_mul_ps(s0, d), a0);
      a1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot1), _mm256_mul_ps(s1, d), a1);
      a0 = _mm256_fmadd_ps(m0, sum, a0);
      a1 = _mm256_fmadd_ps(m1, sum, a1);
      _mm256_storeu_ps(yr, a0);
      _mm256_storeu_ps(yr + 8, a1);
    }
  }
}

}  // namespace simd
}  // namespace
#endif
