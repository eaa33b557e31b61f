// A torch-free test driver for the `simd` matmul tiles (sgrun/kernels/cpu/matmul_*.cpp), so a
// level this machine cannot run natively is still tested: tests/test_kernel_driver.py
// cross-compiles it for aarch64 (neon, neon_dotprod) and runs it under qemu-aarch64, and
// compiles it natively for avx2. It draws random int4 / int8 / bf16 weights and activations
// (a fixed LCG), computes a float64 reference of what each tile promises, runs the tiles over
// every row block the driver's tiling makes (row counts 1..11), and checks each output against
// the reference and each row bitwise against the same row computed alone. The int4 panel
// (matmul_panel.cpp) and the vector quantizer of float32 activations are held to the tile's and
// the generic loop's bits. Prints one line per check and "ALL OK" at the end; exits 1 on the
// first failure.
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <thread>
#include "thread_team.cpp"
#include "matmul_common.cpp"
#include "matmul_avx2.cpp"
#include "matmul_neon.cpp"
#include "matmul_panel.cpp"

#ifndef SGRUN_SIMD_TILES
#error "no simd tiles for this target"
#endif

namespace {

uint64_t lcg = 0x9E3779B97F4A7C15ull;
double uniform() {   // [0, 1)
  lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
  return static_cast<double>(lcg >> 11) / 9007199254740992.0;
}
double normal() { return std::sqrt(-2.0 * std::log(uniform() + 1e-300)) * std::cos(6.283185307179586 * uniform()); }

uint16_t float_to_half(float f) {   // round to nearest even, normal range only (the test's values)
  uint32_t b;
  std::memcpy(&b, &f, 4);
  const uint32_t sign = (b >> 16) & 0x8000;
  int32_t exp = static_cast<int32_t>((b >> 23) & 0xFF) - 127 + 15;
  uint32_t mant = b & 0x7FFFFF;
  if (exp <= 0) return static_cast<uint16_t>(sign);
  uint32_t h = (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  const uint32_t rest = mant & 0x1FFF;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;
  return static_cast<uint16_t>(sign | h);
}
uint16_t float_to_bf16(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return static_cast<uint16_t>((b + 0x7FFF + ((b >> 16) & 1)) >> 16);
}

// y[M, N] through the driver's tiling (row blocks of kRowBlock, unit of two column blocks), the
// units split over thread_team.cpp's workers (3 threads, one unit per chunk at least) as matmul.cpp
// splits them, so the team runs on every target this driver does (aarch64 under qemu included).
template <int RowBlock = simd::kRowBlock, int TwoBlockRows = simd::kTwoBlockRows, class Tile>
void run_tiles(int64_t m, int64_t blocks, Tile tile) {
  team::parallel_for(3, (blocks + 1) / 2, 1, [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u)
      for (int64_t r = 0; r < m; r += RowBlock)
        with_rows<RowBlock, TwoBlockRows>(m - r, 2 * u + 1 < blocks, [&](auto rows, auto nb, int64_t first) {
          tile(rows, nb, 2 * u + first, r);
        });
  });
}

constexpr int64_t kRows = 11;   // every row block size of the tiling, and a remainder
int failures = 0;
void check(bool ok, const char* what, const char* how, double err) {
  std::printf("%s %s %s m=%lld max_err=%.3g\n", ok ? "ok  " : "FAIL", what, how, static_cast<long long>(kRows), err);
  if (!ok) ++failures;
}

// multiply(m, first_row, y) writes rows first_row.. of the product; ref(r, i) is output (r, i) in
// float64. Checks all kRows rows at once against ref (relative to the largest |ref|), and each row
// alone bitwise against its row in the batch.
template <class Multiply, class Ref>
void check_product(const char* what, int64_t n, Multiply multiply, Ref ref, double tol) {
  std::vector<float> full(kRows * n), one(n);
  multiply(kRows, 0, full.data());
  double err = 0, mag = 0;
  bool invariant = true;
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t i = 0; i < n; ++i) {
      const double want = ref(r, i);
      err = std::fmax(err, std::fabs(want - full[r * n + i]));
      mag = std::fmax(mag, std::fabs(want));
    }
    multiply(1, r, one.data());
    invariant = invariant && std::memcmp(one.data(), full.data() + r * n, n * sizeof(float)) == 0;
  }
  check(err <= tol * mag, what, "vs float64", err);
  check(invariant, what, "rows bitwise alone = batched", 0);
}

