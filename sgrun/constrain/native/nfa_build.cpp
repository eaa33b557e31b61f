// The byte NFA built in C++ from the program nfa_program.py writes (its Python face: native_nfa.py).
//
// The program is the constraint's node tree as integer opcodes (children before parents), the
// literals' bytes, the edge masks' words and the fragment definitions; this file replays
// nfa_program._ListBuilder (itself byte_nfa.ByteNFA.build's construction) state for state and
// edge for edge, into CSR arrays that the lazy DFA core (lazy_dfa_core.cpp, sgrun_dfa_new_nfa)
// reads directly: the NFA is never Python lists. ByteNFA.trim's graph pass (prune what cannot
// reach its fragment's end) runs here too when the program asks.
//
// The buffer comes from our own serializer, but it is read as untrusted: every offset, count,
// mask id, fragment id and state is bounds-checked, children must precede their parent (no
// cycles, bounded recursion), and the build stops at max_states states, MAX_EDGES edges and a
// cap on build steps, with an error code, never a crash or an unbounded allocation.

#include <cstdint>
#include <cstring>
#include <new>
#include <vector>

namespace {

enum Op { OP_BYTES = 1, OP_BYTESET, OP_CHARS, OP_SEQ, OP_ALT, OP_REP, OP_CALL, OP_CCALL, OP_DFA, OP_MEMBERS, OP_TABLE };
constexpr int32_t ERR_PROGRAM = -1;   // a malformed program
constexpr int32_t ERR_STATES = -3;    // more NFA states than max_states
constexpr int32_t ERR_EDGES = -5;     // more edges than max_edges
constexpr int32_t ERR_STEPS = -6;     // more build steps than max_steps (a program that loops on nothing)
constexpr int MAX_DEPTH = 20000;      // nested nodes (the Python serializer is bounded by its recursion limit)

struct Fail {
    int32_t code;
};

}  // namespace

// The built NFA: the CSR arrays the lazy DFA core copies (the layout of its Dfa's NFA part).
struct SgrunNfa {
    std::vector<int32_t> edge_off, edge_tgt, edge_mid, eps_off, eps_tgt, call_off, call_data;  // call: kind(2|4), fid, ret, lo, hi
    std::vector<int32_t> frag_start, end_of;
    std::vector<uint64_t> mask_words;  // 4 per mask id
    std::vector<uint8_t> nonempty;     // per fragment (after the trim; all 1 without one)
    int64_t steps = 0;
};

namespace {

struct Builder {
    const int32_t* code;
    int64_t ncode;
    const uint8_t* pool;
    int64_t npool;
    int32_t nmasks, nfrags, max_states;
    int64_t max_edges, max_steps;
    int32_t nstates = 0;
    int64_t steps = 0;
    int depth = 0;
    // edges in append order; a stable sort by source gives ByteNFA's per-state lists
    std::vector<int32_t> e_src, e_mid, e_tgt, p_src, p_tgt, c_src;
    std::vector<int32_t> c_data;  // 5 per call

