"""Decode attention that reads the KV pages in place: a C++ kernel built with torch's extension
mechanism (torch.utils.cpp_extension.load_inline) on first use, cached on disk.

One work item is (query row, kv head, chunk of that head's query heads). It walks the row's
page table page by page, converts each page's K and V to float32 once and uses them for every
query head of the GQA group (and, for a cascade prefix, for the stacked queries of every request
that shares it), with an online softmax, so nothing is gathered or padded. It returns the
attention output and each query's log-sum-exp, which is what merging a cascade prefix with
its suffix needs. Work items are spread with at::parallel_for (torch's OpenMP pool, so
torch.set_num_threads governs it).

Where the build fails (no compiler, no headers, a broken toolchain) `load_kernel` returns None
and says so once in the log; the caller then uses the gather path (attention_torch.py).
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import threading
from collections.abc import Callable

import torch

log = logging.getLogger("sgrun.engine")

_SOURCE = r"""
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
inline float exp_nonpos(float x) {
  x = x < -87.0f ? -87.0f : x;
  const float t = x * 1.4426950408889634f;
  const float magic = 12582912.0f;
  const float rounded = (t + magic) - magic;
  const float f = (t - rounded) * 0.6931471805599453f;
  float p = 1.0f / 5040.0f;
  p = p * f + 1.0f / 720.0f;
  p = p * f + 1.0f / 120.0f;
  p = p * f + 1.0f / 24.0f;
  p = p * f + 1.0f / 6.0f;
  p = p * f + 0.5f;
  p = p * f + 1.0f;
  p = p * f + 1.0f;
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
  vf16 p = splat16(1.0f / 5040.0f);
  p = p * f + 1.0f / 720.0f;
  p = p * f + 1.0f / 120.0f;
  p = p * f + 1.0f / 24.0f;
  p = p * f + 1.0f / 6.0f;
  p = p * f + 0.5f;
  p = p * f + 1.0f;
  p = p * f + 1.0f;
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

template <typename T>
void decode_kernel(const float* q, const T* k, const T* v, const int64_t* table, const int64_t* lens,
                   float* out, float* lse, int64_t R, int64_t KV, int64_t G, int64_t D, int64_t N,
                   int64_t ps, int64_t P, float scale) {
  // Split a head's query rows into chunks only when rows x heads leave threads idle (a cascade
  // prefix is one row with many stacked queries).
  const int64_t threads = at::get_num_threads();
  int64_t chunks = 1;
  if (R * KV < 4 * threads && G > 8) {
    chunks = std::min<int64_t>((G + 7) / 8, (4 * threads + R * KV - 1) / (R * KV));
  }
  const int64_t per_chunk = (G + chunks - 1) / chunks;
  at::parallel_for(0, R * KV * chunks, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> kf(16 * D), vfb(16 * D), qs(per_chunk * D), s(16), acc(per_chunk * D);
    std::vector<float> m(per_chunk), l(per_chunk);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t c = item % chunks, h = (item / chunks) % KV, r = item / (chunks * KV);
      const int64_t g0 = c * per_chunk, gn = std::min(G, g0 + per_chunk) - g0;
      if (gn <= 0) continue;
      const int64_t row = (r * KV + h) * G + g0;
      for (int64_t i = 0; i < gn * D; ++i) qs[i] = q[row * D + i] * scale;
      const T* kh = k + h * N * ps * D;
      const T* vh = v + h * N * ps * D;
      const int64_t* pages = table + r * P;
      const int64_t n = lens[r];
      switch (D) {
        case 16: attend_rows<T, 1>(qs.data(), gn, kh, vh, pages, n, ps, kf.data(), vfb.data(), s.data(), acc.data(), m.data(), l.data()); break;
        case 32: attend_rows<T, 2>(qs.data(), gn, kh, vh, pages, n, ps, kf.data(), vfb.data(), s.data(), acc.data(), m.data(), l.data()); break;
        case 64: attend_rows<T, 4>(qs.data(), gn, kh, vh, pages, n, ps, kf.data(), vfb.data(), s.data(), acc.data(), m.data(), l.data()); break;
        case 128: attend_rows<T, 8>(qs.data(), gn, kh, vh, pages, n, ps, kf.data(), vfb.data(), s.data(), acc.data(), m.data(), l.data()); break;
        default: attend_rows_any<T>(qs.data(), gn, D, kh, vh, pages, n, ps, kf.data(), vfb.data(), s.data(), acc.data(), m.data(), l.data());
      }
      for (int64_t g = 0; g < gn; ++g) {
        float* o = out + (row + g) * D;
        if (l[g] > 0.0f) {
          const float inv = 1.0f / l[g];
          for (int64_t d = 0; d < D; ++d) o[d] = acc[g * D + d] * inv;
          lse[row + g] = m[g] + std::log(l[g]);
        } else {  // an empty context (a cascade suffix of length 0): no weight at all
          for (int64_t d = 0; d < D; ++d) o[d] = 0.0f;
          lse[row + g] = -std::numeric_limits<float>::infinity();
        }
      }
    }
  });
}

}  // namespace

