// Weight-only matmuls for small batches on the CPU, the torch-facing driver: y[M, N] = x[M, K] @
// W[N, K]^T with W int4 (groups of 32, fp16 scale and minimum), dense bf16, or int8 (the lm_head,
// float32 activations). Built by matmul.py after matmul_common.cpp and the ISA files, as one unit
// per CPU level; each op takes the best tiles its level compiled:
//   SGRUN_BF16_DOT (avx512_bf16, amx): bf16 dot products for bf16 activations (matmul_avx512_bf16.cpp);
//   SGRUN_SIMD_TILES (avx2 / avx512 / neon / neon_dotprod, and float32 activations at avx512_bf16):
//   int4 x int8-quantized activations, float32 FMA for bf16 and int8 weights (matmul_avx2.cpp,
//   matmul_neon.cpp);
//   SGRUN_Q8_TILES_512 (avx512_bf16, amx: AVX512-VNNI): the int4 x int8-activation tile in 512-bit
//   registers (matmul_avx512_vnni.cpp), in place of the AVX2 one from two rows on, and the int8
//   lm_head's integer tile; SGRUN_INT8_X16 (every level with simd tiles): the AVX2 or NEON one, bit-identical.
// Ops are registered as sgrun::<op>_<level> so several levels' builds can live in one process
// (tests run every level the CPU has).
#include <torch/library.h>   // TORCH_LIBRARY: the ops torch.compile calls
#include <ATen/Parallel.h>
#include <cstdlib>
#include <string>

#define SG_STR2(x) #x
#define SG_STR(x) SG_STR2(x)
#define SG_OP(name) name "_" SG_STR(SGRUN_ISA)

namespace {

// Work split: units of `unit_blocks` column blocks, in chunks of at least ~256K multiply-adds
// (a few microseconds) for thread_team.cpp's spinning workers, which join a job in well under a
// microsecond. (Under OpenMP a sleeping worker took ~10-30 us to join, as long as a whole layer's
// matmul at one row, so the split started at 8M per thread and every batch-1 matmul of SmolLM2 ran
// on one thread: 8.5 ms for a step's 120 matmuls, against 3.6 ms split over two.)
int64_t grain_for(int64_t m, int64_t k, int64_t unit_blocks) {
  constexpr int64_t kMinWorkPerChunk = 1 << 18;
  const int64_t work = m * k * LANES * unit_blocks;
  const int64_t g = (kMinWorkPerChunk + work - 1) / (work > 0 ? work : 1);
  return g > 0 ? g : 1;
}

// Runs tile(rows, blocks, first block, first row) over every tile of an M x N output: units of two
// column blocks split across the team's threads (grain_for), rows in blocks of MaxRows (with_rows).
template <int MaxRows, int TwoBlockRows, class Tile>
void for_each_tile(int64_t m, int64_t k, int64_t blocks, Tile&& tile) {
  const int64_t units = (blocks + 1) / 2;
  team::parallel_for(at::get_num_threads(), units, grain_for(m, k, 2), [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u) {
      const int64_t b0 = u * 2;
      for (int64_t r = 0; r < m; r += MaxRows)
        with_rows<MaxRows, TwoBlockRows>(m - r, b0 + 1 < blocks,
                                         [&](auto rows, auto nb, int64_t first) { tile(rows, nb, b0 + first, r); });
    }
  });
}

// SGRUN_INT8_HEAD=float: the int8 lm_head keeps its float FMA tile where the integer one would run
// (benchmarks/bench_lm_head.py alternates the two in one process). Read per call: well under a
// microsecond against the lm_head's millisecond.
bool int8_head_float_forced() {
  const char* v = std::getenv("SGRUN_INT8_HEAD");
  return v != nullptr && std::string(v) == "float";
}

void check_x(const at::Tensor& x, int64_t k_multiple, bool float_ok) {
  TORCH_CHECK(x.dim() == 2 && (x.scalar_type() == at::kBFloat16 || (float_ok && x.scalar_type() == at::kFloat)),
              float_ok ? "x must be a 2-D bf16 or float32 tensor" : "x must be a 2-D bf16 tensor");
  TORCH_CHECK(x.size(1) % k_multiple == 0, "x's inner dim must be a multiple of ", k_multiple);
}

