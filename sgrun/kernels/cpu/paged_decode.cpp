// Paged decode attention on the CPU, reading the KV pages in place (built by paged_decode_cpp.py
// after paged_chunk_attention.cpp, which holds the per-chunk math; see paged_decode_cpp.py for the design).
//
// A context is cut into chunks of kChunk tokens at fixed positions (0, kChunk, 2 kChunk, ...).
// Each chunk is attended from scratch and the chunks are folded left to right into a running
// (output, log-sum-exp) state, always in that order and with the same arithmetic, so a row's
// result is bitwise the same whether its chunks ran on one thread or several, whatever else is
// in the batch, and whether a cascade attended its leading chunks (cascade_prefix writes the
// state after the shared prefix; paged_decode folds the row's own chunks onto it).
#include <ATen/Parallel.h>
#include <atomic>
#include <vector>
#ifdef __F16C__
#include <immintrin.h>
#endif

namespace {

constexpr int64_t kChunk = 256;   // tokens per chunk; a cascade prefix is a multiple of it

// Query rows [R, H, D] of any float dtype, read in place (row stride given, [H, D] contiguous).
struct QRows {
  const void* data;
  at::ScalarType dtype;
  int64_t row_stride;
  void load(int64_t r, int64_t off, int64_t count, float* dst) const {   // count floats of row r from `off`
    const int64_t pos = r * row_stride + off;
    if (dtype == at::kFloat) std::memcpy(dst, static_cast<const float*>(data) + pos, count * sizeof(float));
    else if (dtype == at::kBFloat16) to_float(static_cast<const at::BFloat16*>(data) + pos, dst, count);
    else to_float(static_cast<const at::Half*>(data) + pos, dst, count);
  }
  bool exact_bf16() const { return dtype == at::kBFloat16; }
};

// Per-thread buffers for passes of up to `heads` query heads.
struct Work {
  ChunkScratch chunk;
  std::vector<float> q, acc, m, l;
  Work(int64_t D, int64_t heads) : chunk(D, heads), q(heads * D), acc(heads * D), m(heads), l(heads) {}
};

// Folds one chunk's (m, l, acc) into a head's normalised state (o, lse); the empty state is
// (0, -inf), which a first fold replaces by the chunk's own normalised result exactly.
inline void fold(float* o, float* lse, float m, float l, const float* acc, int64_t D) {
  const float lc = m + std::log(l);
  const float mx = *lse > lc ? *lse : lc;
  const float wa = *lse == -std::numeric_limits<float>::infinity() ? 0.0f : std::exp(*lse - mx);
  const float wb = std::exp(lc - mx);
  const float s = wa + wb;
  const float inv_s = 1.0f / s, cb = wb / l;
  for (int64_t d = 0; d < D; ++d) o[d] = (o[d] * wa + acc[d] * cb) * inv_s;
  *lse = mx + std::log(s);
}

inline void clear_state(float* o, float* lse, int64_t heads, int64_t D) {
  std::fill(o, o + heads * D, 0.0f);
  std::fill(lse, lse + heads, -std::numeric_limits<float>::infinity());
}

// One pass: heads [g0, g0 + gn) of kv head h for the query rows given by `qrow(j)` (j < gn),
// over chunks [c0, c1) of a context of `len` tokens, folded into states (o(j), lse(j)).
// Tokens before `lo` are outside a sliding window: the first chunk starts there instead.
template <typename T, typename QRowOf, typename StateOf>
void attend_chunks(const QRows& q, int64_t gn, QRowOf qrow, const T* k, const T* v, const int64_t* pages,
                   int64_t len, int64_t c0, int64_t c1, int64_t ps, int64_t D, float scale, Work& w, StateOf state,
                   int64_t lo = 0) {
  for (int64_t j = 0; j < gn; ++j) {
    const auto [r, off] = qrow(j);
    q.load(r, off, D, w.q.data() + j * D);
  }
  for (int64_t c = c0; c < c1; ++c) {
    const ChunkSource<T> src{k, v, pages, ps, std::max(lo, c * kChunk), std::min(len, (c + 1) * kChunk), len, D};
    attend_chunk<T>(w.q.data(), gn, q.exact_bf16(), src, scale, w.chunk, w.m.data(), w.l.data(), w.acc.data());
    for (int64_t j = 0; j < gn; ++j) {
      const auto [o, lse] = state(j);
      fold(o, lse, w.m[j], w.l[j], w.acc.data() + j * D, D);
    }
  }
}

inline int64_t chunks_of(int64_t tokens) { return (tokens + kChunk - 1) / kChunk; }

// The matmul module's thread team (sgrun_abi::ParallelFn), once set_parallel has been given it; null:
// at::parallel_for.
std::atomic<sgrun_abi::ParallelFn> team_parallel{nullptr};

// Runs body(item, work) for items [0, n) with one Work per thread. Threads take the next item
// from a shared counter rather than a fixed share, so a thread the OS deschedules on a loaded
// machine does not hold the others up at the end (which thread runs an item changes nothing in
// its result). On the team, whose workers spin between jobs, problems from kTeamMinWork
// token-heads are split; on OpenMP only from ~32k, as waking its pool costs more than smaller
// ones take, and far more on a loaded machine.
constexpr int64_t kTeamMinWork = 1 << 9;

template <typename MakeWork, typename Body>
void for_items(int64_t n, int64_t work, MakeWork make_work, Body body) {
  if (n <= 0) return;
  const sgrun_abi::ParallelFn team = team_parallel.load(std::memory_order_acquire);
  const int64_t threads = at::get_num_threads();
  if (work < (team != nullptr ? kTeamMinWork : (1 << 15)) || n == 1 || threads == 1) {
    auto w = make_work();
    for (int64_t i = 0; i < n; ++i) body(i, w);
    return;
  }
  std::atomic<int64_t> next{0};
  auto loop = [&](int64_t, int64_t) {
    auto w = make_work();
    for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) body(i, w);
  };
  const int64_t loops = std::min<int64_t>(n, threads);
  if (team != nullptr) {
    using Loop = decltype(loop);
    team(loops, [](void* ctx, int64_t b, int64_t e) { (*static_cast<Loop*>(ctx))(b, e); }, &loop);
  } else {
    at::parallel_for(0, loops, 1, loop);
  }
}

