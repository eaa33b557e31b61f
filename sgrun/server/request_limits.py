"""Limits the server checks before a request reaches the engine, each in one place: the context
length (prompt + requested tokens), prompt token ids inside the vocabulary, and how many
sequences one request may start. Per-field ranges (n, logprobs, logit_bias, ...) are
SamplingParams' own checks."""

from __future__ import annotations

from typing import Any

from sgrun.server.errors import bad_request

MAX_PROMPTS_PER_REQUEST = 256
MAX_SEQUENCES_PER_REQUEST = 256


def resolve_max_tokens(max_tokens: int | None, prompt_tokens: int, max_context: int, *,
                       max_tokens_field: str, prompt_field: str) -> int | Any:
    """`max_tokens` None means 'up to the context'. A prompt that leaves no room, or prompt +
    max_tokens beyond the context, is a 400 `context_length_exceeded`. Values of the wrong type
    or range pass through for SamplingParams to name."""
    if prompt_tokens >= max_context:
        raise bad_request(f"This model's maximum context length is {max_context} tokens, but the prompt has "
                          f"{prompt_tokens} tokens; shorten the prompt", param=prompt_field,
                          code="context_length_exceeded")
    if max_tokens is None:
        return max_context - prompt_tokens
    if isinstance(max_tokens, int) and not isinstance(max_tokens, bool) and max_tokens >= 1 \
            and prompt_tokens + max_tokens > max_context:
        raise bad_request(f"This model's maximum context length is {max_context} tokens; the prompt has "
                          f"{prompt_tokens} tokens and {max_tokens_field} asks for {max_tokens} more "
                          f"({prompt_tokens + max_tokens} in all); lower {max_tokens_field} or shorten the prompt",
                          param=max_tokens_field, code="context_length_exceeded")
    return max_tokens


def check_prompt_ids(ids: list[Any], vocab_size: int, param: str) -> list[int]:
    """A token-id prompt: a non-empty list of ints inside the vocabulary."""
    if not ids:
        raise bad_request("a token-id prompt must not be empty", param=param)
    for t in ids:
        if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < vocab_size:
            raise bad_request(f"token ids must be integers in [0, {vocab_size}), got {t!r}", param=param)
    return list(ids)


def check_prompt_count(num_prompts: int, param: str) -> None:
    if num_prompts > MAX_PROMPTS_PER_REQUEST:
        raise bad_request(f"at most {MAX_PROMPTS_PER_REQUEST} prompts per request, got {num_prompts}", param=param)


def check_sequence_count(num_prompts: int, n: int, param: str = "n") -> None:
    """One request may not flood the scheduler: prompts x n is bounded."""
    if num_prompts * n > MAX_SEQUENCES_PER_REQUEST:
        raise bad_request(f"{num_prompts} prompts x n={n} asks for {num_prompts * n} sequences; at most "
                          f"{MAX_SEQUENCES_PER_REQUEST} per request", param=param)
