// A torch-free test driver for the attention kernels' `simd` paths (sgrun/kernels/cpu/
// paged_chunk_<isa>.cpp for decode, prefill_attention_<isa>.cpp for prefill), so an ISA this
// machine cannot run is still tested: tests/test_kernel_driver.py cross-compiles it for aarch64
// (NEON) and runs it under qemu-aarch64, and compiles it natively for avx2. The sources' few
// torch names come from tests/kernel_driver/torch_shim. It draws random pages, keys, values and
// queries (a fixed LCG) for float32 and bf16 pools and every head dim the paths take, checks the
// outputs (and the decode chunk's log-sum-exp) against a float64 reference, and checks bitwise:
// a decode head alone = the same head in a pass of several, prefill rows of a whole prompt = the
// same rows computed chunk by chunk. One line per check, "ALL OK" at the end; exits 1 on a failure.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>
#include <torch/extension.h>   // torch_shim/: the few torch names the kernels use (the real build gets torch_headers.cpp)
#include "paged_rows.cpp"
#include "paged_chunk_avx2.cpp"
#include "paged_chunk_neon.cpp"
#include "prefill_attention_common.cpp"
#include "prefill_attention_avx2.cpp"
#include "prefill_attention_neon.cpp"

#if !defined(SG_SIMD_CHUNK) || !defined(SG_PREFILL_SIMD)
#error "no simd attention path for this target"
#endif

