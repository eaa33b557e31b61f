// json_string.escape_lift_uncached in C++: the DFA over a JSON string's escaped body whose
// decoding a DFA over the decoded UTF-8 text accepts, trimmed as byte_dfa.trim trims.
//
// Why: every open object's "any key but the declared ones" is such a lift (the key set differs
// per schema, so the cross-compile memo rarely hits), and in Python it cost 3-5 ms of an 11-14 ms
// first compile (a 77-state decoded automaton lifts to 432 states: an escape sub-automaton per
// names trie node, the `\uXXXX` digit rows, the non-ASCII digit paths; 3.4-4.5 ms in Python,
// 0.6-0.8 ms here).
//
// The result is the Python function's, state for state and edge for edge (the same creation
// order, the same memo keys, the same insertion-ordered target maps), so the Python one stays
// the reference: tests/test_constrain_escape_lift.py compares the two on every shape it builds.
// Linked into the lazy DFA's library (native_dfa.py); called through ctypes.PyDLL, the GIL held,
// because it reads and builds the Python lists of a ByteDFA.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <unordered_map>
#include <utility>
#include <vector>

bool sgrun_mask_words(PyObject* m, uint64_t* w);  // lazy_dfa_core.cpp: a mask int's four words

namespace {

struct Mask {  // a set of bytes: bit b of word b / 64
    uint64_t w[4] = {0, 0, 0, 0};
    bool bit(int b) const { return (w[b >> 6] >> (b & 63)) & 1; }
    void set(int b) { w[b >> 6] |= 1ull << (b & 63); }
    bool any() const { return (w[0] | w[1] | w[2] | w[3]) != 0; }
    Mask operator&(const Mask& o) const {
        Mask r;
        for (int k = 0; k < 4; ++k) r.w[k] = w[k] & o.w[k];
        return r;
    }
    Mask& operator|=(const Mask& o) {
        for (int k = 0; k < 4; ++k) w[k] |= o.w[k];
        return *this;
    }
    bool operator==(const Mask& o) const { return !std::memcmp(w, o.w, sizeof w); }
};

struct MaskHash {
    size_t operator()(const Mask& m) const {
        uint64_t h = 1469598103934665603ull;
        for (uint64_t x : m.w) h = (h ^ x) * 1099511628211ull + (h >> 29);
        return (size_t)h;
    }
};

struct VecHash {
    size_t operator()(const std::vector<uint64_t>& v) const {
        uint64_t h = 1469598103934665603ull ^ v.size();
        for (uint64_t x : v) h ^= x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
        return (size_t)h;
    }
};

Mask range_mask(int lo, int hi) {
    Mask m;
    for (int b = lo; b <= hi; ++b) m.set(b);
    return m;
}

using Edge = std::pair<Mask, int32_t>;
using Targets = std::vector<std::pair<int32_t, Mask>>;  // target -> mask, in insertion order (a Python dict)

void add_target(Targets& ts, int32_t t, const Mask& m) {
    for (auto& p : ts)
        if (p.first == t) { p.second |= m; return; }
    ts.emplace_back(t, m);
}

constexpr int MAX_WIDE_KEYS = 8;  // json_string.MAX_WIDE_KEYS
const char* const HEX_DIGITS = "0123456789abcdef";

struct Lift {
    const std::vector<std::vector<Edge>>& dec;  // the decoded DFA's edges
    std::vector<std::vector<Edge>> edges;       // the lifted DFA's
    Mask raw_ok, ascii, cont, hex_any, hex_byte[16];
    std::unordered_map<uint64_t, int32_t> memo;  // (kind, state, digit) -> lifted state or -1
    using WideEdges = std::array<std::vector<Edge>, 3>;  // the edges of u, u0, u00
    std::unordered_map<std::vector<uint64_t>, WideEdges, VecHash> wide_edges;
    size_t wide_count = 0;

