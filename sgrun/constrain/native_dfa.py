"""The lazy DFA and the token-mask walk in C++ (constrain/native/lazy_dfa_core.cpp), behind LazyDFA's interface.

`make_lazy_dfa(nfa, root)` is what the compiler calls: a NativeLazyDFA where the core library
builds (one g++ run of about a second, cached on disk like the CPU kernels), else the Python
LazyDFA, which stays the reference (the tests compare the two state by state and mask by mask).
SGRUN_NATIVE_DFA=0 forces the Python one.

Why: in Python a new DFA state costs 30-75 us (closures over tuples and frozensets) and a dense
state's mask is a numpy walk of the whole vocabulary trie, so a fresh schema's first request
spent milliseconds per mask. Here a state costs microseconds, and `native_mask` computes a
state's whole mask in one linear pass over the trie (see the .cpp's opening comment).

The C++ side owns the transition table; `table` is a numpy view of it that stays valid only
until the next call that may add states, so rows handed out (`row`, `targets`) are copies.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
import weakref
from pathlib import Path

import numpy as np

from sgrun.constrain.byte_nfa import ByteNFA
from sgrun.constrain.compile_budget import tick
from sgrun.constrain.errors import ConstraintTooComplexError
from sgrun.constrain.nfa_program import ProgramNFA
from sgrun.constrain.lazy_dfa import _MAX_CLOSURE, DEFAULT_MAX_DEPTH, DEFAULT_MAX_DFA_STATES, LazyDFA, byte_classes

log = logging.getLogger("sgrun.constrain")

_NATIVE = Path(__file__).resolve().parent / "native"  # the constraint compiler's C++, shipped as package data
SOURCES = (_NATIVE / "lazy_dfa_core.cpp", _NATIVE / "escape_lift.cpp", _NATIVE / "nfa_build.cpp")  # one library
_ERR_CLOSURE, _ERR_STATES = -2, -3
_NON_UNIFORM = -4
_MAX_SUCCESSORS = 4096

_i32p = ctypes.POINTER(ctypes.c_int32)
_vp = ctypes.c_void_p
_i32 = ctypes.c_int32

_SIGNATURES = {
    "sgrun_dfa_free": (None, [_vp]),
    "sgrun_dfa_num_states": (_i32, [_vp]),
    "sgrun_dfa_table": (_vp, [_vp]),
    "sgrun_dfa_accepting": (_vp, [_vp]),
    "sgrun_dfa_take_work": (ctypes.c_int64, [_vp]),
    "sgrun_dfa_exhausted": (_i32, [_vp]),
    "sgrun_dfa_set_max_states": (None, [_vp, _i32]),
    "sgrun_dfa_fill": (_i32, [_vp, _i32, _i32]),
    "sgrun_dfa_fill_row": (_i32, [_vp, _i32, _vp, _i32]),
    "sgrun_dfa_fill_pairs": (_i32, [_vp, _vp, _vp, ctypes.c_int64]),
    "sgrun_dfa_uniform": (_i32, [_vp, _i32, _vp]),
    "sgrun_dfa_configs": (_i32, [_vp, _i32, _vp, _i32]),
    "sgrun_dfa_frame": (None, [_vp, _i32, _i32p]),
    "sgrun_dfa_step_bytes": (_i32, [_vp, _i32, ctypes.c_char_p, _i32]),
    "sgrun_trie_new": (_vp, [_i32, _vp, _vp, _vp, _i32]),
    "sgrun_trie_free": (None, [_vp]),
    "sgrun_dfa_mask": (_i32, [_vp, _vp, _i32, _vp, _vp, _i32]),
    "sgrun_dfa_nfa_distances": (_i32, [_vp, _vp, _i32, _vp, _i32]),
    "sgrun_dfa_new_nfa": (_vp, [_vp, _i32, _i32, _vp, _vp, _i32, _i32, _i32, _i32p]),
    "sgrun_dfa_nfa_size": (None, [_vp, _i32p]),
    "sgrun_nfa_build": (_i32, [_vp, ctypes.c_int64, _vp, ctypes.c_int64, _vp, _i32, _vp, _i32, _i32, _i32,
                               ctypes.c_int64, ctypes.c_int64, _i32, ctypes.POINTER(_vp)]),
    "sgrun_nfa_free": (None, [_vp]),
    "sgrun_nfa_nonempty": (None, [_vp, _vp]),
    "sgrun_nfa_byte_classes": (_i32, [_vp, _vp]),
    "sgrun_nfa_sizes": (None, [_vp, _vp]),
    "sgrun_nfa_export": (None, [_vp] * 9),
}

_NEW_PY = ("sgrun_dfa_new_py", _vp, [ctypes.py_object] * 6 + [_vp, _i32, _i32, _i32, _i32, _vp, _vp, _i32, _i32,
                                                                 _i32, _i32p])
_LIFT_PY = ("sgrun_escape_lift_py", ctypes.py_object, [ctypes.py_object, ctypes.py_object, _i32])

_lib_lock = threading.Lock()
_lib: ctypes.CDLL | None | bool = False  # False: not tried yet
_py: ctypes.PyDLL | None = None  # the same library, for the one function that reads Python lists


def library() -> ctypes.CDLL | None:
    """The core library, built on first use; None where it cannot be built (then LazyDFA serves)."""
    global _lib
    with _lib_lock:
        if _lib is False:
            global _py
            import sysconfig
            from sgrun.kernels.cpu.build import SharedLibrary
            path = SharedLibrary("lazy_dfa_core", SOURCES, what="the C++ lazy DFA",
                                 fallback="constraints use the Python lazy DFA", fail_env="SGRUN_FAIL_NATIVE_DFA",
                                 flags=("-O2", "-std=c++17", "-fPIC", "-shared",
                                        "-I" + sysconfig.get_paths()["include"])).load()
            lib = None
            if path is not None:
                lib = ctypes.CDLL(path)  # releases the GIL around each call
                for name, (res, args) in _SIGNATURES.items():
                    fn = getattr(lib, name)
                    fn.restype, fn.argtypes = res, args
                _py = ctypes.PyDLL(path)  # holds it, and raises the Python error a call sets
                for name, res, args in (_NEW_PY, _LIFT_PY):
                    fn = getattr(_py, name)
                    fn.restype, fn.argtypes = res, args
            _lib = lib
        return _lib


def _pylib() -> ctypes.PyDLL:
    library()
    return _py


def native_enabled() -> bool:
    return os.environ.get("SGRUN_NATIVE_DFA", "1") != "0" and library() is not None


def native_escape_lift(edges: list, accepting: set[int], start: int) -> tuple[list, list[int]] | None:
    """escape_lift.cpp: the trimmed lift of a decoded DFA's (edges, accepting, start) as (edges,
    accepting states) with the start first, or None where it accepts nothing. Callers check
    native_enabled() first."""
    return getattr(_pylib(), _LIFT_PY[0])(edges, accepting, start)


def make_lazy_dfa(nfa: ByteNFA, root: int):
    """The automaton a constraint runs on: the C++ one where it builds, else the Python one (over
    the program NFA's Python build, nfa_program.ProgramNFA.build_lists)."""
    if native_enabled():
        return NativeLazyDFA(nfa, root)
    return LazyDFA(nfa, root)


def _ptr(a: np.ndarray) -> int:
    """The array's address, for an argument declared void* (each array is made with the dtype
    the C side reads, next to its call). Not ndarray.ctypes.data_as: its ctypes.cast makes a
    reference cycle per call, garbage that only the cyclic collector frees, on the hot path."""
    return a.ctypes.data


_Frame = ctypes.c_int32 * 8  # (one array type, kept: ctypes caches these types weakly, and each
# one made anew and dropped is a reference cycle for the cyclic collector)


class _Memory:
    """Raw memory for numpy (its array interface): a view without a ctypes array type, which would
    be one new type per size, ~30 us to make and a reference cycle when dropped (the table view
    made one each time the automaton had grown: 25 per output-budget set-up, measured)."""

    def __init__(self, ptr: int, shape: tuple[int, ...], typestr: str):
        self.__array_interface__ = {"data": (ptr, False), "shape": shape, "typestr": typestr, "version": 3}


def _words4(mask: int) -> np.ndarray:
    return np.array([(mask >> (64 * w)) & 0xFFFFFFFFFFFFFFFF for w in range(4)], dtype=np.uint64)


class NativeTrie:
    """The vocabulary of one TokenTable in the core's depth-first layout (built once per table)."""

    def __init__(self, table):
        lib = library()
        ids = sorted(table.token_ids.tolist(), key=lambda i: table.token_bytes[i])
        data = b"".join(table.token_bytes[i] for i in ids)
        offsets = np.zeros(len(ids) + 1, dtype=np.int64)
        offsets[1:] = np.cumsum([len(table.token_bytes[i]) for i in ids])
        ids_arr = np.array(ids, dtype=np.int32)
        buf = np.frombuffer(data, dtype=np.uint8) if data else np.zeros(1, dtype=np.uint8)
        self._lib = lib
        self.handle = lib.sgrun_trie_new(len(ids), _ptr(ids_arr), _ptr(buf), _ptr(offsets),
                                         table.words)

    def __del__(self):
        if getattr(self, "handle", None) and self._lib is not None:
            self._lib.sgrun_trie_free(self.handle)
            self.handle = None


_trie_lock = threading.Lock()


def native_trie(table) -> NativeTrie:
    got = table.__dict__.get("_native_trie")
    if got is None:
        with _trie_lock:
            got = table.__dict__.get("_native_trie")
            if got is None:
                got = table.__dict__["_native_trie"] = NativeTrie(table)
    return got


class _DfaView:
    """A view the automaton keeps of itself (dfa.accepting, dfa._sets). It holds the automaton
    weakly: a strong reference back would make every dropped constraint (and its NFA's
    ~10^4-10^5 lists) garbage for the cyclic collector, whose pauses then land in later compiles
    and masks (Zen 5, 2 December 2026: mean compile 22 ms with the collector on, 9 ms with it off)."""

    def __init__(self, dfa: NativeLazyDFA):
        self._dfa_ref = weakref.ref(dfa)

    @property
    def _dfa(self) -> NativeLazyDFA:
        return self._dfa_ref()


class _Accepting(_DfaView):
    """dfa.accepting[state], read from the core (the array grows with the states)."""

    def __getitem__(self, sid: int) -> bool:
        d = self._dfa
        n = d._lib.sgrun_dfa_num_states(d._h)
        if not 0 <= sid < n:
            raise IndexError(sid)
        # (string_at, not ctypes.cast: a cast object is a reference cycle, garbage for the
        # cyclic collector on every call of the matcher's hot path)
        return ctypes.string_at(d._lib.sgrun_dfa_accepting(d._h) + sid, 1) != b"\0"

    def __len__(self) -> int:
        return self._dfa.num_states


class _ConfigSets(_DfaView):
    """dfa._sets[state]: its configurations as lazy_dfa.py writes them, (NFA state, stack) with
    the stack a linked tuple (shortest_completion reads them)."""

    def __init__(self, dfa: NativeLazyDFA):
        super().__init__(dfa)
        self._frames: dict[int, tuple] = {}

    def _stack(self, fid: int):
        if fid < 0:
            return None
        got = self._frames.get(fid)
        if got is None:
            f = _Frame()
            self._dfa._lib.sgrun_dfa_frame(self._dfa._h, fid, f)
            kind, frag, ret, lo, hi, k, depth, parent = list(f)
            top = ret if kind == 0 else (frag, ret, lo, None if hi < 0 else hi, k)
            got = self._frames[fid] = (top, depth, self._stack(parent))
        return got

    def __getitem__(self, sid: int) -> frozenset:
        d = self._dfa
        with d.lock:
            n = d._lib.sgrun_dfa_configs(d._h, sid, None, 0)
            out = np.zeros(2 * max(n, 1), dtype=np.int32)
            d._lib.sgrun_dfa_configs(d._h, sid, _ptr(out), n)
            pairs = out[: 2 * n].reshape(-1, 2).tolist()
            return frozenset((s, self._stack(stk)) for s, stk in pairs)

    def __len__(self) -> int:
        return self._dfa.num_states


class NativeLazyDFA:
    """LazyDFA's interface (row, step, fill, fill_pairs, targets, uniform_target, table,
    accepting, class_*, num_states, exhausted, _sets), determinised in C++, plus native_mask."""

    def __init__(self, nfa: ByteNFA, root: int, max_depth: int = DEFAULT_MAX_DEPTH,
                 max_states: int = DEFAULT_MAX_DFA_STATES):
        self._lib = library()
        self.nfa, self.root, self.root_end = nfa, root, nfa.frag_end[root]
        self.max_depth, self._max_states = max_depth, max_states
        self.lock = threading.RLock()
        if isinstance(nfa, ProgramNFA) and not nfa.is_lists:
            classes = nfa.native().byte_classes()  # (in C++, over the masks its edges read)
        else:
            classes = byte_classes(nfa.all_masks())
        self.class_masks = classes
        self.num_classes = len(classes)
        self.class_rep = [(m & -m).bit_length() - 1 for m in classes]
        self.class_size = [m.bit_count() for m in classes]
        of = [0] * 256
        for cid, m in enumerate(classes):
            while m:
                low = m & -m
                of[low.bit_length() - 1] = cid
                m ^= low
        self.class_of = np.array(of, dtype=np.uint8 if len(classes) <= 256 else np.uint16)
        if len(classes) > 256:  # (cannot happen: 256 bytes make at most 256 classes)
            raise ConstraintTooComplexError("more than 256 byte classes")
        self._uniform: dict[tuple[int, bytes], int | None] = {}
        self._union_words: dict[bytes, np.ndarray] = {}
        self._view_key: tuple[int, int] | None = None
        self._view: np.ndarray | None = None
        self.accepting = _Accepting(self)
        self._sets = _ConfigSets(self)
        self._h = None
        self._build(nfa, root)

    def _build(self, nfa: ByteNFA, root: int) -> None:
        if isinstance(nfa, ProgramNFA) and not nfa.is_lists:  # built in C++: the NFA never is Python lists
            initial = ctypes.c_int32(0)
            self._h = self._lib.sgrun_dfa_new_nfa(
                nfa.native().handle, root, self.num_classes, _ptr(np.ascontiguousarray(self.class_of, dtype=np.uint8)),
                _ptr(np.array(self.class_rep, dtype=np.uint8)), self.max_depth, self.max_states, _MAX_CLOSURE,
                ctypes.byref(initial))
            initial = initial.value
        else:
            self._h, initial = self._new(nfa, root, nfa.all_masks())  # (masks it did not record: read from the edges)
        self.initial = self._check(initial)
        size = _Frame()  # (a kept array type: [states, fragments] in its first two)
        self._lib.sgrun_dfa_nfa_size(self._h, size)
        self.nfa_states, self.nfa_fragments = size[0], size[1]

    def _new(self, nfa: ByteNFA, root: int, masks: set[int]) -> tuple[int, int]:
        mask_ids = {m: k for k, m in enumerate(masks)}
        words = np.zeros((max(len(mask_ids), 1), 4), dtype=np.uint64)
        for m, k in mask_ids.items():
            words[k] = _words4(m)
        class_of = np.ascontiguousarray(self.class_of, dtype=np.uint8)
        class_rep = np.array(self.class_rep, dtype=np.uint8)
        initial = ctypes.c_int32(0)
        handle = _pylib().sgrun_dfa_new_py(
            nfa.edges, nfa.eps, nfa.calls, nfa.frag_start, nfa.end_of, mask_ids, _ptr(words), len(mask_ids),
            nfa.frag_start[root], self.root_end, self.num_classes, _ptr(class_of), _ptr(class_rep),
            self.max_depth, self.max_states, _MAX_CLOSURE, ctypes.byref(initial))
        return handle, initial.value

    def __del__(self):
        if getattr(self, "_h", None) and self._lib is not None:
            self._lib.sgrun_dfa_free(self._h)
            self._h = None

    def __reduce__(self):  # (a fresh automaton over the same NFA: states are rebuilt on demand)
        return (NativeLazyDFA, (self.nfa, self.root, self.max_depth, self.max_states))

    # --- errors and the compile budget -----------------------------------------------------
    def _check(self, got: int) -> int:
        tick(self._lib.sgrun_dfa_take_work(self._h))
        if got >= 0 or got == _NON_UNIFORM:
            return got
        if got == _ERR_CLOSURE:
            raise ConstraintTooComplexError("constraint automaton closure too large (left recursion?)")
        raise ConstraintTooComplexError(
            f"the constraint is too complex: its automaton exceeds {self.max_states} states; simplify it "
            f"(fewer alternatives under repeats, smaller bounds)")

    @property
    def max_states(self) -> int:
        return self._max_states

    @max_states.setter
    def max_states(self, value: int) -> None:
        """The state cap, changeable later like LazyDFA's (the cache's tests fill an automaton up)."""
        self._max_states = int(value)
        if self._h:
            self._lib.sgrun_dfa_set_max_states(self._h, self._max_states)

    @property
    def exhausted(self) -> bool:
        return bool(self._h) and bool(self._lib.sgrun_dfa_exhausted(self._h))

    @property
    def num_states(self) -> int:
        return self._lib.sgrun_dfa_num_states(self._h)

    @property
    def table(self) -> np.ndarray:
        """[num_states, num_classes] int32, -1 where not filled yet: a view of the core's table,
        valid until the next call that adds states."""
        n = self._lib.sgrun_dfa_num_states(self._h)
        ptr = self._lib.sgrun_dfa_table(self._h)
        if self._view_key != (ptr, n):
            self._view = np.asarray(_Memory(ptr, (n, self.num_classes), "<i4"))
            self._view_key = (ptr, n)
        return self._view

    # --- transitions -----------------------------------------------------------------------
    def step(self, sid: int, byte: int) -> int:
        with self.lock:
            return self._check(self._lib.sgrun_dfa_step_bytes(self._h, sid, bytes((byte,)), 1))

    def step_bytes(self, sid: int, data: bytes) -> int:
        """The state after `data` from `sid` (0: dead)."""
        with self.lock:
            return self._check(self._lib.sgrun_dfa_step_bytes(self._h, sid, data, len(data)))

    def fill(self, sid: int, cls: int) -> int:
        with self.lock:
            return self._check(self._lib.sgrun_dfa_fill(self._h, sid, cls))

    def fill_pairs(self, sids: np.ndarray, classes: np.ndarray) -> None:
        s = np.ascontiguousarray(sids, dtype=np.int64)
        c = np.ascontiguousarray(classes, dtype=np.int64)
        with self.lock:
            self._check(self._lib.sgrun_dfa_fill_pairs(self._h, _ptr(s), _ptr(c), len(s)))

    def row(self, sid: int) -> np.ndarray:
        """All transitions of one state (filled; a copy)."""
        with self.lock:
            r = self.table[sid]
            if (r < 0).any():
                self._check(self._lib.sgrun_dfa_fill_row(self._h, sid, None, 0))
                r = self.table[sid]
            return r.copy()

    def targets(self, sid: int, classes: np.ndarray) -> np.ndarray:
        """table[sid, classes], computing just the missing ones among `classes`."""
        with self.lock:
            got = self.table[sid, classes]
            if (got < 0).any():
                only = np.ascontiguousarray(np.unique(classes[got < 0]), dtype=np.int32)
                self._check(self._lib.sgrun_dfa_fill_row(self._h, sid, _ptr(only), len(only)))
                got = self.table[sid, classes]
            return got

    def uniform_target(self, sid: int, classes: np.ndarray) -> int | None:
        """The state every class in `classes` leads to from `sid` (0: dead), or None if the NFA's
        edges tell them apart (LazyDFA.uniform_target)."""
        key = (sid, classes.tobytes())
        got = self._uniform.get(key, -1)
        if got != -1:
            return got
        words = self._union_words.get(key[1])
        if words is None:
            union = 0
            for c in classes.tolist():
                union |= self.class_masks[c]
            words = self._union_words[key[1]] = _words4(union)
        with self.lock:
            t = self._check(self._lib.sgrun_dfa_uniform(self._h, sid, _ptr(words)))
        got = None if t == _NON_UNIFORM else t
        self._uniform[key] = got
        return got

    # --- the output budget ------------------------------------------------------------------
    def nfa_distances(self) -> tuple[list[float], list[float]]:
        """shortest_completion.NfaDistances' (dist per NFA state, shortest per fragment), computed
        in C++ over the NFA this automaton read (the same values; inf where none)."""
        dist = np.empty(self.nfa_states, dtype=np.float64)
        shortest = np.empty(self.nfa_fragments, dtype=np.float64)
        with self.lock:
            got = self._lib.sgrun_dfa_nfa_distances(self._h, _ptr(dist), len(dist), _ptr(shortest), len(shortest))
        if got < 0:
            raise RuntimeError("the automaton's NFA is not the one it was built from")
        return dist.tolist(), shortest.tolist()

    # --- masks -----------------------------------------------------------------------------
    def native_mask(self, state: int, table, successors: set[int] | None = None) -> np.ndarray:
        """Packed int32 bitmask of the non-special tokens of `table` allowed from `state` (no
        EOS), in one pass over the trie; `successors`, when given, collects the states they
        lead to (along a text run: every state of the run)."""
        trie = native_trie(table)
        words = np.zeros(table.words, dtype=np.int32)
        out = np.zeros(_MAX_SUCCESSORS if successors is not None else 1, dtype=np.int32)
        with self.lock:
            got = self._check(self._lib.sgrun_dfa_mask(
                self._h, trie.handle, state, words.ctypes.data, _ptr(out) if successors is not None else None,
                _MAX_SUCCESSORS))
        if successors is not None:
            successors.update(out[:got].tolist())
        return words
