// The lazy DFA's core in C++ (native_dfa.py is its Python face): determinisation of a ByteNFA
// with calls, and a state's token mask in one pass over the vocabulary trie.
//
// The semantics are lazy_dfa.py's, step for step: a configuration is (NFA state, return stack),
// a DFA state the closed set of configurations after some input, transitions are filled on first
// use. Here a stack frame is an interned id and a configuration one 64-bit word, so a new DFA
// state costs a few microseconds instead of lazy_dfa.py's 30-75 us of tuples and frozensets.
//
// The mask walk: the trie is laid out in depth-first (sorted byte) order, so a subtree is one
// contiguous run of nodes and of tokens. The walk is one forward scan that jumps over a subtree
// the moment its node's state is dead; where every byte below a node is of one category (text,
// i.e. printable ASCII but `"` and `\`; URI-unreserved; alphanumeric; digits; ...) and the
// automaton takes any run of that category and length from the node's state (a string body, a
// URI path, a number), the whole subtree's tokens are allowed at once without visiting it.
// Transitions are filled per group of byte classes that the same NFA edges read (one target()
// for a string body's ~50 text classes).
//
// A C ABI for ctypes (Python's headers, no torch's: it builds in a few seconds). Not
// thread-safe: the Python face calls it under its own lock. Only sgrun_dfa_new_py touches Python
// objects; everything else is plain C++ and runs with the GIL released.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <queue>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace {

constexpr int ERR_CLOSURE = -2;   // a closure over max_closure configurations (left recursion?)
constexpr int ERR_STATES = -3;    // more DFA states than max_states
constexpr int UNKNOWN = -1;

struct Frame {
    int32_t kind;   // 0: a call returning to `ret`; 1: the k-th body of a counted repeat of fid
    int32_t fid, ret, lo, hi, k;  // hi < 0: unbounded
    int32_t depth, parent;        // parent: frame id, -1 for the empty stack
    bool operator==(const Frame& o) const {
        return kind == o.kind && fid == o.fid && ret == o.ret && lo == o.lo && hi == o.hi && k == o.k &&
               depth == o.depth && parent == o.parent;
    }
};

struct FrameHash {
    size_t operator()(const Frame& f) const {
        uint64_t h = 1469598103934665603ull;
        const int32_t* p = &f.kind;
        for (int i = 0; i < 8; ++i) { h ^= (uint32_t)p[i]; h *= 1099511628211ull; }
        return (size_t)h;
    }
};

struct VecHash {
    size_t operator()(const std::vector<uint64_t>& v) const {
        uint64_t h = 1469598103934665603ull ^ v.size();
        for (uint64_t x : v) { h ^= x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); }
        return (size_t)h;
    }
};

inline uint64_t config(int32_t s, int32_t stk) { return ((uint64_t)(uint32_t)s << 32) | (uint32_t)(stk + 1); }
inline int32_t config_state(uint64_t c) { return (int32_t)(c >> 32); }
inline int32_t config_stack(uint64_t c) { return (int32_t)(uint32_t)c - 1; }

struct Dfa {
    // the NFA, in CSR form
    std::vector<int32_t> edge_off, edge_tgt, edge_mid;  // edge_mid: the edge's byte mask, by id
    std::vector<uint64_t> mask_words;                   // 4 words per mask id
    std::vector<int32_t> mask_cls_off, mask_cls;        // the classes inside each mask
    std::vector<int32_t> eps_off, eps_tgt, call_off, call_data;  // call: kind(2|4), fid, ret, lo, hi
    std::vector<int32_t> frag_start, end_of;
    int32_t root_end, max_depth, max_states, max_closure;
    int32_t ncls;
    std::vector<uint8_t> class_of;  // 256
    std::vector<uint8_t> class_rep;  // a byte of each class
    // the lazily built DFA
    std::vector<Frame> frames;
    std::unordered_map<Frame, int32_t, FrameHash> frame_index;
    std::vector<std::vector<uint64_t>> sets;
    std::unordered_map<std::vector<uint64_t>, int32_t, VecHash> set_index;
    std::unordered_map<std::vector<uint64_t>, int32_t, VecHash> moved_memo;
    size_t max_moved_memo = 200000;
    std::vector<uint8_t> accepting;
    std::vector<int32_t> table;  // [states * ncls], UNKNOWN until filled
    // per state and byte category: what runs_live knows, (lo << 2) | (uniform << 1) | exact
    std::vector<int32_t> run;
    // per state and byte category: where all its bytes go (0: all die), -1 apart, -3 some die, -2 unknown
    std::vector<int32_t> cat_next;
    std::vector<int32_t> cat_cls[7];  // per category (N_CATS): the classes holding its bytes
    int64_t work = 0;            // configurations closed, for the compile budget's tick
    bool exhausted = false;
    int32_t error = 0;

    int32_t intern_frame(const Frame& f) {
        auto it = frame_index.find(f);
        if (it != frame_index.end()) return it->second;
        int32_t id = (int32_t)frames.size();
        frames.push_back(f);
        frame_index.emplace(f, id);
        return id;
    }

    bool has_edges(int32_t s) const { return edge_off[s + 1] > edge_off[s]; }

    // epsilon / call / return closure, then only the configurations that can read a byte (or
    // accept): lazy_dfa.LazyDFA._closure
    // (scratch kept across calls: a closure is a few configurations, and a hash set and three
    // vectors were allocated per call, hashing and malloc the largest parts of a new state's cost
    // under perf; past CLOSURE_SMALL configurations membership moves from a linear scan to the
    // hash set)
    static constexpr size_t CLOSURE_SMALL = 48;
    std::vector<uint64_t> cl_seen, todo, nxt;
    std::unordered_set<uint64_t> cl_big;
    bool cl_large = false;
    bool cl_add(uint64_t x) {  // true when x is new to this closure
        if (cl_large) {
            if (!cl_big.insert(x).second) return false;
        } else {
            for (uint64_t y : cl_seen)
                if (y == x) return false;
            if (cl_seen.size() + 1 > CLOSURE_SMALL) {
                cl_large = true;
                cl_big.clear();
                cl_big.insert(cl_seen.begin(), cl_seen.end());
                cl_big.insert(x);
            }
        }
        cl_seen.push_back(x);
        return true;
    }

