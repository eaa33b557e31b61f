"""ProgramExecutor: runs a program's IR against a backend, one state at a time.

A program body only *submits* expressions; a worker thread per state executes them in order
(as SGLang's stream executor does). So forks run in parallel, the body blocks only where it
reads a value (`s["x"]`), and streaming readers watch text as it is appended.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from sgrun.engine.state.sampling_params import SamplingParams
from sgrun.errors import SgrunError
from sgrun.lang.backend import Backend
from sgrun.lang.chat_roles import ChatRoles
from sgrun.lang.call_meta import empty_result, gen_meta
from sgrun.lang.ir import (CALL_OPTION_NAMES, GEN_PARAM_NAMES, AppendForks, Expr, ExprList, Gen, RoleBegin, RoleEnd,
                           Select, SeparateReasoning, Text, VarScopeBegin, VarScopeEnd, dtype_constraint)
from sgrun.lang.program_error import ProgramError
from sgrun.lang.reasoning_split import split_reasoning
from sgrun.lang.select_scoring import run_select

_SAMPLING_FIELDS = set(SamplingParams.__dataclass_fields__)


def sampling_defaults(options: dict[str, Any]) -> dict[str, Any]:
    """`run(temperature=0, max_tokens=32)` -> SamplingParams field names (plus the per-call
    logprob options under their own names); unknown names raise. None means "not given"."""
    out: dict[str, Any] = {}
    for key, value in options.items():
        if value is None:
            continue
        if key in GEN_PARAM_NAMES:
            out[GEN_PARAM_NAMES[key]] = value
        elif key in _SAMPLING_FIELDS or key in CALL_OPTION_NAMES:
            out[key] = value
        else:
            raise TypeError(f"unknown argument {key!r}: not a program argument nor a sampling parameter")
    for key in ("stop", "stop_regex"):
        if isinstance(out.get(key), str):
            out[key] = [out[key]]
    return out


@dataclass
class _Item:
    expr: Expr
    function: str        # program name at submission (nested programs: "outer > inner")
    call_site: str


class ProgramExecutor:
    def __init__(self, backend: Backend, function_name: str, default_params: dict[str, Any] | None = None,
                 roles: ChatRoles | None = None, stream: bool = False, synchronous: bool = False):
        self.backend = backend
        self.function_name = function_name
        self.default_params = dict(default_params or {})
        self.stream = stream                 # ask backends for text deltas (for text_iter while running)
        self.synchronous = synchronous       # execute in the submitting thread; errors propagate raw
        self._roles = roles
        # Program state; only the worker writes it while items are pending.
        self.text = ""
        self.messages: list[dict[str, str]] = []
        self.variables: dict[str, Any] = {}
        self.meta: dict[str, dict[str, Any]] = {}
        self.calls: list[dict[str, Any]] = []
        self.error: ProgramError | None = None
        self._role: str | None = None
        self._role_start = 0
        # Execution and streaming bookkeeping, guarded by _cond.
        self._cond = threading.Condition()
        self._queue: collections.deque[_Item] = collections.deque()
        self._pending = 0
        self._worker_running = False
        self._body_thread: int | None = None  # thread running the program body, while it runs
        self._chunks: list[str] = []         # every piece of text appended, in order
        self._var_chunks: dict[str, list[str]] = {}
        self._var_chunk_meta: dict[str, list[dict[str, Any]]] = {}   # per streamed piece of a variable
        self._vars_done: set[str] = set()
        self._var_starts: dict[str, int] = {}  # where a gen's / var scope's text begins in self.text
        self.fork_start = 0                  # len(text) when this state was forked off its parent

    # --- submission and waiting -------------------------------------------------------------
    def submit(self, expr: Expr, function: str, call_site: str) -> None:
        item = _Item(expr, function, call_site)
        if self.synchronous:
            self._execute(item.expr)
            return
        with self._cond:
            if self.error is not None:
                return                     # the program already failed: later calls do not run
            self._queue.append(item)
            self._pending += 1
            if not self._worker_running:
                self._worker_running = True
                threading.Thread(target=self._work, name=f"sgrun-{self.function_name}", daemon=True).start()

    def _work(self) -> None:
        while True:
            with self._cond:
                if not self._queue:
                    self._worker_running = False
                    return
                item = self._queue.popleft()
                failed = self.error is not None
            if not failed:
                try:
                    self._execute(item.expr)
                except BaseException as exc:  # noqa: BLE001 - any failure becomes the program's error
                    node = getattr(exc, "_sgrun_node", item.expr)
                    error = exc if isinstance(exc, ProgramError) else ProgramError(
                        item.function, node.describe(), exc, node.call_site or item.call_site)
                    with self._cond:
                        self.error = error
            with self._cond:
                self._pending -= 1
                self._cond.notify_all()

    def set_body_thread(self, thread_id: int | None) -> None:
        """The runner marks the thread running the body; other threads reading the state wait for it."""
        with self._cond:
            self._body_thread = thread_id
            self._cond.notify_all()

    def _body_may_submit(self) -> bool:
        return self._body_thread is not None and self._body_thread != threading.get_ident()

    def fail(self, error: ProgramError) -> None:
        """Record an error raised by the program body itself."""
        with self._cond:
            if self.error is None:
                self.error = error
            self._cond.notify_all()

    def wait(self) -> None:
        """Block until everything submitted so far has run."""
        with self._cond:
            while (self._pending or self._body_may_submit()) and self.error is None:
                self._cond.wait()
            while self._pending:  # after an error the queue drains without running
                self._cond.wait()

    def wait_var(self, name: str) -> Any:
        with self._cond:
            while name not in self.variables:
                if self.error is not None:
                    raise self.error
                if self._pending == 0 and not self._body_may_submit():
                    known = ", ".join(sorted(self.variables)) or "none"
                    raise KeyError(f"the program set no variable {name!r} (variables: {known})")
                self._cond.wait()
            return self.variables[name]

    def iter_text(self, name: str | None = None) -> Iterator[str]:
        """Text pieces as they are appended (of the whole program, or of variable `name`)."""
        for text, _meta in self.iter_pieces(name):
            if text:
                yield text

    def iter_pieces(self, name: str | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
        """(text, stream meta) per appended piece; the meta is {} except for a streamed gen's pieces
        (completion_tokens so far, output_token_logprobs of this piece, ...)."""
        seen = 0
        while True:
            with self._cond:
                while True:
                    chunks = self._chunks if name is None else self._var_chunks.get(name, [])
                    done = self._finished() or (name is not None and name in self._vars_done)
                    if seen < len(chunks) or done:
                        break
                    self._cond.wait()
                metas = [] if name is None else self._var_chunk_meta.get(name, [])
                new = [(c, metas[seen + i] if seen + i < len(metas) else {}) for i, c in enumerate(chunks[seen:])]
                seen = len(chunks)
            yield from new
            if done and not new:
                return

    def _finished(self) -> bool:
        return (self._pending == 0 and self._body_thread is None) or self.error is not None

    # --- forks --------------------------------------------------------------------------------
    def fork(self, n: int) -> list["ProgramExecutor"]:
        self.wait()
        if self.error is not None:
            raise self.error
        if n > 1 and self.text:
            # Prefill the shared prefix once so the forks' first calls all hit the radix cache.
            self.backend.cache_prefix(self.text)
        children = []
        for _ in range(n):
            child = ProgramExecutor(self.backend, self.function_name, self.default_params, self._roles, self.stream)
            child.text = self.text
            child.messages = [dict(m) for m in self.messages]
            child.variables = dict(self.variables)
            child.meta = dict(self.meta)
            child._role, child._role_start = self._role, self._role_start
            child._chunks = [self.text] if self.text else []
            child.fork_start = len(self.text)
            children.append(child)
        return children

    # --- execution ----------------------------------------------------------------------------
    @property
    def roles(self) -> ChatRoles:
        if self._roles is None:
            self._roles = ChatRoles(self.backend.chat_template)
        return self._roles

    def _execute(self, expr: Expr) -> None:
        for node in expr.walk() if isinstance(expr, ExprList) else [expr]:
            try:
                self._execute_node(node)
            except BaseException as exc:
                if not self.synchronous:
                    exc._sgrun_node = node  # type: ignore[attr-defined]  # name the failing call
                raise

    def _execute_node(self, node: Expr) -> None:
        if isinstance(node, Text):
            self._append(node.text)
        elif isinstance(node, RoleBegin):
            self._begin_role(node.role)
        elif isinstance(node, RoleEnd):
            self._end_role(node.role)
        elif isinstance(node, Gen):
            self._gen(node)
        elif isinstance(node, Select):
            self._select(node)
        elif isinstance(node, VarScopeBegin):
            self._var_starts[node.name] = len(self.text)
        elif isinstance(node, VarScopeEnd):
            if node.name not in self._var_starts:
                raise SgrunError(f"var_scope {node.name!r} ended without beginning")
            self._record(node.name, self.text[self._var_starts.pop(node.name):], None)
        elif isinstance(node, SeparateReasoning):
            self._separate_reasoning(node)
        elif isinstance(node, AppendForks):
            self._append_forks(node)
        else:
            raise TypeError(f"unknown program node {type(node).__name__}")

    def _append(self, text: str, var: str | None = None, meta: dict[str, Any] | None = None) -> None:
        with self._cond:
            self.text += text
            self._chunks.append(text)
            if var is not None:
                self._var_chunks.setdefault(var, []).append(text)
                self._var_chunk_meta.setdefault(var, []).append(meta or {})
            self._cond.notify_all()

    def _begin_role(self, role: str) -> None:
        if self._role is not None:
            raise SgrunError(f"cannot open a {role!r} block inside the open {self._role!r} block; "
                             f"close it first ({self._role}_end())")
        first = not self.messages and not self.text
        self._append(self.roles.prefix(role, first))
        self._role, self._role_start = role, len(self.text)

    def _end_role(self, role: str) -> None:
        if self._role != role:
            raise SgrunError(f"{role}_end() without an open {role!r} block"
                             + (f" (the open block is {self._role!r})" if self._role else ""))
        content = self.text[self._role_start:]
        self._append(self.roles.suffix(role))
        self.messages.append({"role": role, "content": content})
        self._role = None

    def _sampling_params(self, gen: Gen) -> tuple[SamplingParams, dict[str, Any]]:
        merged = {**self.default_params, **gen.params, **gen.options}
        options = {k: merged.pop(k) for k in CALL_OPTION_NAMES if k in merged}
        if options.get("dtype"):
            regex, stops = dtype_constraint(options["dtype"])
            merged.pop("json_schema", None), merged.pop("grammar", None)
            merged["regex"] = regex
            merged["stop"] = [*merged.get("stop", []), *(x for x in stops if x not in merged.get("stop", []))]
        if options.get("return_logprob"):
            merged["logprobs"] = int(options.get("top_logprobs_num") or 0)
        if self._role is not None:
            marker = self.roles.end_marker(self._role)
            if marker and marker not in merged.get("stop", []):
                # Generation inside a role stops at the role's end, even with ignore_eos.
                merged["stop"] = [*merged.get("stop", []), marker]
        if merged.get("max_new_tokens") == 0:
            return SamplingParams(**{**merged, "max_new_tokens": 1}).validated().replace(max_new_tokens=0), options
        return SamplingParams(**merged).validated(), options

    def _gen(self, gen: Gen) -> None:
        params, options = self._sampling_params(gen)
        start = options.get("logprob_start_len")
        input_logprobs = None
        if options.get("return_logprob") and start is not None and start >= 0:
            input_logprobs = self.backend.input_logprobs(self.text, start)
        if params.max_new_tokens == 0:
            # Nothing to generate: SGLang programs use this to prefill the text so far.
            if input_logprobs is None:
                self.backend.cache_prefix(self.text)
            result = empty_result(len(input_logprobs or []) + (start or 0))
            self._record(gen.name, "", gen_meta(gen.name, result, options, 0, input_logprobs))
            return
        on_text: Callable[[str], None] | None = None
        if gen.name is not None:
            self._var_starts[gen.name] = len(self.text)
        if self.stream:
            def on_text(delta: str, meta: dict[str, Any] | None = None) -> None:
                self._append(delta, gen.name, meta)
        result = self.backend.generate(self.text, params, bool(options.get("return_logprob")), on_text)
        if not self.stream:
            self._append(result.text, gen.name)
        meta = gen_meta(gen.name, result, options, params.max_new_tokens, input_logprobs)
        value: Any = result.text
        if params.n > 1:
            value = list(result.texts or [result.text])   # SGLang: the variable holds every sample
        self._record(gen.name, value, meta)

    def _select(self, sel: Select) -> None:
        choice, meta = run_select(self.backend, self.text, sel)
        self._append(choice, sel.name)
        self._record(sel.name, choice, meta)

    def _separate_reasoning(self, node: SeparateReasoning) -> None:
        reasoning, answer = split_reasoning(str(self.variables.get(node.name, "")), node.model_type)
        start = self._var_starts.get(node.name)
        if start is not None and not self.stream:
            # The program text keeps only the answer, as SGLang's does (a stream already showed it all).
            with self._cond:
                self.text = self.text[:start] + answer
        self._record(node.name, answer, self.meta.get(node.name))
        self._record(f"{node.name}_reasoning_content", reasoning, None)

    def _append_forks(self, node: AppendForks) -> None:
        """The forks' texts since the fork point, in order (they share this state's text before it)."""
        for state in node.forks:
            child: ProgramExecutor = state._executor
            child.wait()
            if child.error is not None:
                raise child.error
            self._append(child.text[child.fork_start:])

    def _record(self, name: str | None, value: Any, meta: dict[str, Any] | None) -> None:
        with self._cond:
            if meta is not None and all(m is not meta for m in self.calls):
                self.calls.append(meta)
            if name is not None:
                self.variables[name] = value
                if meta is not None:
                    self.meta[name] = meta
                self._vars_done.add(name)
            self._cond.notify_all()

    def set_var(self, name: str, value: Any) -> None:
        with self._cond:
            self.variables[name] = value
            self._vars_done.add(name)
            self._cond.notify_all()