void test_int4(int64_t n, int64_t k) {
  const int64_t blocks = n / LANES, groups = k / GROUP;
  std::vector<uint8_t> code(n * k), packed(n * k / 2);
  std::vector<uint16_t> scales(n * groups * 2);
  std::vector<double> s(n * groups), mn(n * groups);
  for (auto& c : code) c = static_cast<uint8_t>(uniform() * 16) & 15;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t g = 0; g < groups; ++g) {
      const uint16_t hs = float_to_half(static_cast<float>(uniform() * 0.02 + 1e-3));
      const uint16_t hm = float_to_half(static_cast<float>(-uniform() * 0.15));
      s[i * groups + g] = half_to_float(hs);
      mn[i * groups + g] = half_to_float(hm);
      const int64_t blk = i / LANES, lane = i % LANES;
      scales[((blk * groups + g) * 2 + 0) * LANES + lane] = hs;
      scales[((blk * groups + g) * 2 + 1) * LANES + lane] = hm;
    }
  for (int64_t i = 0; i < n; ++i)   // [N/16, K/2, 16], low nibble = even k
    for (int64_t p = 0; p < k / 2; ++p)
      packed[((i / LANES) * (k / 2) + p) * LANES + i % LANES] =
          static_cast<uint8_t>(code[i * k + 2 * p] | (code[i * k + 2 * p + 1] << 4));
  std::vector<float> x(kRows * k);
  for (auto& v : x) v = static_cast<float>(normal());
  QuantRows qx;
  quantize_rows(kRows, k, [&](int64_t r, int64_t i) { return x[r * k + i]; }, qx);
  const int64_t cs = k / 2 * LANES, ss = groups * 2 * LANES;
  auto multiply = [&](int64_t m, int64_t row0, float* y) {
    run_tiles(m, blocks, [&](auto rows, auto nb, int64_t b, int64_t r) {
      simd::int4_q8_tile<decltype(rows)::value, decltype(nb)::value>(
          packed.data() + b * cs, scales.data() + b * ss, cs, ss, qx.q.data() + (row0 + r) * k,
          qx.d.data() + (row0 + r) * groups, qx.sum.data() + (row0 + r) * groups, k, groups, y + r * n + b * LANES, n);
    });
  };
  // Several callers at once: one job runs on the team, the others inline; every result is the same.
  std::vector<float> alone(kRows * n);
  multiply(kRows, 0, alone.data());
  bool same = true;
  std::vector<std::thread> callers;
  std::vector<std::vector<float>> outs(3, std::vector<float>(kRows * n));
  for (int t = 0; t < 3; ++t)
    callers.emplace_back([&, t] { for (int rep = 0; rep < 20; ++rep) multiply(kRows, 0, outs[t].data()); });
  for (auto& c : callers) c.join();
  for (const auto& o : outs) same = same && std::memcmp(o.data(), alone.data(), alone.size() * sizeof(float)) == 0;
  check(same, "int4_q8", "thread team, 3 callers at once = alone", 0);
  check_product("int4_q8", n, multiply, [&](int64_t r, int64_t i) {
    double ref = 0;   // the quantized product (both terms with the quantized x, d * q)
    for (int64_t g = 0; g < groups; ++g) {
      double dot = 0, sum = 0;
      for (int64_t j = 0; j < GROUP; ++j) {
        dot += static_cast<double>(code[i * k + g * GROUP + j]) * qx.q[r * k + g * GROUP + j];
        sum += qx.q[r * k + g * GROUP + j];
      }
      const double d = qx.d[r * groups + g];
      ref += dot * d * s[i * groups + g] + sum * d * mn[i * groups + g];
    }
    return ref;
  }, 2e-5);
}