    bool closure(std::vector<uint64_t>& configs, std::vector<uint64_t>& out) {
        cl_seen.clear();
        todo.clear();
        cl_large = false;
        for (uint64_t x : configs)
            if (cl_add(x)) todo.push_back(x);
        while (!todo.empty()) {
            uint64_t c = todo.back();
            todo.pop_back();
            int32_t s = config_state(c), stk = config_stack(c);
            nxt.clear();
            for (int32_t i = eps_off[s]; i < eps_off[s + 1]; ++i) nxt.push_back(config(eps_tgt[i], stk));
            int32_t depth = stk >= 0 ? frames[stk].depth : 0;
            for (int32_t i = call_off[s]; i < call_off[s + 1]; ++i) {
                const int32_t* cd = &call_data[5 * i];
                int32_t fid = cd[1], ret = cd[2], lo = cd[3], hi = cd[4];
                if (cd[0] == 2) {
                    if (depth < max_depth)
                        nxt.push_back(config(frag_start[fid], intern_frame({0, -1, ret, 0, 0, 0, depth + 1, stk})));
                    continue;
                }
                if (lo == 0) nxt.push_back(config(ret, stk));
                if ((hi < 0 || hi > 0) && depth < max_depth)
                    nxt.push_back(config(frag_start[fid], intern_frame({1, fid, ret, lo, hi, 1, depth + 1, stk})));
            }
            if (stk >= 0 && end_of[s] >= 0) {
                Frame top = frames[stk];
                if (top.kind == 0) {
                    nxt.push_back(config(top.ret, top.parent));
                } else {  // the k-th body of a counted repeat ended: leave it, or start body k + 1
                    if (top.k >= top.lo) nxt.push_back(config(top.ret, top.parent));
                    if (top.hi < 0 || top.k < top.hi) {
                        int32_t more = (top.hi >= 0 || top.k < top.lo) ? top.k + 1 : top.k;  // unbounded: saturates at lo
                        nxt.push_back(config(frag_start[top.fid],
                                             intern_frame({1, top.fid, top.ret, top.lo, top.hi, more, top.depth, top.parent})));
                    }
                }
            }
            for (uint64_t x : nxt)
                if (cl_add(x)) todo.push_back(x);
            if ((int64_t)cl_seen.size() > max_closure) { error = ERR_CLOSURE; return false; }
        }
        work += (int64_t)cl_seen.size();
        out.clear();
        for (uint64_t x : cl_seen) {
            int32_t s = config_state(x);
            if (has_edges(s) || (s == root_end && config_stack(x) < 0)) out.push_back(x);
        }
        std::sort(out.begin(), out.end());
        return true;
    }

    int32_t intern(std::vector<uint64_t>& set) {
        auto it = set_index.find(set);
        if (it != set_index.end()) return it->second;
        if (set.empty() && !sets.empty()) return 0;
        int32_t sid = (int32_t)sets.size();
        if (sid >= max_states) { exhausted = true; error = ERR_STATES; return ERR_STATES; }
        bool acc = false;
        for (uint64_t c : set) acc |= (config_state(c) == root_end && config_stack(c) < 0);
        sets.push_back(set);
        set_index.emplace(set, sid);
        accepting.push_back(acc);
        table.resize((size_t)(sid + 1) * ncls, UNKNOWN);
        run.insert(run.end(), 7, 0);  // (N_CATS; lo 0: the empty run lives)
        cat_next.insert(cat_next.end(), 7, -2);
        return sid;
    }

    // the state a set of moved configurations closes to (0: dead); < 0 on error
    int32_t target(std::vector<uint64_t>& moved) {
        if (moved.empty()) return 0;
        std::sort(moved.begin(), moved.end());
        moved.erase(std::unique(moved.begin(), moved.end()), moved.end());
        auto it = moved_memo.find(moved);
        if (it != moved_memo.end()) return it->second;
        std::vector<uint64_t> closed;
        if (!closure(moved, closed)) return error;
        int32_t sid = intern(closed);
        if (sid < 0) return sid;
        if (moved_memo.size() > max_moved_memo) moved_memo.clear();
        moved_memo.emplace(moved, sid);
        return sid;
    }

    // fill every class (only == nullptr) or the listed ones of one state's row
    int32_t fill_row(int32_t sid, const int32_t* only, int32_t n_only) {
        std::vector<std::vector<uint64_t>> moved(ncls);
        for (uint64_t c : sets[sid]) {
            int32_t s = config_state(c), stk = config_stack(c);
            for (int32_t e = edge_off[s]; e < edge_off[s + 1]; ++e) {
                const int32_t mid = edge_mid[e];
                for (int32_t k = mask_cls_off[mid]; k < mask_cls_off[mid + 1]; ++k)
                    moved[mask_cls[k]].push_back(config(edge_tgt[e], stk));
            }
        }
        int32_t n = only ? n_only : ncls;
        for (int32_t i = 0; i < n; ++i) {
            int32_t c = only ? only[i] : i;
            if (table[(size_t)sid * ncls + c] != UNKNOWN) continue;
            int32_t t = target(moved[c]);
            if (t < 0) return t;
            table[(size_t)sid * ncls + c] = t;  // (index again: interning may have grown the table)
        }
        return 0;
    }

    int32_t fill(int32_t sid, int32_t cls) {
        int32_t got = table[(size_t)sid * ncls + cls];
        if (got != UNKNOWN) return got;
        std::vector<uint64_t> moved;
        const uint8_t b = class_rep[cls];
        for (uint64_t c : sets[sid]) {
            int32_t s = config_state(c), stk = config_stack(c);
            for (int32_t e = edge_off[s]; e < edge_off[s + 1]; ++e)
                if ((mask_words[4 * (size_t)edge_mid[e] + (b >> 6)] >> (b & 63)) & 1)
                    moved.push_back(config(edge_tgt[e], stk));
        }
        int32_t t = target(moved);
        if (t < 0) return t;
        table[(size_t)sid * ncls + cls] = t;
        return t;
    }

    // Classes that the same NFA edges of a state read move to the same configurations, so one
    // target() serves them all: a string body's ~50 text classes (a schema's keys split the bytes
    // into many classes) are one group, its quote and backslash two more. edge_groups numbers the
    // edges of sid's configurations (at most 64; false where there are more) and gives each class
    // the bit set of the edges that read it (group_sig), and each edge its moved configuration.
    std::vector<uint64_t> group_sig, edge_cfg, moved_scratch;
    int32_t groups_of = -1;  // the state group_sig describes (the walk fills siblings from one state)
    bool groups_fit = false;
    bool edge_groups(int32_t sid) {
        if (sid == groups_of) return groups_fit;
        groups_of = sid;
        groups_fit = false;
        const auto& set = sets[sid];
        int32_t ne = 0;
        for (uint64_t c : set) ne += edge_off[config_state(c) + 1] - edge_off[config_state(c)];
        if (ne > 64) return false;
        group_sig.assign(ncls, 0);
        edge_cfg.clear();
        for (uint64_t c : set) {
            int32_t s = config_state(c), stk = config_stack(c);
            for (int32_t e = edge_off[s]; e < edge_off[s + 1]; ++e) {
                const uint64_t bit = 1ull << edge_cfg.size();
                edge_cfg.push_back(config(edge_tgt[e], stk));
                const int32_t mid = edge_mid[e];
                for (int32_t k = mask_cls_off[mid]; k < mask_cls_off[mid + 1]; ++k) group_sig[mask_cls[k]] |= bit;
            }
        }
        groups_fit = true;
        return true;
    }

    int32_t group_target(uint64_t sig) {
        if (!sig) return 0;
        moved_scratch.clear();
        for (uint64_t b = sig; b; b &= b - 1) moved_scratch.push_back(edge_cfg[__builtin_ctzll(b)]);
        return target(moved_scratch);
    }