#ifdef SGRUN_SIMD_TILES
// The int4 x int8-activation tiles with their row blocking, for int4_mm to choose between.
struct SimdInt4Q8 {
  static constexpr int kRowBlock = simd::kRowBlock, kTwoBlockRows = simd::kTwoBlockRows;
  template <int R, int NB, class... A>
  static void tile(A... a) { simd::int4_q8_tile<R, NB>(a...); }
};
#endif
#ifdef SGRUN_Q8_TILES_512
struct Vnni512Int4Q8 {
  static constexpr int kRowBlock = q8x512::kRowBlock, kTwoBlockRows = q8x512::kTwoBlockRows;
  template <int R, int NB, class... A>
  static void tile(A... a) { q8x512::int4_q8_tile<R, NB>(a...); }
};
#endif

}  // namespace

// What this build multiplies with, for the Python side: "bf16dot" and/or the simd tile set's name.
std::string tiles() {
  std::string out;
#ifdef SGRUN_BF16_DOT
  out += "bf16dot ";
#endif
#ifdef SGRUN_SIMD_TILES
  out += SGRUN_SIMD_TILES;
#endif
#ifdef SGRUN_Q8_TILES_512
  out += " int4q8x512";
#endif
  return out;
}

bool fast_path() { return !tiles().empty(); }

// Whether float32 activations of a prefill chunk's row count take the AMX-INT8 tiles
// (matmul_amx.cpp): `want` (the level is amx) where the CPU and Linux allow them. Returns whether
// they now do. The output bits are the same either way; only the speed changes.
bool set_amx(bool want) {
#ifdef SGRUN_AMX_Q8
  amx_q8::wanted().store(want, std::memory_order_relaxed);
  return amx_q8::enabled();
#else
  (void)want;
  return false;
#endif
}

// Whether they do now.
bool amx_active() {
#ifdef SGRUN_AMX_Q8
  return amx_q8::enabled();
#else
  return false;
#endif
}

// How many int4_mm calls the AMX-INT8 tiles have served in this process.
int64_t amx_calls() {
#ifdef SGRUN_AMX_Q8
  return amx_q8::calls().load(std::memory_order_relaxed);
#else
  return 0;
#endif
}

// Whether int4_mm of 6 rows and more takes the int4 panel (matmul_panel.cpp, AVX2 or NEON; `want`,
// default true) or the level's tile it replaces, with the same bits. Returns whether the panel now
// serves: false where this build has none or never takes it (a level with the VNNI tile, which
// serves every row count from two, int4_mm_into below).
bool set_panel(bool want) {
#if defined(SGRUN_SIMD_PANEL) && !defined(SGRUN_Q8_TILES_512)
  simd::panel_wanted().store(want, std::memory_order_relaxed);
  return want;
#else
  (void)want;
  return false;
#endif
}

// How many int4_mm calls the panel has served in this process.
int64_t panel_calls() {
#ifdef SGRUN_SIMD_PANEL
  return simd::panel_calls().load(std::memory_order_relaxed);
#else
  return 0;
#endif
}

// The output every op below writes: [m, n], contiguous, in x's dtype (float32 rows for the
// int8 lm_head). The `_into` forms write a buffer the caller keeps (decode_block.cpp reuses one per
// activation across a step's layers: at batch 1 a layer's allocations and views cost ~30 us with the
// caches cold from the weights' stream); the plain forms allocate it.
static void check_mm_out(const at::Tensor& out, int64_t m, int64_t n, at::ScalarType dtype) {
  TORCH_CHECK(out.dim() == 2 && out.size(0) == m && out.size(1) == n && out.is_contiguous() &&
                  out.scalar_type() == dtype,
              "out must be a contiguous [", m, ", ", n, "] tensor of the op's output dtype");
}

