"""ProgramState: the `s` a program receives. `s += ...` appends, `s["name"]` reads a value."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, AsyncIterator, Iterator

from sgrun.lang.interpreter import ProgramExecutor
from sgrun.lang.ir import AppendForks, Expr, RoleBegin, RoleEnd, VarScopeBegin, VarScopeEnd, _located, role, to_expr
from sgrun.lang.program_error import ProgramError, find_call_site


class ProgramState:
    def __init__(self, executor: ProgramExecutor):
        self._executor = executor
        self._functions = [executor.function_name]  # nested program calls, outermost first
        self.ret_value: Any = None                   # what the program body returned

    # --- building the program -----------------------------------------------------------------
    def __iadd__(self, other: Any) -> "ProgramState":
        expr: Expr = to_expr(other)
        self._executor.submit(expr, " > ".join(self._functions), find_call_site())
        return self

    def fork(self, n: int = 1, position_ids_offset: Any = None) -> "ForkGroup":
        """n states continuing from this one's text; their calls share its prefix in the cache.
        (`position_ids_offset` is accepted for SGLang programs; forks always continue the text.)"""
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"fork needs n >= 1, got {n!r}")
        children = self._executor.fork(n)   # waits for this state's pending calls
        return ForkGroup((ProgramState(child) for child in children), source=self,
                         inherited=set(self._executor.variables))

    @contextlib.contextmanager
    def copy(self) -> Iterator["ProgramState"]:
        """`with s.copy() as c:` a single fork, joined (its new variables gathered) at the end."""
        group = self.fork(1)
        try:
            yield group[0]
        finally:
            group.join()

    # --- role blocks, as SGLang's state methods -------------------------------------------------
    def system(self, content: Any = None) -> Any:
        """`s.system("...")` appends a system block; `with s.system(): ...` wraps what is appended."""
        return self._role("system", content)

    def user(self, content: Any = None) -> Any:
        return self._role("user", content)

    def assistant(self, content: Any = None) -> Any:
        return self._role("assistant", content)

    def _role(self, name: str, content: Any) -> Any:
        if content is not None:
            self += role(name, content)
            return None
        return self._role_scope(name)

    @contextlib.contextmanager
    def _role_scope(self, name: str) -> Iterator[None]:
        self += _located(RoleBegin(name))
        yield
        self += _located(RoleEnd(name))

    @contextlib.contextmanager
    def var_scope(self, name: str) -> Iterator[None]:
        """`with s.var_scope("x"): ...` stores the text appended inside the block as variable x."""
        self += _located(VarScopeBegin(name))
        yield
        self += _located(VarScopeEnd(name))

    def set_var(self, name: str, value: Any) -> None:
        self._executor.set_var(name, value)

    def __setitem__(self, name: str, value: Any) -> None:
        self._executor.set_var(name, value)

    # --- reading it -----------------------------------------------------------------------------
    def __getitem__(self, name: str) -> Any:
        return self._executor.wait_var(name)

    def get_var(self, name: str) -> Any:
        return self._executor.wait_var(name)

    def __contains__(self, name: str) -> bool:
        self.sync()
        return name in self._executor.variables

    def text(self) -> str:
        """The program's full text (after everything submitted so far has run)."""
        self.sync()
        return self._executor.text

    def messages(self) -> list[dict[str, str]]:
        """The role blocks closed so far, as chat messages."""
        self.sync()
        return [dict(m) for m in self._executor.messages]

    def variables(self) -> dict[str, Any]:
        self.sync()
        return dict(self._executor.variables)

    def get_meta_info(self, name: str) -> dict[str, Any]:
        """Details of the call that set `name`: prompt/cached/completion tokens, finish reason,
        logprobs (gen with return_logprob), normalised logprobs per choice (select)."""
        self._executor.wait_var(name)
        return dict(self._executor.meta[name])

    @property
    def calls(self) -> list[dict[str, Any]]:
        """Meta information of every gen/select call, in execution order."""
        self.sync()
        return list(self._executor.calls)

    def error(self) -> ProgramError | None:
        """The error that stopped this program, or None (run_batch keeps it here instead of raising)."""
        self.sync()
        return self._executor.error

    def text_iter(self, var_name: str | None = None) -> Iterator[str]:
        """Yield text as it is appended: the whole program's, or only variable `var_name`'s."""
        return self._executor.iter_text(var_name)

    async def text_async_iter(self, var_name: str | None = None,
                              return_meta_data: bool = False) -> AsyncIterator[Any]:
        """text_iter for asyncio code: the waiting happens on a worker thread, not the event loop.
        With `return_meta_data` (needs `var_name`), yields (text, meta) where meta holds SGLang's
        stream fields: completion_tokens and output_token_logprobs_length so far, and this piece's
        output_token_logprobs (pieces that carried tokens but no text fold into the next one)."""
        pieces = self._executor.iter_pieces(var_name)
        done = object()
        pending: dict[str, Any] = {}
        while True:
            item = await asyncio.to_thread(next, pieces, done)
            if item is done:
                return
            text, meta = item  # type: ignore[misc]
            if pending and meta:
                meta = {**meta, **{k: [*pending.get(k, []), *meta.get(k, [])]
                                   for k in ("output_token_logprobs", "output_top_logprobs") if k in meta}}
            if not text:
                pending = meta or pending
                continue
            pending = {}
            if return_meta_data:
                yield text, meta
            else:
                yield text

    def sync(self) -> "ProgramState":
        self._executor.wait()
        return self

    def raise_error(self) -> "ProgramState":
        error = self.error()
        if error is not None:
            raise error
        return self

    @property
    def function_name(self) -> str:
        return self._executor.function_name

    def __repr__(self) -> str:
        text = self._executor.text
        shown = text if len(text) <= 60 else "..." + text[-57:]
        return f"ProgramState({self.function_name!r}, text={shown!r})"

    # --- nested programs ------------------------------------------------------------------------
    def _enter_function(self, name: str) -> None:
        self._functions.append(name)

    def _exit_function(self) -> None:
        self._functions.pop()


