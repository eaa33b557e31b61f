"""ProgramState: the `s` a program receives. `s += ...` appends, `s["name"]` reads a value."""

from __future__ import annotations

from typing import Any, Iterator

from sgrun.lang.interpreter import ProgramExecutor
from sgrun.lang.ir import Expr, to_expr
from sgrun.lang.program_error import ProgramError, find_call_site


class ProgramState:
    def __init__(self, executor: ProgramExecutor):
        self._executor = executor
        self._functions = [executor.function_name]  # nested program calls, outermost first

    # --- building the program -----------------------------------------------------------------
    def __iadd__(self, other: Any) -> "ProgramState":
        expr: Expr = to_expr(other)
        self._executor.submit(expr, " > ".join(self._functions), find_call_site())
        return self

    def fork(self, n: int = 1) -> "ForkGroup":
        """n states continuing from this one's text; their calls share its prefix in the cache."""
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"fork needs n >= 1, got {n!r}")
        return ForkGroup(ProgramState(child) for child in self._executor.fork(n))

    def set_var(self, name: str, value: Any) -> None:
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

    @property
    def error(self) -> ProgramError | None:
        """The error that stopped this program (run_batch keeps it here instead of raising)."""
        self.sync()
        return self._executor.error

    def text_iter(self, name: str | None = None) -> Iterator[str]:
        """Yield text as it is appended: the whole program's, or only variable `name`'s."""
        return self._executor.iter_text(name)

    def sync(self) -> "ProgramState":
        self._executor.wait()
        return self

    def raise_error(self) -> "ProgramState":
        if self.error is not None:
            raise self.error
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
    """The states `fork(n)` returns; `forks += expr` appends to every one of them."""

    def __iadd__(self, other: Any) -> "ForkGroup":
        for state in self:
            state += other
        return self

    def join(self) -> "ForkGroup":
        """Wait for every fork; raise the first fork's error."""
        for state in self:
            state.sync().raise_error()
        return self


def fork(state: ProgramState, n: int = 1) -> ForkGroup:
    return state.fork(n)
