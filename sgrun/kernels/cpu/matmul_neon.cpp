// The aarch64 NEON tiles of the weight-only matmuls (levels neon and neon_dotprod): the same
// `simd` tile set as matmul_avx2.cpp, on 128-bit vectors.
// - int4_q8_tile: int4 codes x activations quantized to int8 per group of 32. Two pairs of k are
//   regrouped (zips) so each 32-bit lane holds one column's four codes; with dotprod one SDOT adds
//   4 products per lane (16 columns x 4 k in four instructions), without it widening multiplies
//   (SMULL) and pairwise accumulates (SADALP) give the same int32 sums. Scale and minimum are
//   applied per group in float32, as on AVX2.
// - int4_q8_panel_tile (dotprod): the same numbers for 6 rows and more, each block's codes decoded
//   once per chunk of rows (matmul_panel.cpp drives it, as on AVX2).
// - int8_f32_tile / bf16_f32_tile: the lm_head's int8 and dense bf16 weights widened to float32, FMA;
//   int8_x16_tile: the lm_head's int8 codes x 16-bit integer activations, x86's bits (SDOT or SMULL).
// Layouts: matmul_common.cpp. Every row runs the same instructions whatever the row count.
#if defined(__aarch64__) && defined(__ARM_NEON) && !defined(SGRUN_SIMD_TILES)
#include <arm_neon.h>
#if defined(__ARM_FEATURE_DOTPROD)
#define SGRUN_SIMD_TILES "neon_dotprod"
#else
#define SGRUN_SIMD_TILES "neon"
#endif
#define SGRUN_INT8_X16 1   // simd::int8_x16_tile