void test_int8(int64_t n, int64_t k) {
  const int64_t blocks = n / LANES, groups = (k + GROUP - 1) / GROUP;
  std::vector<int8_t> q(n * k), blocked(n * k);
  std::vector<float> scale(n * groups), x(kRows * k);   // scale: [N, groups], fp16 values
  std::vector<uint16_t> blocked_scale(n * groups);
  for (auto& v : q) v = static_cast<int8_t>(static_cast<int>(uniform() * 255) - 127);
  for (auto& v : scale) v = half_to_float(float_to_half(static_cast<float>(uniform() * 0.01 + 1e-3)));
  for (auto& v : x) v = static_cast<float>(normal());
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < k; ++j) blocked[((i / LANES) * k + j) * LANES + i % LANES] = q[i * k + j];
    for (int64_t g = 0; g < groups; ++g)   // [N/16, groups, 16]
      blocked_scale[((i / LANES) * groups + g) * LANES + i % LANES] = float_to_half(scale[i * groups + g]);
  }
  const int64_t qs = k * LANES, ss = groups * LANES;
  auto multiply = [&](int64_t m, int64_t row0, float* y) {
    run_tiles(m, blocks, [&](auto rows, auto nb, int64_t b, int64_t r) {
      simd::int8_f32_tile<decltype(rows)::value, decltype(nb)::value>(blocked.data() + b * qs, qs, x.data() + (row0 + r) * k,
                                                                      k, blocked_scale.data() + b * ss, ss,
                                                                      y + r * n + b * LANES, n);
    });
  };
  check_product("int8_f32", n, multiply, [&](int64_t r, int64_t i) {
    double ref = 0;
    for (int64_t j = 0; j < k; ++j) ref += static_cast<double>(q[i * k + j]) * x[r * k + j] * scale[i * groups + j / GROUP];
    return ref;
  }, 1e-5);
}

// The int8 lm_head's integer tile (int8_x16_tile) against its exact model: x rounded to 16-bit
// integers per group (matmul_common.cpp's quantize16_rows), the exact integer dot per column and
// group, then acc = fma(float(dot), s * d, acc) group by group: bit for bit, every row count (x86's
// tiles compute the same bits; tests/test_cpu_matmul.py holds them to it). Codes span -128..127.
void test_int8_x16(int64_t n, int64_t k) {
  const int64_t blocks = n / LANES, groups = k / GROUP;
  std::vector<int8_t> q(n * k), blocked(n * k);
  std::vector<uint16_t> blocked_scale(n * groups);
  std::vector<float> x(kRows * k);
  for (auto& v : q) v = static_cast<int8_t>(static_cast<int>(uniform() * 256) - 128);
  for (auto& v : x) v = static_cast<float>(normal() * 3);
  for (int64_t j = 0; j < GROUP; ++j) x[GROUP + j] = 0.0f;   // an all-zero group: d = 0
  // Row 0's first group: X = -128 (low byte -128) against codes -128, the products whose int16 pair
  // sum (2 x 16384) would overflow: the plain NEON dot must widen before it adds.
  x[0] = 1.0f;
  for (int64_t j = 1; j < GROUP; ++j) x[j] = -128.0f / 32512.0f;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 1; j < GROUP; ++j) q[i * k + j] = -128;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < k; ++j) blocked[((i / LANES) * k + j) * LANES + i % LANES] = q[i * k + j];
    for (int64_t g = 0; g < groups; ++g)
      blocked_scale[((i / LANES) * groups + g) * LANES + i % LANES] = float_to_half(static_cast<float>(uniform() * 0.01 + 1e-3));
  }
  Quant16Rows qx;
  quantize16_rows(kRows, k, x.data(), qx);
  if (qx.lo[1] != -128 || qx.hi[1] != 0) {
    std::printf("FAIL int8_x16: the overflow case did not quantize to lo = -128\n");
    ++failures;
  }
  const int64_t qs = k * LANES, ss = groups * LANES;
  std::vector<float> want(kRows * n);
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t i = 0; i < n; ++i) {
      float acc = 0.0f;
      for (int64_t g = 0; g < groups; ++g) {
        int32_t dot = 0;
        for (int64_t j = 0; j < GROUP; ++j) dot += int32_t(q[i * k + g * GROUP + j]) * qx.x16[r * k + g * GROUP + j];
        const float s = half_to_float(blocked_scale[((i / LANES) * groups + g) * LANES + i % LANES]);
        acc = std::fma(static_cast<float>(dot), s * qx.d[r * groups + g], acc);
      }
      want[r * n + i] = acc;
    }
  int bad = 0;
  for (int64_t m = 1; m <= kRows; ++m) {
    std::vector<float> y(m * n);
    run_tiles<simd::kX16RowBlock, simd::kX16TwoBlockRows>(m, blocks, [&](auto rows, auto nb, int64_t b, int64_t r) {
      simd::int8_x16_tile<decltype(rows)::value, decltype(nb)::value>(
          blocked.data() + b * qs, qs, qx.x16.data() + r * k, qx.hi.data() + r * k, qx.lo.data() + r * k,
          qx.d.data() + r * groups, qx.corr.data() + r * groups, k, groups, blocked_scale.data() + b * ss, ss,
          y.data() + r * n + b * LANES, n);
    });
    for (int64_t e = 0; e < m * n; ++e) bad += std::memcmp(&y[e], &want[e], sizeof(float)) != 0;
  }
  std::printf("int8_x16 n=%lld k=%lld: %s (%d outputs differ from the exact model)\n", static_cast<long long>(n),
              static_cast<long long>(k), bad ? "FAIL" : "ok", bad);
  if (bad) ++failures;
}