// window > 0: a sliding window (the layer's): the row, at position len - 1, attends keys j with
// len - 1 - window < j <= len - 1, i.e. from lo = len - window; its chunks keep their fixed
// boundaries, the first cut at lo, so a row's result still depends on its own context alone.
// A window comes without a cascade (starts all 0: CppPagedAttention attends no shared prefix then).
template <typename T>
void decode_kernel(const QRows& q, const T* k, const T* v, const int64_t* table, const int64_t* lens,
                   const int64_t* starts, float* out, float* lse, int64_t R, int64_t KV, int64_t G, int64_t D,
                   int64_t N, int64_t ps, int64_t P, float scale, int64_t window = 0) {
  const auto lo_of = [&](int64_t r) { return window > 0 ? std::max(starts[r], lens[r] - window) : starts[r]; };
  int64_t work = 0, max_chunks = 0;
  for (int64_t r = 0; r < R; ++r) {
    work += (lens[r] - lo_of(r)) * KV * G;
    max_chunks = std::max(max_chunks, chunks_of(lens[r]) - lo_of(r) / kChunk);
  }
  for (int64_t r = 0; r < R; ++r)   // rows without a cascade prefix start from the empty state
    if (starts[r] == 0) clear_state(out + r * KV * G * D, lse + r * KV * G, KV * G, D);
  const int64_t threads = at::get_num_threads();
  const auto qrow = [&](int64_t r, int64_t h) { return [=](int64_t j) { return std::pair<int64_t, int64_t>{r, (h * G + j) * D}; }; };
  const auto state = [&](int64_t r, int64_t h) {
    return [=](int64_t j) { const int64_t i = (r * KV + h) * G + j; return std::pair<float*, float*>{out + i * D, lse + i}; };
  };
  if (R * KV >= 4 * threads || max_chunks <= 1) {   // enough (row, kv head) items: each folds its chunks itself
    for_items(R * KV, work, [&] { return Work(D, G); }, [&](int64_t item, Work& w) {
      const int64_t r = item / KV, h = item % KV;
      attend_chunks<T>(q, G, qrow(r, h), k + h * N * ps * D, v + h * N * ps * D, table + r * P, lens[r],
                       lo_of(r) / kChunk, chunks_of(lens[r]), ps, D, scale, w, state(r, h), lo_of(r));
    });
    return;
  }
  // Few rows (batch 1, a verify of one request): (row, kv head, chunk) items into per-chunk
  // states, then each row folds its chunk states in order. A chunk state folded onto the empty
  // state is the chunk's normalised result, so this is the same arithmetic as the loop above.
  const int64_t items = R * KV * max_chunks;
  std::vector<float> part_m(items * G), part_l(items * G), part_acc(items * G * D);
  for_items(items, work, [&] { return Work(D, G); }, [&](int64_t item, Work& w) {
    const int64_t c = item % max_chunks, h = (item / max_chunks) % KV, r = item / (max_chunks * KV);
    const int64_t chunk = lo_of(r) / kChunk + c;
    if (chunk >= chunks_of(lens[r])) return;
    for (int64_t j = 0; j < G; ++j) q.load(r, (h * G + j) * D, D, w.q.data() + j * D);
    const ChunkSource<T> src{k + h * N * ps * D, v + h * N * ps * D, table + r * P, ps, std::max(lo_of(r), chunk * kChunk),
                             std::min(lens[r], (chunk + 1) * kChunk), lens[r], D};
    attend_chunk<T>(w.q.data(), G, q.exact_bf16(), src, scale, w.chunk, part_m.data() + item * G,
                    part_l.data() + item * G, part_acc.data() + item * G * D);
  });
  for (int64_t r = 0; r < R; ++r)
    for (int64_t h = 0; h < KV; ++h)
      for (int64_t c = 0; c < chunks_of(lens[r]) - lo_of(r) / kChunk; ++c) {
        const int64_t item = (r * KV + h) * max_chunks + c;
        for (int64_t j = 0; j < G; ++j) {
          const int64_t i = (r * KV + h) * G + j;
          fold(out + i * D, lse + i, part_m[item * G + j], part_l[item * G + j], part_acc.data() + (item * G + j) * D, D);
        }
      }
}