    int32_t at(int64_t i) const {
        if (i < 0 || i >= ncode) throw Fail{ERR_PROGRAM};
        return code[i];
    }
    int32_t mask(int64_t i) const {
        int32_t m = at(i);
        if (m < 0 || m >= nmasks) throw Fail{ERR_PROGRAM};
        return m;
    }
    int32_t fid(int64_t i) const {
        int32_t f = at(i);
        if (f < 0 || f >= nfrags) throw Fail{ERR_PROGRAM};
        return f;
    }
    void step() {
        if (++steps > max_steps) throw Fail{ERR_STEPS};
    }
    int32_t new_states(int64_t n) {
        if (n < 0 || (int64_t)nstates + n > max_states) throw Fail{ERR_STATES};
        int32_t first = nstates;
        nstates += (int32_t)n;
        return first;
    }
    void room() {
        if ((int64_t)(e_src.size() + p_src.size() + c_src.size()) >= max_edges) throw Fail{ERR_EDGES};
    }
    void edge(int32_t s, int32_t m, int32_t t) { room(); e_src.push_back(s); e_mid.push_back(m); e_tgt.push_back(t); }
    void eps(int32_t s, int32_t t) { room(); p_src.push_back(s); p_tgt.push_back(t); }
    void call(int32_t s, int32_t kind, int32_t f, int32_t ret, int32_t lo, int32_t hi) {
        room();
        c_src.push_back(s);
        int32_t row[5] = {kind, f, ret, lo, hi};
        c_data.insert(c_data.end(), row, row + 5);
    }
    // a child's offset: before its parent's (so the recursion ends), and in range
    int64_t child(int64_t i, int64_t parent) const {
        int32_t c = at(i);
        if (c < 0 || c >= parent) throw Fail{ERR_PROGRAM};
        return c;
    }

    // [OP_TABLE, n, start, nmasks, mask ids..., nacc, accepting..., per state: k, (mask index, target) * k]
    int32_t table(int64_t off, int32_t cur) {
        if (at(off) != OP_TABLE) throw Fail{ERR_PROGRAM};
        int32_t n = at(off + 1), start = at(off + 2), nm = at(off + 3);
        if (n < 0 || n > max_states || start < 0 || start >= n || nm < 0 || nm > nmasks) throw Fail{ERR_PROGRAM};
        const int64_t acc_at = off + 5 + nm;
        int32_t nacc = at(acc_at - 1);
        if (nacc < 0 || nacc > n) throw Fail{ERR_PROGRAM};
        int32_t base = new_states((int64_t)n + 1), end = base + n;
        int64_t p = acc_at + nacc;
        for (int32_t s = 0; s < n; ++s) {
            int32_t k = at(p++);
            if (k < 0) throw Fail{ERR_PROGRAM};
            for (int32_t j = 0; j < k; ++j, p += 2) {
                int32_t li = at(p), t = at(p + 1);
                if (li < 0 || li >= nm || t < 0 || t >= n) throw Fail{ERR_PROGRAM};
                edge(base + s, mask(off + 4 + li), base + t);
            }
            step();
        }
        for (int32_t j = 0; j < nacc; ++j) {
            int32_t s = at(acc_at + j);
            if (s < 0 || s >= n) throw Fail{ERR_PROGRAM};
            eps(base + s, end);
        }
        eps(cur, base + start);
        return end;
    }

    int32_t build(int64_t off, int32_t cur) {
        step();
        if (++depth > MAX_DEPTH) throw Fail{ERR_PROGRAM};
        int32_t got = build_op(off, cur);
        --depth;
        return got;
    }