void test_bf16(int64_t n, int64_t k) {
  const int64_t blocks = n / LANES;
  std::vector<uint16_t> w(n * k), packed(n * k), x(kRows * k);
  for (auto& v : w) v = float_to_bf16(static_cast<float>(normal() * 0.05));
  for (auto& v : x) v = float_to_bf16(static_cast<float>(normal()));
  for (int64_t i = 0; i < n; ++i)   // [N/16, K/2, 16, 2]
    for (int64_t j = 0; j < k; ++j) packed[(((i / LANES) * (k / 2) + j / 2) * LANES + i % LANES) * 2 + j % 2] = w[i * k + j];
  const uint32_t* wp = reinterpret_cast<const uint32_t*>(packed.data());
  const int64_t ws = k / 2 * LANES;
  auto multiply = [&](int64_t m, int64_t row0, float* y) {
    run_tiles(m, blocks, [&](auto rows, auto nb, int64_t b, int64_t r) {
      simd::bf16_f32_tile<decltype(rows)::value, decltype(nb)::value>(wp + b * ws, ws, x.data() + (row0 + r) * k, k,
                                                                      y + r * n + b * LANES, n);
    });
  };
  check_product("bf16_f32", n, multiply, [&](int64_t r, int64_t i) {
    double ref = 0;
    for (int64_t j = 0; j < k; ++j) ref += static_cast<double>(bf16_to_float(w[i * k + j])) * bf16_to_float(x[r * k + j]);
    return ref;
  }, 1e-5);
}


// The int4 panel (matmul_panel.cpp with the level's decode_block_quads / int4_q8_panel_tile) against
// int4_q8_tile, bit for bit, at row counts around kPanelRows' multiples and past a chunk of
// kPanelChunkRows (the rows of a chunk's tail pass and of the next chunk), on the team's threads.
void test_int4_panel(int64_t n, int64_t k) {
#ifdef SGRUN_SIMD_PANEL
  const int64_t blocks = n / LANES, groups = k / GROUP, rows = simd::kPanelChunkRows + 2 * simd::kPanelRows + 1;
  std::vector<uint8_t> packed(n * k / 2);
  std::vector<uint16_t> scales(n * groups * 2);
  for (auto& c : packed) c = static_cast<uint8_t>(uniform() * 256);
  for (int64_t i = 0; i < n * groups; ++i) {
    scales[(i / LANES) * 2 * LANES + i % LANES] = float_to_half(static_cast<float>(uniform() * 0.02 + 1e-3));
    scales[(i / LANES) * 2 * LANES + LANES + i % LANES] = float_to_half(static_cast<float>(-uniform() * 0.15));
  }
  std::vector<float> x(rows * k);
  for (auto& v : x) v = static_cast<float>(normal());
  QuantRows qx;
  quantize_rows(rows, k, [&](int64_t r, int64_t i) { return x[r * k + i]; }, qx);
  const int64_t cs = k / 2 * LANES, ss = groups * 2 * LANES;
  std::vector<float> tile(rows * n);
  run_tiles(rows, blocks, [&](auto r_count, auto nb, int64_t b, int64_t r) {
    simd::int4_q8_tile<decltype(r_count)::value, decltype(nb)::value>(
        packed.data() + b * cs, scales.data() + b * ss, cs, ss, qx.q.data() + r * k, qx.d.data() + r * groups,
        qx.sum.data() + r * groups, k, groups, tile.data() + r * n + b * LANES, n);
  });
  int64_t bad = 0;
  for (int64_t m : {simd::kPanelMinRows, simd::kPanelMinRows + 1, int64_t{11}, int64_t{17}, rows}) {
    std::vector<float> y(m * n, -1.0f);
    const int64_t before = simd::panel_calls().load();
    simd::int4_q8_panel(packed.data(), scales.data(), cs, ss, qx, m, k, n, y.data(), [](int64_t count, auto&& f) {
      team::parallel_for(3, count, 1, f);
    });
    bad += simd::panel_calls().load() != before + 1;
    for (int64_t e = 0; e < m * n; ++e) bad += std::memcmp(&y[e], &tile[e], sizeof(float)) != 0;
  }
  std::printf("%s int4 panel n=%lld k=%lld = int4_q8_tile bitwise, up to %lld rows (%lld differ)\n", bad ? "FAIL" : "ok  ",
              static_cast<long long>(n), static_cast<long long>(k), static_cast<long long>(rows), static_cast<long long>(bad));
  if (bad) ++failures;
#else
  (void)n;
  (void)k;
  std::printf("no   int4 panel at %s (tests/test_kernel_driver.py says which levels must have one)\n", SGRUN_SIMD_TILES);
#endif
}