// The members' queries stacked per kv head against one shared prefix of n tokens (whole chunks):
// one K/V read for all of them. Writes each member's state after the prefix into (out, lse).
template <typename T>
void prefix_kernel(const QRows& q, const T* k, const T* v, const int64_t* pages, int64_t n, const int64_t* members,
                   int64_t M, float* out, float* lse, int64_t KV, int64_t G, int64_t D, int64_t N, int64_t ps,
                   float scale) {
  const int64_t rows = M * G;
  for (int64_t i = 0; i < M; ++i) clear_state(out + members[i] * KV * G * D, lse + members[i] * KV * G, KV * G, D);
  // Split a head's stacked rows into parts only to keep every thread busy (each part re-reads the prefix).
  const int64_t threads = at::get_num_threads();
  int64_t parts = 1;
  if (KV < 2 * threads && rows > 8) parts = std::min<int64_t>((rows + 3) / 4, (2 * threads + KV - 1) / KV);
  const int64_t per_part = (rows + parts - 1) / parts;
  for_items(KV * parts, n * KV * rows, [&] { return Work(D, per_part); }, [&](int64_t item, Work& w) {
    const int64_t c = item % parts, h = item / parts;
    const int64_t j0 = c * per_part, jn = std::min(rows, j0 + per_part) - j0;
    if (jn <= 0) return;
    const auto qrow = [&](int64_t j) {
      const int64_t mem = (j0 + j) / G, g = (j0 + j) % G;
      return std::pair<int64_t, int64_t>{members[mem], (h * G + g) * D};
    };
    const auto state = [&](int64_t j) {
      const int64_t mem = (j0 + j) / G, g = (j0 + j) % G;
      const int64_t i = (members[mem] * KV + h) * G + g;
      return std::pair<float*, float*>{out + i * D, lse + i};
    };
    attend_chunks<T>(q, jn, qrow, k + h * N * ps * D, v + h * N * ps * D, pages, n, 0, n / kChunk, ps, D, scale,
                     w, state);
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

void check_state(const at::Tensor& q, int64_t KV, int64_t G, const at::Tensor& out, const at::Tensor& lse) {
  const int64_t D = q.size(2);
  TORCH_CHECK(out.scalar_type() == at::kFloat && out.is_contiguous() && out.numel() == q.size(0) * KV * G * D &&
              lse.scalar_type() == at::kFloat && lse.is_contiguous() && lse.numel() == q.size(0) * KV * G,
              "out/lse: float32 [R, KV, G, D] and [R, KV, G], contiguous");
}

#define SG_DISPATCH_CACHE(cache, CALL)                                                  \
  switch (cache.scalar_type()) {                                                        \
    case at::kFloat: { using T = float; CALL; break; }                                  \
    case at::kBFloat16: { using T = at::BFloat16; CALL; break; }                        \
    case at::kHalf: { using T = at::Half; CALL; break; }                                \
    default: TORCH_CHECK(false, "KV cache dtype must be float32, bfloat16 or float16"); \
  }

}  // namespace

// The chunk path a pool of `dtype` ("float32", "bfloat16", "float16") with `head_dim` takes in
// this build: "avx512_bf16", "avx2", "neon", "portable" or "any" (paged_chunk_attention.cpp's chunk_path).
std::string decode_path(const std::string& dtype, int64_t head_dim) {
  const at::ScalarType dt = dtype == "bfloat16" ? at::kBFloat16 : dtype == "float32" ? at::kFloat : at::kHalf;
  return chunk_path(dt, head_dim);
}

// Tokens per chunk: a cascade prefix must be a whole number of them.
int64_t chunk_tokens() { return kChunk; }

namespace {

// paged_decode's checks and kernel, without the GIL's release (decode_layer runs without it).
void paged_decode_unlocked(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                           const at::Tensor& table, const at::Tensor& lens, const at::Tensor& starts, double scale,
                           const at::Tensor& out, const at::Tensor& lse, int64_t window = 0) {
  const QRows qr = check_q(q);
  const int64_t R = q.size(0), D = q.size(2), KV = k_cache.size(0);
  check_cache(k_cache, v_cache, D);
  TORCH_CHECK(q.size(1) % KV == 0, "query heads must be a multiple of kv heads");
  TORCH_CHECK(table.scalar_type() == at::kLong && table.is_contiguous() && table.dim() == 2 && table.size(0) == R,
              "table: int64 [R, P]");
  TORCH_CHECK(lens.scalar_type() == at::kLong && lens.is_contiguous() && lens.numel() == R, "lens: int64 [R]");
  TORCH_CHECK(starts.scalar_type() == at::kLong && starts.is_contiguous() && starts.numel() == R, "starts: int64 [R]");
  const int64_t G = q.size(1) / KV, N = k_cache.size(1), ps = k_cache.size(2), P = table.size(1);
  check_state(q, KV, G, out, lse);
  const int64_t* lp = lens.data_ptr<int64_t>();
  const int64_t* sp = starts.data_ptr<int64_t>();
  for (int64_t r = 0; r < R; ++r) {
    TORCH_CHECK(lp[r] >= 0 && lp[r] <= P * ps, "context longer than its page table");
    TORCH_CHECK(sp[r] >= 0 && sp[r] <= lp[r] && sp[r] % kChunk == 0, "starts: whole chunks within the context");
    TORCH_CHECK(window <= 0 || sp[r] == 0, "a sliding window attends no cascade prefix (starts must be 0)");
  }
  SG_DISPATCH_CACHE(k_cache, decode_kernel<T>(qr, k_cache.data_ptr<T>(), v_cache.data_ptr<T>(), table.data_ptr<int64_t>(),
                                              lp, sp, out.data_ptr<float>(), lse.data_ptr<float>(), R, KV, G, D, N, ps, P,
                                              static_cast<float>(scale), window));
}

void write_kv_unlocked(const at::Tensor& k, const at::Tensor& v, const at::Tensor& k_cache, const at::Tensor& v_cache,
                       const at::Tensor& pages, const at::Tensor& offsets);

// sgrun_abi::DecodeLayerFn (decode_layer_abi.cpp): one layer's KV write and decode attention.
void decode_layer(const sgrun_abi::DecodeAttention& a, int64_t layer, const at::Tensor& q, const at::Tensor& k,
                  const at::Tensor& v) {
  TORCH_CHECK(layer >= 0 && layer < a.layers, "decode layer out of range");
  write_kv_unlocked(k, v, a.k_caches[layer], a.v_caches[layer], a.write_pages, a.write_offsets);
  paged_decode_unlocked(q, a.k_caches[layer], a.v_caches[layer], a.table, a.lens, a.starts, a.scale, a.out, a.lse,
                        a.windows != nullptr ? a.windows[layer] : 0);
}

}  // namespace

// q [R, H, D] (H = kv_heads x G); k_cache, v_cache [KV, N, ps, D]; table [R, P] int64; lens [R]
// int64; starts [R] int64: tokens already folded into (out, lse) by cascade_prefix (0, or a
// multiple of chunk_tokens()). Writes out [R, KV, G, D] and lse [R, KV, G] (float32, natural log).
void paged_decode(at::Tensor q, at::Tensor k_cache, at::Tensor v_cache, at::Tensor table, at::Tensor lens,
                  at::Tensor starts, double scale, at::Tensor out, at::Tensor lse) {
  pybind11::gil_scoped_release no_gil;   // the engine thread must not stall the server's threads
  paged_decode_unlocked(q, k_cache, v_cache, table, lens, starts, scale, out, lse);
}

// paged_decode under a sliding window of `window` tokens (0: none): each row attends only the last
// `window` tokens of its context (decode_kernel's comment); starts must be 0.
void paged_decode_window(at::Tensor q, at::Tensor k_cache, at::Tensor v_cache, at::Tensor table, at::Tensor lens,
                         at::Tensor starts, double scale, at::Tensor out, at::Tensor lse, int64_t window) {
  pybind11::gil_scoped_release no_gil;
  paged_decode_unlocked(q, k_cache, v_cache, table, lens, starts, scale, out, lse, window);
}

// From now on, split attention items over the thread team at `address` (the matmul module's
// team_parallel_address(), of the same torch build); 0: back to at::parallel_for.
void set_parallel(int64_t address) {
  team_parallel.store(reinterpret_cast<sgrun_abi::ParallelFn>(address), std::memory_order_release);
}

// The team set_parallel last gave (0: none, at::parallel_for), for tests and reports.
int64_t parallel_address() { return reinterpret_cast<int64_t>(team_parallel.load(std::memory_order_acquire)); }

// The address of decode_layer, a sgrun_abi::DecodeLayerFn, for the matmul module's decode forward.
int64_t decode_layer_address() { return reinterpret_cast<int64_t>(&decode_layer); }

// Attends the first n tokens of `pages` ([P] int64; n a multiple of chunk_tokens()) for the
// query rows `members` of q, writing their state after that prefix into (out, lse); paged_decode
// with starts[member] = n then folds each member's own tokens onto it.
void cascade_prefix(at::Tensor q, at::Tensor k_cache, at::Tensor v_cache, at::Tensor pages, int64_t n,
                    at::Tensor members, double scale, at::Tensor out, at::Tensor lse) {
  const QRows qr = check_q(q);
  const int64_t D = q.size(2), KV = k_cache.size(0);
  check_cache(k_cache, v_cache, D);
  const int64_t G = q.size(1) / KV, N = k_cache.size(1), ps = k_cache.size(2);
  TORCH_CHECK(pages.scalar_type() == at::kLong && pages.is_contiguous() && n > 0 && n <= pages.numel() * ps &&
              n % kChunk == 0, "pages: int64, covering n > 0 tokens, a multiple of chunk_tokens()");
  TORCH_CHECK(members.scalar_type() == at::kLong && members.is_contiguous(), "members: int64");
  check_state(q, KV, G, out, lse);
  const int64_t* mp = members.data_ptr<int64_t>();
  for (int64_t i = 0; i < members.numel(); ++i) TORCH_CHECK(mp[i] >= 0 && mp[i] < q.size(0), "member row out of range");
  pybind11::gil_scoped_release no_gil;
  SG_DISPATCH_CACHE(k_cache, prefix_kernel<T>(qr, k_cache.data_ptr<T>(), v_cache.data_ptr<T>(), pages.data_ptr<int64_t>(),
                                              n, mp, members.numel(), out.data_ptr<float>(), lse.data_ptr<float>(),
                                              KV, G, D, N, ps, static_cast<float>(scale)));
}

// Writes the new tokens' keys and values into the pool: row t of k / v ([T, KV, D], each head's D
// contiguous, any row and head strides: the narrowed q/k/v views of a fused projection) goes to
// page pages[t], offset offsets[t] of k_cache / v_cache ([KV, N, ps, D], the same dtype, or bf16 or
// float16 under float32 k / v: a float32 model's narrower KV cache, each value rounded to nearest
// even as torch's conversion does). The pool write the torch path does with two advanced-index
// assignments (~8 us each at one row, twice per layer), as plain row copies.
void write_kv(at::Tensor k, at::Tensor v, at::Tensor k_cache, at::Tensor v_cache, at::Tensor pages,
              at::Tensor offsets) {
  write_kv_unlocked(k, v, k_cache, v_cache, pages, offsets);
}

namespace {

// n float32 values as bf16, rounded to nearest even by c10::BFloat16's own conversion (a NaN
// becomes the quiet NaN 0x7FC0), so the pool holds what torch's .to(torch.bfloat16) would.
void round_row_to_bf16(const float* src, at::BFloat16* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = at::BFloat16(src[i]);
}

// n float32 values as float16, rounded to nearest even (c10::Half's conversion), saturated at
// +-65504: a key past float16's range keeps the largest finite value instead of becoming an
// infinity that would turn its row's scores into NaN (a NaN stays NaN).
// F16C converts 8 at a time (0.5 -> ~0.1 ms a layer for a 2,048-token chunk, Zen 4); max/min take
// the bound first so a NaN lane passes through (they return their second operand on NaN).
void round_row_to_half(const float* src, at::Half* dst, int64_t n) {
  constexpr float kMax = 65504.0f;
  int64_t i = 0;
#ifdef __F16C__
  const __m256 hi = _mm256_set1_ps(kMax), lo = _mm256_set1_ps(-kMax);
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_min_ps(hi, _mm256_max_ps(lo, _mm256_loadu_ps(src + i)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
  }
#endif
  for (; i < n; ++i) {
    const float x = src[i];
    dst[i] = at::Half(x > kMax ? kMax : x < -kMax ? -kMax : x);
  }
}

void write_kv_unlocked(const at::Tensor& k, const at::Tensor& v, const at::Tensor& k_cache, const at::Tensor& v_cache,
                       const at::Tensor& pages, const at::Tensor& offsets) {
  TORCH_CHECK(k.dim() == 3 && v.sizes() == k.sizes() && k.stride(2) == 1 && v.stride(2) == 1,
              "k, v: [T, KV, D] with contiguous head rows");
  const int64_t T = k.size(0), KV = k.size(1), D = k.size(2);
  check_cache(k_cache, v_cache, D);
  const bool narrows = k.scalar_type() == at::kFloat && k_cache.scalar_type() != at::kFloat;
  const bool to_half = narrows && k_cache.scalar_type() == at::kHalf;
  TORCH_CHECK(k_cache.size(0) == KV && v.scalar_type() == k.scalar_type() &&
                  (k.scalar_type() == k_cache.scalar_type() || (narrows && (to_half || k_cache.scalar_type() == at::kBFloat16))),
              "k, v: the pool's kv heads, and its dtype (or float32 into a bf16 or float16 pool)");
  TORCH_CHECK(pages.scalar_type() == at::kLong && offsets.scalar_type() == at::kLong && pages.is_contiguous() &&
                  offsets.is_contiguous() && pages.numel() == T && offsets.numel() == T,
              "pages, offsets: int64 [T]");
  const int64_t N = k_cache.size(1), ps = k_cache.size(2), es = k.element_size(), cs = k_cache.element_size();
  const int64_t* pp = pages.data_ptr<int64_t>();
  const int64_t* op = offsets.data_ptr<int64_t>();
  for (int64_t t = 0; t < T; ++t)
    TORCH_CHECK(pp[t] >= 0 && pp[t] < N && op[t] >= 0 && op[t] < ps, "write slot out of the pool");
  const auto* ks = static_cast<const char*>(k.data_ptr());
  const auto* vs = static_cast<const char*>(v.data_ptr());
  auto* kc = static_cast<char*>(k_cache.data_ptr());
  auto* vc = static_cast<char*>(v_cache.data_ptr());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < KV; ++h) {
      const int64_t dst = ((h * N + pp[t]) * ps + op[t]) * D * cs;
      const char* k_row = ks + (t * k.stride(0) + h * k.stride(1)) * es;
      const char* v_row = vs + (t * v.stride(0) + h * v.stride(1)) * es;
      if (to_half) {
        round_row_to_half(reinterpret_cast<const float*>(k_row), reinterpret_cast<at::Half*>(kc + dst), D);
        round_row_to_half(reinterpret_cast<const float*>(v_row), reinterpret_cast<at::Half*>(vc + dst), D);
      } else if (narrows) {
        round_row_to_bf16(reinterpret_cast<const float*>(k_row), reinterpret_cast<at::BFloat16*>(kc + dst), D);
        round_row_to_bf16(reinterpret_cast<const float*>(v_row), reinterpret_cast<at::BFloat16*>(vc + dst), D);
      } else {
        std::memcpy(kc + dst, k_row, D * es);
        std::memcpy(vc + dst, v_row, D * es);
      }
    }
}

}  // namespace