namespace {
namespace simd {

constexpr int kRowBlock = 4;
constexpr int kTwoBlockRows = 1;

inline float32x4_t half4(const uint16_t* p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }

// One column quad's int32 sums += its 4 codes (lanes of 4 bytes) x the 4 activations `x4`.
inline int32x4_t dot4(int32x4_t acc, int8x16_t codes, int8x16_t x4) {
#if defined(__ARM_FEATURE_DOTPROD)
  return vdotq_s32(acc, codes, x4);
#else
  const int16x8_t lo = vmull_s8(vget_low_s8(codes), vget_low_s8(x4));
  const int16x8_t hi = vmull_high_s8(codes, x4);
  // Adjacent products summed (pairs of one column's k), then pairs of those into the column's lane.
  return vpadalq_s16(acc, vpaddq_s16(lo, hi));
#endif
}

// Byte pairs per column (a: columns 0-7 and 8-15 of one pair of k, b: the next pair) -> four column
// quads, quad c holding columns 4c..4c+3 with each column's 4 bytes (a's pair, then b's) in one lane.
inline void pairs_to_quads(int16x8_t a_lo, int16x8_t a_hi, int16x8_t b_lo, int16x8_t b_hi, int8x16_t quad[4]) {
  quad[0] = vreinterpretq_s8_s16(vzip1q_s16(a_lo, b_lo));
  quad[1] = vreinterpretq_s8_s16(vzip2q_s16(a_lo, b_lo));
  quad[2] = vreinterpretq_s8_s16(vzip1q_s16(a_hi, b_hi));
  quad[3] = vreinterpretq_s8_s16(vzip2q_s16(a_hi, b_hi));
}

// Two pairs of k of a column block's codes (32 bytes at `at`: pair p, then pair p+1) -> its four
// column quads, quad c holding columns 4c .. 4c+3 with each column's codes c[n, 2p .. 2p+3] in one lane.
inline void codes_to_quads(const uint8_t* at, int8x16_t quad[4]) {
  const uint8x16_t low = vdupq_n_u8(0x0F);
  const uint8x16_t v0 = vld1q_u8(at), v1 = vld1q_u8(at + LANES);
  // (c[n, 2p], c[n, 2p+1]) per column, for pair p and for pair p+1 ...
  const uint8x16_t e0 = vandq_u8(v0, low), o0 = vshrq_n_u8(v0, 4);
  const uint8x16_t e1 = vandq_u8(v1, low), o1 = vshrq_n_u8(v1, 4);
  // ... then the two pairs of a column side by side.
  pairs_to_quads(vreinterpretq_s16_u8(vzip1q_u8(e0, o0)), vreinterpretq_s16_u8(vzip2q_u8(e0, o0)),
                 vreinterpretq_s16_u8(vzip1q_u8(e1, o1)), vreinterpretq_s16_u8(vzip2q_u8(e1, o1)), quad);
}

template <int R, int NB>
void int4_q8_tile(const uint8_t* codes, const uint16_t* scales, int64_t block_stride_codes,
                  int64_t block_stride_scales, const int8_t* xq, const float* xd, const float* xsum, int64_t k,
                  int64_t groups, float* y, int64_t n_total) {
  float32x4_t acc[R][NB][4];
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NB; ++b)
      for (int c = 0; c < 4; ++c) acc[r][b][c] = vdupq_n_f32(0.0f);
  for (int64_t g = 0; g < groups; ++g) {
    int32x4_t dot[R][NB][4];   // columns 4c .. 4c+3
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < NB; ++b)
        for (int c = 0; c < 4; ++c) dot[r][b][c] = vdupq_n_s32(0);
    for (int64_t p = 0; p < PAIRS_PER_GROUP; p += 2) {
      const int64_t pair = g * PAIRS_PER_GROUP + p;
      int8x16_t quad[NB][4];
      for (int b = 0; b < NB; ++b) codes_to_quads(codes + b * block_stride_codes + pair * LANES, quad[b]);
      for (int r = 0; r < R; ++r) {
        int32_t four;
        std::memcpy(&four, xq + r * k + 2 * pair, sizeof(four));
        const int8x16_t x4 = vreinterpretq_s8_s32(vdupq_n_s32(four));
        for (int b = 0; b < NB; ++b)
          for (int c = 0; c < 4; ++c) dot[r][b][c] = dot4(dot[r][b][c], quad[b][c], x4);
      }
    }
    for (int b = 0; b < NB; ++b) {
      const uint16_t* sg = scales + b * block_stride_scales + g * 2 * LANES;
      float32x4_t s[4], mn[4];
      for (int c = 0; c < 4; ++c) { s[c] = half4(sg + 4 * c); mn[c] = half4(sg + LANES + 4 * c); }
      for (int r = 0; r < R; ++r) {
        const float32x4_t d = vdupq_n_f32(xd[r * groups + g]), sum = vdupq_n_f32(xsum[r * groups + g]);
        for (int c = 0; c < 4; ++c) {
          acc[r][b][c] = vfmaq_f32(acc[r][b][c], vcvtq_f32_s32(dot[r][b][c]), vmulq_f32(s[c], d));
          acc[r][b][c] = vfmaq_f32(acc[r][b][c], mn[c], sum);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NB; ++b)
      for (int c = 0; c < 4; ++c) vst1q_f32(y + r * n_total + b * LANES + 4 * c, acc[r][b][c]);
}

// The int4 x int8-activation panel (matmul_panel.cpp drives it), with dotprod only:
// int4_q8_tile's numbers for kPanelMinRows rows and more, each column block's codes decoded once per
// chunk of rows instead of once per 4 rows. The tile spends ~14 instructions per block and 4 k on
// the decode (2 loads, 4 masks and shifts, 8 zips) against a broadcast and 4 SDOT per row; here a
// row's 4 k are 4 SDOT in their indexed form (vdotq_laneq_s32), which take the row's 4 activations
// from one lane of a 16-byte load, the quads' loads shared by the pass's 5 rows. Without dotprod
// the products themselves (4 instructions per column quad) dominate and a panel counted 1.03-1.06x
// fewer instructions than the tile: not worth a second code path.
// Exactness: the same exact integer dot per column and group as int4_q8_tile, then its float32
// steps in its order (the float sums kept in y between groups: a stored float reloads as itself),
// so the bits are int4_q8_tile's. Not timed on an ARM CPU (none at hand): dynamic instruction
// counts under qemu are in docs/cpu_kernels.md (1.21x fewer than the tile at 6 rows, 1.39x at 256).
#if defined(__ARM_FEATURE_DOTPROD)
#define SGRUN_SIMD_PANEL 1
using PanelQuad = int8x16_t;              // 4 columns' quads
constexpr int64_t kPanelQuadsPer4K = 4;   // PanelQuads a column block holds per 4 k
constexpr int64_t kPanelMinRows = 6;      // as on AVX2 (qemu's counts: 1.21x fewer instructions at 6 rows)
constexpr int kPanelRows = 5;             // rows per pass: 20 int32 sums, 5 activation vectors, 4 quads (counted best of 4-6)

// A column block's codes (pairs 2q and 2q+1 for k = 4q .. 4q+3) -> out[4q + c], columns 4c .. 4c+3,
// as int4_q8_tile builds them in registers.
inline void decode_block_quads(const uint8_t* codes, int64_t k, int8x16_t* out) {
  for (int64_t q = 0; q < k / 4; ++q) codes_to_quads(codes + 2 * q * LANES, out + 4 * q);
}

// Step J of 4 (4 k) of a half group: the quads w[4J .. 4J+3] x lane J of each row's 16 activations.
template <int R, int J>
inline void panel_quarter(int32x4_t (&dot)[R][4], const int8x16_t* w, const int8x16_t (&x16)[R]) {
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < 4; ++c) dot[r][c] = vdotq_laneq_s32(dot[r][c], w[4 * J + c], x16[r], J);
}

// R rows x one column block against its quads; the other arguments as int4_q8_tile's.
template <int R>
void int4_q8_panel_tile(const int8x16_t* quads, const uint16_t* scales, const int8_t* xq, const float* xd,
                        const float* xsum, int64_t k, int64_t groups, float* y, int64_t n_total) {
  for (int64_t g = 0; g < groups; ++g) {
    int32x4_t dot[R][4];   // columns 4c .. 4c+3
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < 4; ++c) dot[r][c] = vdupq_n_s32(0);
    // Half a group (16 k) per iteration, not unrolled: unrolling the group let GCC hoist its 32
    // quad loads and spill them.
#pragma GCC unroll 1
    for (int64_t h = 0; h < 2; ++h) {
      const int8x16_t* w = quads + 4 * (8 * g + 4 * h);
      int8x16_t x16[R];
      for (int r = 0; r < R; ++r) x16[r] = vld1q_s8(xq + r * k + g * GROUP + 16 * h);
      panel_quarter<R, 0>(dot, w, x16);
      panel_quarter<R, 1>(dot, w, x16);
      panel_quarter<R, 2>(dot, w, x16);
      panel_quarter<R, 3>(dot, w, x16);
    }
    const uint16_t* sg = scales + g * 2 * LANES;
    float32x4_t s[4], mn[4];
    for (int c = 0; c < 4; ++c) { s[c] = half4(sg + 4 * c); mn[c] = half4(sg + LANES + 4 * c); }
    for (int r = 0; r < R; ++r) {
      const float32x4_t d = vdupq_n_f32(xd[r * groups + g]), sum = vdupq_n_f32(xsum[r * groups + g]);
      float* yr = y + r * n_total;
      for (int c = 0; c < 4; ++c) {
        float32x4_t a = g == 0 ? vdupq_n_f32(0.0f) : vld1q_f32(yr + 4 * c);
        a = vfmaq_f32(a, vcvtq_f32_s32(dot[r][c]), vmulq_f32(s[c], d));
        a = vfmaq_f32(a, mn[c], sum);
        vst1q_f32(yr + 4 * c, a);
      }
    }
  }
}
#endif

// scale: fp16, one per column and group of 32 k ([groups, 16] per block), applied to each group's sum.
template <int R, int NB>
void int8_f32_tile(const int8_t* q, int64_t block_stride, const float* x, int64_t k, const uint16_t* scale,
                   int64_t block_stride_scales, float* y, int64_t n_total) {
  float32x4_t acc[R][NB][4];
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NB; ++b)
      for (int c = 0; c < 4; ++c) acc[r][b][c] = vdupq_n_f32(0.0f);
  for (int64_t k0 = 0; k0 < k; k0 += GROUP) {   // sums blocked by 32 k, as the other levels
    const int64_t k_end = k0 + GROUP < k ? k0 + GROUP : k;
    float32x4_t part[R][NB][4];
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < NB; ++b)
        for (int c = 0; c < 4; ++c) part[r][b][c] = vdupq_n_f32(0.0f);
    for (int64_t kk = k0; kk < k_end; ++kk) {
      float32x4_t w[NB][4];
      for (int b = 0; b < NB; ++b) {
        const int8x16_t v = vld1q_s8(q + b * block_stride + kk * LANES);
        const int16x8_t lo = vmovl_s8(vget_low_s8(v)), hi = vmovl_high_s8(v);
        w[b][0] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo)));
        w[b][1] = vcvtq_f32_s32(vmovl_high_s16(lo));
        w[b][2] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi)));
        w[b][3] = vcvtq_f32_s32(vmovl_high_s16(hi));
      }
      for (int r = 0; r < R; ++r) {
        const float32x4_t xv = vdupq_n_f32(x[r * k + kk]);
        for (int b = 0; b < NB; ++b)
          for (int c = 0; c < 4; ++c) part[r][b][c] = vfmaq_f32(part[r][b][c], w[b][c], xv);
      }
    }
    const uint16_t* group_scale = scale + (k0 / GROUP) * LANES;
    for (int b = 0; b < NB; ++b)
      for (int c = 0; c < 4; ++c) {
        const float32x4_t sg = half4(group_scale + b * block_stride_scales + 4 * c);
        for (int r = 0; r < R; ++r) acc[r][b][c] = vfmaq_f32(acc[r][b][c], part[r][b][c], sg);
      }
  }
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NB; ++b)
      for (int c = 0; c < 4; ++c) vst1q_f32(y + r * n_total + b * LANES + 4 * c, acc[r][b][c]);
}

