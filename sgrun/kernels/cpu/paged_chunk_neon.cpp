// The aarch64 NEON path of the decode kernel's chunk math (levels neon and neon_dotprod): the same
// `chunk_simd` pass as paged_chunk_avx2.cpp (each key and value row loaded once from its page for
// every head of the pass, q.k partial sums per token reduced by a pairwise-add tree, the P.V
// accumulators in registers across a block), on 128-bit vectors, for float32 and bf16 pools of
// head dim 16, 32, 64, 128, and float16 ones (FCVTL). bf16 widens with SHLL (4 values per instruction, natural order), so
// nothing is reordered. Built after paged_rows.cpp, before paged_chunk_attention.cpp.
// Row invariance: a head's instructions do not depend on which heads share its pass.
#if defined(__aarch64__) && defined(__ARM_NEON) && !defined(SG_SCALAR_LEVEL) && !defined(SG_SIMD_CHUNK) && \
    !defined(SG_PORTABLE_CHUNK)
#define SG_SIMD_CHUNK "neon"
#include <arm_neon.h>

namespace {
namespace chunk_simd {

template <typename T>
struct Lanes;

template <>
struct Lanes<float> {   // 16 dims of a row as 4 vectors
  static void get(const float* row, int i, float32x4_t* x) {
    for (int j = 0; j < 4; ++j) x[j] = vld1q_f32(row + 16 * i + 4 * j);
  }
};

template <>
struct Lanes<at::BFloat16> {
  static void get(const at::BFloat16* row, int i, float32x4_t* x) {
    const uint16_t* p = reinterpret_cast<const uint16_t*>(row) + 16 * i;
    const uint16x8_t a = vld1q_u16(p), b = vld1q_u16(p + 8);
    x[0] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(a), 16));
    x[1] = vreinterpretq_f32_u32(vshll_high_n_u16(a, 16));
    x[2] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(b), 16));
    x[3] = vreinterpretq_f32_u32(vshll_high_n_u16(b, 16));
  }
};

template <>
struct Lanes<at::Half> {   // a float32 model's fp16 KV cache: FCVTL widens 4 values, natural order
  static void get(const at::Half* row, int i, float32x4_t* x) {
    const float16_t* p = reinterpret_cast<const float16_t*>(row) + 16 * i;
    const float16x8_t a = vld1q_f16(p), b = vld1q_f16(p + 8);
    x[0] = vcvt_f32_f16(vget_low_f16(a));
    x[1] = vcvt_high_f32_f16(a);
    x[2] = vcvt_f32_f16(vget_low_f16(b));
    x[3] = vcvt_high_f32_f16(b);
  }
};

// e^x for x <= 0 on 4 lanes: exp_nonpos's method (2^n * e^f, degree-7 series), n by rounding.
inline float32x4_t exp4(float32x4_t x) {
  x = vmaxq_f32(x, vdupq_n_f32(-87.0f));
  const float32x4_t t = vmulq_f32(x, vdupq_n_f32(1.4426950408889634f));
  const float32x4_t n = vrndnq_f32(t);
  const float32x4_t f = vmulq_f32(vsubq_f32(t, n), vdupq_n_f32(0.6931471805599453f));
  const float c[8] = {1.0f / 5040.0f, 1.0f / 720.0f, 1.0f / 120.0f, 1.0f / 24.0f, 1.0f / 6.0f, 0.5f, 1.0f, 1.0f};
  float32x4_t p = vdupq_n_f32(c[0]);
  for (int i = 1; i < 8; ++i) p = vfmaq_f32(vdupq_n_f32(c[i]), p, f);
  const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
  return vmulq_f32(p, vreinterpretq_f32_s32(e));
}

inline float32x4_t masked(float32x4_t x, uint32x4_t valid) {
  return vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(x), valid));
}

