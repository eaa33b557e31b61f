"""A ProgramNFA built in C++ (constrain/native/nfa_build.cpp), the Python face of that builder.

NativeNFA(program_nfa) builds the program into CSR arrays that the C++ lazy DFA reads in place
(native_dfa.NativeLazyDFA), pruned by ByteNFA.trim's graph pass when the program asks. Errors
are the list build's: ConstraintTooComplexError past the state cap, and past an edge or build
step cap that only a hostile program reaches. SGRUN_NATIVE_NFA=0 (or no compiler) keeps the
Python build (nfa_program.ProgramNFA.build_lists), the reference `export` is compared with.
"""

from __future__ import annotations

import ctypes
import os

import numpy as np

from sgrun.constrain.compile_budget import tick
from sgrun.constrain.errors import ConstraintTooComplexError
from sgrun.constrain.native_dfa import library
from sgrun.constrain.nfa_program import MAX_EDGES, ProgramNFA

_ERR_PROGRAM, _ERR_STATES, _ERR_EDGES, _ERR_STEPS = -1, -3, -5, -6
MAX_BUILD_STEPS = 50_000_000  # nodes built (a repeat of an empty body would otherwise loop on nothing)


def native_nfa_enabled() -> bool:
    return os.environ.get("SGRUN_NATIVE_NFA", "1") != "0" and library() is not None


def new_program_nfa() -> ProgramNFA | None:
    """A ProgramNFA built by this module's C++, or None where that is off or cannot build (then
    the compiler keeps the list-built ByteNFA)."""
    return ProgramNFA(builder=NativeNFA) if native_nfa_enabled() else None


def _ptr(a: np.ndarray) -> int:
    return a.ctypes.data


class NativeNFA:
    """The C++ build of one ProgramNFA's program (the handle is freed with this object)."""

    def __init__(self, nfa: ProgramNFA):
        self._lib = lib = library()
        self.handle = None
        p = nfa.program()
        code, pool, words, defs = p["code"], p["pool"], p["words"], p["defs"]
        out = ctypes.c_void_p()
        got = lib.sgrun_nfa_build(
            _ptr(code) if len(code) else None, len(code), _ptr(pool) if len(pool) else None, len(pool), _ptr(words),
            len(words), _ptr(defs) if len(defs) else None, len(defs) // 3, len(nfa.frag_start), nfa.max_states,
            MAX_EDGES, MAX_BUILD_STEPS, int(nfa.needs_trim), ctypes.byref(out))
        if got == _ERR_STATES:
            raise ConstraintTooComplexError(
                f"the constraint is too complex: its automaton exceeds {nfa.max_states} NFA states; reduce repeat "
                f"counts, string length bounds or schema size")
        if got in (_ERR_EDGES, _ERR_STEPS):
            raise ConstraintTooComplexError(
                "the constraint is too complex: its automaton exceeds the builder's edge or step cap; reduce repeat "
                "counts, string length bounds or schema size")
        if got != 0:
            raise ValueError(f"malformed NFA program (error {got})")
        self.handle = out.value
        self.sizes = self._sizes()
        tick(int(self.sizes[0]))  # (the compile budget counts states, as the list build does)

    def __del__(self):
        if getattr(self, "handle", None) and self._lib is not None:
            self._lib.sgrun_nfa_free(self.handle)
            self.handle = None

    def _sizes(self) -> np.ndarray:
        out = np.zeros(7, dtype=np.int64)
        self._lib.sgrun_nfa_sizes(self.handle, _ptr(out))
        return out

    @property
    def num_states(self) -> int:
        return int(self.sizes[0])

    def export(self) -> dict[str, np.ndarray]:
        """The arrays (edge_off, edge_tgt, edge_mid, eps_off, eps_tgt, call_off, call_data [calls, 5]:
        kind 2 plain / 4 counted, fid, ret, lo, hi), and nonempty per fragment."""
        n, nf, ne, np_, nc = (int(x) for x in self.sizes[:5])
        a = {"edge_off": np.zeros(n + 1, np.int32), "edge_tgt": np.zeros(max(ne, 1), np.int32),
             "edge_mid": np.zeros(max(ne, 1), np.int32), "eps_off": np.zeros(n + 1, np.int32),
             "eps_tgt": np.zeros(max(np_, 1), np.int32), "call_off": np.zeros(n + 1, np.int32),
             "call_data": np.zeros(max(5 * nc, 1), np.int32), "nonempty": np.zeros(max(nf, 1), np.uint8)}
        self._lib.sgrun_nfa_export(self.handle, *(_ptr(a[k]) for k in ("edge_off", "edge_tgt", "edge_mid", "eps_off",
                                                                         "eps_tgt", "call_off", "call_data",
                                                                         "nonempty")))
        a["edge_tgt"], a["edge_mid"], a["eps_tgt"] = a["edge_tgt"][:ne], a["edge_mid"][:ne], a["eps_tgt"][:np_]
        a["call_data"] = a["call_data"][:5 * nc].reshape(-1, 5)
        a["nonempty"] = a["nonempty"][:nf]
        return a

    def byte_classes(self) -> list[int]:
        """lazy_dfa.byte_classes over the masks this NFA's edges read (classes by lowest byte)."""
        of = np.zeros(256, dtype=np.uint8)
        n = self._lib.sgrun_nfa_byte_classes(self.handle, _ptr(of))
        classes = [0] * n
        for b, c in enumerate(of.tolist()):
            classes[c] |= 1 << b
        return classes

    def nonempty(self) -> set[int]:
        out = np.zeros(max(int(self.sizes[1]), 1), dtype=np.uint8)
        self._lib.sgrun_nfa_nonempty(self.handle, _ptr(out))
        return set(np.flatnonzero(out[: int(self.sizes[1])]).tolist())
