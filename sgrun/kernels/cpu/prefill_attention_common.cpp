// Causal prefill attention over the paged KV pool on the CPU, the parts every path shares (first
// of the sources prefill_attention.py builds as one unit; see that file for the design):
// the segments of a call, the thread pool's shared counter, and the packed walk every vector path
// (prefill_attention_avx512_bf16.cpp, prefill_attention_avx2.cpp) runs:
//   1. pack: each (segment, kv head)'s context K and V are copied once out of the pages into the
//      path's layout, zero-padded to a kKeyBlock boundary; under a sliding window only from the
//      key block holding the segment's first row's window start (`first`), so a chunk after a long
//      cached prefix packs the window, not the prefix;
//   2. attend: tiles of P::kRows query rows (positions x the GQA group's heads, which share one kv
//      head, so one packed K/V load serves all of them) walk the keys in blocks of kKeyBlock with
//      an online softmax, from the block holding the tile's earliest window start to the block
//      holding its last causal key: blocks before every row's window and above the diagonal are
//      skipped, not masked, so a windowed layer costs the window, not the prompt.
// A row at position p attends keys j with lo <= j <= p, lo = max(0, p - window + 1) under a window
// of `window` tokens (transformers' sliding mask, p - window < j), 0 without one.
// A row's result depends only on its own query, position and context: keys outside [lo, p] get
// probability exactly 0 and a block with none of its keys leaves its state exactly as it was
// (before its first key: the empty state, zeros; after: rescale factor 2^0 = 1), so which rows
// share its tile, and how many rows the chunk has, change nothing.
#include <ATen/Parallel.h>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>
// SGRUN_ISA=scalar (build.py) promises no intrinsics path; on aarch64 its flags (-march=armv8-a)
// still enable NEON, so the NEON files check SG_SCALAR_LEVEL as well as __ARM_NEON.
#define SG_ISA_IS_scalar 1
#define SG_ISA_CAT2(a, b) a##b
#define SG_ISA_CAT(a, b) SG_ISA_CAT2(a, b)
#if defined(SGRUN_ISA) && SG_ISA_CAT(SG_ISA_IS_, SGRUN_ISA) == 1
#define SG_SCALAR_LEVEL 1
#endif

namespace {

constexpr int64_t kKeyBlock = 64;   // keys per online-softmax step

// The first key a row at position `pos` attends: 0 without a window (window 0), else the window's start.
inline int64_t window_start(int64_t pos, int64_t window) {
  return window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
}

struct Segments {
  const int64_t* table;   // [S, table_stride] page ids
  int64_t table_stride;
  const int64_t* q_start;
  const int64_t* q_len;
  const int64_t* ctx_len;
  int64_t count;
};

// Runs `work(i)` for i in [0, n) on torch's thread pool; items are taken in order from a shared
// counter, so callers list the heaviest first and the threads finish together.
template <class F>
void run_dynamic(int64_t n, int64_t min_parallel, const F& work) {
  if (n <= 0) return;
  const int64_t threads = std::min<int64_t>(at::get_num_threads(), n);
  if (threads <= 1 || n < min_parallel) {
    for (int64_t i = 0; i < n; ++i) work(i);
    return;
  }
  std::atomic<int64_t> next{0};
  at::parallel_for(0, threads, 1, [&](int64_t, int64_t) {
    for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) work(i);
  });
}

