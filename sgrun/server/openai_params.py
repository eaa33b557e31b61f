"""OpenAI request fields -> sgrun SamplingParams, with errors named by the API's field names."""

from __future__ import annotations

from typing import Any

from sgrun.engine.sampling_params import SamplingParams
from sgrun.errors import InvalidRequestError
from sgrun.server.errors import APIError, bad_request, from_exception

# Engine field name -> OpenAI field name, for error messages and `param`.
OPENAI_FIELD_NAMES = {
    "max_new_tokens": "max_tokens",
    "json_schema": "response_format",
    "grammar": "ebnf",
}


def build_sampling_params(req: Any, max_tokens: int | None, prompt_tokens: int, max_context: int,
                          logprobs: int | None, json_schema: Any = None, regex: str | None = None,
                          grammar: str | None = None, max_tokens_field: str = "max_tokens",
                          vocab_size: int = 1 << 31) -> SamplingParams:
    """Common sampling fields of chat and completion requests. `max_tokens` None means 'up to the
    context'; a prompt that leaves no room, or prompt + max_tokens beyond it, is a 400."""
    if prompt_tokens >= max_context:
        raise bad_request(f"This model's maximum context length is {max_context} tokens, but the prompt has "
                          f"{prompt_tokens} tokens; shorten the prompt", param="messages" if hasattr(req, "messages") else "prompt",
                          code="context_length_exceeded")
    if max_tokens is None:
        max_tokens = max_context - prompt_tokens
    elif isinstance(max_tokens, int) and max_tokens >= 1 and prompt_tokens + max_tokens > max_context:
        raise bad_request(f"This model's maximum context length is {max_context} tokens; the prompt has "
                          f"{prompt_tokens} tokens and {max_tokens_field} asks for {max_tokens} more "
                          f"({prompt_tokens + max_tokens} in all); lower {max_tokens_field} or shorten the prompt",
                          param=max_tokens_field, code="context_length_exceeded")
    stop = req.stop
    if isinstance(stop, str):
        stop = [stop]
    fields: dict[str, Any] = dict(
        max_new_tokens=max_tokens,
        temperature=_default(req.temperature, 1.0),
        top_p=_default(req.top_p, 1.0),
        top_k=_default(req.top_k, 0),
        min_p=_default(req.min_p, 0.0),
        repetition_penalty=_default(req.repetition_penalty, 1.0),
        frequency_penalty=_default(req.frequency_penalty, 0.0),
        presence_penalty=_default(req.presence_penalty, 0.0),
        logit_bias=_logit_bias(req.logit_bias),
        seed=req.seed,
        stop=list(stop or []),
        stop_token_ids=list(req.stop_token_ids or []),
        ignore_eos=bool(req.ignore_eos),
        skip_special_tokens=_default(req.skip_special_tokens, True),
        logprobs=logprobs,
        n=_default(req.n, 1),
        json_schema=json_schema,
        regex=regex,
        grammar=grammar,
    )
    if not 0.0 <= fields["temperature"] <= 2.0:  # OpenAI's range (the engine allows more)
        raise bad_request(f"temperature must be in [0, 2], got {fields['temperature']}", param="temperature",
                          code="invalid_value")
    names = dict(OPENAI_FIELD_NAMES, max_new_tokens=max_tokens_field)
    if len(fields["stop"]) > 16:
        raise bad_request("stop may hold at most 16 strings", param="stop")
    try:
        params = SamplingParams(**fields).validated()
    except InvalidRequestError as exc:
        raise from_exception(exc, "", names) from exc
    check_token_ids(params, vocab_size)
    return params


def _default(value: Any, default: Any) -> Any:
    return default if value is None else value


def _logit_bias(bias: dict[str, float] | None) -> dict[int, float]:
    out: dict[int, float] = {}
    for k, v in (bias or {}).items():
        try:
            out[int(k)] = float(v)
        except ValueError:
            raise bad_request(f"logit_bias keys must be token ids, got {k!r}", param="logit_bias") from None
    return out


def check_token_ids(params: SamplingParams, vocab_size: int, prefix: str = "") -> None:
    """Token ids the client names must exist in the vocabulary."""
    bad = [t for t in params.logit_bias if not 0 <= t < vocab_size]
    if bad:
        raise bad_request(f"logit_bias names token id {bad[0]}, outside the vocabulary [0, {vocab_size})",
                          param=prefix + "logit_bias")
    bad = [t for t in params.stop_token_ids if not isinstance(t, int) or not 0 <= t < vocab_size]
    if bad:
        raise bad_request(f"stop_token_ids holds {bad[0]!r}, outside the vocabulary [0, {vocab_size})",
                          param=prefix + "stop_token_ids")


MAX_SEQUENCES_PER_REQUEST = 256


def check_sequence_count(num_prompts: int, n: int, param: str = "n") -> None:
    """One request may not flood the scheduler: prompts x n is bounded."""
    if num_prompts * n > MAX_SEQUENCES_PER_REQUEST:
        raise bad_request(f"{num_prompts} prompts x n={n} asks for {num_prompts * n} sequences; at most "
                          f"{MAX_SEQUENCES_PER_REQUEST} per request", param=param)


def check_n(n: int | None, limit: int = 64) -> None:
    if n is not None and not 1 <= n <= limit:
        raise APIError(400, f"n must be between 1 and {limit}, got {n}", param="n", code="invalid_value")
