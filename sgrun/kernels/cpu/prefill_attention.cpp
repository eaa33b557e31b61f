// Causal or sliding-window prefill attention over the paged KV pool on the CPU, the torch-facing driver (last of
// the sources prefill_attention.py builds as one unit, after prefill_attention_common.cpp and the
// ISA files; see prefill_attention.py for the design). Each call takes the best vector path its
// level compiled for the pool's dtype and head dim (`vector_path`):
//   SG_PREFILL_BF16 (avx512_bf16, amx): bf16 dot products on bf16 pools, and on a float32 pool's
//   rows at positions >= bf16_from (their Q, K, V rounded to bf16 as they are packed; earlier rows
//   keep the float32 FMA path; prefill_attention_avx512_bf16.cpp);
//   SG_PREFILL_SIMD (avx2, avx512, and what the bf16 tiles lack at avx512_bf16, float16 pools
//   included): float32 FMA on bf16, float16 or float32 pools (prefill_attention_avx2.cpp); the same on aarch64 NEON (neon,
//   neon_dotprod: prefill_attention_neon.cpp);
//   SG_PREFILL_AMX (amx, inside the avx512_bf16 build): SG_PREFILL_BF16's walk with its products on
//   AMX tiles, taken where the caller asks for it (`amx`: the level is amx) and `amx_ready()`
//   (prefill_attention_amx.cpp);
// else the portable path below (any dtype, any head dim, no intrinsics), row by row.
// A sliding window (`window` > 0) is one more bound on the same walks, on every path: each row's
// keys start at its window's start instead of 0 (prefill_attention_common.cpp).
// Under float32 queries the pool may be narrower (a float32 model's float16 or bf16 KV cache,
// kv_cache_dtype): every path widens it exactly as it packs, so only the pack step sees its type.
namespace {

// ---------------------------------------------------------------- portable path
// An element as float: c10's conversions, and raw bf16 bits (uint16_t, the vector paths' bf16
// element, which with_float_q_pool hands every path) shifted into a float's high half.
template <class C>
inline float widen(C x) { return static_cast<float>(x); }
inline float widen(uint16_t bf16_bits) {
  const uint32_t u = static_cast<uint32_t>(bf16_bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// One work item per (segment, query row, head): scores over the row's keys [window start, position] in float,
// a max-subtracted softmax, and the weighted sum of V, all in float. T: q's and out's element,
// C: the pool's (T, or bf16 bits / at::Half under float32 queries).
template <class T, class C = T>
void attend_portable(const T* q, int64_t q_stride, const C* kc, const C* vc, int64_t kv_head_stride,
                     int64_t page_stride, int64_t ps, const Segments& seg, int64_t H, int64_t KV, int64_t D,
                     float scale, T* out, int64_t out_stride, int64_t window) {
  const int64_t G = H / KV;
  std::vector<int64_t> first(seg.count + 1, 0);
  for (int64_t s = 0; s < seg.count; ++s) first[s + 1] = first[s] + seg.q_len[s] * H;
  run_dynamic(first[seg.count], 64, [&](int64_t item) {
    const int64_t s = std::upper_bound(first.begin(), first.end(), item) - first.begin() - 1;
    const int64_t t = (item - first[s]) / H, h = (item - first[s]) % H, kvh = h / G;
    const int64_t pos = seg.ctx_len[s] - seg.q_len[s] + t;
    const int64_t* pages = seg.table + s * seg.table_stride;
    const T* qr = q + (seg.q_start[s] + t) * q_stride + h * D;
    const int64_t lo = window_start(pos, window);   // 0: causal, every key up to pos
    std::vector<float> score(pos + 1 - lo), acc(D, 0.0f);
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t c = lo; c <= pos; ++c) {
      const C* kr = kc + kvh * kv_head_stride + pages[c / ps] * page_stride + (c % ps) * D;
      float dot = 0.0f;
      for (int64_t d = 0; d < D; ++d) dot += widen(qr[d]) * widen(kr[d]);
      score[c - lo] = dot * scale;
      mx = std::max(mx, score[c - lo]);
    }
    float sum = 0.0f;
    for (int64_t c = lo; c <= pos; ++c) {
      const float p = std::exp(score[c - lo] - mx);
      sum += p;
      const C* vr = vc + kvh * kv_head_stride + pages[c / ps] * page_stride + (c % ps) * D;
      for (int64_t d = 0; d < D; ++d) acc[d] += p * widen(vr[d]);
    }
    T* o = out + (seg.q_start[s] + t) * out_stride + h * D;
    for (int64_t d = 0; d < D; ++d) o[d] = static_cast<T>(acc[d] / sum);
  });
}

}  // namespace

// The vector path a (dtype, head dim) takes in this build: "avx512_bf16", "avx2", "neon", or "" (portable).
static std::string vector_path(at::ScalarType dt, int64_t D) {
#ifdef SG_PREFILL_BF16
  // A float16 pool (a float32 model's kv_cache_dtype="float16", which auto never picks at this
  // level) takes the simd path's float32 products: no bf16 tiles are built for it.
  if ((dt == at::kBFloat16 || dt == at::kFloat) && (D == 32 || D == 64 || D == 96 || D == 128))
    return "avx512_bf16";
#endif
#ifdef SG_PREFILL_SIMD
  if (simd::supports(dt, D)) return SG_PREFILL_SIMD;
#endif
  (void)dt;
  (void)D;
  return "";
}

// Whether this build has any vector path.
bool fast_path_available() {
#if defined(SG_PREFILL_BF16) || defined(SG_PREFILL_SIMD)
  return true;
#else
  return false;
#endif
}

// Whether this build has the AMX tile path and this CPU and kernel let it run (asked once).
bool amx_ready() {
#ifdef SG_PREFILL_AMX
  return amx::ready();
#else
  return false;
#endif
}

// The vector path a pool of `dtype` ("bfloat16", "float32", "float16") with `head_dim` takes; "" for none.
std::string fast_path(const std::string& dtype, int64_t head_dim) {
  const at::ScalarType dt = dtype == "bfloat16" ? at::kBFloat16 : dtype == "float32" ? at::kFloat
                          : dtype == "float16" ? at::kHalf : at::ScalarType::Undefined;
  return dt == at::ScalarType::Undefined ? std::string() : vector_path(dt, head_dim);
}

#ifdef SG_PREFILL_BF16
#ifndef SG_PREFILL_SIMD
#error "float32 queries' rows below bf16_from take the simd path, which every AVX512-BF16 build has"
#endif
// A float32 pool's segments split at position `from`: rows below it keep float32 products
// (`low`), the rest take bf16 ones (`high`). A row attends only keys up to its own position, so
// rows [first, from) of a segment are a segment of their own whose context ends at `from`: each
// row's result depends on its position alone, never on where a chunk starts.
struct SplitSegments {
  std::vector<int64_t> table, q_start, q_len, ctx_len;
  void add(const Segments& seg, int64_t s, int64_t start, int64_t len, int64_t ctx) {
    table.insert(table.end(), seg.table + s * seg.table_stride, seg.table + (s + 1) * seg.table_stride);
    q_start.push_back(start);
    q_len.push_back(len);
    ctx_len.push_back(ctx);
  }
  Segments view(int64_t table_stride) const {
    return Segments{table.data(), table_stride, q_start.data(), q_len.data(), ctx_len.data(),
                    static_cast<int64_t>(q_start.size())};
  }
};

void split_at_position(const Segments& seg, int64_t from, SplitSegments& low, SplitSegments& high) {
  for (int64_t s = 0; s < seg.count; ++s) {
    const int64_t first = seg.ctx_len[s] - seg.q_len[s];
    const int64_t n_low = std::clamp<int64_t>(from - first, 0, seg.q_len[s]);
    if (n_low > 0) low.add(seg, s, seg.q_start[s], n_low, first + n_low);
    if (n_low < seg.q_len[s]) high.add(seg, s, seg.q_start[s] + n_low, seg.q_len[s] - n_low, seg.ctx_len[s]);
  }
}
#endif

// q [T, H, D] (rows may be strided; heads contiguous), k_cache / v_cache [KV, pages, ps, D],
// tables [S, max_pages] int64, q_starts / q_lens / ctx_lens [S] int64: segment s's q_len rows
// start at row q_starts[s] and are the last q_len positions of its ctx_len-token context.
// Writes those rows of `out` (same shape and dtype as q, contiguous). The pool holds q's dtype, or
// bf16 or float16 under float32 queries (a float32 model's narrower KV cache: its keys and values
// are widened exactly, so every product and sum stays float32). bf16_from: on the AVX512-BF16
// path, float32 queries' rows from that position on take bf16 products (their Q, and the pool's K
// and V unless bf16 already, rounded to bf16; 0: every row); other paths and bf16 queries ignore
// it. float16 queries (a float16 model) take the portable path. amx: the AVX512-BF16 path's products
// run on AMX tiles where amx_ready() (else it is ignored); the level amx asks for it. window: 0
// (causal: every key up to the row's position) or a sliding window of that many tokens (the row at
// position p attends keys j with p - window < j <= p), on every path.
void prefill_attention(at::Tensor q, at::Tensor k_cache, at::Tensor v_cache, at::Tensor tables,
                       at::Tensor q_starts, at::Tensor q_lens, at::Tensor ctx_lens, double scale,
                       at::Tensor out, bool portable, int64_t bf16_from, bool amx, int64_t window) {
  TORCH_CHECK(window >= 0, "window must be 0 (causal) or a positive token count");
  TORCH_CHECK(q.dim() == 3 && k_cache.dim() == 4 && v_cache.sizes() == k_cache.sizes(), "bad shapes");
  const at::ScalarType qt = q.scalar_type(), ct = k_cache.scalar_type();
  const bool narrow_pool = qt == at::kFloat && (ct == at::kBFloat16 || ct == at::kHalf);
  TORCH_CHECK((qt == ct || narrow_pool) && v_cache.scalar_type() == ct && out.scalar_type() == qt,
              "q and out share a dtype; the caches hold it too, or bf16 / float16 under float32 q");
  TORCH_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous() && out.is_contiguous(), "contiguous caches/out");
  TORCH_CHECK(q.stride(2) == 1 && q.stride(1) == q.size(2), "q's heads must be contiguous [H, D] rows");
  TORCH_CHECK(out.sizes() == q.sizes(), "out must have q's shape");
  for (const auto& t : {tables, q_starts, q_lens, ctx_lens})
    TORCH_CHECK(t.scalar_type() == at::kLong && t.is_contiguous(), "tables and lengths must be contiguous int64");
  const int64_t H = q.size(1), D = q.size(2), KV = k_cache.size(0), ps = k_cache.size(2);
  TORCH_CHECK(k_cache.size(3) == D && H % KV == 0, "head dims disagree");
  Segments seg{tables.data_ptr<int64_t>(), tables.size(1), q_starts.data_ptr<int64_t>(), q_lens.data_ptr<int64_t>(),
               ctx_lens.data_ptr<int64_t>(), q_starts.size(0)};
  const int64_t head_stride = k_cache.stride(0), page_stride = k_cache.stride(1);
  const float sc = static_cast<float>(scale);
  // A 2,048-token chunk takes ~10 ms per layer: let the server's Python threads run meanwhile
  // (torch's own ops release the GIL too; nothing below touches a Python object).
  pybind11::gil_scoped_release no_gil;
  const std::string path = portable || qt == at::kHalf ? std::string() : vector_path(ct, D);
  const int64_t qs = q.stride(0), os = out.stride(0);
  // Calls f with a null pointer of the pool's element type under float32 queries: float, bf16
  // bits (uint16_t) or at::Half. The one dispatch of the pool's type: every path below takes it.
  auto with_float_q_pool = [&](auto f) {
    if (ct == at::kBFloat16) f(static_cast<uint16_t*>(nullptr));
    else if (ct == at::kHalf) f(static_cast<at::Half*>(nullptr));
    else f(static_cast<float*>(nullptr));
  };
#ifdef SG_PREFILL_SIMD
  // float32 products over the packed, widened context: simd::Path<query element, pool element>.
  auto simd_float_q = [&](const Segments& part) {
    with_float_q_pool([&](auto kv_elem) {
      using C = std::remove_pointer_t<decltype(kv_elem)>;
      attend_packed<simd::Path<float, C>>(q.data_ptr<float>(), qs, reinterpret_cast<const C*>(k_cache.data_ptr()),
                                          reinterpret_cast<const C*>(v_cache.data_ptr()), head_stride, page_stride,
                                          ps, part, H, KV, D, sc, out.data_ptr<float>(), os, window);
    });
  };
#endif
#ifdef SG_PREFILL_BF16
  if (path == "avx512_bf16") {
    // The pools the bf16 tiles are built for: vector_path sends only bf16 and float32 ones here.
    TORCH_CHECK(ct == at::kBFloat16 || ct == at::kFloat, "the bf16 prefill tiles take bf16 or float32 pools");
    auto with_tile_pool = [&](auto f) {
      if (ct == at::kBFloat16) f(static_cast<uint16_t*>(nullptr));
      else f(static_cast<float*>(nullptr));
    };
    // elem, kv_elem: null pointers of q's and the pool's element types
    auto run = [&](auto elem, auto kv_elem, const Segments& part) {
      using E = std::remove_pointer_t<decltype(elem)>;
      using C = std::remove_pointer_t<decltype(kv_elem)>;
      auto* qp = reinterpret_cast<const E*>(q.data_ptr());
      auto* kp = reinterpret_cast<const C*>(k_cache.data_ptr());
      auto* vp = reinterpret_cast<const C*>(v_cache.data_ptr());
      auto* op = reinterpret_cast<E*>(out.data_ptr());
#ifdef SG_PREFILL_AMX
      if (amx && amx::ready()) {
        if (D == 32) attend_packed<amx::Path<2, E, C>>(qp, qs, kp, vp, head_stride, page_stride, ps, part, H, KV, D, sc, op, os, window);
        if (D == 64) attend_packed<amx::Path<4, E, C>>(qp, qs, kp, vp, head_stride, page_stride, ps, part, H, KV, D, sc, op, os, window);
        if (D == 96) attend_packed<amx::Path<6, E, C>>(qp, qs, kp, vp, head_stride, page_stride, ps, part, H, KV, D, sc, op, os, window);
        if (D == 128) attend_packed<amx::Path<8, E, C>>(qp, qs, kp, vp, head_stride, page_stride, ps, part, H, KV, D, sc, op, os, window);
        return;
      }
#endif
      (void)amx;
      using namespace bf16dot;
      if (D == 32) attend_packed<Path<2, 6, E, C>>(qp, qs, kp, vp, head_stride, page_stride, ps, part, H, KV, D, sc, op, os, window);
      if (D == 64) attend_packed<Path<4, 6, E, C>>(qp, qs, kp, vp, head_stride, page_stride, ps, part, H, KV, D, sc, op, os, window);
      if (D == 96) attend_packed<Path<6, 4, E, C>>(qp, qs, kp, vp, head_stride, page_stride, ps, part, H, KV, D, sc, op, os, window);
      if (D == 128) attend_packed<Path<8, 3, E, C>>(qp, qs, kp, vp, head_stride, page_stride, ps, part, H, KV, D, sc, op, os, window);
    };
    if (qt == at::kBFloat16) {
      run(static_cast<uint16_t*>(nullptr), static_cast<uint16_t*>(nullptr), seg);
      return;
    }
    SplitSegments low, high;
    split_at_position(seg, bf16_from, low, high);
    if (!low.q_start.empty()) simd_float_q(low.view(seg.table_stride));   // simd::supports every D here
    if (!high.q_start.empty())
      with_tile_pool([&](auto kv_elem) { run(static_cast<float*>(nullptr), kv_elem, high.view(seg.table_stride)); });
    return;
  }
#endif
#ifdef SG_PREFILL_SIMD
  if (!path.empty()) {
    if (qt == at::kBFloat16) {
      attend_packed<simd::Path<uint16_t>>(reinterpret_cast<const uint16_t*>(q.data_ptr()), qs,
                                          reinterpret_cast<const uint16_t*>(k_cache.data_ptr()),
                                          reinterpret_cast<const uint16_t*>(v_cache.data_ptr()), head_stride,
                                          page_stride, ps, seg, H, KV, D, sc,
                                          reinterpret_cast<uint16_t*>(out.data_ptr()), os, window);
    } else {
      simd_float_q(seg);
    }
    return;
  }
#endif
  if (narrow_pool) {
    with_float_q_pool([&](auto kv_elem) {
      using C = std::remove_pointer_t<decltype(kv_elem)>;
      attend_portable<float, C>(q.data_ptr<float>(), q.stride(0), reinterpret_cast<const C*>(k_cache.data_ptr()),
                                reinterpret_cast<const C*>(v_cache.data_ptr()), head_stride, page_stride, ps, seg, H,
                                KV, D, sc, out.data_ptr<float>(), out.stride(0), window);
    });
    return;
  }
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, q.scalar_type(), "prefill_attention", [&] {
    attend_portable<scalar_t>(q.data_ptr<scalar_t>(), q.stride(0), k_cache.data_ptr<scalar_t>(),
                              v_cache.data_ptr<scalar_t>(), head_stride, page_stride, ps, seg, H, KV, D, sc,
                              out.data_ptr<scalar_t>(), out.stride(0), window);
  });
}