void int4_mm_into(const at::Tensor& x, const at::Tensor& codes, const at::Tensor& scales, int64_t n,
                  const at::Tensor& out) {
  check_x(x, GROUP, true);
  TORCH_CHECK(n % LANES == 0, "n must be a multiple of 16");
  const int64_t m = x.size(0), k = x.size(1), blocks = n / LANES, groups = k / GROUP;
  TORCH_CHECK(codes.scalar_type() == at::kByte && codes.is_contiguous() && codes.numel() == n * k / 2,
              "codes do not match x and n");
  TORCH_CHECK(scales.scalar_type() == at::kHalf && scales.is_contiguous() && scales.numel() == n * groups * 2,
              "scales do not match x and n");
  check_mm_out(out, m, n, x.scalar_type());
  at::Tensor xc = x.contiguous();
  const uint8_t* cb = codes.data_ptr<uint8_t>();
  const uint16_t* sb = reinterpret_cast<const uint16_t*>(scales.data_ptr<at::Half>());
  const int64_t cs = k / 2 * LANES, ss = groups * 2 * LANES;
#ifdef SGRUN_BF16_DOT
  if (x.scalar_type() == at::kBFloat16) {
    const uint16_t* xb = reinterpret_cast<const uint16_t*>(xc.data_ptr<at::BFloat16>());
    // Kept between calls (no allocation at a decode step), and named through a reference: the
    // team's threads run the lambdas below, where a thread_local's own name is their empty copy.
    thread_local std::vector<float> xs_kept;
    std::vector<float>& xs = xs_kept;
    xs.resize(static_cast<size_t>(m * groups));
    bf16dot::group_sums(xb, m, k, xs.data());
    const uint32_t* xp = reinterpret_cast<const uint32_t*>(xb);
    uint16_t* yb = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>());
    for_each_tile<bf16dot::kRowBlock, bf16dot::kTwoBlockRows>(m, k, blocks, [&](auto rows, auto nb, int64_t b, int64_t r) {
      bf16dot::int4_tile<decltype(rows)::value, decltype(nb)::value>(cb + b * cs, sb + b * ss, cs, ss, xp + r * (k / 2),
                                                                     k, xs.data() + r * groups, groups,
                                                                     yb + r * n + b * LANES, n);
    });
    return;
  }
#endif
#ifdef SGRUN_SIMD_TILES
  // Kept between calls (no allocation at a decode step), and named through a reference: the
  // team's threads run the tile lambda below, where a thread_local's own name is their empty copy.
  thread_local QuantRows qx_kept;
  QuantRows& qx = qx_kept;
  if (x.scalar_type() == at::kFloat) {
    const float* xf = xc.data_ptr<float>();
    quantize_float_rows(m, k, xf, qx, at::get_num_threads());
  } else {
    const uint16_t* xb = reinterpret_cast<const uint16_t*>(xc.data_ptr<at::BFloat16>());
    quantize_rows(m, k, [&](int64_t r, int64_t i) { return bf16_to_float(xb[r * k + i]); }, qx,
                  at::get_num_threads());
  }
  // The tiles write float32 rows: into out itself, or a float copy that out then takes rounded.
  const at::Tensor yt = x.scalar_type() == at::kFloat ? out : at::empty({m, n}, x.options().dtype(at::kFloat));
  float* yf = yt.data_ptr<float>();
  auto run = [&](auto tiles_ns) {
    using T = decltype(tiles_ns);
    for_each_tile<T::kRowBlock, T::kTwoBlockRows>(m, k, blocks, [&](auto rows, auto nb, int64_t b, int64_t r) {
      T::template tile<decltype(rows)::value, decltype(nb)::value>(
          cb + b * cs, sb + b * ss, cs, ss, qx.q.data() + r * k, qx.d.data() + r * groups, qx.sum.data() + r * groups,
          k, groups, yf + r * n + b * LANES, n);
    });
  };
#ifdef SGRUN_AMX_Q8
  // The AMX tiles give the VNNI tile's bits too (matmul_amx.cpp), so rows stay invariant.
  if (x.scalar_type() == at::kFloat && m >= amx_q8::kMinRows && amx_q8::enabled()) {
    amx_q8::int4_q8(cb, sb, cs, ss, qx, m, k, n, yf, [](int64_t count, auto&& f) {
      team::parallel_for(at::get_num_threads(), count, 1, f);
    });
  } else
#endif
#ifdef SGRUN_Q8_TILES_512
  // Both tiles give bit-identical rows (matmul_avx512.cpp), so choosing by row count keeps rows invariant.
  if (m >= q8x512::kMinRows) {
    run(Vnni512Int4Q8{});
  } else
#endif
#ifdef SGRUN_SIMD_PANEL
  // The panel gives the level's tile's bits (matmul_panel.cpp) where the level has no VNNI tile.
  if (m >= simd::kPanelMinRows && simd::panel_wanted().load(std::memory_order_relaxed)) {
    simd::int4_q8_panel(cb, sb, cs, ss, qx, m, k, n, yf, [&](int64_t count, auto&& f) {
      team::parallel_for(at::get_num_threads(), count, grain_for(m, k, 1), f);
    });
  } else
#endif
  {
    run(SimdInt4Q8{});
  }
  if (x.scalar_type() != at::kFloat) out.copy_(yt);