// q [R, KV, G, D] float32; k_cache, v_cache [KV, N, ps, D]; table [R, P] int64; lens [R] int64.
// Returns out [R, KV, G, D] float32 and lse [R, KV, G] float32.
std::vector<at::Tensor> paged_decode(at::Tensor q, at::Tensor k_cache, at::Tensor v_cache, at::Tensor table,
                                     at::Tensor lens, double scale) {
  TORCH_CHECK(q.dim() == 4 && q.scalar_type() == at::kFloat && q.is_contiguous(), "q: contiguous float32 [R, KV, G, D]");
  TORCH_CHECK(k_cache.dim() == 4 && k_cache.is_contiguous() && v_cache.is_contiguous(), "caches: contiguous [KV, N, ps, D]");
  TORCH_CHECK(k_cache.sizes() == v_cache.sizes() && k_cache.scalar_type() == v_cache.scalar_type(), "k/v caches differ");
  TORCH_CHECK(table.scalar_type() == at::kLong && table.is_contiguous() && table.dim() == 2, "table: int64 [R, P]");
  TORCH_CHECK(lens.scalar_type() == at::kLong && lens.is_contiguous() && lens.numel() == q.size(0), "lens: int64 [R]");
  const int64_t R = q.size(0), KV = q.size(1), G = q.size(2), D = q.size(3);
  const int64_t N = k_cache.size(1), ps = k_cache.size(2), P = table.size(1);
  TORCH_CHECK(k_cache.size(0) == KV && k_cache.size(3) == D && table.size(0) == R, "shape mismatch");
  const int64_t* lp = lens.data_ptr<int64_t>();
  for (int64_t r = 0; r < R; ++r) TORCH_CHECK(lp[r] >= 0 && lp[r] <= P * ps, "context longer than its page table");
  pybind11::gil_scoped_release no_gil;   // the engine thread must not stall the server's threads
  auto out = at::empty({R, KV, G, D}, q.options());
  auto lse = at::empty({R, KV, G}, q.options());
  const float sc = static_cast<float>(scale);
  const auto dt = k_cache.scalar_type();
  if (dt == at::kFloat) {
    decode_kernel<float>(q.data_ptr<float>(), k_cache.data_ptr<float>(), v_cache.data_ptr<float>(),
                         table.data_ptr<int64_t>(), lp, out.data_ptr<float>(), lse.data_ptr<float>(), R, KV, G, D, N, ps, P, sc);
  } else if (dt == at::kBFloat16) {
    decode_kernel<at::BFloat16>(q.data_ptr<float>(), k_cache.data_ptr<at::BFloat16>(), v_cache.data_ptr<at::BFloat16>(),
                                table.data_ptr<int64_t>(), lp, out.data_ptr<float>(), lse.data_ptr<float>(), R, KV, G, D, N, ps, P, sc);
  } else if (dt == at::kHalf) {
    decode_kernel<at::Half>(q.data_ptr<float>(), k_cache.data_ptr<at::Half>(), v_cache.data_ptr<at::Half>(),
                            table.data_ptr<int64_t>(), lp, out.data_ptr<float>(), lse.data_ptr<float>(), R, KV, G, D, N, ps, P, sc);
  } else {
    TORCH_CHECK(false, "KV cache dtype must be float32, bfloat16 or float16");
  }
  return {out, lse};
}
"""

_FLAGS = ["-O3", "-fopenmp", "-march=native", "-std=c++17"]

# Tests set this to simulate a machine where the build fails.
FORCE_BUILD_FAILURE_ENV = "SGRUN_CPP_ATTENTION_FAIL"

_lock = threading.Lock()
_state: dict[str, object] = {}


def _build_name() -> str:
    """One build per source, flags, torch version and CPU (the build uses -march=native, so a
    cache shared with a different CPU must not reuse it)."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu += next((line for line in f if line.startswith("flags")), "")
    except OSError:
        pass
    key = "\n".join([_SOURCE, " ".join(_FLAGS), torch.__version__, cpu])
    return "sgrun_paged_decode_" + hashlib.sha256(key.encode()).hexdigest()[:12]


def build_dir() -> str:
    from sgrun.models.fetch import cache_dir
    path = cache_dir() / "torch_extensions" / _build_name()
    path.mkdir(parents=True, exist_ok=True)
    return str(path)


def load_kernel() -> Callable | None:
    """The compiled `paged_decode` op, building it on first use; None (logged once) where it
    cannot be built. Thread-safe; concurrent processes share the build through torch's lock file."""
    with _lock:
        if "op" in _state:
            return _state["op"]  # type: ignore[return-value]
        op = None
        try:
            if os.environ.get(FORCE_BUILD_FAILURE_ENV):
                raise RuntimeError(f"build disabled by {FORCE_BUILD_FAILURE_ENV}")
            from torch.utils.cpp_extension import load_inline
            module = load_inline(_build_name(), cpp_sources=_SOURCE, functions=["paged_decode"],
                                 extra_cflags=_FLAGS, extra_ldflags=["-fopenmp"], build_directory=build_dir(),
                                 verbose=False)
            op = module.paged_decode
        except Exception as exc:  # any build or load failure: the gather path still works
            log.warning("C++ paged decode attention is unavailable (%s); decode attention gathers pages "
                        "with the torch path instead", str(exc).strip().splitlines()[-1] if str(exc).strip() else
                        type(exc).__name__)
        _state["op"] = op
        return op


def reset_for_tests() -> None:
    """Forget the loaded op so the next load_kernel() runs the build (or its failure) again."""
    with _lock:
        _state.clear()
