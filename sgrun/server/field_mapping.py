"""Field mapping between the HTTP APIs and SamplingParams, in both directions: request fields
(OpenAI chat / completions, the native `sampling_params`) -> SamplingParams, and a SamplingParams
or engine field name -> the name the client sent, so every error names the client's field."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sgrun.engine.state.sampling_params import MAX_LOGPROBS, SamplingParams
from sgrun.errors import InvalidRequestError
from sgrun.server.errors import bad_request, from_exception


@dataclass(frozen=True)
class FieldNames:
    """SamplingParams / engine field -> the client's field. `renames` give full client names;
    any other field is `prefix + field`."""
    renames: dict[str, str] = field(default_factory=dict)
    prefix: str = ""

    def client(self, name: str | None) -> str | None:
        if name is None:
            return None
        return self.renames.get(name, self.prefix + name)

    def with_renames(self, **renames: str) -> "FieldNames":
        return FieldNames({**self.renames, **renames}, self.prefix)


CHAT_NAMES = FieldNames({"max_new_tokens": "max_tokens", "logprobs": "top_logprobs", "prompt": "messages",
                         "grammar": "ebnf", "json_schema": "response_format"})
COMPLETION_NAMES = FieldNames({"max_new_tokens": "max_tokens", "grammar": "ebnf"})
NATIVE_NAMES = FieldNames({"logprobs": "top_logprobs_num", "prompt": "text"}, prefix="sampling_params.")

NATIVE_DEFAULT_MAX_NEW_TOKENS = 128


def _default(value: Any, default: Any) -> Any:
    return default if value is None else value


def openai_sampling_params(req: Any, max_tokens: int, logprobs: int | None, names: FieldNames,
                           vocab_size: int, strict_budget: bool = False) -> SamplingParams:
    """The sampling fields chat and completion requests share -> SamplingParams. `max_tokens` is
    already resolved against the context (request_limits.resolve_max_tokens); `strict_budget` is
    the server's default for a request that does not say."""
    temperature = _default(req.temperature, 1.0)
    if not 0.0 <= temperature <= 2.0:  # OpenAI's range (the engine allows more)
        raise bad_request(f"temperature must be in [0, 2], got {temperature}", param="temperature",
                          code="invalid_value")
    fields: dict[str, Any] = dict(
        max_new_tokens=max_tokens,
        temperature=temperature,
        top_p=_default(req.top_p, 1.0),
        top_k=_default(req.top_k, 0),
        min_p=_default(req.min_p, 0.0),
        repetition_penalty=_default(req.repetition_penalty, 1.0),
        frequency_penalty=_default(req.frequency_penalty, 0.0),
        presence_penalty=_default(req.presence_penalty, 0.0),
        logit_bias=req.logit_bias or {},
        seed=req.seed,
        stop=req.stop or [],
        stop_token_ids=list(req.stop_token_ids or []),
        ignore_eos=bool(req.ignore_eos),
        skip_special_tokens=_default(req.skip_special_tokens, True),
        logprobs=logprobs,
        n=_default(req.n, 1),
        speculative_ngram=req.speculative_ngram,
        strict_budget=_default(req.strict_budget, strict_budget),
    )
    return _validated(fields, names, vocab_size)


def native_names(raw: dict[str, Any] | None) -> FieldNames:
    """Native field names; a grammar the client sent as `ebnf` is reported as `ebnf`."""
    names = NATIVE_NAMES
    if raw and "ebnf" in raw:
        names = names.with_renames(grammar=names.prefix + "ebnf")
    if raw and "logprobs" in raw:  # sent inside sampling_params rather than as top_logprobs_num
        names = names.with_renames(logprobs=names.prefix + "logprobs")
    return names


def native_sampling_params(raw: dict[str, Any] | None, return_logprob: bool, top_logprobs_num: int,
                           names: FieldNames, vocab_size: int, strict_budget: bool = False) -> SamplingParams:
    """/generate's `sampling_params` (SGLang's names) -> SamplingParams; `strict_budget` is the
    server's default where they do not say."""
    fields: dict[str, Any] = dict(raw or {})
    if fields.get("strict_budget") is None:
        fields["strict_budget"] = strict_budget
    if "ebnf" in fields:  # SGLang's name for a grammar
        if fields.get("grammar") is not None:
            raise bad_request("give either 'ebnf' or 'grammar'", param=names.client("ebnf"))
        fields["grammar"] = fields.pop("ebnf")
    fields.setdefault("max_new_tokens", NATIVE_DEFAULT_MAX_NEW_TOKENS)
    if not 0 <= top_logprobs_num <= MAX_LOGPROBS:
        raise bad_request(f"top_logprobs_num must be in [0, {MAX_LOGPROBS}], got {top_logprobs_num}",
                          param="top_logprobs_num")
    if return_logprob:
        fields["logprobs"] = top_logprobs_num
    return _validated(fields, names, vocab_size)


def _validated(fields: dict[str, Any], names: FieldNames, vocab_size: int) -> SamplingParams:
    try:
        return SamplingParams.from_dict(fields, vocab_size)
    except InvalidRequestError as exc:
        raise from_exception(exc, names) from exc