namespace {

uint64_t lcg = 0x9E3779B97F4A7C15ull;
double uniform() {   // [0, 1)
  lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
  return static_cast<double>(lcg >> 11) / 9007199254740992.0;
}
double normal() { return std::sqrt(-2.0 * std::log(uniform() + 1e-300)) * std::cos(6.283185307179586 * uniform()); }

std::vector<int64_t> shuffled(int64_t n) {
  std::vector<int64_t> p(n);
  for (int64_t i = 0; i < n; ++i) p[i] = i;
  for (int64_t i = n - 1; i > 0; --i) std::swap(p[i], p[static_cast<int64_t>(uniform() * (i + 1))]);
  return p;
}

int failures = 0;
void check(bool ok, const std::string& what, double err) {
  std::printf("%s %s max_err=%.3g\n", ok ? "ok  " : "FAIL", what.c_str(), err);
  if (!ok) ++failures;
}

// Pool elements: float, at::BFloat16 (decode), uint16_t bf16 bits (prefill), at::Half (a float32
// model's fp16 KV cache, both).
float as_float(float x) { return x; }
float as_float(at::BFloat16 x) { return static_cast<float>(x); }
float as_float(at::Half x) { return static_cast<float>(x); }
float as_float(uint16_t x) { at::BFloat16 b; b.x = x; return static_cast<float>(b); }
template <class T> T from_float(float f);
template <> float from_float<float>(float f) { return f; }
template <> at::BFloat16 from_float<at::BFloat16>(float f) { return at::BFloat16(f); }
template <> uint16_t from_float<uint16_t>(float f) { return at::BFloat16(f).x; }
template <> at::Half from_float<at::Half>(float f) { return at::Half(f); }

// Decode: chunk_simd::chunk over tokens [t0, t1) of a paged context, for 1..5 heads in one pass.
template <class T, int C>
void check_chunk(const char* dtype) {
  constexpr int64_t D = 16 * C, ps = 7, pages = 64, limit = 300;
  std::vector<T> k(pages * ps * D), v(pages * ps * D);
  for (auto& x : k) x = from_float<T>(static_cast<float>(2 * normal()));
  for (auto& x : v) x = from_float<T>(static_cast<float>(normal()));
  const std::vector<int64_t> table = shuffled(pages);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const int64_t spans[3][2] = {{0, 37}, {256, 300}, {5, 6}};
  for (const auto& span : spans) {
    const ChunkSource<T> src{k.data(), v.data(), table.data(), ps, span[0], span[1], limit, D};
    for (int gn = 1; gn <= 5; ++gn) {
      std::vector<float> q(gn * D), m(gn, -INFINITY), l(gn, 0.0f), acc(gn * D, 0.0f);
      for (auto& x : q) x = static_cast<float>(normal());
      chunk_simd::chunk<T, C>(q.data(), gn, src, scale, m.data(), l.data(), acc.data());
      double err = 0.0;
      bool alone_same = true;
      for (int h = 0; h < gn; ++h) {
        std::vector<double> s;
        double mx = -INFINITY;
        for (int64_t t = span[0]; t < span[1]; ++t) {
          const T* kr = k.data() + (table[t / ps] * ps + t % ps) * D;
          double dot = 0.0;
          for (int64_t d = 0; d < D; ++d) dot += static_cast<double>(q[h * D + d]) * as_float(kr[d]);
          s.push_back(dot * scale);
          mx = std::max(mx, s.back());
        }
        double sum = 0.0;
        std::vector<double> o(D, 0.0);
        for (int64_t t = span[0]; t < span[1]; ++t) {
          const double p = std::exp(s[t - span[0]] - mx);
          sum += p;
          const T* vr = v.data() + (table[t / ps] * ps + t % ps) * D;
          for (int64_t d = 0; d < D; ++d) o[d] += p * as_float(vr[d]);
        }
        err = std::max(err, std::abs(m[h] + std::log(static_cast<double>(l[h])) - (mx + std::log(sum))));
        for (int64_t d = 0; d < D; ++d)
          err = std::max(err, std::abs(acc[h * D + d] / l[h] - o[d] / sum) / (1.0 + std::abs(o[d] / sum)));
        float m1 = -INFINITY, l1 = 0.0f;
        std::vector<float> acc1(D, 0.0f);
        chunk_simd::chunk<T, C>(q.data() + h * D, 1, src, scale, &m1, &l1, acc1.data());
        alone_same = alone_same && m1 == m[h] && l1 == l[h] &&
                     std::memcmp(acc1.data(), acc.data() + h * D, D * sizeof(float)) == 0;
      }
      const std::string what = std::string("decode ") + dtype + " D=" + std::to_string(D) + " heads=" +
                               std::to_string(gn) + " tokens [" + std::to_string(span[0]) + "," +
                               std::to_string(span[1]) + ")";
      check(err < 2e-5, what + " vs float64", err);
      check(alone_same, what + " each head alone bitwise", 0.0);
    }
  }
}

// Prefill: attend_packed with the simd path over 3 segments (a whole prompt, a chunk after
// earlier context, one row), GQA 6 query heads over 2 kv heads, shuffled pages of 5 tokens;
// causal (window 0) or under a sliding window (the row at p attends keys p - window < j <= p).
// E: q's and out's element; C: the pool's (E, or at::Half under float queries).
template <class E, class C = E>
void check_prefill(int64_t D, const char* dtype, int64_t window = 0) {
  constexpr int64_t H = 6, KV = 2, ps = 5, S = 3;
  const int64_t q_len[S] = {37, 77, 1}, ctx_len[S] = {37, 203, 64};
  int64_t width = 0, total_pages = 0, T = 0;
  for (int64_t s = 0; s < S; ++s) {
    width = std::max(width, (ctx_len[s] + ps - 1) / ps);
    total_pages += (ctx_len[s] + ps - 1) / ps;
    T += q_len[s];
  }
  const int64_t pages = total_pages + 2;
  const std::vector<int64_t> order = shuffled(pages);
  std::vector<int64_t> table(S * width, 0), q_start(S);
  for (int64_t s = 0, next = 0, row = 0; s < S; ++s) {
    for (int64_t i = 0; i < (ctx_len[s] + ps - 1) / ps; ++i) table[s * width + i] = order[next++];
    q_start[s] = row;
    row += q_len[s];
  }
  std::vector<C> kc(KV * pages * ps * D), vc(KV * pages * ps * D);
  std::vector<E> q(T * H * D), out(T * H * D);
  for (auto& x : kc) x = from_float<C>(static_cast<float>(2 * normal()));
  for (auto& x : vc) x = from_float<C>(static_cast<float>(normal()));
  for (auto& x : q) x = from_float<E>(static_cast<float>(normal()));
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const int64_t head_stride = pages * ps * D, page_stride = ps * D;
  const Segments seg{table.data(), width, q_start.data(), q_len, ctx_len, S};
  attend_packed<simd::Path<E, C>>(q.data(), H * D, kc.data(), vc.data(), head_stride, page_stride, ps, seg, H, KV,
                                  D, scale, out.data(), H * D, window);
  const bool bf16 = sizeof(E) == 2;
  double err = 0.0;
  for (int64_t s = 0; s < S; ++s)
    for (int64_t t = 0; t < q_len[s]; ++t)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t pos = ctx_len[s] - q_len[s] + t, kvh = h / (H / KV);
        const E* qr = q.data() + ((q_start[s] + t) * H + h) * D;
        auto at = [&](const std::vector<C>& c, int64_t key) {
          return c.data() + kvh * head_stride + table[s * width + key / ps] * page_stride + (key % ps) * D;
        };
        const int64_t lo = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
        std::vector<double> sc(pos + 1), o(D, 0.0);
        double mx = -INFINITY, sum = 0.0;
        for (int64_t c = lo; c <= pos; ++c) {
          double dot = 0.0;
          for (int64_t d = 0; d < D; ++d) dot += static_cast<double>(as_float(qr[d])) * as_float(at(kc, c)[d]);
          sc[c] = dot * scale;
          mx = std::max(mx, sc[c]);
        }
        for (int64_t c = lo; c <= pos; ++c) {
          const double p = std::exp(sc[c] - mx);
          sum += p;
          for (int64_t d = 0; d < D; ++d) o[d] += p * as_float(at(vc, c)[d]);
        }
        const E* orow = out.data() + ((q_start[s] + t) * H + h) * D;
        for (int64_t d = 0; d < D; ++d) {   // bf16: the output's own rounding (2^-9 relative) and a margin
          const double want = o[d] / sum, e = std::abs(as_float(orow[d]) - want);
          err = std::max(err, bf16 ? e / (1e-3 + std::abs(want)) : e);
        }
      }
  const std::string what = std::string("prefill ") + dtype + " D=" + std::to_string(D) +
                           (window > 0 ? " window=" + std::to_string(window) : std::string());
  check(err < (bf16 ? 5e-3 : 1e-5), what + " vs float64", err);
  // Segment 1 again as two chunks (41 rows, then 36 attending them from the pages; tiles of 6
  // rows cut elsewhere): bitwise equal.
  std::vector<E> out2(77 * H * D);
  for (int part = 0; part < 2; ++part) {
    const int64_t qs = part == 0 ? 0 : 41, ql[1] = {part == 0 ? 41 : 36}, cl[1] = {203 - 77 + qs + ql[0]};
    const Segments one{table.data() + width, width, &qs, ql, cl, 1};
    attend_packed<simd::Path<E, C>>(q.data() + q_start[1] * H * D, H * D, kc.data(), vc.data(), head_stride,
                                    page_stride, ps, one, H, KV, D, scale, out2.data(), H * D, window);
  }
  check(std::memcmp(out2.data(), out.data() + q_start[1] * H * D, out2.size() * sizeof(E)) == 0,
        what + " chunked = whole bitwise", 0.0);
}

}  // namespace

