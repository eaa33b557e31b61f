"""What the engine hands back: per-token events while streaming, and final outputs."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TokenLogprob:
    token_id: int
    token: str
    logprob: float
    top: list[tuple[int, str, float]] = field(default_factory=list)  # (id, text, logprob), best first


@dataclass
class StreamEvent:
    """One step of one sample (`index` < n) of a request: new text, new tokens, maybe the end."""
    index: int
    text: str                      # text delta (held back while it could start a stop string)
    token_ids: list[int]           # tokens accepted this step (may be several after jump-forward)
    logprobs: list[TokenLogprob]   # one per token in token_ids when logprobs were asked for
    finish_reason: str | None = None   # "stop" | "length" | "abort" | None while running
    matched_stop: str | int | None = None
    error: str | None = None       # set when finish_reason == "abort" because of an error


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    finish_reason: str | None
    logprobs: list[TokenLogprob] | None = None
    matched_stop: str | int | None = None


@dataclass
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    prompt_tokens: int
    cached_tokens: int              # prompt tokens served from the radix cache (the prompt counts once, like prompt_tokens)
    completion_tokens: int
    arrival_time: float
    first_token_time: float | None
    finish_time: float | None
    error: str | None = None

    @property
    def text(self) -> str:
        return self.outputs[0].text

    @property
    def token_ids(self) -> list[int]:
        return self.outputs[0].token_ids

    @property
    def finish_reason(self) -> str | None:
        return self.outputs[0].finish_reason

    @property
    def ttft(self) -> float | None:
        return None if self.first_token_time is None else self.first_token_time - self.arrival_time