    // fill the listed classes of sid's row that are still unknown, one target() per group
    int32_t fill_classes(int32_t sid, const int32_t* cls, int32_t n) {
        int32_t i = 0;
        while (i < n && table[(size_t)sid * ncls + cls[i]] != UNKNOWN) ++i;
        if (i == n) return 0;  // (runs_live asks again for every state it passes)
        if (!edge_groups(sid)) {
            for (int32_t i = 0; i < n; ++i) {
                int32_t t = step(sid, cls[i]);
                if (t < 0) return t;
            }
            return 0;
        }
        uint64_t seen_sig[8];
        int32_t seen_t[8], n_seen = 0;
        for (; i < n; ++i) {
            const int32_t c = cls[i];
            if (table[(size_t)sid * ncls + c] != UNKNOWN) continue;
            const uint64_t sig = group_sig[c];
            int32_t t = -1;
            for (int32_t j = 0; j < n_seen; ++j)
                if (seen_sig[j] == sig) { t = seen_t[j]; break; }
            if (t < 0) {
                t = group_target(sig);
                if (t < 0) return t;
                if (n_seen < 8) { seen_sig[n_seen] = sig; seen_t[n_seen++] = t; }
            }
            table[(size_t)sid * ncls + c] = t;  // (index again: interning may have grown the table)
        }
        return 0;
    }

    // the target of (sid, cls), filled for every unknown class of its group too (the trie walk
    // meets them among the node's siblings)
    int32_t fill_group(int32_t sid, int32_t cls) {
        if (!edge_groups(sid)) return fill(sid, cls);
        const uint64_t sig = group_sig[cls];
        int32_t t = group_target(sig);
        if (t < 0) return t;
        int32_t* row = &table[(size_t)sid * ncls];
        for (int32_t c = 0; c < ncls; ++c)
            if (group_sig[c] == sig && row[c] == UNKNOWN) row[c] = t;
        return t;
    }

    inline int32_t step(int32_t sid, int32_t cls) {
        int32_t t = table[(size_t)sid * ncls + cls];
        return t != UNKNOWN ? t : fill(sid, cls);
    }

    // lazy_dfa.LazyDFA.uniform_target over the byte set `mask`: decided from the NFA edges (each
    // edge holds all of the set or none of it), -4 where they tell its bytes apart
    int32_t uniform(int32_t sid, const uint64_t* mask) {
        std::vector<uint64_t> moved;
        for (uint64_t c : sets[sid]) {
            int32_t s = config_state(c), stk = config_stack(c);
            for (int32_t e = edge_off[s]; e < edge_off[s + 1]; ++e) {
                const uint64_t* m = &mask_words[4 * (size_t)edge_mid[e]];
                bool any = false, all = true;
                for (int w = 0; w < 4; ++w) {
                    uint64_t x = m[w] & mask[w];
                    any |= x != 0;
                    all &= x == mask[w];
                }
                if (!any) continue;
                if (!all) return -4;
                moved.push_back(config(edge_tgt[e], stk));
            }
        }
        return target(moved);
    }
};

// The vocabulary trie in depth-first (sorted bytes) order: a node's subtree is the run of nodes
// up to `next`, and its tokens the run of sorted positions tok_lo .. nodes[next].tok_lo, the
// first of them (up to the following node's tok_lo) the tokens that end at the node. The mask
// walk is then one forward scan that skips a subtree by jumping to `next`, reading the nodes in
// memory order, where a level-by-level layout sent every descent elsewhere in memory.
struct Node {
    uint32_t next;     // the node after this subtree
    uint32_t tok_lo;   // the subtree's first token, as a position in sorted order
    uint32_t below;    // deepest descendant's depth - the node's
    uint32_t depth : 24;  // the root bytes are depth 0
    uint32_t byte : 8;
    uint8_t cats;      // the byte categories (category_of) that hold every byte strictly below
};

struct Trie {
    int32_t words = 0, max_depth = 0;
    int32_t max_cat_len[7] = {0, 0, 0, 0, 0, 0, 0};  // (N_CATS) the longest run of one category ending a token
    std::vector<Node> nodes;          // preorder, then one sentinel (tok_lo: every token)
    std::vector<int32_t> sorted_ids;  // token ids in sorted order; tok_lo indexes it
    std::vector<uint32_t> tok_len;    // by sorted position: the token's length in bytes
    std::vector<uint32_t> all_ids;    // the bitmask of every token id in the trie
};

inline bool is_text(uint8_t b) { return b >= 0x20 && b < 0x7F && b != 0x22 && b != 0x5C; }

// Byte categories for the walk's shortcut, widest first: text (printable ASCII but `"` and `\`,
// a JSON string body's plain bytes), URI-unreserved [A-Za-z0-9._~-], [A-Za-z0-9], [a-z0-9],
// [0-9], [a-z], [A-Z]. A string body takes any text; a URI host or path, an e-mail, a package
// name, a currency code or a number takes only the narrower ones, and there a text-only
// shortcut never fired (a `format: uri` state walked 29k trie nodes, measured).
constexpr int N_CATS = 7;
inline uint8_t category_of(uint8_t b) {
    if (!is_text(b)) return 0;
    const bool digit = b >= '0' && b <= '9', lower = b >= 'a' && b <= 'z', upper = b >= 'A' && b <= 'Z';
    uint8_t m = 1;
    if (digit || lower || upper || b == '.' || b == '_' || b == '~' || b == '-') m |= 2;
    if (digit || lower || upper) m |= 4;
    if (digit || lower) m |= 8;
    if (digit) m |= 16;
    if (lower) m |= 32;
    if (upper) m |= 64;
    return m;
}

// Does every run of at most `need` bytes of category `cat` keep the automaton alive from q?
// Decided breadth-first over the states those bytes reach, level by level (a string body: one
// state per level, or the same set again, which stays alive for ever), no deeper than `need`:
// the walk asks at each depth of a string for the depth below, and a search to the longest
// token from every depth built states quadratically (133 for one mask of a maxLength string,
// measured). What a search learns is kept as a lower bound for every state it met: a state
// reached in j bytes lives at least L - j more where the start lives L. Returns 1 or 0, < 0 on
// error. `levels`, when given, collects the states of levels 1..need (where allowed tokens end,
// for the warm-up).
constexpr int32_t RUN_BUDGET = 4096;  // state visits one search may make

const std::vector<int32_t>& category_classes(Dfa& d, int cat) {
    std::vector<int32_t>& got = d.cat_cls[cat];
    if (got.empty()) {
        std::vector<uint8_t> has(d.ncls, 0);
        for (int b = 0; b < 256; ++b)
            if ((category_of((uint8_t)b) >> cat) & 1) has[d.class_of[b]] = 1;
        for (int32_t c = 0; c < d.ncls; ++c)
            if (has[c]) got.push_back(c);
    }
    return got;
}