// The packed walk of one vector path P, which provides:
//   Elem: the query's and the output's element (float, or uint16_t for the raw bf16 bits);
//   KVElem: the pool's (the same, or bf16 bits under float32 queries); Word: a scratch element;
//   kRows: query rows per tile;
//   words(keys, D): scratch Words for one (segment, kv head) context of `keys` keys (a multiple of kKeyBlock);
//   pack(kc, vc, kv_head_stride, page_stride, ps, pages, ctx, first, kvh, D, block, base, keys): keys
//     first + [16 block, 16 block + 16) of that context into its scratch `base` (padding: zeros);
//   attend(qrow, pos, lo, n, base, keys, D, scale_log2, orow): kRows rows (the first n real, the rest
//     repeats of the last) against the packed context, row r attending packed keys [lo[r], pos[r]]
//     (positions counted from the first packed key); scale_log2 = scale * log2(e).
template <class P>
void attend_packed(const typename P::Elem* q, int64_t q_stride, const typename P::KVElem* kc,
                   const typename P::KVElem* vc, int64_t kv_head_stride, int64_t page_stride, int64_t ps,
                   const Segments& seg, int64_t H, int64_t KV, int64_t D, float scale, typename P::Elem* out,
                   int64_t out_stride, int64_t window = 0) {
  using Elem = typename P::Elem;
  using Word = typename P::Word;
  constexpr int R = P::kRows;
  const int64_t G = H / KV;
  // Phase 1: pack every (segment, kv head)'s context, from the key block of its first row's window start.
  std::vector<int64_t> keys(seg.count), first_key(seg.count), base(seg.count + 1, 0);
  for (int64_t s = 0; s < seg.count; ++s) {
    first_key[s] = window_start(seg.ctx_len[s] - seg.q_len[s], window) / kKeyBlock * kKeyBlock;
    keys[s] = (seg.ctx_len[s] - first_key[s] + kKeyBlock - 1) / kKeyBlock * kKeyBlock;
    base[s + 1] = base[s] + KV * P::words(keys[s], D);
  }
  // Uninitialized: pack writes every word, the padding included.
  std::unique_ptr<Word[]> scratch(new Word[base[seg.count]]);
  auto packed = [&](int64_t s, int64_t kvh) { return scratch.get() + base[s] + kvh * P::words(keys[s], D); };
  std::vector<int64_t> pack_first(seg.count + 1, 0);
  for (int64_t s = 0; s < seg.count; ++s) pack_first[s + 1] = pack_first[s] + KV * (keys[s] / 16);
  run_dynamic(pack_first[seg.count], 16, [&](int64_t item) {
    const int64_t s = std::upper_bound(pack_first.begin(), pack_first.end(), item) - pack_first.begin() - 1;
    const int64_t nb = keys[s] / 16, kvh = (item - pack_first[s]) / nb, block = (item - pack_first[s]) % nb;
    P::pack(kc, vc, kv_head_stride, page_stride, ps, seg.table + s * seg.table_stride, seg.ctx_len[s], first_key[s],
            kvh, D, block, packed(s, kvh), keys[s]);
  });
  // Phase 2: tiles of R rows (row = position * G + head in group), the longest contexts first
  // within each (segment, kv head).
  std::vector<int64_t> tiles(seg.count), first(seg.count + 1, 0);
  for (int64_t s = 0; s < seg.count; ++s) {
    tiles[s] = (seg.q_len[s] * G + R - 1) / R;
    first[s + 1] = first[s] + KV * tiles[s];
  }
  const float scale_log2 = scale * 1.4426950408889634f;
  run_dynamic(first[seg.count], 4, [&](int64_t item) {
    const int64_t s = std::upper_bound(first.begin(), first.end(), item) - first.begin() - 1;
    const int64_t kvh = (item - first[s]) / tiles[s], tile = tiles[s] - 1 - (item - first[s]) % tiles[s];
    const int64_t rows = seg.q_len[s] * G;
    const Elem* qrow[R];
    Elem* orow[R];
    int64_t pos[R], lo[R];   // counted from the first packed key
    int n = 0;
    for (int r = 0; r < R; ++r) {
      const int64_t row = std::min(tile * R + r, rows - 1);   // a short last tile repeats its last row
      if (tile * R + r < rows) ++n;
      const int64_t t = row / G, h = kvh * G + row % G;
      qrow[r] = q + (seg.q_start[s] + t) * q_stride + h * D;
      orow[r] = out + (seg.q_start[s] + t) * out_stride + h * D;
      const int64_t p = seg.ctx_len[s] - seg.q_len[s] + t;
      pos[r] = p - first_key[s];
      lo[r] = window_start(p, window) - first_key[s];
    }
    P::attend(qrow, pos, lo, n, packed(s, kvh), keys[s], D, scale_log2, orow);
  });
}

}  // namespace
