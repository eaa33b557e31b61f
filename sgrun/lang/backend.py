"""What a DSL program needs from whatever runs the model, and the process-wide default backend.

Backends take the program's text as the prompt (the text is the source of truth) and tokenize
it where the model lives, so the in-process and the remote backend see identical token ids.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Callable

from sgrun.engine.sampling_params import SamplingParams
from sgrun.errors import SgrunError
from sgrun.models.chat_template import ChatTemplate


@dataclass
class GenerationResult:
    text: str
    finish_reason: str | None
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    output_ids: list[int] = field(default_factory=list)
    logprobs: list[tuple[str, float]] | None = None    # (token text, logprob) when asked for
    matched_stop: str | int | None = None


@dataclass
class ScoreResult:
    logprobs: list[list[float]]        # per continuation, one logprob per continuation token
    prompt_tokens: int


TextCallback = Callable[[str], None]


class Backend(ABC):
    """Runs generations and scores for programs. Methods may be called from many threads."""

    @property
    @abstractmethod
    def chat_template(self) -> ChatTemplate | None: ...

    @abstractmethod
    def generate(self, prompt: str, params: SamplingParams, return_logprob: bool = False,
                 on_text: TextCallback | None = None) -> GenerationResult:
        """Generate one sample; `on_text` (when given) receives text deltas as they are produced."""

    @abstractmethod
    def score(self, prompt: str, continuations: list[str]) -> ScoreResult: ...

    def cache_prefix(self, prompt: str) -> None:
        """Prefill `prompt` into the prefix cache so later requests starting with it reuse it."""
        self.generate(prompt, SamplingParams(max_new_tokens=1, temperature=0.0))

    def close(self) -> None:
        """Release what the backend holds."""


_default_backend: Backend | None = None
_default_lock = threading.Lock()


def set_default_backend(backend: Backend | None) -> None:
    """Backend that `run`/`run_batch` use when none is passed."""
    global _default_backend
    if backend is not None and not isinstance(backend, Backend):
        raise TypeError(f"expected a sgrun.Runtime or sgrun.RuntimeEndpoint, got {type(backend).__name__}")
    with _default_lock:
        _default_backend = backend


def get_default_backend() -> Backend:
    with _default_lock:
        if _default_backend is None:
            raise SgrunError("no backend: pass backend=sgrun.Runtime() (or sgrun.RuntimeEndpoint(url)) "
                             "to run(), or call sgrun.set_default_backend(...) first")
        return _default_backend
