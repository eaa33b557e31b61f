// benchmarks/bench_panel_insns.py's program: one int4 x int8 matmul of m rows, single-threaded, through
// the level's int4_q8_tile (driven as matmul.cpp drives it) or its panel (matmul_panel.cpp), or
// neither (mode 0: the setup alone, subtracted from the other two counts).
//   panel_count MODE N K M        MODE: 0 setup, 1 tile, 2 panel; prints a checksum
#include <cstdio>
#include <cstdlib>
#include "thread_team.cpp"
#include "matmul_common.cpp"
#include "matmul_avx2.cpp"
#include "matmul_neon.cpp"
#include "matmul_panel.cpp"

int main(int argc, char** argv) {
  if (argc != 5) return 2;
  const int mode = std::atoi(argv[1]);
  const int64_t n = std::atoll(argv[2]), k = std::atoll(argv[3]), m = std::atoll(argv[4]);
  const int64_t blocks = n / LANES, groups = k / GROUP;
  std::vector<uint8_t> packed(n * k / 2);
  std::vector<uint16_t> scales(n * groups * 2, 0x2000);
  uint32_t s = 1;
  for (auto& c : packed) c = static_cast<uint8_t>((s = s * 1664525u + 1013904223u) >> 24);
  std::vector<float> x(m * k);
  for (auto& v : x) v = static_cast<float>(static_cast<int32_t>((s = s * 1664525u + 1013904223u) >> 8)) * 1e-6f;
  QuantRows qx;
  quantize_float_rows(m, k, x.data(), qx, 1);
  std::vector<float> y(m * n);
  const int64_t cs = k / 2 * LANES, ss = groups * 2 * LANES;
  if (mode == 1) {
    for (int64_t u = 0; u < (blocks + 1) / 2; ++u)
      for (int64_t r = 0; r < m; r += simd::kRowBlock)
        with_rows<simd::kRowBlock, simd::kTwoBlockRows>(m - r, 2 * u + 1 < blocks, [&](auto rows, auto nb, int64_t first) {
          const int64_t b = 2 * u + first;
          simd::int4_q8_tile<decltype(rows)::value, decltype(nb)::value>(
              packed.data() + b * cs, scales.data() + b * ss, cs, ss, qx.q.data() + r * k, qx.d.data() + r * groups,
              qx.sum.data() + r * groups, k, groups, y.data() + r * n + b * LANES, n);
        });
  } else if (mode == 2) {
#ifdef SGRUN_SIMD_PANEL
    simd::int4_q8_panel(packed.data(), scales.data(), cs, ss, qx, m, k, n, y.data(),
                        [](int64_t count, auto&& f) { f(int64_t{0}, count); });
#else
    return 3;   // no panel at this level
#endif
  }
  double check = 0;
  for (float v : y) check += v;
  std::printf("check %g\n", check);
  return 0;
}