    explicit Lift(const std::vector<std::vector<Edge>>& d) : dec(d), edges(d.size()) {
        raw_ok = range_mask(0x20, 0xFF);
        raw_ok.w[0x22 >> 6] &= ~(1ull << (0x22 & 63));
        raw_ok.w[0x5C >> 6] &= ~(1ull << (0x5C & 63));
        ascii = range_mask(0, 0x7F);
        cont = range_mask(0x80, 0xBF);
        for (int v = 0; v < 16; ++v) {
            hex_byte[v].set(HEX_DIGITS[v]);
            if (v >= 10) hex_byte[v].set(HEX_DIGITS[v] - 'a' + 'A');
            hex_any |= hex_byte[v];
        }
    }

    int32_t fresh() {
        edges.emplace_back();
        return (int32_t)edges.size() - 1;
    }

    int32_t step(int32_t s, int b) const {
        for (const Edge& e : dec[s])
            if (e.first.bit(b)) return e.second;
        return -1;
    }

    static uint64_t key(uint64_t kind, int64_t s, int64_t x) { return kind << 60 | (uint64_t)s << 8 | (uint64_t)x; }

    bool recall(uint64_t k, int32_t& out) const {
        auto it = memo.find(k);
        if (it == memo.end()) return false;
        out = it->second;
        return true;
    }

    int32_t make_state(uint64_t k, const Targets& ts) {  // _HexLift._state
        if (ts.empty()) { memo[k] = -1; return -1; }
        int32_t st = fresh();
        for (const auto& p : ts) edges[st].emplace_back(p.second, p.first);
        memo[k] = st;
        return st;
    }

    int32_t cont_of(int32_t t) {  // the state every continuation byte leads to, if one edge takes them all
        uint64_t k = key(1, t, 0);
        int32_t got;
        if (recall(k, got)) return got;
        got = -1;
        for (const Edge& e : dec[t]) {
            Mask c = e.first & cont;
            if (c.any()) {
                got = c == cont ? e.second : -1;
                break;
            }
        }
        memo[k] = got;
        return got;
    }

    int32_t last(int32_t t, int pend) {
        uint64_t k = key(2, t, pend);
        int32_t got;
        if (recall(k, got)) return got;
        int32_t u = cont_of(t);
        Targets ts;
        if (u >= 0) {
            ts.emplace_back(u, hex_any);
        } else {
            for (int h4 = 0; h4 < 16; ++h4) {
                int32_t tt = step(t, 0x80 | pend << 4 | h4);
                if (tt >= 0) add_target(ts, tt, hex_byte[h4]);
            }
        }
        return make_state(k, ts);
    }

    int32_t third(int32_t t1, int h2) {
        uint64_t k = key(3, t1, h2);
        int32_t got;
        if (recall(k, got)) return got;
        Targets ts;
        int32_t u = cont_of(t1);
        for (int h3 = 0; h3 < 16; ++h3) {
            int32_t t2 = u >= 0 ? u : step(t1, 0x80 | h2 << 2 | h3 >> 2);
            int32_t nxt = t2 >= 0 ? last(t2, h3 & 3) : -1;
            if (nxt >= 0) add_target(ts, nxt, hex_byte[h3]);
        }
        return make_state(k, ts);
    }

    int32_t second(int32_t t1) {
        uint64_t k = key(4, t1, 0);
        int32_t got;
        if (recall(k, got)) return got;
        Targets ts;
        for (int h2 = 0; h2 < 16; ++h2) {
            int32_t nxt = third(t1, h2);
            if (nxt >= 0) add_target(ts, nxt, hex_byte[h2]);
        }
        return make_state(k, ts);
    }

    Targets two_byte(int32_t s, int h2, int from, int to) {
        Targets ts;
        for (int h3 = from; h3 < to; ++h3) {
            int32_t t1 = step(s, 0xC0 | h2 << 2 | h3 >> 2);
            int32_t nxt = t1 >= 0 ? last(t1, h3 & 3) : -1;
            if (nxt >= 0) add_target(ts, nxt, hex_byte[h3]);
        }
        return ts;
    }