int64_t g_searches = 0, g_levels = 0;
int32_t runs_live(Dfa& d, const Trie& t, int32_t q, int cat, int32_t need, std::vector<int32_t>* levels = nullptr) {
    const int32_t known = d.run[(size_t)q * N_CATS + cat];
    if (!levels) {
        if ((known >> 2) >= need) return 1;
        if (known & 1) return 0;  // exact: some run of (known >> 2) + 1 bytes dies
    }
    const std::vector<int32_t>& cls = category_classes(d, cat);
    const int32_t cap = std::min(need, t.max_cat_len[cat]);
    ++g_searches;
    std::vector<int32_t> all{q}, level_end{1};  // the levels' states, one after another
    std::vector<int32_t> next;
    int32_t visits = 0, lo = cap;  // every run of <= lo bytes lives
    bool exact = false, forever = false, uniform = true;  // uniform: every run one byte longer than lo dies
    for (int32_t k = 0; k < cap; ++k) {
        next.clear();
        uniform = true;
        const int32_t from = k ? level_end[k - 1] : 0, to_end = level_end[k];
        for (int32_t i = from; i < to_end; ++i) {
            const int32_t s = all[i];
            ++g_levels;
            int32_t& same = d.cat_next[(size_t)s * N_CATS + cat];
            if (same == -2) {  // once per state: where the category's bytes go (a string body: all to one state)
                int32_t filled = d.fill_classes(s, cls.data(), (int32_t)cls.size());
                if (filled < 0) return filled;
                const int32_t* row = &d.table[(size_t)s * d.ncls];
                int32_t u = row[cls[0]];
                bool any_dead = false, all_dead = true;
                for (int32_t c : cls) {
                    any_dead |= row[c] == 0;
                    all_dead &= row[c] == 0;
                    if (row[c] != u) u = -1;
                }
                u = all_dead ? 0 : any_dead ? -3 : u;
                d.cat_next[(size_t)s * N_CATS + cat] = u;  // (the fills may have moved `same`)
            }
            const int32_t u = d.cat_next[(size_t)s * N_CATS + cat];
            if (u == 0 || u == -3) {  // a run of k + 1 bytes dies: finish the level, to tell whether every one does
                lo = k;
                exact = true;
                uniform &= u == 0;
                continue;
            }
            uniform = false;  // (a state of this level lives on)
            if (exact) continue;
            if (u > 0) {
                next.push_back(u);
            } else {
                const int32_t* row = &d.table[(size_t)s * d.ncls];
                for (int32_t c : cls)
                    if (next.empty() || next.back() != row[c]) next.push_back(row[c]);
            }
            visits += 1;
        }
        if (exact) break;
        std::sort(next.begin(), next.end());
        next.erase(std::unique(next.begin(), next.end()), next.end());
        if (levels) levels->insert(levels->end(), next.begin(), next.end());
        if ((int32_t)next.size() == to_end - from && std::equal(next.begin(), next.end(), all.begin() + from)) {
            forever = true;  // the same states for ever: alive at any length
            break;
        }
        all.insert(all.end(), next.begin(), next.end());
        level_end.push_back((int32_t)all.size());
        if (visits > RUN_BUDGET) { lo = k + 1; break; }  // checked this far
    }
    // what the search proved, for q and (as lower bounds) for every state it passed
    if (forever) lo = 1 << 20;
    for (size_t k = 0; k < level_end.size(); ++k) {
        const int32_t from = k ? level_end[k - 1] : 0;
        const int32_t bound = forever ? lo : lo - (int32_t)k;
        if (bound <= 0) break;
        for (int32_t i = from; i < level_end[k]; ++i) {
            int32_t& m = d.run[(size_t)all[i] * N_CATS + cat];
            if (!(m & 1) && (m >> 2) < bound) m = bound << 2;
        }
    }
    if (exact) d.run[(size_t)q * N_CATS + cat] = (lo << 2) | (uniform ? 2 : 0) | 1;
    return lo >= need ? 1 : 0;
}


// the shared tail of the two constructors below
void* dfa_init(Dfa* d, int32_t n_masks, int32_t root_start, int32_t root_end, int32_t ncls, const uint8_t* class_of,
               const uint8_t* class_rep, int32_t max_depth, int32_t max_states, int32_t max_closure, int32_t* initial);
}  // namespace

// nfa_build.cpp's NFA, read in place (the same struct there)
struct SgrunNfaView {
    const int32_t *edge_off, *edge_tgt, *edge_mid, *eps_off, *eps_tgt, *call_off, *call_data, *frag_start, *end_of;
    const uint64_t* mask_words;
    int32_t n_states, n_frags, n_edges, n_eps, n_calls, n_masks;
};
extern "C" void sgrun_nfa_view(void* p, SgrunNfaView* v);

int64_t g_visits = 0, g_shortcuts = 0;

// (a portable popcount: built for the architecture's baseline, __builtin_popcountll is a libgcc
// call on x86-64, ~2.6% of the first-request mask walks under perf, on every mask's 768 words)
inline int64_t popcount64(uint64_t x) {
    x -= (x >> 1) & 0x5555555555555555ull;
    x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
    x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0full;
    return (int64_t)((x * 0x0101010101010101ull) >> 56);
}

// The four 64-bit words of a byte mask (a Python int of 256 bits), through the public C API;
// false with a Python exception set where it is not an int. escape_lift.cpp reads its masks
// with it too (declared there: both files are one library).
bool sgrun_mask_words(PyObject* m, uint64_t* w) {
    if (!PyLong_Check(m)) {
        PyErr_SetString(PyExc_TypeError, "an edge mask is not an int");
        return false;
    }
    PyObject* x = m;
    Py_INCREF(x);
    PyObject* sixty_four = PyLong_FromLong(64);
    for (int k = 0; k < 4 && x; ++k) {
        w[k] = PyLong_AsUnsignedLongLongMask(x);
        PyObject* y = PyNumber_Rshift(x, sixty_four);
        Py_DECREF(x);
        x = y;
    }
    Py_XDECREF(x);
    Py_DECREF(sixty_four);
    return !PyErr_Occurred();
}

