"""Constraint compiles in worker processes, so a hostile compile never holds this process's GIL.

Measured (benchmarks/bench_compile_isolation.py, docs/benchmarks-constrain.md): a compile on a
thread beside the engine loop slows the loop's steps 4-7x however it yields (a lower switch
interval, time.sleep(0), pausing the garbage collector), because every torch call of the loop
releases the GIL and must win it back from the compiling thread. In a worker process the loop
only shares the CPU.

What runs in the worker is the expensive, tokenizer-independent part: schema / regex / choices
-> the byte NFA (eager leaf DFAs, products, escape lifts), trimmed and checked for emptiness,
under the compile budget. It comes back pickled (a C-speed load), and the caller builds the
lazy DFA and token masks against its own vocabulary. Grammars stay in process: their expensive
part (lark's table build) already runs in a child process when big (lark_build).

A worker that overruns the budget by far (it raises by itself at the budget) is killed and
replaced. Any failure of the worker machinery itself makes the caller compile in process.
"""

from __future__ import annotations

import atexit
import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
from typing import Any, BinaryIO

from sgrun.constrain.compile_budget import CompileBudgetExceeded, compile_budget
from sgrun.constrain.errors import EmptyConstraintError
from sgrun.errors import ConstraintError

WORKERS = 2  # one hostile compile (at most the budget long) never holds up every other new schema
WORKER_STARTUP_S = 60.0  # a fresh worker imports sgrun (torch) first: a stuck-worker backstop only


class _Worker:
    """One child `python -m sgrun.constrain.compile_worker`, length-prefixed pickles over its
    stdin/stdout (a plain subprocess: multiprocessing's spawn would re-run the parent's main
    script, which breaks scripts without a __main__ guard)."""

    def __init__(self) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        self.proc = subprocess.Popen([sys.executable, "-m", "sgrun.constrain.compile_worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env)
        self.replies: queue.Queue = queue.Queue()
        _all.append(self)

    def request(self, msg: Any, timeout: float | None) -> Any:
        _send(self.proc.stdin, msg)
        reader = threading.Thread(target=lambda: self.replies.put(_recv_or_none(self.proc.stdout)), daemon=True)
        reader.start()
        try:
            got = self.replies.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError from None
        if got is None:
            raise BrokenPipeError("compile worker exited")
        return got

    def kill(self) -> None:
        self.proc.kill()
        self.close()

    def close(self) -> None:
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


_all: list[_Worker] = []
_idle: queue.LifoQueue = queue.LifoQueue()
_started = 0
_start_lock = threading.Lock()


def _take_worker() -> _Worker:
    global _started
    with _start_lock:
        if _idle.empty() and _started < WORKERS:
            _started += 1
            return _Worker()
    return _idle.get()


def _give_back(w: _Worker | None) -> None:
    global _started
    if w is None:
        with _start_lock:
            _started -= 1
        return
    _idle.put(w)


@atexit.register
def _close_workers() -> None:
    """Workers end when their stdin closes; wait for them so no pipe is left open at exit."""
    for w in _all:
        w.close()


def _send(f: BinaryIO, msg: Any) -> None:
    data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
    f.write(struct.pack("<Q", len(data)) + data)
    f.flush()


def _recv_or_none(f: BinaryIO) -> Any:
    """The next message, or None when the other side is gone (closed or killed)."""
    try:
        head = f.read(8)
        if len(head) < 8:
            return None
        (n,) = struct.unpack("<Q", head)
        return pickle.loads(f.read(n))
    except (OSError, ValueError, EOFError, pickle.UnpicklingError):
        return None


def build_nfa(kind: str, payload: Any, options: dict) -> tuple[Any, int, list[str]]:
    """(nfa, root fragment, warnings) for a json_schema / regex / choices constraint, trimmed
    and known non-empty. Runs in process or in a worker."""
    from sgrun.constrain.regex_ast import literal_choices
    from sgrun.constrain.regex_parser import parse_regex
    warnings: list[str] = []
    if kind == "json_schema":
        from sgrun.constrain.json_schema import schema_to_nfa
        nfa, root, warnings = schema_to_nfa(payload, **options)
    else:
        from sgrun.constrain.byte_nfa import nfa_from_node
        from sgrun.constrain.native_nfa import new_program_nfa
        node = parse_regex(payload).fullmatch_node() if kind == "regex" else literal_choices(list(payload))
        nfa, root = nfa_from_node(node, new_program_nfa())
    if root not in nfa.trim():
        raise EmptyConstraintError(f"the {kind.replace('_', ' ')} constraint admits no output at all")
    return nfa, root, warnings


def _in_worker(kind: str, payload: Any, options: dict, budget_s: float | None) -> tuple:
    try:
        with compile_budget(budget_s, what=kind.replace("_", " ")):
            try:
                return ("ok", build_nfa(kind, payload, options))
            except RecursionError:
                from sgrun.constrain.errors import ConstraintTooComplexError
                raise ConstraintTooComplexError(f"the {kind} nests too deeply to compile; flatten it") from None
    except ConstraintError as e:  # custom __init__ signatures do not unpickle: send the parts
        return ("error", type(e).__module__, type(e).__qualname__, str(e), dict(e.__dict__))


def start_workers() -> None:
    """Start the worker processes now (their import takes seconds), e.g. at server start."""
    workers = [_take_worker() for _ in range(WORKERS)]
    for w in workers:
        try:
            w.request(("regex", "a", {}, 1.0), WORKER_STARTUP_S)
            _give_back(w)
        except (TimeoutError, OSError):
            w.kill()
            _give_back(None)


def build_nfa_isolated(kind: str, payload: Any, options: dict, budget_s: float | None) -> tuple[Any, int, list[str]]:
    try:
        w = _take_worker()
    except OSError:
        return build_nfa(kind, payload, options)
    try:
        got = w.request((kind, payload, options, budget_s), None if budget_s is None else budget_s + WORKER_STARTUP_S)
    except TimeoutError:
        w.kill()
        _give_back(None)
        raise CompileBudgetExceeded(f"the {kind.replace('_', ' ')} is too complex: compiling it took more than "
                                    f"the {budget_s:g} s budget; simplify it, or raise the compile budget") from None
    except (OSError, pickle.PickleError, EOFError):
        w.kill()
        _give_back(None)
        return build_nfa(kind, payload, options)  # the worker machinery failed: compile here
    _give_back(w)
    if got[0] == "ok":
        return got[1]
    _, module, qualname, message, attrs = got
    import importlib
    cls = getattr(importlib.import_module(module), qualname, ConstraintError)
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    err.__dict__.update(attrs)
    raise err


def _serve() -> None:
    """The worker's loop: one request at a time until stdin closes."""
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing else may write to the reply pipe
    while True:
        msg = _recv_or_none(stdin)
        if msg is None:
            return
        _send(stdout, _in_worker(*msg))


if __name__ == "__main__":
    _serve()
