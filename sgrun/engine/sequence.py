"""Sequence: the engine's state for one sample of one request."""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from sgrun.engine.detokenizer import IncrementalDetokenizer
from sgrun.engine.outputs import StreamEvent, TokenLogprob
from sgrun.engine.sampling_params import SamplingParams


class Status(enum.Enum):
    WAITING = 0
    RUNNING = 1
    FINISHED = 2


@dataclass(eq=False)
class Sequence:
    seq_id: int
    request_id: str
    index: int
    tokens: list[int]                 # prompt followed by output tokens
    prompt_len: int
    params: SamplingParams
    detok: IncrementalDetokenizer | None
    emit: Callable[[StreamEvent], None]
    matcher: Any = None               # constraint matcher (sgrun.constrain), or None
    generator: torch.Generator | None = None
    score_from: int | None = None     # score-only: logprobs of tokens[score_from:] are wanted
    status: Status = Status.WAITING
    page_table: list[int] = field(default_factory=list)
    num_computed: int = 0             # tokens whose K/V are in the pool
    cached_tokens: int = 0            # prompt tokens served from the radix cache at first admission
    admitted: bool = False
    locked_node: Any = None
    cache_inserted_len: int = 0
    admit_order: int = 0
    passed_over: int = 0
    finish_reason: str | None = None
    matched_stop: str | int | None = None
    logprobs: list[TokenLogprob] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    arrival_time: float = field(default_factory=time.monotonic)
    first_token_time: float | None = None
    num_preemptions: int = 0
    error: str | None = None

    @property
    def output_ids(self) -> list[int]:
        return self.tokens[self.prompt_len:]

    @property
    def num_output(self) -> int:
        return len(self.tokens) - self.prompt_len

    @property
    def is_finished(self) -> bool:
        return self.status is Status.FINISHED