    void wide_of(int32_t s, WideEdges& out) {  // _HexLift._wide
        for (int h1 = 1; h1 < 16; ++h1) {
            int32_t t1 = step(s, 0xE0 | h1);
            int32_t nxt = t1 >= 0 ? second(t1) : -1;
            if (nxt >= 0) out[0].emplace_back(hex_byte[h1], nxt);
        }
        for (int h2 = 1; h2 < 16; ++h2) {
            int32_t nxt;
            if (h2 < 8) {
                nxt = make_state(key(5, s, h2), two_byte(s, h2, 0, 16));
            } else {
                int32_t t1 = step(s, 0xE0);
                nxt = t1 >= 0 ? third(t1, h2) : -1;
            }
            if (nxt >= 0) out[1].emplace_back(hex_byte[h2], nxt);
        }
        for (const auto& p : two_byte(s, 0, 8, 16)) out[2].emplace_back(p.second, p.first);
    }

    void add_wide(int32_t s, const std::vector<uint64_t>& wide, int32_t u, int32_t u0, int32_t u00) {
        auto it = wide_edges.find(wide);
        if (it == wide_edges.end()) {
            if (wide_count >= MAX_WIDE_KEYS) return;  // sound: those states take raw UTF-8 only
            ++wide_count;
            WideEdges got;
            wide_of(s, got);
            it = wide_edges.emplace(wide, std::move(got)).first;
        }
        const int32_t to[3] = {u, u0, u00};
        for (int k = 0; k < 3; ++k) edges[to[k]].insert(edges[to[k]].end(), it->second[k].begin(), it->second[k].end());
    }

    using Memo = std::unordered_map<std::vector<uint64_t>, int32_t, VecHash>;

    // the state `memo` keeps for `key`, made (and `made` set) the first time it is asked for
    int32_t state_for(Memo& memo, const std::vector<uint64_t>& key, bool& made) {
        auto it = memo.find(key);
        made = it == memo.end();
        return made ? (memo[key] = fresh()) : it->second;
    }