extern "C" {
int64_t sgrun_debug(int32_t which) { return which == 0 ? g_visits : which == 1 ? g_shortcuts : which == 2 ? g_searches : g_levels; }

// The automaton of a lazy_dfa.py-shaped ByteNFA, read straight from its Python lists (edges[s]:
// [(mask, target)], eps[s]: [target], calls[s]: [(fid, ret)] or [(fid, ret, lo, hi)], end_of:
// {state: fid}); mask_ids maps every edge mask to its row of mask_words (4 words each). Exporting
// a 30k-state NFA through numpy arrays cost ~80 ms of Python; this is a C loop over the lists.
// Called through ctypes.PyDLL (the GIL held). Returns null with a Python exception set on a
// malformed NFA.
void* sgrun_dfa_new_py(PyObject* edges, PyObject* eps, PyObject* calls, PyObject* frag_start, PyObject* end_of,
                       PyObject* mask_ids, const uint64_t* mask_words, int32_t n_masks, int32_t root_start,
                       int32_t root_end, int32_t ncls, const uint8_t* class_of, const uint8_t* class_rep,
                       int32_t max_depth, int32_t max_states, int32_t max_closure, int32_t* initial) {
    if (!PyList_Check(edges) || !PyList_Check(eps) || !PyList_Check(calls) || !PyList_Check(frag_start) ||
        !PyDict_Check(end_of) || !PyDict_Check(mask_ids)) {
        PyErr_SetString(PyExc_TypeError, "sgrun_dfa_new_py: not a ByteNFA's lists");
        return nullptr;
    }
    Dfa* d = new Dfa();
    const Py_ssize_t n = PyList_GET_SIZE(edges);
    std::vector<uint64_t> extra;  // the words of masks found missing from mask_ids
    auto as_int = [](PyObject* o) -> int32_t { return (int32_t)PyLong_AsLong(o); };
    auto fail = [&](const char* what) -> void* {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, what);
        delete d;
        return nullptr;
    };
    if (PyList_GET_SIZE(eps) != n || PyList_GET_SIZE(calls) != n) return fail("edges, eps and calls differ in length");
    d->edge_off.reserve(n + 1);
    d->edge_off.push_back(0);
    d->eps_off.push_back(0);
    d->call_off.push_back(0);
    for (Py_ssize_t s = 0; s < n; ++s) {
        PyObject* es = PyList_GET_ITEM(edges, s);
        if (!PyList_Check(es)) return fail("an edge list is not a list");
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(es); ++k) {
            PyObject* e = PyList_GET_ITEM(es, k);
            if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) != 2) return fail("an edge is not (mask, target)");
            PyObject* m = PyTuple_GET_ITEM(e, 0);
            PyObject* mid = PyDict_GetItem(mask_ids, m);
            if (mid) {
                d->edge_mid.push_back(as_int(mid));
            } else {  // a mask the NFA did not record (all_masks): its words, and a new id
                uint64_t w[4];
                if (!sgrun_mask_words(m, w)) return fail("bad edge mask");
                int32_t id = n_masks + (int32_t)(extra.size() / 4);
                extra.insert(extra.end(), w, w + 4);
                PyObject* idobj = PyLong_FromLong(id);
                PyDict_SetItem(mask_ids, m, idobj);
                Py_DECREF(idobj);
                d->edge_mid.push_back(id);
            }
            d->edge_tgt.push_back(as_int(PyTuple_GET_ITEM(e, 1)));
        }
        d->edge_off.push_back((int32_t)d->edge_tgt.size());
        PyObject* ps = PyList_GET_ITEM(eps, s);
        if (!PyList_Check(ps)) return fail("an epsilon list is not a list");
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(ps); ++k) d->eps_tgt.push_back(as_int(PyList_GET_ITEM(ps, k)));
        d->eps_off.push_back((int32_t)d->eps_tgt.size());
        PyObject* cs = PyList_GET_ITEM(calls, s);
        if (!PyList_Check(cs)) return fail("a call list is not a list");
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(cs); ++k) {
            PyObject* c = PyList_GET_ITEM(cs, k);
            if (!PyTuple_Check(c) || (PyTuple_GET_SIZE(c) != 2 && PyTuple_GET_SIZE(c) != 4)) return fail("a call is not (fid, ret) or (fid, ret, lo, hi)");
            if (PyTuple_GET_SIZE(c) == 2) {
                int32_t row[5] = {2, as_int(PyTuple_GET_ITEM(c, 0)), as_int(PyTuple_GET_ITEM(c, 1)), 0, 0};
                d->call_data.insert(d->call_data.end(), row, row + 5);
            } else {
                PyObject* hi = PyTuple_GET_ITEM(c, 3);
                int32_t row[5] = {4, as_int(PyTuple_GET_ITEM(c, 0)), as_int(PyTuple_GET_ITEM(c, 1)),
                                  as_int(PyTuple_GET_ITEM(c, 2)), hi == Py_None ? -1 : as_int(hi)};
                d->call_data.insert(d->call_data.end(), row, row + 5);
            }
        }
        d->call_off.push_back((int32_t)(d->call_data.size() / 5));
    }
    for (Py_ssize_t f = 0; f < PyList_GET_SIZE(frag_start); ++f) d->frag_start.push_back(as_int(PyList_GET_ITEM(frag_start, f)));
    d->end_of.assign(n, -1);
    PyObject *key, *value;
    Py_ssize_t at = 0;
    while (PyDict_Next(end_of, &at, &key, &value)) {
        int32_t s = as_int(key);
        if (s >= 0 && s < n) d->end_of[s] = as_int(value);
    }
    if (PyErr_Occurred()) return fail("bad NFA data");
    for (int32_t t : d->edge_tgt) if (t < 0 || t >= n) return fail("an edge target is out of range");
    for (int32_t t : d->eps_tgt) if (t < 0 || t >= n) return fail("an epsilon target is out of range");
    d->mask_words.assign(mask_words, mask_words + 4 * (size_t)n_masks);
    d->mask_words.insert(d->mask_words.end(), extra.begin(), extra.end());
    n_masks += (int32_t)(extra.size() / 4);
    for (int32_t m : d->edge_mid) if (m < 0 || m >= n_masks) return fail("a mask id is out of range");
    return dfa_init(d, n_masks, root_start, root_end, ncls, class_of, class_rep, max_depth, max_states, max_closure,
                    initial);
}

// A new automaton over an NFA built by nfa_build.cpp (its arrays copied; the NFA may go).
void* sgrun_dfa_new_nfa(void* nfa, int32_t root, int32_t ncls, const uint8_t* class_of, const uint8_t* class_rep,
                        int32_t max_depth, int32_t max_states, int32_t max_closure, int32_t* initial) {
    SgrunNfaView v;
    sgrun_nfa_view(nfa, &v);
    if (root < 0 || root >= v.n_frags) return nullptr;
    Dfa* d = new Dfa();
    d->edge_off.assign(v.edge_off, v.edge_off + v.n_states + 1);
    d->edge_tgt.assign(v.edge_tgt, v.edge_tgt + v.n_edges);
    d->edge_mid.assign(v.edge_mid, v.edge_mid + v.n_edges);
    d->eps_off.assign(v.eps_off, v.eps_off + v.n_states + 1);
    d->eps_tgt.assign(v.eps_tgt, v.eps_tgt + v.n_eps);
    d->call_off.assign(v.call_off, v.call_off + v.n_states + 1);
    d->call_data.assign(v.call_data, v.call_data + 5 * (size_t)v.n_calls);
    d->frag_start.assign(v.frag_start, v.frag_start + v.n_frags);
    d->end_of.assign(v.end_of, v.end_of + v.n_states);
    d->mask_words.assign(v.mask_words, v.mask_words + 4 * (size_t)v.n_masks);
    int32_t root_start = v.frag_start[root], root_end = -1;
    for (int32_t s = 0; s < v.n_states; ++s) if (v.end_of[s] == root) root_end = s;
    return dfa_init(d, v.n_masks, root_start, root_end, ncls, class_of, class_rep, max_depth, max_states,
                    max_closure, initial);
}

