"""Find the text every run of a program starts with, before it depends on its arguments.

`run_batch` prefills that prefix once (as SGLang's `cache_program` does) so concurrent programs
share it in the radix cache instead of each prefilling it at the same moment.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

from sgrun.engine.state.sampling_params import SamplingParams
from sgrun.lang.backend import Backend, GenerationResult, ScoreResult, TextCallback
from sgrun.lang.chat_roles import ChatRoles
from sgrun.lang.interpreter import ProgramExecutor
from sgrun.models.chat_template import ChatTemplate


class _StopTrace(Exception):
    """The program reached something that depends on its arguments or on the model."""


class _ArgumentPlaceholder:
    """Stands in for a program argument; using its value in any way ends the trace."""

    def _stop(self, *args: Any, **kwargs: Any) -> Any:
        raise _StopTrace

    __str__ = __repr__ = __format__ = __bool__ = __len__ = __iter__ = __int__ = __float__ = _stop
    __add__ = __radd__ = __mul__ = __getitem__ = __eq__ = __lt__ = __gt__ = __contains__ = _stop
    __hash__ = _stop  # type: ignore[assignment]

    def __getattr__(self, name: str) -> Any:
        raise _StopTrace


class _TracingBackend(Backend):
    def __init__(self, template: ChatTemplate | None):
        self._template = template

    @property
    def chat_template(self) -> ChatTemplate | None:
        return self._template

    def generate(self, prompt: str, params: SamplingParams, return_logprob: bool = False,
                 on_text: TextCallback | None = None) -> GenerationResult:
        raise _StopTrace

    def score(self, prompt: str, continuations: list[str]) -> ScoreResult:
        raise _StopTrace


def constant_prefix(body: Callable[..., Any], roles: ChatRoles, name: str) -> str:
    """The program text before the first model call or argument use ("" if it cannot tell)."""
    from sgrun.lang.state import ProgramState  # state imports the interpreter; keep this module light

    executor = ProgramExecutor(_TracingBackend(roles.template), name, roles=roles, synchronous=True)
    params = list(inspect.signature(body).parameters.values())[1:]
    placeholders = {p.name: _ArgumentPlaceholder() for p in params
                    if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    try:
        body(ProgramState(executor), **placeholders)
    except Exception:  # noqa: BLE001 - any stop (placeholder, model call, user error) ends the prefix
        pass
    return executor.text