// One column quad's exact int32 sums += its 4 int8 codes x 4 int8 activations, for any bytes (the
// int8 lm_head's codes reach -128): SDOT, or widening products summed pairwise in int32 (dot4's
// int16 pair sum could reach 2 x 128 x 128 and overflow).
inline int32x4_t dot4_wide(int32x4_t acc, int8x16_t codes, int8x16_t x4) {
#if defined(__ARM_FEATURE_DOTPROD)
  return vdotq_s32(acc, codes, x4);
#else
  const int32x4_t lo = vpaddlq_s16(vmull_s8(vget_low_s8(codes), vget_low_s8(x4)));   // columns 0, 1: 2 sums each
  const int32x4_t hi = vpaddlq_s16(vmull_high_s8(codes, x4));                       // columns 2, 3
  return vaddq_s32(acc, vpaddq_s32(lo, hi));
#endif
}

// The int8 lm_head against 16-bit activations, as matmul_avx2.cpp's int8_x16_tile (see there and
// matmul_common.cpp's Quant16Rows): the same exact integer dot per column and group and the same
// float32 steps, so NEON gives x86's bits. A 64-byte line (16 columns x 4 k) is zipped into four
// column quads (one column's 4 codes a lane); both halves of X are signed bytes, so the codes need
// no offset: dot = 256 * (w . hi) + w . lo. The float sums live in y.
constexpr int kX16RowBlock = 2, kX16TwoBlockRows = 1;

