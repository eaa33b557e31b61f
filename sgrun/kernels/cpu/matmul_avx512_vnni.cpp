// The AVX512-VNNI int4 x int8-activation tile (levels avx512_bf16 and amx): float32 activations
// quantized to int8 per group of 32 (matmul_common.cpp's quantize_rows) against the int4 codes,
// 16 columns x 4 k per instruction, for two rows and more; one row keeps the AVX2 tile, which was
// faster there (below). Compiled after matmul_common.cpp and before matmul_avx2.cpp, whose tiles
// serve everything else at these levels. Also here: the int8 lm_head's integer tile
// (`int8_x16_tile`, at its definition below), which every row count at these levels runs.
//
// Why: at these levels the float32 path used to run the AVX2 tile (matmul_avx2.cpp), whose
// _mm256_maddubs_epi16 gives int16 pair sums that need an add per instruction and a widening per
// group. Here each 32-bit lane is one column and takes 4 consecutive k at once: with AVX512-VNNI,
// _mm512_dpbusd_epi32 multiplies 64 unsigned codes by 64 signed activations and adds them into 16
// int32 sums in one instruction. Per 64 multiply-adds and row that is one instruction (the
// activation dword broadcast from memory) against the AVX2 tile's five; the codes' regrouping into
// column quads (6 instructions per 64 codes) is shared by the rows of a pass. Measured on AMD EPYC
// Zen 4 (3072 x 576, one thread, in cache, 4 December 2026; 512-bit ops run double-pumped there):
// 1.08x the AVX2 tile at 2 rows, 1.3x at 4, 1.6-1.7x from 6 rows on; 0.8x at one row, where the
// regrouping is not shared. The same tile on maddubs + madd_epi16 (AVX-512BW without VNNI) measured
// no faster than the AVX2 tile, so the avx512 level keeps that one.
//
// Exactness: a group's integer dot product is exact in both tiles (int16 partial sums cannot
// overflow: 8 adds of at most 2 * 15 * 127), and the float32 steps after it are the AVX2 tile's,
// in its order (acc += dot * (s * d), then acc += min * sum), so every output is bit-identical to
// the AVX2 tile's. The tests hold the two levels to that.
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#define SGRUN_Q8_TILES_512 1
#include <immintrin.h>

namespace {
namespace q8x512 {

constexpr int kRowBlock = 8;       // rows per pass: 8 int32 dot + 8 float sums + codes in 32 registers
constexpr int kTwoBlockRows = 4;   // two blocks at once up to 4 rows (16 + 16 accumulators would not fit at 8)
constexpr int64_t kMinRows = 2;    // below it the AVX2 tile (see above)

// 16 columns' codes for k = 2 * pair .. 2 * pair + 3 (the pairs `pair` and `pair + 1`, 16 bytes
// each, byte = c[2p] | c[2p+1] << 4) as one dword per column, bytes (c[2p], c[2p+1], c[2p+2], c[2p+3]):
// t = b0 | b1 << 16 puts the two bytes in bytes 0 and 2; t | t << 4 copies each high nibble into
// the byte above; the mask keeps the low nibble of every byte.
inline __m512i decode_quads(const uint8_t* pair_bytes) {
  const __m512i b0 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pair_bytes)));
  const __m512i b1 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pair_bytes + LANES)));
  const __m512i t = _mm512_or_si512(b0, _mm512_slli_epi32(b1, 16));
  return _mm512_ternarylogic_epi32(t, _mm512_slli_epi32(t, 4), _mm512_set1_epi32(0x0F0F0F0F), 0xA8);   // (A | B) & C
}

// acc + the sums of 4 products of unsigned codes w and signed activations x, per 32-bit lane, exactly.
inline __m512i dot4(__m512i acc, __m512i w, __m512i x) { return _mm512_dpbusd_epi32(acc, w, x); }

inline __m512 half16(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }

// The same prefetch as the AVX2 tile (see there why): the next unit of two column blocks, into L2.
inline void prefetch_next_unit(const void* at, int64_t unit_bytes) {
  _mm_prefetch(static_cast<const char*>(at) + unit_bytes, _MM_HINT_T1);
}

