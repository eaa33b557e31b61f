"""What a DSL program needs from whatever runs the model, and the process-wide default backend.

Backends take the program's text as the prompt (the text is the source of truth) and tokenize
it where the model lives, so the in-process and the remote backend see identical token ids.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Callable

from sgrun.engine.state.outputs import TokenLogprob
from sgrun.engine.state.sampling_params import SamplingParams
from sgrun.errors import SgrunError
from sgrun.models.chat_template import ChatTemplate


@dataclass
class GenerationResult:
    text: str                          # the first sample
    finish_reason: str | None
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    output_ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprob] | None = None          # per output token of the first sample, when asked for
    matched_stop: str | int | None = None
    texts: list[str] = field(default_factory=list)      # every sample (params.n of them); [text] when empty


# [logprob or None, token id, token text or None]: SGLang's shape for a token's logprob.
LogprobEntry = list


@dataclass
class ScoreResult:
    logprobs: list[list[float]]        # per continuation, one logprob per continuation token
    prompt_tokens: int
    token_ids: list[list[int]] | None = None   # the scored tokens, when the backend reports them
    tokens: list[list[str]] | None = None      # their text


# Called with each text delta of a streamed gen and, optionally, its stream meta (SGLang's names:
# completion_tokens and output_token_logprobs_length so far, this delta's output_token_logprobs).
TextCallback = Callable[..., None]


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

    def input_logprobs(self, prompt: str | list[int], start: int) -> list[LogprobEntry]:
        """[logprob, id, text] of each prompt token from index `start` on, given the tokens before it
        (the first token of the prompt has logprob None). Prefills the prompt into the cache."""
        raise SgrunError(f"{type(self).__name__} cannot report prompt token logprobs "
                         f"(logprob_start_len, unconditional_likelihood_normalized)")

    def cache_prefix(self, prompt: str) -> None:
        """Prefill `prompt` into the prefix cache so later requests starting with it reuse it."""
        self.generate(prompt, SamplingParams(max_new_tokens=1, temperature=0.0))

    def flush_cache(self) -> None:
        """Drop the backend's cached prefixes."""

    def server_info(self) -> dict:
        """What the backend runs (model, limits), as SGLang's get_server_info reports it."""
        return {}

    def close(self) -> None:
        """Release what the backend holds."""


_default_backend: Backend | None = None
_default_lock = threading.Lock()


def set_default_backend(backend: Backend | None) -> None:
    """Backend that `run`/`run_batch` use when none is passed (also `global_config.default_backend`)."""
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
