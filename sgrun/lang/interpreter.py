"""ProgramExecutor: runs a program's IR against a backend, one state at a time.

A program body only *submits* expressions; a worker thread per state executes them in order
(as SGLang's stream executor does). So forks run in parallel, the body blocks only where it
reads a value (`s["x"]`), and streaming readers watch text as it is appended.
"""

from __future__ import annotations

import collections
import math
import random
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from sgrun.engine.sampling_params import SamplingParams
from sgrun.errors import SgrunError
from sgrun.lang.backend import Backend
from sgrun.lang.chat_roles import ChatRoles
from sgrun.lang.ir import GEN_PARAM_NAMES, Expr, ExprList, Gen, RoleBegin, RoleEnd, Select, Text
from sgrun.lang.program_error import ProgramError

_SAMPLING_FIELDS = set(SamplingParams.__dataclass_fields__)


def sampling_defaults(options: dict[str, Any]) -> dict[str, Any]:
    """`run(temperature=0, max_tokens=32)` -> SamplingParams field names; unknown names raise."""
    out: dict[str, Any] = {}
    for key, value in options.items():
        if key in GEN_PARAM_NAMES:
            out[GEN_PARAM_NAMES[key]] = value
        elif key in _SAMPLING_FIELDS:
            out[key] = value
        else:
            raise TypeError(f"unknown argument {key!r}: not a program argument nor a sampling parameter")
    if isinstance(out.get("stop"), str):
        out["stop"] = [out["stop"]]
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
        self._vars_done: set[str] = set()

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
        seen = 0
        while True:
            with self._cond:
                while True:
                    chunks = self._chunks if name is None else self._var_chunks.get(name, [])
                    done = self._finished() or (name is not None and name in self._vars_done)
                    if seen < len(chunks) or done:
                        break
                    self._cond.wait()
                new = chunks[seen:]
                seen = len(chunks)
            yield from (c for c in new if c)
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
        else:
            raise TypeError(f"unknown program node {type(node).__name__}")

    def _append(self, text: str, var: str | None = None) -> None:
        with self._cond:
            self.text += text
            self._chunks.append(text)
            if var is not None:
                self._var_chunks.setdefault(var, []).append(text)
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

    def _sampling_params(self, gen: Gen) -> SamplingParams:
        fields = {**self.default_params, **gen.params}
        if self._role is not None:
            marker = self.roles.end_marker(self._role)
            if marker and marker not in fields.get("stop", []):
                # Generation inside a role stops at the role's end, even with ignore_eos.
                fields["stop"] = [*fields.get("stop", []), marker]
        return SamplingParams(**fields).validated()

    def _gen(self, gen: Gen) -> None:
        params = self._sampling_params(gen)
        on_text: Callable[[str], None] | None = None
        if self.stream:
            def on_text(delta: str) -> None:
                self._append(delta, gen.name)
        result = self.backend.generate(self.text, params, gen.return_logprob, on_text)
        if not self.stream:
            self._append(result.text, gen.name)
        meta = {"kind": "gen", "name": gen.name, "text": result.text, "finish_reason": result.finish_reason,
                "matched_stop": result.matched_stop, "prompt_tokens": result.prompt_tokens,
                "cached_tokens": result.cached_tokens, "completion_tokens": result.completion_tokens,
                "output_ids": result.output_ids, "logprobs": result.logprobs}
        self._record(gen.name, result.text, meta)

    def _select(self, sel: Select) -> None:
        # Trailing spaces go with the choices: "use a " + "calculator" scores " calculator", the
        # token the model would really produce, instead of a bare word after a lone space.
        prompt = self.text.rstrip(" ")
        moved = self.text[len(prompt):]
        scored = self.backend.score(prompt, [moved + c for c in sel.choices])
        normalized = [sum(lps) / len(lps) if lps else -math.inf for lps in scored.logprobs]
        if sel.temperature > 0:
            top = max(normalized)
            weights = [math.exp((x - top) / sel.temperature) for x in normalized]
            index = random.choices(range(len(sel.choices)), weights=weights)[0]
        else:
            index = max(range(len(sel.choices)), key=normalized.__getitem__)
        choice = sel.choices[index]
        self._append(choice, sel.name)
        meta = {"kind": "select", "name": sel.name, "text": choice, "choices": list(sel.choices),
                "normalized_logprobs": normalized, "token_logprobs": scored.logprobs,
                "prompt_tokens": scored.prompt_tokens}
        self._record(sel.name, choice, meta)

    def _record(self, name: str | None, value: str, meta: dict[str, Any]) -> None:
        with self._cond:
            self.calls.append(meta)
            if name is not None:
                self.variables[name] = value
                self.meta[name] = meta
                self._vars_done.add(name)
            self._cond.notify_all()

    def set_var(self, name: str, value: Any) -> None:
        with self._cond:
            self.variables[name] = value
            self._vars_done.add(name)
            self._cond.notify_all()