int main() {
  std::printf("attention: decode %s, prefill %s\n", SG_SIMD_CHUNK, SG_PREFILL_SIMD);
  check_chunk<float, 1>("float32");
  check_chunk<float, 4>("float32");
  check_chunk<float, 8>("float32");
  check_chunk<at::BFloat16, 1>("bf16");
  check_chunk<at::BFloat16, 2>("bf16");
  check_chunk<at::BFloat16, 4>("bf16");
  check_chunk<at::BFloat16, 8>("bf16");
  check_chunk<at::Half, 1>("float16");
  check_chunk<at::Half, 4>("float16");
  check_chunk<at::Half, 8>("float16");
  for (int64_t D : {16, 64, 128}) {
    check_prefill<float>(D, "float32");
    check_prefill<uint16_t>(D, "bf16");
    check_prefill<float, at::Half>(D, "float16 pool");
  }
  // Sliding windows smaller than a 16-key step, than a 64-key block, and wider than the contexts.
  for (int64_t window : {3, 40, 100, 500}) {
    check_prefill<float>(64, "float32", window);
    check_prefill<uint16_t>(16, "bf16", window);
  }
  if (failures) {
    std::printf("%d FAILED\n", failures);
    return 1;
  }
  std::printf("ALL OK\n");
  return 0;
}