class ForkGroup(list):
    """The states `fork(n)` returns. `forks += expr` appends expr to every fork, `forks += lambda i: ...`
    the expression built for fork i, `forks += [e0, e1, ...]` one expression per fork."""

    def __init__(self, states: Any = (), source: ProgramState | None = None, inherited: set[str] | None = None):
        super().__init__(states)
        self.source = source
        self.inherited = inherited or set()   # the source's variables at the fork: not gathered back

    def __iadd__(self, other: Any) -> "ForkGroup":
        if isinstance(other, (list, tuple)):
            if len(other) != len(self):
                raise ValueError(f"forks += [...] needs one expression per fork ({len(self)}), got {len(other)}")
            items: list[Any] = list(other)
        elif callable(other) and not isinstance(other, Expr):
            items = [other(i) for i in range(len(self))]
        else:
            items = [other] * len(self)
        for state, item in zip(self, items):
            state += item
        return self

    def join(self, mode: str = "gather_variable") -> "ForkGroup":
        """Wait for every fork; raise the first fork's error. Then, as in SGLang:
        "gather_variable": each variable a fork set that the source state did not have before the
        fork becomes, in the source, the list of the forks' values (in fork order);
        "concate_and_append": the forks' new texts are appended to the source, in order."""
        if mode not in ("gather_variable", "concate_and_append"):
            raise ValueError(f"join mode must be 'gather_variable' or 'concate_and_append', got {mode!r}")
        for state in self:
            state.sync().raise_error()
        if self.source is None:
            return self
        if mode == "concate_and_append":
            self.source += _located(AppendForks(list(self)))
            self.source.sync().raise_error()
            return self
        before = self.inherited
        gathered: dict[str, list[Any]] = {}
        for state in self:
            for name, value in state._executor.variables.items():
                if name not in before:
                    gathered.setdefault(name, []).append(value)
        for name, values in gathered.items():
            self.source.set_var(name, values)
        return self


def fork(state: ProgramState, n: int = 1) -> ForkGroup:
    return state.fork(n)