#else
  TORCH_CHECK(false, "int4_mm has no tiles at CPU level " SG_STR(SGRUN_ISA));
#endif
}

at::Tensor int4_mm(const at::Tensor& x, const at::Tensor& codes, const at::Tensor& scales, int64_t n) {
  check_x(x, GROUP, true);
  at::Tensor out = at::empty({x.size(0), n}, x.options());
  int4_mm_into(x, codes, scales, n, out);
  return out;
}

void bf16_mm_into(const at::Tensor& x, const at::Tensor& w, int64_t n, const at::Tensor& out) {
  check_x(x, 2, false);
  TORCH_CHECK(n % LANES == 0, "n must be a multiple of 16");
  const int64_t m = x.size(0), k = x.size(1), blocks = n / LANES;
  TORCH_CHECK(w.scalar_type() == at::kBFloat16 && w.is_contiguous() && w.numel() == n * k,
              "w does not match x and n");
  check_mm_out(out, m, n, at::kBFloat16);
  at::Tensor xc = x.contiguous();
  const uint32_t* wb = reinterpret_cast<const uint32_t*>(w.data_ptr<at::BFloat16>());
  const int64_t ws = k / 2 * LANES;   // 32-bit pairs per column block
#if defined(SGRUN_BF16_DOT)
  const uint32_t* xp = reinterpret_cast<const uint32_t*>(xc.data_ptr<at::BFloat16>());
  uint16_t* yb = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>());
  for_each_tile<bf16dot::kRowBlock, bf16dot::kTwoBlockRows>(m, k, blocks, [&](auto rows, auto nb, int64_t b, int64_t r) {
    bf16dot::bf16_tile<decltype(rows)::value, decltype(nb)::value>(wb + b * ws, ws, xp + r * (k / 2), k,
                                                                   yb + r * n + b * LANES, n);
  });
#elif defined(SGRUN_SIMD_TILES)
  at::Tensor yt = at::empty({m, n}, x.options().dtype(at::kFloat));   // float32 rows, then rounded into out
  const uint16_t* xb = reinterpret_cast<const uint16_t*>(xc.data_ptr<at::BFloat16>());
  float* yf = yt.data_ptr<float>();
  for_each_tile<simd::kRowBlock, simd::kTwoBlockRows>(m, k, blocks, [&](auto rows, auto nb, int64_t b, int64_t r) {
    simd::bf16_f32_tile<decltype(rows)::value, decltype(nb)::value>(wb + b * ws, ws, xb + r * k, k,
                                                                    yf + r * n + b * LANES, n);
  });
  out.copy_(yt);
#else
  TORCH_CHECK(false, "bf16_mm has no tiles at CPU level " SG_STR(SGRUN_ISA));
#endif
}

at::Tensor bf16_mm(const at::Tensor& x, const at::Tensor& w, int64_t n) {
  check_x(x, 2, false);
  at::Tensor out = at::empty({x.size(0), n}, x.options());
  bf16_mm_into(x, w, n, out);
  return out;
}

// Rows `token_ids` of an int8 table kept in column blocks of 16 (q [N/16, K, 16], its fp16 scales
// [N/16, ceil(K/32), 16], one per row and group of 32: int8_mm_f32's layout) as float32, code *
// scale: the embedding lookup of Int8Linear.rows and of decode_logits (decode_block.cpp).
at::Tensor int8_table_rows(const at::Tensor& q, const at::Tensor& scale, const at::Tensor& token_ids) {
  TORCH_CHECK(q.dim() == 3 && q.size(2) == LANES && q.scalar_type() == at::kChar && q.is_contiguous(),
              "q must be a contiguous [N/16, K, 16] int8 table");
  const int64_t k = q.size(1), groups = (k + GROUP - 1) / GROUP, n_rows = q.size(0) * LANES;
  TORCH_CHECK(scale.dim() == 3 && scale.size(0) == q.size(0) && scale.size(1) == groups && scale.size(2) == LANES &&
                  scale.scalar_type() == at::kHalf && scale.is_contiguous(),
              "scale must be a contiguous [N/16, ceil(K/32), 16] float16 tensor");
  TORCH_CHECK(token_ids.dim() == 1 && at::isIntegralType(token_ids.scalar_type(), false),
              "token ids must be a 1-D integer tensor");
  const at::Tensor tokens = token_ids.to(at::kLong).contiguous();
  const int64_t n = tokens.size(0);
  at::Tensor out = at::empty({n, k}, q.options().dtype(at::kFloat));
  const int8_t* qb = q.data_ptr<int8_t>();
  const at::Half* sb = scale.data_ptr<at::Half>();
  const int64_t* tok = tokens.data_ptr<int64_t>();
  float* o = out.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    TORCH_CHECK(tok[i] >= 0 && tok[i] < n_rows, "token id ", tok[i], " out of range [0, ", n_rows, ")");
    const int64_t block = tok[i] / LANES, lane = tok[i] % LANES;
    const int8_t* codes = qb + block * k * LANES + lane;
    const at::Half* scales = sb + block * groups * LANES + lane;
    for (int64_t c = 0; c < k; ++c)
      o[i * k + c] = static_cast<float>(codes[c * LANES]) * static_cast<float>(scales[(c / GROUP) * LANES]);
  }
  return out;
}