    int32_t build_op(int64_t off, int32_t cur) {
        switch (at(off)) {
        case OP_BYTES: {
            int64_t p = at(off + 1), n = at(off + 2);
            if (p < 0 || n < 0 || p + n > npool) throw Fail{ERR_PROGRAM};
            if (n == 0) return cur;
            int32_t first = new_states(n);
            edge(cur, pool[p], first);
            for (int64_t k = 1; k < n; ++k) edge(first + (int32_t)k - 1, pool[p + k], first + (int32_t)k);
            return first + (int32_t)n - 1;
        }
        case OP_BYTESET: {
            int32_t nxt = new_states(1);
            if (at(off + 1) >= 0) edge(cur, mask(off + 1), nxt);
            return nxt;
        }
        case OP_CHARS: {
            int32_t single = at(off + 1), nmulti = at(off + 2);
            if (nmulti < 0) throw Fail{ERR_PROGRAM};
            int32_t end = new_states(1);
            int64_t p = off + 3;
            for (int32_t q = 0; q < nmulti; ++q) {
                int32_t k = at(p);
                if (k < 1 || k > 4) throw Fail{ERR_PROGRAM};
                int32_t st = cur;
                for (int32_t i = 0; i < k; ++i) {
                    int32_t nxt = i == k - 1 ? end : new_states(1);
                    edge(st, mask(p + 1 + i), nxt);
                    st = nxt;
                }
                p += 1 + k;
            }
            if (single >= 0) edge(cur, mask(off + 1), end);
            return end;
        }
        case OP_SEQ: {
            int32_t n = at(off + 1);
            if (n < 0) throw Fail{ERR_PROGRAM};
            for (int32_t k = 0; k < n; ++k) cur = build(child(off + 2 + k, off), cur);
            return cur;
        }
        case OP_ALT: {
            int32_t n = at(off + 1);
            if (n < 0) throw Fail{ERR_PROGRAM};
            int32_t end = new_states(1);
            for (int32_t k = 0; k < n; ++k) {
                int32_t entry = new_states(1);
                eps(cur, entry);
                eps(build(child(off + 2 + k, off), entry), end);
            }
            return end;
        }
        case OP_REP: {
            int64_t c = child(off + 1, off);
            int32_t lo = at(off + 2), hi = at(off + 3);
            if (lo < 0 || hi < -1) throw Fail{ERR_PROGRAM};
            for (int32_t k = 0; k < lo; ++k) cur = build(c, cur);
            if (hi < 0) {
                int32_t loop = new_states(1);
                eps(cur, loop);
                eps(build(c, loop), loop);
                int32_t out = new_states(1);
                eps(loop, out);
                return out;
            }
            int32_t end = new_states(1);
            for (int32_t k = lo; k < hi; ++k) {
                eps(cur, end);
                cur = build(c, cur);
            }
            eps(cur, end);
            return end;
        }
        case OP_CALL: {
            int32_t f = fid(off + 1);
            int32_t nxt = new_states(1);
            call(cur, 2, f, nxt, 0, 0);
            return nxt;
        }
        case OP_CCALL: {
            int32_t f = fid(off + 1), lo = at(off + 2), hi = at(off + 3);
            if (lo < 0 || hi < -1) throw Fail{ERR_PROGRAM};
            int32_t nxt = new_states(1);
            call(cur, 4, f, nxt, lo, hi);
            return nxt;
        }
        case OP_DFA: {
            int64_t t = child(off + 1, off);
            return table(t, cur);
        }
        case OP_MEMBERS:
            return members(off, cur);
        default:
            throw Fail{ERR_PROGRAM};
        }
    }