// One pass of NH heads over the chunk; acc: [NH, D], zero on entry.
template <typename T, int C, int NH>
void chunk_heads(const float* q, const ChunkSource<T>& src, float scale, float* m, float* l, float* acc) {
  constexpr int D = 16 * C;
  const float ninf = -std::numeric_limits<float>::infinity();
  alignas(16) float qs[NH][D];
  alignas(16) float part[NH][kBlock][4];   // per token, its 4 partial dot products
  alignas(16) float pa[NH][kBlock];
  for (int h = 0; h < NH; ++h)
    for (int d = 0; d < D; ++d) qs[h][d] = q[h * D + d] * scale;
  const int32x4_t lane = {0, 1, 2, 3};
  BlockRows<T> br(src);
  for (int64_t t0 = src.t0; t0 < src.t1; t0 += kBlock) {
    const int nt = br.fill(src, t0);
    for (int t = 0; t < nt; ++t) {
      const T* kr = src.k + br.rows[t] * D;
      float32x4_t a[NH][2];
      for (int h = 0; h < NH; ++h) a[h][0] = a[h][1] = vdupq_n_f32(0.0f);
      for (int i = 0; i < C; ++i) {
        float32x4_t x[4];
        Lanes<T>::get(kr, i, x);
        for (int h = 0; h < NH; ++h)
          for (int j = 0; j < 4; ++j) a[h][j & 1] = vfmaq_f32(a[h][j & 1], vld1q_f32(qs[h] + 16 * i + 4 * j), x[j]);
      }
      for (int h = 0; h < NH; ++h) vst1q_f32(part[h][t], vaddq_f32(a[h][0], a[h][1]));
    }
    for (int t = nt; t < kBlock; ++t)   // past the chunk's end: any finite value, masked below
      for (int h = 0; h < NH; ++h) vst1q_f32(part[h][t], vdupq_n_f32(0.0f));
    uint32x4_t valid[4];
    for (int v = 0; v < 4; ++v) valid[v] = vcltq_s32(vaddq_s32(lane, vdupq_n_s32(4 * v)), vdupq_n_s32(nt));
    float alpha[NH];
    for (int h = 0; h < NH; ++h) {
      float32x4_t s[4];
      for (int v = 0; v < 4; ++v) {   // lane t of s[v] = token 4 v + t's score
        const float* pp = part[h][4 * v];
        const float32x4_t p01 = vpaddq_f32(vld1q_f32(pp), vld1q_f32(pp + 4));
        const float32x4_t p23 = vpaddq_f32(vld1q_f32(pp + 8), vld1q_f32(pp + 12));
        s[v] = vbslq_f32(valid[v], vpaddq_f32(p01, p23), vdupq_n_f32(ninf));
      }
      const float bm = vmaxvq_f32(vmaxq_f32(vmaxq_f32(s[0], s[1]), vmaxq_f32(s[2], s[3])));
      const float mo = m[h];
      const float mn = bm > mo ? bm : mo;
      alpha[h] = mo == ninf ? 0.0f : exp_nonpos(mo - mn);
      float32x4_t p[4];
      for (int v = 0; v < 4; ++v) {
        p[v] = masked(exp4(vsubq_f32(s[v], vdupq_n_f32(mn))), valid[v]);
        vst1q_f32(pa[h] + 4 * v, p[v]);
      }
      l[h] = l[h] * alpha[h] + vaddvq_f32(vaddq_f32(vaddq_f32(p[0], p[1]), vaddq_f32(p[2], p[3])));
      m[h] = mn;
    }
    for (int i = 0; i < C; ++i) {
      float32x4_t o[NH][4];
      for (int h = 0; h < NH; ++h)
        for (int j = 0; j < 4; ++j) o[h][j] = vmulq_n_f32(vld1q_f32(acc + h * D + 16 * i + 4 * j), alpha[h]);
      for (int t = 0; t < nt; ++t) {
        float32x4_t x[4];
        Lanes<T>::get(src.v + br.rows[t] * D, i, x);
        for (int h = 0; h < NH; ++h) {
          const float pt = pa[h][t];
          for (int j = 0; j < 4; ++j) o[h][j] = vfmaq_n_f32(o[h][j], x[j], pt);
        }
      }
      for (int h = 0; h < NH; ++h)
        for (int j = 0; j < 4; ++j) vst1q_f32(acc + h * D + 16 * i + 4 * j, o[h][j]);
    }
  }
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
