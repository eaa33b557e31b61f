"""A time and size budget for one constraint compile, enforced from inside the compiler's loops.

compile_constraint opens a budget (a context variable, so nested helpers need no extra
argument); the hot loops of the compiler (NFA state creation, eager subset construction and
products, grammar analysis, lazy-DFA closures during warm-up) call `tick()`. Every
`_CHECK_EVERY` ticks it checks the clock and raises CompileBudgetExceeded (a
ConstraintTooComplexError) once the deadline has passed.

GIL: compiles run on a submitting thread next to the engine loop. A pure-Python compile never
blocks, so it keeps the GIL until the interpreter's switch interval (5 ms) forces it off, and
every torch call of the engine loop (each releases the GIL and must take it back) can wait that
long. GIL_POLICY picks the remedy; benchmarks/bench_compile_isolation.py measures them side by
side (docs/benchmarks-constrain.md):
  "switch" - while any compile runs, the switch interval is lowered to SWITCH_INTERVAL_S, so a
             waiting thread gets the GIL within that, and the cyclic garbage collector is paused:
             a compile allocates millions of small lists, and the full collections that triggers
             are single 250-400 ms pauses of every thread (measured). The default: it measured best;
  "yield"  - time.sleep(0) every YIELD_EVERY_S of compile work (a syscall; on a loaded machine
             the OS may deschedule the compiling thread for a whole time slice);
  "none"   - no remedy.
"""

from __future__ import annotations

import contextvars
import gc
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

from sgrun.constrain.errors import ConstraintTooComplexError

DEFAULT_COMPILE_BUDGET_S = 5.0
GIL_POLICY = "switch"
SWITCH_INTERVAL_S = 0.0005
YIELD_EVERY_S = 0.002
_CHECK_EVERY = 256
_switch_lock = threading.Lock()
_switch_users = 0
_switch_saved = 0.005
_gc_was_enabled = True


class CompileBudgetExceeded(ConstraintTooComplexError):
    """The compile ran past its time budget."""


@dataclass
class CompileBudget:
    seconds: float
    what: str = "constraint"
    yield_gil: bool = False
    deadline: float = field(init=False)
    _count: int = field(default=0, init=False)
    _next_yield: float = field(init=False)

    def __post_init__(self) -> None:
        now = time.perf_counter()
        self.deadline = now + self.seconds
        self._next_yield = now + YIELD_EVERY_S

    def tick(self, n: int = 1) -> None:
        self._count += n
        if self._count < _CHECK_EVERY:
            return
        self._count = 0
        now = time.perf_counter()
        if now > self.deadline:
            raise CompileBudgetExceeded(
                f"the {self.what} is too complex: compiling it took more than the {self.seconds:g} s budget; "
                f"simplify it (fewer or smaller repeats, shorter length bounds, anchored patterns, fewer "
                f"alternatives or rules), or raise the compile budget")
        if self.yield_gil and now >= self._next_yield:
            time.sleep(0)  # let the engine loop take the GIL (see module docstring)
            self._next_yield = time.perf_counter() + YIELD_EVERY_S


_CURRENT: contextvars.ContextVar[CompileBudget | None] = contextvars.ContextVar("sgrun_compile_budget", default=None)


def current_budget() -> CompileBudget | None:
    return _CURRENT.get()


def tick(n: int = 1) -> None:
    """Count work against the open budget (a no-op outside compile_constraint)."""
    b = _CURRENT.get()
    if b is not None:
        b.tick(n)


@contextmanager
def compile_budget(seconds: float | None, what: str = "constraint") -> Iterator[None]:
    """Open a budget for the enclosed compile (None: no time limit; the GIL policy still applies)."""
    global _switch_users, _switch_saved, _gc_was_enabled
    policy = GIL_POLICY
    budget = CompileBudget(float("inf") if seconds is None else float(seconds), what, policy == "yield")
    token = _CURRENT.set(budget)
    if policy == "switch":
        with _switch_lock:
            if _switch_users == 0:
                _switch_saved = sys.getswitchinterval()
                sys.setswitchinterval(min(SWITCH_INTERVAL_S, _switch_saved))
                _gc_was_enabled = gc.isenabled()
                gc.disable()
            _switch_users += 1
    try:
        yield
    finally:
        _CURRENT.reset(token)
        if policy == "switch":
            with _switch_lock:
                _switch_users -= 1
                if _switch_users == 0:
                    sys.setswitchinterval(_switch_saved)
                    if _gc_was_enabled:
                        gc.enable()