    // nfa_program._ListBuilder.members (byte_nfa.ByteNFA._build_members)
    int32_t members(int64_t off, int32_t cur) {
        int32_t n = at(off + 1), lo = at(off + 4), hi = at(off + 5);
        int64_t extra = at(off + 2) < 0 ? -1 : child(off + 2, off), sep = child(off + 3, off);
        if (n < 0 || lo < 0 || hi < -1) throw Fail{ERR_PROGRAM};
        const int32_t top = hi >= 0 ? hi : (lo > 1 ? lo : 1);
        auto bump = [&](int32_t k) -> int32_t { return hi < 0 ? (k + 1 < top ? k + 1 : top) : (k < hi ? k + 1 : -1); };
        std::vector<int32_t> lanes{cur}, fresh;
        for (int32_t k = 0; k < top; ++k) { step(); lanes.push_back(new_states(1)); }
        for (int32_t i = 0; i < n; ++i) {
            int64_t member = child(off + 6 + 2 * (int64_t)i, off);
            bool required = at(off + 7 + 2 * (int64_t)i) != 0;
            fresh.clear();
            for (int32_t k = 0; k <= top; ++k) { step(); fresh.push_back(new_states(1)); }
            for (int32_t k = 0; k <= top; ++k) {
                if (!required) eps(lanes[k], fresh[k]);
                int32_t nk = bump(k);
                if (nk >= 0) {
                    int32_t start = k == 0 ? lanes[k] : build(sep, lanes[k]);
                    eps(build(member, start), fresh[nk]);
                }
            }
            lanes.swap(fresh);
        }
        int32_t end = new_states(1);
        for (int32_t k = lo; k <= top; ++k) eps(lanes[k], end);
        if (extra >= 0) {
            std::vector<int32_t> loop;
            for (int32_t k = 0; k <= top; ++k) {
                int32_t e_top = hi >= 0 ? hi - k : 1;
                if (e_top < 1) continue;
                loop.clear();
                for (int32_t e = 0; e <= e_top; ++e) { step(); loop.push_back(new_states(1)); }
                int32_t start = k == 0 ? lanes[k] : build(sep, lanes[k]);
                eps(build(extra, start), loop[1]);
                const int32_t reach = hi < 0 ? (k + 1 < top ? k + 1 : top) : (k + 1 < hi ? k + 1 : hi);
                for (int32_t e = 1; e <= e_top; ++e) {
                    if (hi < 0)
                        eps(build(extra, build(sep, loop[e])), loop[e]);
                    else if (e < e_top)
                        eps(build(extra, build(sep, loop[e])), loop[e + 1]);
                    if (reach >= lo) eps(loop[e], end);
                }
            }
        }
        return end;
    }
};

// the stable bucket sort of (source, payload) rows into CSR
void to_csr(int32_t n, const std::vector<int32_t>& src, std::vector<int32_t>& off, std::vector<int32_t>& order) {
    off.assign((size_t)n + 1, 0);
    for (int32_t s : src) ++off[(size_t)s + 1];
    for (int32_t s = 0; s < n; ++s) off[(size_t)s + 1] += off[s];
    std::vector<int32_t> fill(off.begin(), off.end() - 1);
    order.assign(src.size(), 0);
    for (size_t i = 0; i < src.size(); ++i) order[(size_t)fill[src[i]]++] = (int32_t)i;
}

// byte_nfa.ByteNFA._alive and the graph part of ByteNFA.trim (the reverse graph in CSR: one
// vector per state cost more than the pass itself on a 20k-state NFA)
void trim(SgrunNfa& g) {
    const int32_t n = (int32_t)g.edge_off.size() - 1, nf = (int32_t)g.frag_start.size();
    std::vector<int32_t> rev_off((size_t)n + 1, 0), call_off((size_t)n + 1, 0);
    auto plain_call = [](const int32_t* cd) { return cd[0] == 4 && cd[3] == 0; };  // may run zero times
    for (int32_t t : g.edge_tgt) ++rev_off[(size_t)t + 1];
    for (int32_t t : g.eps_tgt) ++rev_off[(size_t)t + 1];
    for (size_t c = 0; c < g.call_data.size() / 5; ++c) {
        const int32_t* cd = &g.call_data[5 * c];
        ++(plain_call(cd) ? rev_off : call_off)[(size_t)cd[2] + 1];
    }
    for (int32_t s = 0; s < n; ++s) { rev_off[s + 1] += rev_off[s]; call_off[s + 1] += call_off[s]; }
    std::vector<int32_t> rev_src(rev_off[n]), call_src(call_off[n]), call_fid(call_off[n]);
    std::vector<int32_t> fill(rev_off.begin(), rev_off.end() - 1), cfill(call_off.begin(), call_off.end() - 1);
    for (int32_t s = 0; s < n; ++s) {
        for (int32_t e = g.edge_off[s]; e < g.edge_off[s + 1]; ++e) rev_src[fill[g.edge_tgt[e]]++] = s;
        for (int32_t e = g.eps_off[s]; e < g.eps_off[s + 1]; ++e) rev_src[fill[g.eps_tgt[e]]++] = s;
        for (int32_t c = g.call_off[s]; c < g.call_off[s + 1]; ++c) {
            const int32_t* cd = &g.call_data[5 * (size_t)c];
            if (plain_call(cd)) rev_src[fill[cd[2]]++] = s;
            else { call_src[cfill[cd[2]]] = s; call_fid[cfill[cd[2]]++] = cd[1]; }
        }
    }
    std::vector<int32_t> start_of(n, -1);
    for (int32_t f = 0; f < nf; ++f) start_of[g.frag_start[f]] = f;
    std::vector<uint8_t> alive(n, 0);
    std::vector<std::vector<int32_t>> waiting(nf);
    std::vector<int32_t> todo;
    for (int32_t s = 0; s < n; ++s)
        if (g.end_of[s] >= 0 && !alive[s]) { alive[s] = 1; todo.push_back(s); }
    auto reach = [&](int32_t p) { if (!alive[p]) { alive[p] = 1; todo.push_back(p); } };
    while (!todo.empty()) {
        const int32_t x = todo.back();
        todo.pop_back();
        for (int32_t i = rev_off[x]; i < rev_off[x + 1]; ++i) reach(rev_src[i]);
        for (int32_t i = call_off[x]; i < call_off[x + 1]; ++i) {
            if (alive[g.frag_start[call_fid[i]]]) reach(call_src[i]);
            else waiting[call_fid[i]].push_back(call_src[i]);
        }
        if (start_of[x] >= 0) {
            std::vector<int32_t> w;
            w.swap(waiting[start_of[x]]);
            for (int32_t p : w) reach(p);
        }
    }
    g.nonempty.assign(nf, 0);
    for (int32_t f = 0; f < nf; ++f) g.nonempty[f] = alive[g.frag_start[f]];
    SgrunNfa out;
    out.edge_off.push_back(0);
    out.eps_off.push_back(0);
    out.call_off.push_back(0);
    for (int32_t s = 0; s < n; ++s) {
        if (alive[s]) {
            for (int32_t e = g.edge_off[s]; e < g.edge_off[s + 1]; ++e)
                if (alive[g.edge_tgt[e]]) { out.edge_tgt.push_back(g.edge_tgt[e]); out.edge_mid.push_back(g.edge_mid[e]); }
            for (int32_t e = g.eps_off[s]; e < g.eps_off[s + 1]; ++e)
                if (alive[g.eps_tgt[e]]) out.eps_tgt.push_back(g.eps_tgt[e]);
            for (int32_t c = g.call_off[s]; c < g.call_off[s + 1]; ++c) {
                const int32_t* cd = &g.call_data[5 * (size_t)c];
                if (!alive[cd[2]]) continue;
                if (g.nonempty[cd[1]]) out.call_data.insert(out.call_data.end(), cd, cd + 5);
                else if (cd[0] == 4 && cd[3] == 0) out.eps_tgt.push_back(cd[2]);  // an empty body: zero times only
            }
        }
        out.edge_off.push_back((int32_t)out.edge_tgt.size());
        out.eps_off.push_back((int32_t)out.eps_tgt.size());
        out.call_off.push_back((int32_t)(out.call_data.size() / 5));
    }
    g.edge_off.swap(out.edge_off); g.edge_tgt.swap(out.edge_tgt); g.edge_mid.swap(out.edge_mid);
    g.eps_off.swap(out.eps_off); g.eps_tgt.swap(out.eps_tgt);
    g.call_off.swap(out.call_off); g.call_data.swap(out.call_data);
}

}  // namespace