// q: [N/16, K, 16] int8; scale: [N/16, ceil(K/32), 16] fp16, one per column and group of 32 k.
void int8_mm_f32_into(const at::Tensor& x, const at::Tensor& q, const at::Tensor& scale, const at::Tensor& out) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat, "x must be a 2-D float32 tensor");
  const int64_t m = x.size(0), k = x.size(1), groups = (k + GROUP - 1) / GROUP;
  TORCH_CHECK(scale.dim() == 3 && scale.size(1) == groups && scale.size(2) == LANES,
              "scale must be [N/16, ceil(K/32), 16]");
  const int64_t blocks = scale.size(0), n = blocks * LANES;
  TORCH_CHECK(q.scalar_type() == at::kChar && q.is_contiguous() && q.numel() == n * k, "q does not match x and scale");
  TORCH_CHECK(scale.scalar_type() == at::kHalf && scale.is_contiguous(), "scale must be contiguous float16");
  check_mm_out(out, m, n, at::kFloat);
  at::Tensor xc = x.contiguous();
  const float* xb = xc.data_ptr<float>();
  const int8_t* qb = q.data_ptr<int8_t>();
  const uint16_t* sb = reinterpret_cast<const uint16_t*>(scale.data_ptr<at::Half>());
  float* yb = out.data_ptr<float>();
  const int64_t qs = k * LANES;
#if defined(SGRUN_Q8_TILES_512) || defined(SGRUN_INT8_X16)
  // Integer dots against 16-bit activations (matmul_common.cpp's Quant16Rows), unless
  // SGRUN_INT8_HEAD=float keeps the float FMA tile.
  if (k % GROUP == 0 && !int8_head_float_forced()) {
    // Kept between calls and named through a reference, as int4_mm_into's quantized activations.
    thread_local Quant16Rows x16_kept;
    Quant16Rows& qx = x16_kept;
    quantize16_rows(m, k, xb, qx);
    const int64_t ss = groups * LANES;
#if defined(SGRUN_Q8_TILES_512)
    namespace x16_ns = q8x512;
#else
    namespace x16_ns = simd;
#endif
    for_each_tile<x16_ns::kX16RowBlock, x16_ns::kX16TwoBlockRows>(m, k, blocks, [&](auto rows, auto nb, int64_t b, int64_t r) {
      x16_ns::int8_x16_tile<decltype(rows)::value, decltype(nb)::value>(
          qb + b * qs, qs, qx.x16.data() + r * k, qx.hi.data() + r * k, qx.lo.data() + r * k, qx.d.data() + r * groups,
          qx.corr.data() + r * groups, k, groups, sb + b * ss, ss, yb + r * n + b * LANES, n);
    });
    return;
  }
#endif
#if defined(SGRUN_BF16_DOT)
  namespace tiles_ns = bf16dot;
#elif defined(SGRUN_SIMD_TILES)
  namespace tiles_ns = simd;
#endif
#if defined(SGRUN_BF16_DOT) || defined(SGRUN_SIMD_TILES)
  for_each_tile<tiles_ns::kRowBlock, tiles_ns::kTwoBlockRows>(m, k, blocks, [&](auto rows, auto nb, int64_t b, int64_t r) {
    tiles_ns::int8_f32_tile<decltype(rows)::value, decltype(nb)::value>(qb + b * qs, qs, xb + r * k, k,
                                                                        sb + b * groups * LANES, groups * LANES,
                                                                        yb + r * n + b * LANES, n);
  });