    void run() {  // escape_lift_uncached's loop over the decoded states
        static const int SHORT[8][2] = {{0x22, 0x22}, {0x5C, 0x5C}, {0x2F, 0x2F}, {0x62, 0x08},
                                        {0x66, 0x0C}, {0x6E, 0x0A}, {0x72, 0x0D}, {0x74, 0x09}};
        Memo esc_of, row_of;
        const int32_t n = (int32_t)dec.size();
        Mask backslash;
        backslash.set(0x5C);
        for (int32_t s = 0; s < n; ++s) {
            std::vector<std::pair<Mask, int32_t>> ascii_targets, wide;
            for (const Edge& e : dec[s]) {
                Mask raw = e.first & raw_ok;
                if (raw.any()) edges[s].emplace_back(raw, e.second);
                Mask a = e.first & ascii;
                if (a.any()) ascii_targets.emplace_back(a, e.second);
                Mask hi;
                hi.w[2] = e.first.w[2];
                hi.w[3] = e.first.w[3];
                if (hi.any()) wide.emplace_back(hi, e.second);
            }
            if (ascii_targets.empty() && wide.empty()) continue;
            std::vector<uint64_t> k{ascii_targets.size()};
            for (const auto& p : ascii_targets) k.insert(k.end(), {p.first.w[0], p.first.w[1], (uint64_t)p.second});
            std::vector<uint64_t> wide_key;
            for (const auto& p : wide) wide_key.insert(wide_key.end(), {p.first.w[2], p.first.w[3], (uint64_t)p.second});
            k.insert(k.end(), wide_key.begin(), wide_key.end());
            bool made;
            const int32_t esc = state_for(esc_of, k, made);
            if (made) {
                for (const auto& p : ascii_targets) {
                    Mask letters;
                    for (const auto& sh : SHORT)
                        if (p.first.bit(sh[1])) letters.set(sh[0]);
                    if (letters.any()) edges[esc].emplace_back(letters, p.second);
                }
                int32_t u = fresh(), u0 = fresh(), u00 = fresh();
                Mask m_u, m_0;
                m_u.set('u');
                m_0.set('0');
                edges[esc].emplace_back(m_u, u);
                edges[u].emplace_back(m_0, u0);
                edges[u0].emplace_back(m_0, u00);
                Targets digit_rows;  // row state -> mask of its first digits
                for (int h1 = 0; h1 < 8; ++h1) {
                    std::vector<uint64_t> hex_row;
                    for (const auto& p : ascii_targets) {
                        uint64_t nib = (p.first.w[h1 >> 2] >> (16 * (h1 & 3))) & 0xFFFF;
                        if (nib) hex_row.push_back(nib << 32 | (uint32_t)p.second);
                    }
                    if (hex_row.empty()) continue;
                    const int32_t h = state_for(row_of, hex_row, made);
                    if (made) {
                        for (uint64_t x : hex_row) {
                            Mask m;
                            for (int v = 0; v < 16; ++v)
                                if (x >> (32 + v) & 1) m |= hex_byte[v];
                            edges[h].emplace_back(m, (int32_t)(x & 0xFFFFFFFFu));
                        }
                    }
                    Mask digit;
                    digit.set('0' + h1);
                    add_target(digit_rows, h, digit);
                }
                for (const auto& p : digit_rows) edges[u00].emplace_back(p.second, p.first);
                if (!wide.empty()) add_wide(s, wide_key, u, u0, u00);
            }
            edges[s].emplace_back(backslash, esc);
        }
    }
};

bool read_mask(PyObject* m, Mask& out, std::unordered_map<PyObject*, Mask>& seen) {
    auto it = seen.find(m);
    if (it != seen.end()) { out = it->second; return true; }
    if (!sgrun_mask_words(m, out.w)) return false;
    seen.emplace(m, out);
    return true;
}

PyObject* mask_object(const Mask& m, std::unordered_map<Mask, PyObject*, MaskHash>& made) {
    auto it = made.find(m);
    if (it != made.end()) { Py_INCREF(it->second); return it->second; }
    char text[4 * 16 + 1];
    std::snprintf(text, sizeof text, "%016llx%016llx%016llx%016llx", (unsigned long long)m.w[3],
                  (unsigned long long)m.w[2], (unsigned long long)m.w[1], (unsigned long long)m.w[0]);
    PyObject* got = PyLong_FromString(text, nullptr, 16);
    if (!got) return nullptr;
    made.emplace(m, got);
    Py_INCREF(got);
    return got;
}

}  // namespace