// The NFA's size as the automaton holds it: [states, fragments].
void sgrun_dfa_nfa_size(void* dp, int32_t* out) {
    Dfa& d = *static_cast<Dfa*>(dp);
    out[0] = (int32_t)d.edge_off.size() - 1;
    out[1] = (int32_t)d.frag_start.size();
}

}  // extern "C"

namespace {
void* dfa_init(Dfa* d, int32_t n_masks, int32_t root_start, int32_t root_end, int32_t ncls, const uint8_t* class_of,
               const uint8_t* class_rep, int32_t max_depth, int32_t max_states, int32_t max_closure, int32_t* initial) {
    d->mask_cls_off.push_back(0);
    for (int32_t m = 0; m < n_masks; ++m) {  // masks are unions of classes: a class is in iff its byte is
        const uint64_t* w = &d->mask_words[4 * (size_t)m];
        for (int32_t c = 0; c < ncls; ++c) {
            uint8_t b = class_rep[c];
            if ((w[b >> 6] >> (b & 63)) & 1) d->mask_cls.push_back(c);
        }
        d->mask_cls_off.push_back((int32_t)d->mask_cls.size());
    }
    d->root_end = root_end;
    d->ncls = ncls;
    d->class_of.assign(class_of, class_of + 256);
    d->class_rep.assign(class_rep, class_rep + ncls);
    d->max_depth = max_depth;
    d->max_states = max_states;
    d->max_closure = max_closure;
    std::vector<uint64_t> empty;
    d->intern(empty);  // dead state 0
    for (int32_t c = 0; c < ncls; ++c) d->table[c] = 0;
    std::vector<uint64_t> start{config(root_start, -1)}, closed;
    if (!d->closure(start, closed)) { *initial = d->error; return d; }
    *initial = d->intern(closed);
    return d;
}
}  // namespace

