// The aarch64 NEON path of the prefill attention (levels neon and neon_dotprod): the same `simd`
// path as prefill_attention_avx2.cpp (same packed layouts, tiles of 6 rows, online softmax in base
// 2 over blocks of 64 keys, causal stop inside the last block), on 128-bit vectors: S = Q K^T is a
// 6 x 16 block of 24 accumulators per 16 keys (four K loads and a scalar multiply-add of Q per head
// dim), P V 6 rows x 16 head dims per pass over the block's keys; NEON's 32 registers hold them.
// bf16 widens with one SHLL per 4 values. Built after prefill_attention_common.cpp.
#if defined(__aarch64__) && defined(__ARM_NEON) && !defined(SG_SCALAR_LEVEL) && !defined(SG_PREFILL_SIMD)
#define SG_PREFILL_SIMD "neon"
#include <arm_neon.h>

namespace {
namespace simd {

constexpr int kRows = 6;
constexpr int64_t kMaxHeadDim = 256;

// Pool dtypes (float16 only under float32 queries: a float32 model's fp16 KV cache) and head dims.
inline bool supports(at::ScalarType dt, int64_t D) {
  return (dt == at::kFloat || dt == at::kBFloat16 || dt == at::kHalf) && D > 0 && D % 16 == 0 && D <= kMaxHeadDim;
}

inline float32x4_t load4(const float* p) { return vld1q_f32(p); }
inline float32x4_t load4(const uint16_t* p) { return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16)); }
inline float32x4_t load4(const at::Half* p) { return vcvt_f32_f16(vld1_f16(reinterpret_cast<const float16_t*>(p))); }
inline void store4(float* p, float32x4_t x) { vst1q_f32(p, x); }
inline void store4(uint16_t* p, float32x4_t x) {   // float32 to bf16, rounded to nearest even
  const uint32x4_t b = vreinterpretq_u32_f32(x);
  const uint32x4_t odd = vandq_u32(vshrq_n_u32(b, 16), vdupq_n_u32(1));
  vst1_u16(p, vshrn_n_u32(vaddq_u32(b, vaddq_u32(vdupq_n_u32(0x7FFF), odd)), 16));
}

// 2^x for x <= 0, as exp2_8 in prefill_attention_avx2.cpp: lanes below -126 give exactly 0, 2^0 is 1.
inline float32x4_t exp2_4(float32x4_t x) {
  const uint32x4_t keep = vcgeq_f32(x, vdupq_n_f32(-126.0f));
  x = vmaxq_f32(x, vdupq_n_f32(-126.0f));
  const float32x4_t n = vrndnq_f32(x);
  const float32x4_t f = vmulq_f32(vsubq_f32(x, n), vdupq_n_f32(0.6931471805599453f));
  const float c[8] = {1.0f / 5040.0f, 1.0f / 720.0f, 1.0f / 120.0f, 1.0f / 24.0f, 1.0f / 6.0f, 0.5f, 1.0f, 1.0f};
  float32x4_t p = vdupq_n_f32(c[0]);
  for (int i = 1; i < 8; ++i) p = vfmaq_f32(vdupq_n_f32(c[i]), p, f);
  const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
  return vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(vmulq_f32(p, vreinterpretq_f32_s32(e))), keep));
}