// quantize_float_rows (the level's vector group) against quantize_rows (the generic loop): the same
// bytes, d and sums, with exact ties (x / d = k + 0.5), an all-zero group, a one-value group and a
// group of tiny values among random rows.
void test_quantize_float_rows() {
  constexpr int64_t m = 5, k = 4 * GROUP;
  std::vector<float> x(m * k);
  for (auto& v : x) v = static_cast<float>(normal() * 4);
  for (int64_t i = 0; i < GROUP; ++i) {
    x[i] = static_cast<float>(i % 2 ? i - 15.5 : -(i + 0.5));             // both signs
    x[GROUP + i] = (i == 0) ? 127.0f : static_cast<float>(i) + 0.5f;   // d = 1: x / d = i + 0.5, ties to even
    x[2 * GROUP + i] = 0.0f;                                              // d = 0
    x[3 * GROUP + i] = i == 7 ? -3.0f : 0.0f;                             // one value: q = -127
  }
  for (int64_t i = 0; i < GROUP; ++i) x[k + i] = static_cast<float>(i - 16) * 1e-30f;   // tiny, 1 / d still finite
  QuantRows want, got;
  quantize_rows(m, k, [&](int64_t r, int64_t i) { return x[r * k + i]; }, want);
  quantize_float_rows(m, k, x.data(), got, 3);
  const bool same = want.q == got.q && std::memcmp(want.d.data(), got.d.data(), want.d.size() * 4) == 0 &&
                    std::memcmp(want.sum.data(), got.sum.data(), want.sum.size() * 4) == 0;
  const bool ties = want.q[GROUP + 1] == 2 && want.q[GROUP + 2] == 2 && want.q[GROUP + 3] == 4;   // 1.5, 2.5, 3.5
  check(same && ties, "quantize", "float rows = the generic loop (bytes, d, sums; ties, zeros, tiny values)", 0);
}
}  // namespace

// The team's generations: jobs back to back whose chunk counts alternate small and large, each
// chunk counted in its own job's slot. Every chunk must run exactly once, in its own job: a worker
// that read the last generation's ticket before the next job's fields were written must not claim
// a chunk with them (it ran a chunk of the new job twice, and the extra count let a caller return
// while a chunk still ran on its stack's lambda: segfaults, fixed 7 December 2026).
void test_team_generations() {
  constexpr int kJobs = 200000;
  std::vector<std::atomic<int>> runs(static_cast<size_t>(kJobs) * 16);
  for (auto& r : runs) r.store(0);
  for (int job = 0; job < kJobs; ++job) {
    const int64_t chunks = job % 2 ? 12 : 2;
    team::parallel_for(4, chunks, 1, [&, job](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) runs[static_cast<size_t>(job) * 16 + c].fetch_add(1);
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));   // a stray late chunk would land by now
  int64_t wrong = 0;
  for (int job = 0; job < kJobs; ++job)
    for (int c = 0; c < 16; ++c)
      wrong += runs[static_cast<size_t>(job) * 16 + c].load() != (c < (job % 2 ? 12 : 2) ? 1 : 0);
  check(wrong == 0, "team", "every chunk of 200,000 jobs ran once, in its own job", static_cast<double>(wrong));
}

int main() {
  std::printf("tiles: %s\n", SGRUN_SIMD_TILES);
  test_team_generations();
  test_int4(48, 96);
  test_int4(80, 576);
  test_int4_panel(48, 96);
  test_int4_panel(80, 576);
  test_quantize_float_rows();
  test_int8(48, 200);
  test_int8_x16(48, 576);
  test_int8_x16(80, 96);
  test_bf16(48, 130);
  if (failures) {
    std::printf("%d FAILED\n", failures);
    return 1;
  }
  std::printf("ALL OK\n");
  return 0;
}