extern "C" {
void sgrun_dfa_free(void* p) { delete static_cast<Dfa*>(p); }

// shortest_completion.NfaDistances over the NFA this automaton holds: per NFA state the fewest
// bytes to the end of its own fragment (a call costs lo times the called fragment's shortest
// string, a plain call once), per fragment its shortest string; HUGE_VAL where none. The same
// passes as the Python, step for step: each fragment's states found from its start (its end
// not expanded), the reverse edges, groups of the call graph callee first (Tarjan, callees in
// sorted order), a backward Dijkstra per fragment, a recursive group iterated until it
// settles. Why here: the budget computes this once per constraint on its first request, whose
// set-up took 3 ms at the median real-world-like schema and 257-286 ms at p99 with this pass in
// Python, most of it this pass (10.3 ms a constraint on average in Python, 0.65 ms here). Returns 0, or -1 where the sizes asked for are not this NFA's.
int32_t sgrun_dfa_nfa_distances(void* dp, double* dist, int32_t n_states, double* shortest, int32_t n_frags) {
    Dfa& d = *static_cast<Dfa*>(dp);
    const int32_t n = (int32_t)d.edge_off.size() - 1, nf = (int32_t)d.frag_start.size();
    if (n != n_states || nf != n_frags) return -1;
    std::vector<int32_t> frag_end(nf, -1);
    for (int32_t s = 0; s < n; ++s)
        if (d.end_of[s] >= 0 && d.end_of[s] < nf) frag_end[d.end_of[s]] = s;
    struct Back { int32_t src, w; };
    struct BackCall { int32_t src, fid, lo; };
    std::vector<std::vector<Back>> back(n);
    std::vector<std::vector<BackCall>> back_calls(n);
    std::vector<std::vector<int32_t>> members(nf), callees(nf);
    std::vector<int32_t> mark(n, -1), todo;
    for (int32_t f = 0; f < nf; ++f) {
        const int32_t start = d.frag_start[f], end = frag_end[f];
        auto visit = [&](int32_t t) {
            if (mark[t] != f) { mark[t] = f; members[f].push_back(t); todo.push_back(t); }
        };
        mark[start] = f;
        members[f].push_back(start);
        if (end >= 0 && end != start) { mark[end] = f; members[f].push_back(end); }
        todo.assign(1, start);
        while (!todo.empty()) {
            const int32_t st = todo.back();
            todo.pop_back();
            for (int32_t e = d.edge_off[st]; e < d.edge_off[st + 1]; ++e) {
                back[d.edge_tgt[e]].push_back({st, 1});
                visit(d.edge_tgt[e]);
            }
            for (int32_t e = d.eps_off[st]; e < d.eps_off[st + 1]; ++e) {
                back[d.eps_tgt[e]].push_back({st, 0});
                visit(d.eps_tgt[e]);
            }
            for (int32_t c = d.call_off[st]; c < d.call_off[st + 1]; ++c) {
                const int32_t* cd = &d.call_data[5 * (size_t)c];
                callees[f].push_back(cd[1]);
                back_calls[cd[2]].push_back({st, cd[1], cd[0] == 2 ? 1 : cd[3]});
                visit(cd[2]);
            }
        }
        std::sort(callees[f].begin(), callees[f].end());
        callees[f].erase(std::unique(callees[f].begin(), callees[f].end()), callees[f].end());
    }
    // call-graph groups, callees before callers (shortest_completion._callee_first_groups)
    std::vector<std::vector<int32_t>> groups;
    {
        std::vector<int32_t> index(nf, -1), low(nf, 0), stack;
        std::vector<char> on(nf, 0);
        int32_t counter = 0;
        for (int32_t root = 0; root < nf; ++root) {
            if (index[root] >= 0) continue;
            std::vector<std::pair<int32_t, size_t>> work{{root, 0}};
            index[root] = low[root] = counter++;
            stack.push_back(root);
            on[root] = 1;
            while (!work.empty()) {
                const int32_t v = work.back().first;
                size_t& it = work.back().second;
                bool advanced = false;
                while (it < callees[v].size()) {
                    const int32_t w = callees[v][it++];
                    if (w < 0 || w >= nf) continue;
                    if (index[w] < 0) {
                        index[w] = low[w] = counter++;
                        stack.push_back(w);
                        on[w] = 1;
                        work.push_back({w, 0});
                        advanced = true;
                        break;
                    }
                    if (on[w]) low[v] = std::min(low[v], index[w]);
                }
                if (advanced) continue;
                work.pop_back();
                if (!work.empty()) low[work.back().first] = std::min(low[work.back().first], low[v]);
                if (low[v] == index[v]) {
                    std::vector<int32_t> group;
                    while (true) {
                        const int32_t w = stack.back();
                        stack.pop_back();
                        on[w] = 0;
                        group.push_back(w);
                        if (w == v) break;
                    }
                    groups.push_back(std::move(group));
                }
            }
        }
    }
    const double inf = HUGE_VAL;
    std::fill(dist, dist + n, inf);
    std::fill(shortest, shortest + nf, inf);
    using Item = std::pair<double, int32_t>;
    std::priority_queue<Item, std::vector<Item>, std::greater<Item>> heap;
    auto distances = [&](int32_t f) {  // backward Dijkstra from the fragment's end over its own edges
        for (int32_t st : members[f]) dist[st] = inf;
        const int32_t end = frag_end[f];
        if (end < 0) return;
        dist[end] = 0;
        heap.push({0.0, end});
        while (!heap.empty()) {
            const auto [dd, st] = heap.top();
            heap.pop();
            if (dd > dist[st]) continue;
            for (const Back& b : back[st]) {
                const double nd = dd + b.w;
                if (nd < dist[b.src]) { dist[b.src] = nd; heap.push({nd, b.src}); }
            }
            for (const BackCall& c : back_calls[st]) {
                const double nd = dd + (c.lo == 0 ? 0.0 : c.lo * shortest[c.fid]);
                if (nd < dist[c.src]) { dist[c.src] = nd; heap.push({nd, c.src}); }
            }
        }
    };
    for (const auto& group : groups) {
        const bool recursive = group.size() > 1 ||
            std::binary_search(callees[group[0]].begin(), callees[group[0]].end(), group[0]);
        while (true) {
            bool changed = false;
            for (int32_t f : group) {
                distances(f);
                const double got = dist[d.frag_start[f]];
                if (got < shortest[f]) { shortest[f] = got; changed = true; }
            }
            if (!(changed && recursive)) break;
        }
    }
    return 0;
}

int32_t sgrun_dfa_num_states(void* p) { return (int32_t)static_cast<Dfa*>(p)->sets.size(); }
int32_t* sgrun_dfa_table(void* p) { return static_cast<Dfa*>(p)->table.data(); }
uint8_t* sgrun_dfa_accepting(void* p) { return static_cast<Dfa*>(p)->accepting.data(); }
int64_t sgrun_dfa_take_work(void* p) {
    Dfa* d = static_cast<Dfa*>(p);
    int64_t w = d->work;
    d->work = 0;
    return w;
}
int32_t sgrun_dfa_exhausted(void* p) { return static_cast<Dfa*>(p)->exhausted; }
void sgrun_dfa_set_max_states(void* p, int32_t n) { static_cast<Dfa*>(p)->max_states = n; }

int32_t sgrun_dfa_fill(void* p, int32_t sid, int32_t cls) { return static_cast<Dfa*>(p)->fill(sid, cls); }

int32_t sgrun_dfa_fill_row(void* p, int32_t sid, const int32_t* only, int32_t n_only) {
    return static_cast<Dfa*>(p)->fill_row(sid, only, n_only);
}

// the state after n bytes from sid (0: dead), < 0 on error
int32_t sgrun_dfa_step_bytes(void* p, int32_t sid, const char* data, int32_t n) {
    Dfa* d = static_cast<Dfa*>(p);
    int32_t s = sid;
    for (int32_t i = 0; i < n && s > 0; ++i) s = d->step(s, d->class_of[(uint8_t)data[i]]);
    return s;
}

// pairs: sids[i], classes[i]
int32_t sgrun_dfa_fill_pairs(void* p, const int64_t* sids, const int64_t* classes, int64_t n) {
    Dfa* d = static_cast<Dfa*>(p);
    for (int64_t i = 0; i < n; ++i) {
        int32_t t = d->fill((int32_t)sids[i], (int32_t)classes[i]);
        if (t < 0) return t;
    }
    return 0;
}

int32_t sgrun_dfa_uniform(void* p, int32_t sid, const uint64_t* mask) {
    return static_cast<Dfa*>(p)->uniform(sid, mask);
}

// configurations of one state: writes up to cap (state, stack) pairs, returns how many it has
int32_t sgrun_dfa_configs(void* p, int32_t sid, int32_t* out, int32_t cap) {
    Dfa* d = static_cast<Dfa*>(p);
    const auto& set = d->sets[sid];
    for (size_t i = 0; i < set.size() && (int32_t)i < cap; ++i) {
        out[2 * i] = config_state(set[i]);
        out[2 * i + 1] = config_stack(set[i]);
    }
    return (int32_t)set.size();
}

// one stack frame: kind, fid, ret, lo, hi, k, depth, parent
void sgrun_dfa_frame(void* p, int32_t id, int32_t* out) {
    const Frame& f = static_cast<Dfa*>(p)->frames[id];
    std::memcpy(out, &f, sizeof(Frame));
}

// tokens: n ids in sorted byte order, their bytes concatenated (offsets[n + 1])
void* sgrun_trie_new(int32_t n, const int32_t* ids, const uint8_t* data, const int64_t* offsets, int32_t words) {
    Trie* t = new Trie();
    t->words = words;
    t->sorted_ids.assign(ids, ids + n);
    t->tok_len.resize(n);
    for (int32_t i = 0; i < n; ++i) t->tok_len[i] = (uint32_t)(offsets[i + 1] - offsets[i]);
    t->all_ids.assign(words, 0);
    for (int32_t i = 0; i < n; ++i)
        if (ids[i] < words * 32) t->all_ids[ids[i] >> 5] |= 1u << (ids[i] & 31);
    // token i adds the nodes of its bytes past the prefix it shares with token i - 1
    std::vector<int32_t> open;  // the node at each depth of the current path
    std::vector<int32_t> below;
    std::vector<uint8_t> below_cats;
    auto& nodes = t->nodes;
    for (int32_t i = 0; i < n; ++i) {
        const uint8_t* s = data + offsets[i];
        int32_t len = (int32_t)(offsets[i + 1] - offsets[i]);
        below_cats.assign(len + 1, 0xFF);  // [j]: the categories holding every byte from j on
        for (int32_t k = len - 1; k >= 0; --k) below_cats[k] = below_cats[k + 1] & category_of(s[k]);
        for (int c = 0; c < N_CATS; ++c) {  // the longest run of the category that ends a token
            int32_t j = len;
            while (j > 0 && ((below_cats[j - 1] >> c) & 1)) --j;
            t->max_cat_len[c] = std::max(t->max_cat_len[c], len - j);
        }
        int32_t common = 0;
        if (i > 0) {
            const uint8_t* p = data + offsets[i - 1];
            int32_t plen = (int32_t)(offsets[i] - offsets[i - 1]);
            while (common < std::min(plen, len) && p[common] == s[common]) ++common;
        }
        while ((int32_t)open.size() > common) {  // close the nodes the new token does not share
            nodes[open.back()].next = (uint32_t)nodes.size();
            open.pop_back();
        }
        for (int32_t k = common; k < len; ++k) {
            open.push_back((int32_t)nodes.size());
            nodes.push_back(Node{0, (uint32_t)i, 0, (uint32_t)k, s[k], (uint8_t)((1 << N_CATS) - 1)});
            below.push_back(0);
        }
        t->max_depth = std::max(t->max_depth, len);
        for (int32_t k = 0; k < len; ++k) {  // every open node's subtree now holds token i
            const int32_t at = open[k];
            below[at] = std::max(below[at], len - (k + 1));
            nodes[at].cats &= below_cats[k + 1];  // the categories of the bytes strictly below node k
        }
    }
    while (!open.empty()) {
        nodes[open.back()].next = (uint32_t)nodes.size();
        open.pop_back();
    }
    for (size_t k = 0; k < nodes.size(); ++k) nodes[k].below = (uint32_t)below[k];
    nodes.push_back(Node{(uint32_t)nodes.size() + 1, (uint32_t)n, 0, 0, 0, 0});  // the sentinel
    return t;
}

void sgrun_trie_free(void* p) { delete static_cast<Trie*>(p); }

// The mask of `state` into words (zeroed by the caller): every token whose bytes keep the
// automaton alive. succ (may be null, cap succ_cap): the states allowed tokens end in, for the
// compile-time warm-up. Returns the number of successors written (or 0), < 0 on error.
int32_t sgrun_dfa_mask(void* dp, void* tp, int32_t state, uint32_t* words, int32_t* succ, int32_t succ_cap) {
    Dfa& d = *static_cast<Dfa*>(dp);
    const Trie& t = *static_cast<Trie*>(tp);
    std::unordered_set<int32_t> ends;
    const int32_t ncls = d.ncls;
    const uint8_t* class_of = d.class_of.data();
    const int32_t* ids = t.sorted_ids.data();
    const int32_t limit = t.words * 32;
    // allowed tokens are marked by their position in sorted order, where a subtree is one range
    // (a few word fills), and turned into ids at the end from whichever side is smaller: a string
    // body allows ~all tokens, so its mask is every id but the few it forbids
    const int32_t n_tok = (int32_t)t.sorted_ids.size();
    std::vector<uint64_t> pos((size_t)n_tok / 64 + 1, 0);
    auto allow = [&](int32_t lo, int32_t hi) {
        if (lo >= hi) return;
        int32_t wl = lo >> 6, wh = (hi - 1) >> 6;
        uint64_t ml = ~0ull << (lo & 63), mh = ~0ull >> (63 - ((hi - 1) & 63));
        if (wl == wh) { pos[wl] |= ml & mh; return; }
        pos[wl] |= ml;
        for (int32_t w = wl + 1; w < wh; ++w) pos[w] = ~0ull;
        pos[wh] |= mh;
    };
    const Node* nodes = t.nodes.data();
    const int32_t n_nodes = (int32_t)t.nodes.size() - 1;  // (the sentinel last)
    std::vector<int32_t> at_depth((size_t)t.max_depth + 1);  // the state before each depth's byte
    at_depth[0] = state;
    g_visits = g_shortcuts = g_searches = g_levels = 0;
    for (int32_t i = 0; i < n_nodes;) {
        const Node& nd = nodes[i];
        const int32_t from = at_depth[nd.depth];
        ++g_visits;
        const int32_t cls = class_of[nd.byte];
        int32_t q = d.table[(size_t)from * ncls + cls];
        if (q == UNKNOWN) {
            q = d.fill_group(from, cls);
            if (q < 0) return q;
        }
        if (q == 0) { i = (int32_t)nd.next; continue; }  // dead: skip the subtree
        const int32_t own = (int32_t)nodes[i + 1].tok_lo - (int32_t)nd.tok_lo;
        if (own) {
            allow(nd.tok_lo, nd.tok_lo + own);
            if (succ) ends.insert(q);
        }
        if (nd.next == (uint32_t)i + 1) { ++i; continue; }  // a leaf
        const int32_t tok_hi = (int32_t)nodes[nd.next].tok_lo;
        if (nd.cats && tok_hi - (int32_t)nd.tok_lo - own > 2) {
            int cat = -1;  // the widest category of the bytes below in which every run that long lives
            for (int c = 0; c < N_CATS && cat < 0; ++c) {
                if (!((nd.cats >> c) & 1)) continue;
                int32_t live = runs_live(d, t, q, c, (int32_t)nd.below);
                if (live < 0) return live;
                if (live) cat = c;
            }
            if (cat >= 0) {  // every token below is allowed
                allow(nd.tok_lo + own, tok_hi);
                ++g_shortcuts;
                if (succ) {  // they end among the states those bytes reach from q
                    std::vector<int32_t> lv;
                    int32_t got = runs_live(d, t, q, cat, (int32_t)nd.below, &lv);
                    if (got < 0) return got;
                    ends.insert(lv.begin(), lv.end());
                }
                i = (int32_t)nd.next;
                continue;
            }
            // no category lives that long; where every run of one dies at the same length (a
            // maxLength string near its end), the tokens below up to that length live, the rest die
            int lim = -1;
            for (int c = 0; c < N_CATS && lim < 0; ++c) {
                const int32_t m = d.run[(size_t)q * N_CATS + c];
                if (((nd.cats >> c) & 1) && (m & 3) == 3) lim = (int32_t)nd.depth + 1 + (m >> 2);
            }
            if (lim >= 0) {
                const uint32_t* len = t.tok_len.data();
                for (int32_t p = (int32_t)nd.tok_lo + own; p < tok_hi; ++p)
                    if ((int32_t)len[p] <= lim) pos[p >> 6] |= 1ull << (p & 63);
                ++g_shortcuts;
                if (succ) {  // they end among the states of the runs' levels
                    std::vector<int32_t> lv;
                    for (int c = 0; c < N_CATS; ++c) {
                        const int32_t m = d.run[(size_t)q * N_CATS + c];
                        if (((nd.cats >> c) & 1) && (m & 3) == 3) {
                            int32_t got = runs_live(d, t, q, c, m >> 2, &lv);
                            if (got < 0) return got;
                            break;
                        }
                    }
                    ends.insert(lv.begin(), lv.end());
                }
                i = (int32_t)nd.next;
                continue;
            }
        }
        at_depth[nd.depth + 1] = q;
        ++i;
    }
    int64_t count = 0;
    for (uint64_t w : pos) count += popcount64(w);
    if (2 * count <= n_tok) {
        for (size_t w = 0; w < pos.size(); ++w)
            for (uint64_t bits = pos[w]; bits; bits &= bits - 1) {
                int32_t id = ids[64 * w + __builtin_ctzll(bits)];
                if (id < limit) words[id >> 5] |= 1u << (id & 31);
            }
    } else {
        std::memcpy(words, t.all_ids.data(), sizeof(uint32_t) * t.words);
        for (size_t w = 0; w < pos.size(); ++w) {
            uint64_t off = ~pos[w];
            if (64 * w + 64 > (size_t)n_tok) off &= (n_tok - 64 * w >= 64) ? ~0ull : ((1ull << (n_tok - 64 * w)) - 1);
            for (; off; off &= off - 1) {
                int32_t id = ids[64 * w + __builtin_ctzll(off)];
                if (id < limit) words[id >> 5] &= ~(1u << (id & 31));
            }
        }
    }
    if (!succ) return 0;
    int32_t k = 0;
    for (int32_t s : ends) {
        if (k >= succ_cap) break;
        succ[k++] = s;
    }
    return k;
}

}  // extern "C"