template <int R, int NB>
void int8_x16_tile(const int8_t* q, int64_t block_stride, const int16_t*, const int8_t* xhi, const int8_t* xlo,
                   const float* xd, const int32_t*, int64_t k, int64_t groups, const uint16_t* scale,
                   int64_t block_stride_scales, float* y, int64_t n_total) {
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NB; ++b)
      for (int c = 0; c < 4; ++c) vst1q_f32(y + r * n_total + b * LANES + 4 * c, vdupq_n_f32(0.0f));
  for (int64_t g = 0; g < groups; ++g) {
    int32x4_t dhi[R][NB][4], dlo[R][NB][4];   // columns 4c .. 4c+3
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < NB; ++b)
        for (int c = 0; c < 4; ++c) dhi[r][b][c] = dlo[r][b][c] = vdupq_n_s32(0);
    for (int64_t kk = g * GROUP; kk < (g + 1) * GROUP; kk += 4) {
      int8x16_t quad[NB][4];
      for (int b = 0; b < NB; ++b) {
        const int8_t* at = q + b * block_stride + kk * LANES;
        const int8x16_t k0 = vld1q_s8(at), k1 = vld1q_s8(at + LANES), k2 = vld1q_s8(at + 2 * LANES),
                        k3 = vld1q_s8(at + 3 * LANES);
        // (k0, k1) and (k2, k3) byte pairs per column, then the two pairs per column side by side.
        pairs_to_quads(vreinterpretq_s16_s8(vzip1q_s8(k0, k1)), vreinterpretq_s16_s8(vzip2q_s8(k0, k1)),
                       vreinterpretq_s16_s8(vzip1q_s8(k2, k3)), vreinterpretq_s16_s8(vzip2q_s8(k2, k3)), quad[b]);
      }
      for (int r = 0; r < R; ++r) {
        int32_t h, l;
        std::memcpy(&h, xhi + r * k + kk, sizeof(h));
        std::memcpy(&l, xlo + r * k + kk, sizeof(l));
        const int8x16_t hv = vreinterpretq_s8_s32(vdupq_n_s32(h)), lv = vreinterpretq_s8_s32(vdupq_n_s32(l));
        for (int b = 0; b < NB; ++b)
          for (int c = 0; c < 4; ++c) {
            dhi[r][b][c] = dot4_wide(dhi[r][b][c], quad[b][c], hv);
            dlo[r][b][c] = dot4_wide(dlo[r][b][c], quad[b][c], lv);
          }
      }
    }
    for (int b = 0; b < NB; ++b)
      for (int c = 0; c < 4; ++c) {
        const float32x4_t s = half4(scale + b * block_stride_scales + g * LANES + 4 * c);
        for (int r = 0; r < R; ++r) {
          const int32x4_t total = vaddq_s32(vshlq_n_s32(dhi[r][b][c], 8), dlo[r][b][c]);
          float* yr = y + r * n_total + b * LANES + 4 * c;
          vst1q_f32(yr, vfmaq_f32(vld1q_f32(yr), vcvtq_f32_s32(total), vmulq_f32(s, vdupq_n_f32(xd[r * groups + g]))));
        }
      }
  }
}

