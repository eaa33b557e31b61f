// The int4 panel's driver, shared by the ISAs that have one (matmul_avx2.cpp, matmul_neon.cpp): for
// the int4 x int8-activation matmuls of kPanelMinRows rows and more (a prefill chunk, a batch's
// decode step), each column block's codes are decoded once per chunk of rows into "quads" (per
// column one 32-bit lane of its 4 codes for 4 consecutive k) and then every row of the chunk
// multiplies them, where int4_q8_tile decodes them again for every few rows. The ISA file gives:
//   PanelQuad, kPanelQuadsPer4K    the vector type of the quads, and how many a block holds per 4 k;
//   decode_block_quads(codes, k, out)   a column block's codes -> k / 4 * kPanelQuadsPer4K quads;
//   int4_q8_panel_tile<R>(quads, ...)   R rows x one block, int4_q8_tile's float32 steps and bits;
//   kPanelMinRows, kPanelRows           from how many rows the panel serves, rows per pass.
// Each ISA's panel gives its own int4_q8_tile's bits, so a row's output does not depend on which of
// the two served its row count.
#if defined(SGRUN_SIMD_PANEL)
#include <algorithm>
#include <atomic>

namespace {
namespace simd {

constexpr int64_t kPanelChunkRows = 256;   // rows per column-block pass (their int8 activations stay in L2)

// Calls served by the panel, so a test can tell it ran (its output bits are int4_q8_tile's).
inline std::atomic<int64_t>& panel_calls() {
  static std::atomic<int64_t> n{0};
  return n;
}

// Whether int4_mm takes the panel from kPanelMinRows (default) or keeps int4_q8_tile: `set_panel`,
// for benchmarks/bench_matmul.py's A/B in one process. A relaxed load per call, so the decode path
// pays nothing for the switch (an environment variable read per call would cost ~0.5 us, 120 times
// a step).
inline std::atomic<bool>& panel_wanted() {
  static std::atomic<bool> w{true};
  return w;
}

// f(Const<left>) for a compile-time row count 1 <= left <= Max (nothing for 0).
template <int Max, class F>
inline void with_rows_left(int64_t left, F&& f) {
  if constexpr (Max > 0) {
    if (left == Max) f(Const<Max>{});
    else with_rows_left<Max - 1>(left, f);
  }
}

// y[m, n] (float32) = the int8-quantized rows qx x the int4 weight, for m >= kPanelMinRows: column
// blocks split over the team's threads (parallel_for(count, f(begin, end))), rows in chunks of
// kPanelChunkRows, each chunk's every block decoded once and multiplied by all its rows.
template <class ParallelFor>
void int4_q8_panel(const uint8_t* cb, const uint16_t* sb, int64_t cs, int64_t ss, const QuantRows& qx, int64_t m,
                   int64_t k, int64_t n, float* y, ParallelFor&& parallel_for) {
  panel_calls().fetch_add(1, std::memory_order_relaxed);
  const int64_t groups = k / GROUP, blocks = n / LANES;
  parallel_for(blocks, [&](int64_t b0, int64_t b1) {
    thread_local std::vector<PanelQuad> kept;   // a block's quads (24 KB at k = 1,536)
    std::vector<PanelQuad>& quads = kept;
    quads.resize(static_cast<size_t>(k / 4 * kPanelQuadsPer4K));
    for (int64_t r0 = 0; r0 < m; r0 += kPanelChunkRows) {
      const int64_t r1 = std::min(m, r0 + kPanelChunkRows);
      for (int64_t b = b0; b < b1; ++b) {
        decode_block_quads(cb + b * cs, k, quads.data());
        auto rows = [&](auto count, int64_t r) {
          int4_q8_panel_tile<decltype(count)::value>(quads.data(), sb + b * ss, qx.q.data() + r * k,
                                                     qx.d.data() + r * groups, qx.sum.data() + r * groups, k, groups,
                                                     y + r * n + b * LANES, n);
        };
        int64_t r = r0;
        for (; r + kPanelRows <= r1; r += kPanelRows) rows(Const<kPanelRows>{}, r);
        with_rows_left<kPanelRows - 1>(r1 - r, [&](auto count) { rows(count, r); });   // the rest in one pass
      }
    }
  });
}

}  // namespace simd
}  // namespace
#endif