extern "C" {

// Build the program (nfa_program.ProgramNFA.program()) into a new NFA; 0 and *out set, or an
// error code (ERR_*) and *out null.
int32_t sgrun_nfa_build(const int32_t* code, int64_t ncode, const uint8_t* pool, int64_t npool,
                        const uint64_t* mask_words, int32_t nmasks, const int32_t* defs, int32_t ndefs,
                        int32_t nfrags, int32_t max_states, int64_t max_edges, int64_t max_steps, int32_t do_trim,
                        void** out) {
    *out = nullptr;
    if (ncode < 0 || npool < 0 || nmasks < 256 || ndefs < 0 || nfrags < 0 || (int64_t)nfrags * 2 > max_states)
        return ERR_PROGRAM;
    SgrunNfa* g = nullptr;
    try {
        Builder b{code, ncode, pool, npool, nmasks, nfrags, max_states, max_edges, max_steps};
        b.nstates = 2 * nfrags;
        std::vector<uint8_t> defined(nfrags, 0);
        for (int32_t i = 0; i < ndefs; ++i) {
            int32_t f = defs[3 * i], kind = defs[3 * i + 1], off = defs[3 * i + 2];
            if (f < 0 || f >= nfrags || defined[f] || off < 0 || off >= ncode || (kind != 0 && kind != 1)) return ERR_PROGRAM;
            defined[f] = 1;
            int32_t end = kind == 0 ? b.build(off, 2 * f) : b.table(off, 2 * f);
            b.eps(end, 2 * f + 1);
        }
        g = new SgrunNfa();
        const int32_t n = b.nstates;
        std::vector<int32_t> order;
        to_csr(n, b.e_src, g->edge_off, order);
        g->edge_tgt.resize(order.size());
        g->edge_mid.resize(order.size());
        for (size_t i = 0; i < order.size(); ++i) { g->edge_tgt[i] = b.e_tgt[order[i]]; g->edge_mid[i] = b.e_mid[order[i]]; }
        to_csr(n, b.p_src, g->eps_off, order);
        g->eps_tgt.resize(order.size());
        for (size_t i = 0; i < order.size(); ++i) g->eps_tgt[i] = b.p_tgt[order[i]];
        to_csr(n, b.c_src, g->call_off, order);
        g->call_data.resize(order.size() * 5);
        for (size_t i = 0; i < order.size(); ++i) std::memcpy(&g->call_data[5 * i], &b.c_data[5 * (size_t)order[i]], 5 * sizeof(int32_t));
        g->frag_start.resize(nfrags);
        g->end_of.assign(n, -1);
        for (int32_t f = 0; f < nfrags; ++f) { g->frag_start[f] = 2 * f; g->end_of[2 * f + 1] = f; }
        g->mask_words.assign(mask_words, mask_words + 4 * (size_t)nmasks);
        g->steps = b.steps;
        if (do_trim) trim(*g);
        else g->nonempty.assign(nfrags, 1);
    } catch (const Fail& e) {
        delete g;
        return e.code;
    } catch (const std::bad_alloc&) {
        delete g;
        return ERR_EDGES;
    }
    *out = g;
    return 0;
}

void sgrun_nfa_free(void* p) { delete static_cast<SgrunNfa*>(p); }

// sizes: [states, fragments, edges, eps, calls, masks, build steps]
void sgrun_nfa_sizes(void* p, int64_t* out) {
    const SgrunNfa& g = *static_cast<SgrunNfa*>(p);
    out[0] = (int64_t)g.edge_off.size() - 1;
    out[1] = (int64_t)g.frag_start.size();
    out[2] = (int64_t)g.edge_tgt.size();
    out[3] = (int64_t)g.eps_tgt.size();
    out[4] = (int64_t)(g.call_data.size() / 5);
    out[5] = (int64_t)(g.mask_words.size() / 4);
    out[6] = g.steps;
}

// Copy the arrays out (for the tests' comparison with the Python build, and pickling): each
// pointer sized by sgrun_nfa_sizes.
void sgrun_nfa_export(void* p, int32_t* edge_off, int32_t* edge_tgt, int32_t* edge_mid, int32_t* eps_off,
                      int32_t* eps_tgt, int32_t* call_off, int32_t* call_data, uint8_t* nonempty) {
    const SgrunNfa& g = *static_cast<SgrunNfa*>(p);
    auto put = [](int32_t* dst, const std::vector<int32_t>& v) { if (!v.empty()) std::memcpy(dst, v.data(), v.size() * sizeof(int32_t)); };
    put(edge_off, g.edge_off); put(edge_tgt, g.edge_tgt); put(edge_mid, g.edge_mid);
    put(eps_off, g.eps_off); put(eps_tgt, g.eps_tgt); put(call_off, g.call_off); put(call_data, g.call_data);
    if (!g.nonempty.empty()) std::memcpy(nonempty, g.nonempty.data(), g.nonempty.size());
}

// The non-empty fragments (1 / 0 each, n_frags of them).
void sgrun_nfa_nonempty(void* p, uint8_t* out) {
    const SgrunNfa& g = *static_cast<SgrunNfa*>(p);
    if (!g.nonempty.empty()) std::memcpy(out, g.nonempty.data(), g.nonempty.size());
}

// lazy_dfa.byte_classes over the masks the NFA's edges read: the coarsest partition of the
// bytes such that each of those masks is a union of classes, numbered by their lowest byte.
// One refinement per distinct mask (a class splits into the bytes in and out of it), 256
// steps each: ~50 us where the Python refinement of one big int per mask cost ~0.5 ms.
// Writes class_of[256]; returns the number of classes.
int32_t sgrun_nfa_byte_classes(void* p, uint8_t* class_of) {
    const SgrunNfa& g = *static_cast<SgrunNfa*>(p);
    const int32_t nm = (int32_t)(g.mask_words.size() / 4);
    std::vector<uint8_t> used(nm, 0);
    for (int32_t m : g.edge_mid) used[m] = 1;
    int32_t cls[256] = {0}, ncls = 1;
    int32_t split[2 * 256];
    for (int32_t m = 0; m < nm; ++m) {
        if (!used[m]) continue;
        const uint64_t* w = &g.mask_words[4 * (size_t)m];
        for (int32_t i = 0; i < 2 * ncls; ++i) split[i] = -1;
        int32_t next = 0;
        for (int b = 0; b < 256; ++b) {
            const int in = (int)((w[b >> 6] >> (b & 63)) & 1);
            int32_t& to = split[2 * cls[b] + in];
            if (to < 0) to = next++;
            cls[b] = to;
        }
        ncls = next;  // (numbered by first byte already: bytes are visited in order)
    }
    for (int b = 0; b < 256; ++b) class_of[b] = (uint8_t)cls[b];
    return ncls;
}

// For the lazy DFA core: the NFA's arrays, without a copy (valid while the NFA lives).
struct SgrunNfaView {
    const int32_t *edge_off, *edge_tgt, *edge_mid, *eps_off, *eps_tgt, *call_off, *call_data, *frag_start, *end_of;
    const uint64_t* mask_words;
    int32_t n_states, n_frags, n_edges, n_eps, n_calls, n_masks;
};

void sgrun_nfa_view(void* p, SgrunNfaView* v) {
    const SgrunNfa& g = *static_cast<SgrunNfa*>(p);
    v->edge_off = g.edge_off.data(); v->edge_tgt = g.edge_tgt.data(); v->edge_mid = g.edge_mid.data();
    v->eps_off = g.eps_off.data(); v->eps_tgt = g.eps_tgt.data(); v->call_off = g.call_off.data();
    v->call_data = g.call_data.data(); v->frag_start = g.frag_start.data(); v->end_of = g.end_of.data();
    v->mask_words = g.mask_words.data();
    v->n_states = (int32_t)g.edge_off.size() - 1; v->n_frags = (int32_t)g.frag_start.size();
    v->n_edges = (int32_t)g.edge_tgt.size(); v->n_eps = (int32_t)g.eps_tgt.size();
    v->n_calls = (int32_t)(g.call_data.size() / 5); v->n_masks = (int32_t)(g.mask_words.size() / 4);
}

}  // extern "C"