// R rows x NB column blocks; arguments as simd::int4_q8_tile's. At one row and one block the dot
// runs in two chains (even and odd quads) so the instruction's latency is hidden; integer sums are
// exact, so the split changes no bit.
template <int R, int NB>
void int4_q8_tile(const uint8_t* codes, const uint16_t* scales, int64_t block_stride_codes,
                  int64_t block_stride_scales, const int8_t* xq, const float* xd, const float* xsum, int64_t k,
                  int64_t groups, float* y, int64_t n_total) {
  constexpr int kChains = R * NB <= 2 ? 2 : 1;
  __m512 acc[R][NB];
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NB; ++b) acc[r][b] = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    __m512i dot[kChains][R][NB];
    for (int c = 0; c < kChains; ++c)
      for (int r = 0; r < R; ++r)
        for (int b = 0; b < NB; ++b) dot[c][r][b] = _mm512_setzero_si512();
    for (int b = 0; b < NB; ++b)
      prefetch_next_unit(scales + b * block_stride_scales + g * 2 * LANES, 2 * block_stride_scales * sizeof(uint16_t));
    for (int64_t p = 0; p < PAIRS_PER_GROUP; p += 2) {
      const int64_t pair = g * PAIRS_PER_GROUP + p;
      const int c = kChains == 2 ? static_cast<int>((p >> 1) & 1) : 0;
      __m512i w[NB];
      for (int b = 0; b < NB; ++b) {
        const uint8_t* at = codes + b * block_stride_codes + pair * LANES;
        if ((p & 3) == 0) prefetch_next_unit(at, 2 * block_stride_codes);   // one 64-byte line per two loads
        w[b] = decode_quads(at);
      }
      for (int r = 0; r < R; ++r) {
        int32_t quad;
        std::memcpy(&quad, xq + r * k + 2 * pair, sizeof(quad));
        const __m512i xv = _mm512_set1_epi32(quad);
        for (int b = 0; b < NB; ++b) dot[c][r][b] = dot4(dot[c][r][b], w[b], xv);
      }
    }
    for (int b = 0; b < NB; ++b) {
      const uint16_t* sg = scales + b * block_stride_scales + g * 2 * LANES;
      const __m512 s = half16(sg), mn = half16(sg + LANES);
      for (int r = 0; r < R; ++r) {
        __m512i total = dot[0][r][b];
        if constexpr (kChains == 2) total = _mm512_add_epi32(total, dot[1][r][b]);
        const __m512 d = _mm512_set1_ps(xd[r * groups + g]), sum = _mm512_set1_ps(xsum[r * groups + g]);
        acc[r][b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), _mm512_mul_ps(s, d), acc[r][b]);
        acc[r][b] = _mm512_fmadd_ps(mn, sum, acc[r][b]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NB; ++b) _mm512_storeu_ps(y + r * n_total + b * LANES, acc[r][b]);
}

// The int8 lm_head (q [N/16, K, 16], an fp16 scale per column and group of 32) against 16-bit
// activations (matmul_common.cpp's Quant16Rows), R rows x NB column blocks; k a multiple of 32. Per
// 4 k a 64-byte line holds the 16 columns of each k; one dword permute and one in-lane byte shuffle
// regroup it into one dword per column (k, k+1, k+2, k+3), which _mm512_dpbusd_epi32 multiplies as
// unsigned bytes (the sign bit flipped: w + 128) by X's high and low bytes broadcast, 64
// multiply-adds per instruction. A group's dot w . X = 256 * hi_dot + lo_dot - 128 * sum(X) is exact
// in int32 (|.| < 2^28), as the AVX2 tile's, and applied in the same float32 order, so both give the
// same bits. Against the float FMA tile (a widening, a conversion and an FMA per 16 weights) this is
// about five instructions per 64 weights, shared by the rows of a pass.
constexpr int kX16RowBlock = kRowBlock, kX16TwoBlockRows = kTwoBlockRows;
template <int R, int NB>
void int8_x16_tile(const int8_t* q, int64_t block_stride, const int16_t*, const int8_t* xhi, const int8_t* xlo, const float* xd,
                   const int32_t* xcorr, int64_t k, int64_t groups, const uint16_t* scale,
                   int64_t block_stride_scales, float* y, int64_t n_total) {
  // Dword 4m + L of the permuted line is the input's dword 4L + m (k = L, columns 4m..4m+3); then
  // byte 4c + L of each lane takes byte 4L + c: one dword per column, its 4 k in order.
  const __m512i dwords = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const __m512i bytes = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15));
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[R][NB];
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NB; ++b) acc[r][b] = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    __m512i dhi[R][NB], dlo[R][NB];
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < NB; ++b) dhi[r][b] = dlo[r][b] = _mm512_setzero_si512();
    for (int b = 0; b < NB; ++b)
      prefetch_next_unit(scale + b * block_stride_scales + g * LANES, 2 * block_stride_scales * sizeof(uint16_t));
    for (int64_t kk = g * GROUP; kk < (g + 1) * GROUP; kk += 4) {
      __m512i w[NB];
      for (int b = 0; b < NB; ++b) {
        const int8_t* at = q + b * block_stride + kk * LANES;
        prefetch_next_unit(at, 2 * block_stride);   // one 64-byte line a load
        const __m512i line = _mm512_loadu_si512(at);
        w[b] = _mm512_xor_si512(_mm512_shuffle_epi8(_mm512_permutexvar_epi32(dwords, line), bytes), flip);
      }
      for (int r = 0; r < R; ++r) {
        int32_t h, l;
        std::memcpy(&h, xhi + r * k + kk, sizeof(h));
        std::memcpy(&l, xlo + r * k + kk, sizeof(l));
        const __m512i hv = _mm512_set1_epi32(h), lv = _mm512_set1_epi32(l);
        for (int b = 0; b < NB; ++b) {
          dhi[r][b] = dot4(dhi[r][b], w[b], hv);
          dlo[r][b] = dot4(dlo[r][b], w[b], lv);
        }
      }
    }
    for (int b = 0; b < NB; ++b) {
      const __m512 s = half16(scale + b * block_stride_scales + g * LANES);
      for (int r = 0; r < R; ++r) {
        const __m512i total = _mm512_sub_epi32(_mm512_add_epi32(_mm512_slli_epi32(dhi[r][b], 8), dlo[r][b]),
                                               _mm512_set1_epi32(xcorr[r * groups + g]));
        acc[r][b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), _mm512_mul_ps(s, _mm512_set1_ps(xd[r * groups + g])),
                                    acc[r][b]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NB; ++b) _mm512_storeu_ps(y + r * n_total + b * LANES, acc[r][b]);
}

}  // namespace q8x512
}  // namespace
#endif  // SGRUN_Q8_TILES_512