extern "C" {

// (edges, accepting, start) of a decoded ByteDFA -> (edges, accepting list) of its trimmed lift,
// start state 0 (byte_dfa.trim puts the start first), or None where the start cannot accept
// (then the lift is the empty DFA). Null with a Python exception on malformed input.
PyObject* sgrun_escape_lift_py(PyObject* py_edges, PyObject* py_accepting, int32_t start) {
    if (!PyList_Check(py_edges)) {
        PyErr_SetString(PyExc_TypeError, "sgrun_escape_lift_py: edges must be a list");
        return nullptr;
    }
    const Py_ssize_t n = PyList_GET_SIZE(py_edges);
    std::vector<std::vector<Edge>> dec(n);
    std::unordered_map<PyObject*, Mask> seen;
    for (Py_ssize_t s = 0; s < n; ++s) {
        PyObject* row = PyList_GET_ITEM(py_edges, s);
        if (!PyList_Check(row)) { PyErr_SetString(PyExc_TypeError, "an edge row is not a list"); return nullptr; }
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(row); ++k) {
            PyObject* e = PyList_GET_ITEM(row, k);
            if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) != 2) {
                PyErr_SetString(PyExc_TypeError, "an edge is not (mask, target)");
                return nullptr;
            }
            Mask m;
            if (!read_mask(PyTuple_GET_ITEM(e, 0), m, seen)) return nullptr;
            long t = PyLong_AsLong(PyTuple_GET_ITEM(e, 1));
            if (PyErr_Occurred()) return nullptr;
            if (t < 0 || t >= n) { PyErr_SetString(PyExc_ValueError, "an edge target is out of range"); return nullptr; }
            dec[s].emplace_back(m, (int32_t)t);
        }
    }
    std::vector<int32_t> accepting;
    PyObject* it = PyObject_GetIter(py_accepting);
    if (!it) return nullptr;
    while (PyObject* a = PyIter_Next(it)) {
        long v = PyLong_AsLong(a);
        Py_DECREF(a);
        if (v < 0 || v >= n) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "an accepting state is out of range");
            Py_DECREF(it);
            return nullptr;
        }
        accepting.push_back((int32_t)v);
    }
    Py_DECREF(it);
    if (PyErr_Occurred()) return nullptr;
    if (start < 0 || start >= n) { PyErr_SetString(PyExc_ValueError, "the start state is out of range"); return nullptr; }

    Lift lift(dec);
    lift.run();

    // byte_dfa.trim: keep the states some accepting state can be reached from, start first.
    const auto& out = lift.edges;
    const size_t m = out.size();
    std::vector<std::vector<int32_t>> rev(m);
    for (size_t s = 0; s < m; ++s)
        for (const Edge& e : out[s]) rev[e.second].push_back((int32_t)s);
    std::vector<char> live(m, 0);
    std::vector<int32_t> todo;
    for (int32_t a : accepting)
        if (!live[a]) { live[a] = 1; todo.push_back(a); }
    while (!todo.empty()) {
        int32_t s = todo.back();
        todo.pop_back();
        for (int32_t p : rev[s])
            if (!live[p]) { live[p] = 1; todo.push_back(p); }
    }
    if (!live[start]) Py_RETURN_NONE;
    std::vector<int32_t> remap(m, -1), order{start};
    remap[start] = 0;
    for (size_t s = 0; s < m; ++s)
        if (live[s] && (int32_t)s != start) { remap[s] = (int32_t)order.size(); order.push_back((int32_t)s); }

    std::unordered_map<Mask, PyObject*, MaskHash> made;
    auto release = [&made]() { for (auto& p : made) Py_DECREF(p.second); };
    PyObject* rows = PyList_New((Py_ssize_t)order.size());
    if (!rows) { release(); return nullptr; }
    for (size_t k = 0; k < order.size(); ++k) {
        const std::vector<Edge>& src = out[order[k]];
        Py_ssize_t kept = 0;
        for (const Edge& e : src) kept += live[e.second];
        PyObject* row = PyList_New(kept);
        if (!row) { Py_DECREF(rows); release(); return nullptr; }
        PyList_SET_ITEM(rows, (Py_ssize_t)k, row);
        Py_ssize_t at = 0;
        for (const Edge& e : src) {
            if (!live[e.second]) continue;
            PyObject* edge = PyTuple_New(2);
            PyObject* mask = edge ? mask_object(e.first, made) : nullptr;
            PyObject* target = mask ? PyLong_FromLong(remap[e.second]) : nullptr;
            if (!target) {
                Py_XDECREF(mask);
                Py_XDECREF(edge);
                Py_DECREF(rows);
                release();
                return nullptr;
            }
            PyTuple_SET_ITEM(edge, 0, mask);
            PyTuple_SET_ITEM(edge, 1, target);
            PyList_SET_ITEM(row, at++, edge);
        }
    }
    release();
    PyObject* acc = PyList_New(0);
    for (int32_t a : accepting) {
        if (!live[a]) continue;
        PyObject* v = PyLong_FromLong(remap[a]);
        PyList_Append(acc, v);
        Py_DECREF(v);
    }
    return Py_BuildValue("(NN)", rows, acc);
}

}  // extern "C"