template <class E>
inline void widen_row(const E* src, float* dst, int64_t D) {
  for (int64_t d = 0; d < D; d += 4) store4(dst + d, load4(src + d));
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
    alignas(16) float row[kMaxHeadDim];
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
    alignas(16) float qf[R][kMaxHeadDim], o[R][kMaxHeadDim], s[R][kKeyBlock];
    float m[R], l[R], alpha[R];
    const float32x4_t sl = vdupq_n_f32(scale_log2);
    for (int r = 0; r < R; ++r) {
      m[r] = ninf;
      l[r] = 0.0f;
      for (int64_t d = 0; d < D; d += 4) {
        vst1q_f32(qf[r] + d, vmulq_f32(load4(qrow[r] + d), sl));
        vst1q_f32(o[r] + d, vdupq_n_f32(0.0f));
      }
    }
    const int32x4_t lane = {0, 1, 2, 3};
    const int64_t blocks = max_pos / kKeyBlock + 1;
    for (int64_t kb = min_lo / kKeyBlock; kb < blocks; ++kb) {   // blocks before every row's window: skipped
      const int64_t key0 = kb * kKeyBlock;
      const int nk = static_cast<int>(std::min<int64_t>(kKeyBlock, max_pos - key0 + 1));   // keys any row attends
      const int nsub = (nk + 15) / 16;
      // 16-key steps before every row's window start: skipped too (their probabilities are 0 in every row).
      const int sub0 = static_cast<int>(std::max<int64_t>(0, min_lo - key0) / 16);
      for (int sb = sub0; sb < nsub; ++sb) {   // S = Q K^T (scaled, base 2), 16 keys at a time
        const float* kp = kpk + (key0 / 16 + sb) * D * 16;
        float32x4_t acc[R][4];
        for (int r = 0; r < R; ++r)
          for (int j = 0; j < 4; ++j) acc[r][j] = vdupq_n_f32(0.0f);
        for (int64_t d = 0; d < D; ++d) {
          float32x4_t kv[4];
          for (int j = 0; j < 4; ++j) kv[j] = vld1q_f32(kp + d * 16 + 4 * j);
          for (int r = 0; r < R; ++r) {
            const float qv = qf[r][d];
            for (int j = 0; j < 4; ++j) acc[r][j] = vfmaq_n_f32(acc[r][j], kv[j], qv);
          }
        }
        for (int r = 0; r < R; ++r)
          for (int j = 0; j < 4; ++j) vst1q_f32(s[r] + 16 * sb + 4 * j, acc[r][j]);
      }
      const int v0 = 4 * sub0, nv = 4 * nsub;
      const bool masked = key0 + 16 * nsub - 1 > min_pos || key0 + 16 * sub0 < max_lo;
      for (int r = 0; r < R; ++r) {   // keys outside a row's window [lo, pos] masked; new max and rescale factor
        float32x4_t mx = vdupq_n_f32(ninf);
        const int32x4_t limit = vdupq_n_s32(static_cast<int>(pos[r] - key0));
        const int32x4_t start = vdupq_n_s32(static_cast<int>(std::max<int64_t>(lo[r] - key0, -1)));
        for (int v = v0; v < nv; ++v) {
          float32x4_t x = vld1q_f32(s[r] + 4 * v);
          if (masked) {
            const int32x4_t key = vaddq_s32(lane, vdupq_n_s32(4 * v));
            const uint32x4_t out = vorrq_u32(vcgtq_s32(key, limit), vcgtq_s32(start, key));
            x = vbslq_f32(out, vdupq_n_f32(ninf), x);
            vst1q_f32(s[r] + 4 * v, x);
          }
          mx = vmaxq_f32(mx, x);
        }
        const float bm = vmaxvq_f32(mx), mn = std::max(m[r], bm);
        alpha[r] = vgetq_lane_f32(exp2_4(vdupq_n_f32(m[r] - mn)), 0);
        m[r] = mn;
        const float32x4_t shift = vdupq_n_f32(mn);
        float32x4_t sum = vdupq_n_f32(0.0f);
        for (int v = v0; v < nv; ++v) {
          const float32x4_t p = exp2_4(vsubq_f32(vld1q_f32(s[r] + 4 * v), shift));
          sum = vaddq_f32(sum, p);
          vst1q_f32(s[r] + 4 * v, p);
        }
        l[r] = l[r] * alpha[r] + vaddvq_f32(sum);
      }
      const float* vb = vpk + key0 * D;   // O = alpha O + P V over the block's keys [16 sub0, nk)
      for (int64_t dc = 0; dc < D; dc += 16) {
        float32x4_t ov[R][4];
        for (int r = 0; r < R; ++r)
          for (int j = 0; j < 4; ++j) ov[r][j] = vmulq_n_f32(vld1q_f32(o[r] + dc + 4 * j), alpha[r]);
        for (int k = 16 * sub0; k < nk; ++k) {
          float32x4_t vv[4];
          for (int j = 0; j < 4; ++j) vv[j] = vld1q_f32(vb + k * D + dc + 4 * j);
          for (int r = 0; r < R; ++r) {
            const float p = s[r][k];
            for (int j = 0; j < 4; ++j) ov[r][j] = vfmaq_n_f32(ov[r][j], vv[j], p);
          }
        }
        for (int r = 0; r < R; ++r)
          for (int j = 0; j < 4; ++j) vst1q_f32(o[r] + dc + 4 * j, ov[r][j]);
      }
    }
    for (int r = 0; r < nrows; ++r) {
      const float32x4_t inv = vdupq_n_f32(1.0f / l[r]);
      for (int64_t d = 0; d < D; d += 4) store4(orow[r] + d, vmulq_f32(vld1q_f32(o[r] + d), inv));
    }
  }
};

}  // namespace simd
}  // namespace
#endif
