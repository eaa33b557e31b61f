// Paged decode attention on the CPU, reading the KV pages in place (built by paged_decode_cpp.py;
// see that file for the design). One work item: (query row, kv head, chunk of its query heads).
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace {

// exp(x) for x <= 0 in plain arithmetic so the compiler vectorizes it (a libm call would not):
// 2^(x log2 e) = 2^n * 2^f with n the nearest integer (the 1.5 * 2^23 rounding trick) and
// |f| <= 0.5, 2^f by its degree-7 Taylor series (relative error below 1e-8).
// e^f for |f| <= 0.5 ln 2 by its degree-7 Taylor series; T is float or a GCC vector of floats
// (scalar operands broadcast), so the scalar and the 16-lane exp share one polynomial.
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

// ---- vectorized path: head dims that are a multiple of 16, tokens in blocks of 16 ----
typedef float vf16 __attribute__((vector_size(64)));
typedef int32_t vi16 __attribute__((vector_size(64)));

inline vf16 load16(const float* p) { vf16 x; std::memcpy(&x, p, sizeof(x)); return x; }
inline void store16(float* p, vf16 x) { std::memcpy(p, &x, sizeof(x)); }
inline vf16 splat16(float x) { return vf16{} + x; }

#if defined(__clang__)
#define SG_SHUF(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define SG_SHUF(a, b, ...) __builtin_shuffle(a, b, (vi16){__VA_ARGS__})
#endif

// Lane sums of 16 vectors as one vector: out[t] = sum of a[t]'s lanes (a transposing tree:
// 15 adds and 30 two-source shuffles instead of 16 separate horizontal sums).
inline vf16 transpose_sum16(const vf16* a) {
  vf16 b[8], c[4], d[2];
  for (int i = 0; i < 8; ++i)
    b[i] = SG_SHUF(a[2 * i], a[2 * i + 1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23)
         + SG_SHUF(a[2 * i], a[2 * i + 1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
  for (int i = 0; i < 4; ++i)
    c[i] = SG_SHUF(b[2 * i], b[2 * i + 1], 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27)
         + SG_SHUF(b[2 * i], b[2 * i + 1], 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
  for (int i = 0; i < 2; ++i)
    d[i] = SG_SHUF(c[2 * i], c[2 * i + 1], 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29)
         + SG_SHUF(c[2 * i], c[2 * i + 1], 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31);
  return SG_SHUF(d[0], d[1], 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30)
       + SG_SHUF(d[0], d[1], 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
}

inline float hmax16(vf16 x) {
  float m = x[0];
  for (int i = 1; i < 16; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

// exp_nonpos on 16 lanes.
inline vf16 exp16(vf16 x) {
  x = x < -87.0f ? splat16(-87.0f) : x;
  const vf16 t = x * 1.4426950408889634f;
  const vf16 rounded = (t + 12582912.0f) - 12582912.0f;
  const vf16 f = (t - rounded) * 0.6931471805599453f;
  const vf16 p = exp_frac_series(f);
  const vi16 bits = (__builtin_convertvector(rounded, vi16) + 127) << 23;
  vf16 scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

// One work item: gn query rows (scaled, [gn, D]) against n context tokens of one kv head, whose
// rows are found through the page table. Each block of 16 tokens is converted to float once
// and used by every query row (GQA group, or the stacked queries of a cascade prefix).
template <typename T, int C>
void attend_rows(const float* qs, int64_t gn, const T* k, const T* v, const int64_t* pages, int64_t n,
                 int64_t ps, float* kf, float* vfb, float* s, float* acc, float* m, float* l) {
  constexpr int D = 16 * C;
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t g = 0; g < gn; ++g) { m[g] = ninf; l[g] = 0.0f; }
  std::fill(acc, acc + gn * D, 0.0f);
  for (int64_t t0 = 0; t0 < n; t0 += 16) {
    const int nt = static_cast<int>(std::min<int64_t>(16, n - t0));
    for (int t = 0; t < nt; ++t) {
      const int64_t tok = t0 + t;
      const int64_t row = (pages[tok / ps] * ps + tok % ps) * D;
      to_float(k + row, kf + t * D, D);
      to_float(v + row, vfb + t * D, D);
    }
    if (nt < 16) {  // finite padding: its scores are masked out below
      std::fill(kf + nt * D, kf + 16 * D, 0.0f);
      std::fill(vfb + nt * D, vfb + 16 * D, 0.0f);
    }
    vf16 lane_ok;
    for (int t = 0; t < 16; ++t) lane_ok[t] = t < nt ? 0.0f : ninf;
    for (int64_t g = 0; g < gn; ++g) {
      vf16 q[C];
      for (int c = 0; c < C; ++c) q[c] = load16(qs + g * D + 16 * c);
      vf16 a[16];
      for (int t = 0; t < 16; ++t) {
        vf16 x = q[0] * load16(kf + t * D);
        for (int c = 1; c < C; ++c) x += q[c] * load16(kf + t * D + 16 * c);
        a[t] = x;
      }
      const vf16 sc = transpose_sum16(a) + lane_ok;
      const float mo = m[g];
      const float bm = hmax16(sc);
      const float mn = bm > mo ? bm : mo;
      const float alpha = mo == ninf ? 0.0f : exp_nonpos(mo - mn);
      vf16 p = exp16(sc - mn);
      p = nt < 16 ? (lane_ok == 0.0f ? p : vf16{}) : p;
      float pa[16];
      store16(pa, p);
      float sum = 0.0f;
      for (int t = 0; t < 16; ++t) sum += pa[t];
      l[g] = l[g] * alpha + sum;
      m[g] = mn;
      vf16 o[C];
      for (int c = 0; c < C; ++c) o[c] = load16(acc + g * D + 16 * c) * alpha;
      for (int t = 0; t < nt; ++t)
        for (int c = 0; c < C; ++c) o[c] += pa[t] * load16(vfb + t * D + 16 * c);
      for (int c = 0; c < C; ++c) store16(acc + g * D + 16 * c, o[c]);
    }
  }
}

// Any head dim: the same walk, scalar-per-row code (the compiler still vectorizes over D).
template <typename T>
void attend_rows_any(const float* qs, int64_t gn, int64_t D, const T* k, const T* v, const int64_t* pages,
                     int64_t n, int64_t ps, float* kf, float* vfb, float* s, float* acc, float* m, float* l) {
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t g = 0; g < gn; ++g) { m[g] = ninf; l[g] = 0.0f; }
  std::fill(acc, acc + gn * D, 0.0f);
  for (int64_t t0 = 0; t0 < n; t0 += 16) {
    const int64_t nt = std::min<int64_t>(16, n - t0);
    for (int64_t t = 0; t < nt; ++t) {
      const int64_t tok = t0 + t;
      const int64_t row = (pages[tok / ps] * ps + tok % ps) * D;
      to_float(k + row, kf + t * D, D);
      to_float(v + row, vfb + t * D, D);
    }
    for (int64_t g = 0; g < gn; ++g) {
      const float* qg = qs + g * D;
      float bm = ninf;
      for (int64_t t = 0; t < nt; ++t) {
        float dot = 0.0f;
        #pragma omp simd reduction(+:dot)
        for (int64_t d = 0; d < D; ++d) dot += qg[d] * kf[t * D + d];
        s[t] = dot;
        bm = dot > bm ? dot : bm;
      }
      const float mn = bm > m[g] ? bm : m[g];
      const float alpha = m[g] == ninf ? 0.0f : exp_nonpos(m[g] - mn);
      float sum = 0.0f;
      for (int64_t t = 0; t < nt; ++t) { s[t] = exp_nonpos(s[t] - mn); sum += s[t]; }
      l[g] = l[g] * alpha + sum;
      m[g] = mn;
      float* ag = acc + g * D;
      for (int64_t d = 0; d < D; ++d) ag[d] *= alpha;
      for (int64_t t = 0; t < nt; ++t) {
        #pragma omp simd
        for (int64_t d = 0; d < D; ++d) ag[d] += s[t] * vfb[t * D + d];
      }
    }
  }
}

// The head-dim dispatch: the vector path for multiples of 16 up to 128, the generic one otherwise.
template <typename T>
void attend(int64_t D, const float* qs, int64_t gn, const T* k, const T* v, const int64_t* pages, int64_t n,
            int64_t ps, float* kf, float* vfb, float* s, float* acc, float* m, float* l) {
  switch (D) {
    case 16: attend_rows<T, 1>(qs, gn, k, v, pages, n, ps, kf, vfb, s, acc, m, l); break;
    case 32: attend_rows<T, 2>(qs, gn, k, v, pages, n, ps, kf, vfb, s, acc, m, l); break;
    case 64: attend_rows<T, 4>(qs, gn, k, v, pages, n, ps, kf, vfb, s, acc, m, l); break;
    case 128: attend_rows<T, 8>(qs, gn, k, v, pages, n, ps, kf, vfb, s, acc, m, l); break;
    default: attend_rows_any<T>(qs, gn, D, k, v, pages, n, ps, kf, vfb, s, acc, m, l);
  }
}

// Query rows [R, H, D] of any float dtype, read in place (row stride given, [H, D] contiguous).
struct QRows {
  const void* data;
  at::ScalarType dtype;
  int64_t row_stride;
  // count floats of row r from element offset `off`, times `scale`, into dst.
  void load(int64_t r, int64_t off, int64_t count, float scale, float* dst) const {
    const int64_t pos = r * row_stride + off;
    if (dtype == at::kFloat) std::memcpy(dst, static_cast<const float*>(data) + pos, count * sizeof(float));
    else if (dtype == at::kBFloat16) to_float(static_cast<const at::BFloat16*>(data) + pos, dst, count);
    else to_float(static_cast<const at::Half*>(data) + pos, dst, count);
    for (int64_t i = 0; i < count; ++i) dst[i] *= scale;
  }
};

struct Scratch {
  std::vector<float> kf, vfb, qs, s, acc, m, l;
  Scratch(int64_t D, int64_t rows)
      : kf(16 * D), vfb(16 * D), qs(rows * D), s(16), acc(rows * D), m(rows), l(rows) {}
};

// Work items: split a head's query rows into chunks only when rows x heads leave threads idle
// (a cascade prefix is one context with many stacked queries). Small problems run on the
// calling thread: waking the pool costs more than they do (and far more on a loaded machine).
struct Split {
  int64_t chunks, per_chunk, grain;
  Split(int64_t contexts, int64_t rows, int64_t work) {
    const int64_t threads = at::get_num_threads();
    chunks = 1;
    if (contexts < 2 * threads && rows > 8) chunks = std::min<int64_t>((rows + 3) / 4, (2 * threads + contexts - 1) / contexts);
    per_chunk = (rows + chunks - 1) / chunks;
    grain = work < (1 << 15) ? contexts * chunks : 1;
  }
};

template <typename T>
void decode_kernel(const QRows& q, const T* k, const T* v, const int64_t* table, const int64_t* lens,
                   float* out, float* lse, int64_t R, int64_t KV, int64_t G, int64_t D, int64_t N,
                   int64_t ps, int64_t P, float scale) {
  int64_t work = 0;
  for (int64_t r = 0; r < R; ++r) work += lens[r] * KV * G;
  const Split sp(R * KV, G, work);
  at::parallel_for(0, R * KV * sp.chunks, sp.grain, [&](int64_t begin, int64_t end) {
    Scratch w(D, sp.per_chunk);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t c = item % sp.chunks, h = (item / sp.chunks) % KV, r = item / (sp.chunks * KV);
      const int64_t g0 = c * sp.per_chunk, gn = std::min(G, g0 + sp.per_chunk) - g0;
      if (gn <= 0) continue;
      q.load(r, (h * G + g0) * D, gn * D, scale, w.qs.data());
      attend<T>(D, w.qs.data(), gn, k + h * N * ps * D, v + h * N * ps * D, table + r * P, lens[r], ps,
                w.kf.data(), w.vfb.data(), w.s.data(), w.acc.data(), w.m.data(), w.l.data());
      const int64_t row = (r * KV + h) * G + g0;
      for (int64_t g = 0; g < gn; ++g) {
        float* o = out + (row + g) * D;
        if (w.l[g] > 0.0f) {
          const float inv = 1.0f / w.l[g];
          for (int64_t d = 0; d < D; ++d) o[d] = w.acc[g * D + d] * inv;
          lse[row + g] = w.m[g] + std::log(w.l[g]);
        } else {  // an empty context (a cascade member whose suffix is empty): no weight at all
          for (int64_t d = 0; d < D; ++d) o[d] = 0.0f;
          lse[row + g] = -std::numeric_limits<float>::infinity();
        }
      }
    }
  });
}

// The members' queries stacked per kv head against one shared prefix, merged into their
// (out, lse) by log-sum-exp: softmax over prefix + suffix keys from the two partial results.
template <typename T>
void prefix_kernel(const QRows& q, const T* k, const T* v, const int64_t* pages, int64_t n, const int64_t* members,
                   int64_t M, float* out, float* lse, int64_t KV, int64_t G, int64_t D, int64_t N, int64_t ps,
                   float scale) {
  const int64_t rows = M * G;
  const Split sp(KV, rows, n * KV * rows);
  at::parallel_for(0, KV * sp.chunks, sp.grain, [&](int64_t begin, int64_t end) {
    Scratch w(D, sp.per_chunk);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t c = item % sp.chunks, h = item / sp.chunks;
      const int64_t j0 = c * sp.per_chunk, jn = std::min(rows, j0 + sp.per_chunk) - j0;
      if (jn <= 0) continue;
      for (int64_t j = 0; j < jn; ++j) {
        const int64_t mem = (j0 + j) / G, g = (j0 + j) % G;
        q.load(members[mem], (h * G + g) * D, D, scale, w.qs.data() + j * D);
      }
      attend<T>(D, w.qs.data(), jn, k + h * N * ps * D, v + h * N * ps * D, pages, n, ps,
                w.kf.data(), w.vfb.data(), w.s.data(), w.acc.data(), w.m.data(), w.l.data());
      for (int64_t j = 0; j < jn; ++j) {
        const int64_t mem = (j0 + j) / G, g = (j0 + j) % G;
        const int64_t idx = (members[mem] * KV + h) * G + g;
        const float lp = w.m[j] + std::log(w.l[j]);   // the prefix is never empty
        const float ls = lse[idx];
        const float mx = ls > lp ? ls : lp;
        const float ws = ls == -std::numeric_limits<float>::infinity() ? 0.0f : std::exp(ls - mx);
        const float wp = std::exp(lp - mx);
        const float inv = 1.0f / (ws + wp);
        const float wpl = wp / w.l[j];
        float* o = out + idx * D;
        for (int64_t d = 0; d < D; ++d) o[d] = (o[d] * ws + w.acc[j * D + d] * wpl) * inv;
        lse[idx] = mx + std::log(ws + wp);
      }
    }
  });
}

QRows check_q(const at::Tensor& q) {
  TORCH_CHECK(q.dim() == 3 && q.stride(2) == 1 && q.stride(1) == q.size(2), "q: [R, H, D] with contiguous [H, D] rows");
  const auto dt = q.scalar_type();
  TORCH_CHECK(dt == at::kFloat || dt == at::kBFloat16 || dt == at::kHalf, "q: float32, bfloat16 or float16");
  return QRows{q.data_ptr(), dt, q.stride(0)};
}

void check_cache(const at::Tensor& k_cache, const at::Tensor& v_cache, int64_t D) {
  TORCH_CHECK(k_cache.dim() == 4 && k_cache.is_contiguous() && v_cache.is_contiguous(), "caches: contiguous [KV, N, ps, D]");
  TORCH_CHECK(k_cache.sizes() == v_cache.sizes() && k_cache.scalar_type() == v_cache.scalar_type(), "k/v caches differ");
  TORCH_CHECK(k_cache.size(3) == D, "head dims of q and cache differ");
}

#define SG_DISPATCH_CACHE(cache, CALL)                                                  \
  switch (cache.scalar_type()) {                                                        \
    case at::kFloat: { using T = float; CALL; break; }                                  \
    case at::kBFloat16: { using T = at::BFloat16; CALL; break; }                        \
    case at::kHalf: { using T = at::Half; CALL; break; }                                \
    default: TORCH_CHECK(false, "KV cache dtype must be float32, bfloat16 or float16"); \
  }

}  // namespace

// q [R, H, D] (H = kv_heads x G); k_cache, v_cache [KV, N, ps, D]; table [R, P] int64; lens [R] int64.
// Returns out [R, KV, G, D] float32 and lse [R, KV, G] float32 (natural log).
std::vector<at::Tensor> paged_decode(at::Tensor q, at::Tensor k_cache, at::Tensor v_cache, at::Tensor table,
                                     at::Tensor lens, double scale) {
  const QRows qr = check_q(q);
  const int64_t R = q.size(0), D = q.size(2), KV = k_cache.size(0);
  check_cache(k_cache, v_cache, D);
  TORCH_CHECK(q.size(1) % KV == 0, "query heads must be a multiple of kv heads");
  TORCH_CHECK(table.scalar_type() == at::kLong && table.is_contiguous() && table.dim() == 2 && table.size(0) == R,
              "table: int64 [R, P]");
  TORCH_CHECK(lens.scalar_type() == at::kLong && lens.is_contiguous() && lens.numel() == R, "lens: int64 [R]");
  const int64_t G = q.size(1) / KV, N = k_cache.size(1), ps = k_cache.size(2), P = table.size(1);
  const int64_t* lp = lens.data_ptr<int64_t>();
  for (int64_t r = 0; r < R; ++r) TORCH_CHECK(lp[r] >= 0 && lp[r] <= P * ps, "context longer than its page table");
  auto out = at::empty({R, KV, G, D}, q.options().dtype(at::kFloat));
  auto lse = at::empty({R, KV, G}, q.options().dtype(at::kFloat));
  pybind11::gil_scoped_release no_gil;   // the engine thread must not stall the server's threads
  SG_DISPATCH_CACHE(k_cache, decode_kernel<T>(qr, k_cache.data_ptr<T>(), v_cache.data_ptr<T>(), table.data_ptr<int64_t>(),
                                              lp, out.data_ptr<float>(), lse.data_ptr<float>(), R, KV, G, D, N, ps, P,
                                              static_cast<float>(scale)));
  return {out, lse};
}

// Attends the first n tokens of `pages` ([P] int64) for the query rows `members` of q and
// merges the result into paged_decode's (out, lse) for those rows, in place.
void cascade_prefix(at::Tensor q, at::Tensor k_cache, at::Tensor v_cache, at::Tensor pages, int64_t n,
                    at::Tensor members, double scale, at::Tensor out, at::Tensor lse) {
  const QRows qr = check_q(q);
  const int64_t D = q.size(2), KV = k_cache.size(0);
  check_cache(k_cache, v_cache, D);
  const int64_t G = q.size(1) / KV, N = k_cache.size(1), ps = k_cache.size(2);
  TORCH_CHECK(pages.scalar_type() == at::kLong && pages.is_contiguous() && n > 0 && n <= pages.numel() * ps,
              "pages: int64, covering n > 0 tokens");
  TORCH_CHECK(members.scalar_type() == at::kLong && members.is_contiguous(), "members: int64");
  TORCH_CHECK(out.scalar_type() == at::kFloat && out.is_contiguous() && out.numel() == q.size(0) * KV * G * D &&
              lse.scalar_type() == at::kFloat && lse.is_contiguous() && lse.numel() == q.size(0) * KV * G,
              "out/lse: paged_decode's results for q");
  const int64_t* mp = members.data_ptr<int64_t>();
  for (int64_t i = 0; i < members.numel(); ++i) TORCH_CHECK(mp[i] >= 0 && mp[i] < q.size(0), "member row out of range");
  pybind11::gil_scoped_release no_gil;
  SG_DISPATCH_CACHE(k_cache, prefix_kernel<T>(qr, k_cache.data_ptr<T>(), v_cache.data_ptr<T>(), pages.data_ptr<int64_t>(),
                                              n, mp, members.numel(), out.data_ptr<float>(), lse.data_ptr<float>(),
                                              KV, G, D, N, ps, static_cast<float>(scale)));
}