template <int R, int NB>
void bf16_f32_tile(const uint32_t* w, int64_t block_stride, const uint16_t* x, int64_t k, float* y, int64_t n_total) {
  const int64_t kp = k / 2;
  const uint32x4_t high = vdupq_n_u32(0xFFFF0000u);
  float32x4_t acc[R][NB][4];
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NB; ++b)
      for (int c = 0; c < 4; ++c) acc[r][b][c] = vdupq_n_f32(0.0f);
  for (int64_t p0 = 0; p0 < kp; p0 += PAIRS_PER_GROUP) {
    const int64_t p_end = p0 + PAIRS_PER_GROUP < kp ? p0 + PAIRS_PER_GROUP : kp;
    float32x4_t part[R][NB][4];
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < NB; ++b)
        for (int c = 0; c < 4; ++c) part[r][b][c] = vdupq_n_f32(0.0f);
    for (int64_t p = p0; p < p_end; ++p) {
      float32x4_t we[NB][4], wo[NB][4];
      for (int b = 0; b < NB; ++b)
        for (int c = 0; c < 4; ++c) {
          const uint32x4_t v = vld1q_u32(w + b * block_stride + p * LANES + 4 * c);
          we[b][c] = vreinterpretq_f32_u32(vshlq_n_u32(v, 16));
          wo[b][c] = vreinterpretq_f32_u32(vandq_u32(v, high));
        }
      for (int r = 0; r < R; ++r) {
        const float32x4_t xe = vdupq_n_f32(bf16_to_float(x[r * k + 2 * p]));
        const float32x4_t xo = vdupq_n_f32(bf16_to_float(x[r * k + 2 * p + 1]));
        for (int b = 0; b < NB; ++b)
          for (int c = 0; c < 4; ++c) part[r][b][c] = vfmaq_f32(vfmaq_f32(part[r][b][c], we[b][c], xe), wo[b][c], xo);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < NB; ++b)
        for (int c = 0; c < 4; ++c) acc[r][b][c] = vaddq_f32(acc[r][b][c], part[r][b][c]);
  }
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NB; ++b)
      for (int c = 0; c < 4; ++c) vst1q_f32(y + r * n_total + b * LANES + 4 * c, acc[r][b][c]);
}

}  // namespace simd
}  // namespace
#endif
