// The paged walk and scalar helpers shared by the decode kernel's chunk math
// (paged_chunk_attention.cpp): token rows found through a page table without a division per
// token, with the rows a few blocks ahead prefetched across pages, float conversion and a
// vectorizable exp. First of the sources paged_decode_cpp.py builds as one unit.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
// SGRUN_ISA=scalar (build.py) promises no intrinsics path; on aarch64 its flags (-march=armv8-a)
// still enable NEON, so the NEON files check SG_SCALAR_LEVEL as well as __ARM_NEON.
#define SG_ISA_IS_scalar 1
#define SG_ISA_CAT2(a, b) a##b
#define SG_ISA_CAT(a, b) SG_ISA_CAT2(a, b)
#if defined(SGRUN_ISA) && SG_ISA_CAT(SG_ISA_IS_, SGRUN_ISA) == 1
#define SG_SCALAR_LEVEL 1
#endif

namespace {

constexpr int kBlock = 16;   // tokens per inner block
#ifndef SG_PREFETCH_BLOCKS
#define SG_PREFETCH_BLOCKS 2     // how many blocks ahead the next tokens' K/V rows are prefetched
#endif

// Walks the token rows of a paged context without a division per token.
struct PageCursor {
  const int64_t* pages;
  int64_t ps, page, off;
  PageCursor(const int64_t* pages_, int64_t ps_, int64_t t) : pages(pages_), ps(ps_), page(t / ps_), off(t % ps_) {}
  int64_t row() const { return pages[page] * ps + off; }   // the token's row in the [N * ps] cache of one kv head
  void next() {
    if (++off == ps) { off = 0; ++page; }
  }
};

// Where a chunk's tokens are, and how far ahead the context goes (for prefetching across pages).
template <typename T>
struct ChunkSource {
  const T* k;   // this kv head's [N, ps, D] cache
  const T* v;
  const int64_t* pages;
  int64_t ps, t0, t1, limit, D;   // tokens [t0, t1) of a context of `limit` tokens
};

// Token rows of the next block; rows past the block's end repeat its first (their scores are masked).
template <typename T>
struct BlockRows {
  int64_t rows[kBlock];
  PageCursor cur, ahead;
  int64_t t_ahead;
  static constexpr int kAhead = SG_PREFETCH_BLOCKS * kBlock;   // prefetch distance in tokens
  explicit BlockRows(const ChunkSource<T>& src)
      : cur(src.pages, src.ps, src.t0), ahead(src.pages, src.ps, std::min(src.t0 + kAhead, src.limit)),
        t_ahead(std::min(src.t0 + kAhead, src.limit)) {}
  int fill(const ChunkSource<T>& src, int64_t t) {   // rows of tokens t.. and the block's token count
    const int nt = static_cast<int>(std::min<int64_t>(kBlock, src.t1 - t));
    for (int i = 0; i < nt; ++i) { rows[i] = cur.row(); cur.next(); }
    for (int i = nt; i < kBlock; ++i) rows[i] = rows[0];
    const int64_t bytes = src.D * static_cast<int64_t>(sizeof(T));
    for (int i = 0; i < nt && t_ahead < src.limit; ++i, ++t_ahead) {   // the rows kAhead tokens later
      const char* kp = reinterpret_cast<const char*>(src.k + ahead.row() * src.D);
      const char* vp = reinterpret_cast<const char*>(src.v + ahead.row() * src.D);
      for (int64_t b = 0; b < bytes; b += 64) { __builtin_prefetch(kp + b); __builtin_prefetch(vp + b); }
      ahead.next();
    }
    return nt;
  }
};

// exp(x) for x <= 0 in plain arithmetic so the compiler vectorizes it (a libm call would not):
// 2^(x log2 e) = 2^n * 2^f with n the nearest integer (the 1.5 * 2^23 rounding trick) and e^f
// for |f| <= 0.5 ln 2 by its degree-7 Taylor series (relative error below 1e-8); T is float or
// a GCC vector of floats (scalar operands broadcast), so scalar and 16-lane exp share it.
template <class T>
inline T exp_frac_series(T f) {
  T p = f * 0.0f + 1.0f / 5040.0f;
  p = p * f + 1.0f / 720.0f;
  p = p * f + 1.0f / 120.0f;
  p = p * f + 1.0f / 24.0f;
  p = p * f + 1.0f / 6.0f;
  p = p * f + 0.5f;
  p = p * f + 1.0f;
  return p * f + 1.0f;
}

inline float exp_nonpos(float x) {
  x = x < -87.0f ? -87.0f : x;
  const float t = x * 1.4426950408889634f;
  const float magic = 12582912.0f;
  const float rounded = (t + magic) - magic;
  const float f = (t - rounded) * 0.6931471805599453f;
  const float p = exp_frac_series(f);
  const int32_t n = static_cast<int32_t>(rounded);
  const int32_t bits = (n + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

inline void to_float(const float* src, float* dst, int64_t n) { std::memcpy(dst, src, n * sizeof(float)); }

inline void to_float(const at::BFloat16* src, float* dst, int64_t n) {
  const uint16_t* raw = reinterpret_cast<const uint16_t*>(src);
  uint32_t* out = reinterpret_cast<uint32_t*>(dst);
  #pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<uint32_t>(raw[i]) << 16;
}

inline void to_float(const at::Half* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}

}  // namespace