#else
  TORCH_CHECK(false, "int8_mm_f32 has no tiles at CPU level " SG_STR(SGRUN_ISA));
#endif
}

at::Tensor int8_mm_f32(const at::Tensor& x, const at::Tensor& q, const at::Tensor& scale) {
  TORCH_CHECK(x.dim() == 2 && scale.dim() == 3, "x must be 2-D and scale [N/16, ceil(K/32), 16]");
  at::Tensor out = at::empty({x.size(0), scale.size(0) * LANES}, x.options().dtype(at::kFloat));
  int8_mm_f32_into(x, q, scale, out);
  return out;
}

// The int4 weight as a dense [K, N] matrix W^T (the caller hands F.linear its .t() view) for
// prefill chunks, in `dtype` (bf16 or float32); w = s * c + min in float32, rounded once.
at::Tensor int4_dequantize_t(const at::Tensor& codes, const at::Tensor& scales, int64_t n, int64_t k, bool as_float) {
  TORCH_CHECK(n % LANES == 0 && k % GROUP == 0, "n must be a multiple of 16 and k of 32");
  TORCH_CHECK(codes.is_contiguous() && scales.is_contiguous() && codes.numel() == n * k / 2 &&
              scales.numel() == n * k / GROUP * 2, "codes/scales do not match n, k");
  const uint8_t* cb = codes.data_ptr<uint8_t>();
  const uint16_t* sb = reinterpret_cast<const uint16_t*>(scales.data_ptr<at::Half>());
  const int64_t blocks = n / LANES;
#ifdef SGRUN_BF16_DOT
  if (!as_float) {
    at::Tensor out = at::empty({k, n}, codes.options().dtype(at::kBFloat16));
    uint16_t* ob = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>());
    at::parallel_for(0, blocks, 4, [&](int64_t begin, int64_t end) {
      for (int64_t blk = begin; blk < end; ++blk) bf16dot::int4_dequantize_block(cb, sb, n, k, blk, ob);
    });
    return out;
  }
#endif
  at::Tensor out = at::empty({k, n}, codes.options().dtype(at::kFloat));
  float* of = out.data_ptr<float>();
  at::parallel_for(0, blocks, 4, [&](int64_t begin, int64_t end) {
    for (int64_t blk = begin; blk < end; ++blk) int4_dequantize_portable(cb, sb, n, k, blk, of);
  });
  return as_float ? out : out.to(at::kBFloat16);
}

// The dense bf16 weight back as W^T, [K, N], for chunks above the kernel's row limit: each
// (block, pair) holds 16 interleaved (even k, odd k) pairs, split into the 16 columns of k and k+1.
at::Tensor bf16_unpack_t(const at::Tensor& w, int64_t n, int64_t k) {
  TORCH_CHECK(n % LANES == 0 && k % 2 == 0 && w.is_contiguous() && w.numel() == n * k, "w does not match n, k");
  at::Tensor out = at::empty({k, n}, w.options());
  const uint16_t* wb = reinterpret_cast<const uint16_t*>(w.data_ptr<at::BFloat16>());
  uint16_t* ob = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>());
  const int64_t blocks = n / LANES, kp = k / 2;
  at::parallel_for(0, blocks, 4, [&](int64_t begin, int64_t end) {
    for (int64_t blk = begin; blk < end; ++blk)
      for (int64_t p = 0; p < kp; ++p) {
        const uint16_t* src = wb + (blk * kp + p) * 2 * LANES;
        uint16_t* even = ob + (2 * p) * n + blk * LANES;
        uint16_t* odd = even + n;
        for (int i = 0; i < LANES; ++i) { even[i] = src[2 * i]; odd[i] = src[2 * i + 1]; }
      }
  });
  return out;
}

TORCH_LIBRARY_FRAGMENT(sgrun, lib) {
  lib.def(SG_OP("int4_mm") "(Tensor x, Tensor codes, Tensor scales, int n) -> Tensor");
  lib.def(SG_OP("bf16_mm") "(Tensor x, Tensor w, int n) -> Tensor");
  lib.def(SG_OP("int8_mm_f32") "(Tensor x, Tensor q, Tensor scale) -> Tensor");
}

TORCH_LIBRARY_IMPL(sgrun, CPU, lib) {
  lib.impl(SG_OP("int4_mm"), &int4_mm);
  lib.impl(SG_OP("bf16_mm"), &bf16_mm);
  lib.impl(SG_OP("int8_mm_f32"), &int8_mm_f32);
}
