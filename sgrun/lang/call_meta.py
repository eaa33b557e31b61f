"""What `state.get_meta_info(name)` holds for a gen call: sgrun's keys and SGLang's side by side.

SGLang programs read `finish_reason["type"]`, `output_token_logprobs` ([logprob, id, text] per
token), `input_token_logprobs`, `prompt_tokens`...; sgrun programs read `finish_reason == "stop"`,
`logprobs` ([(text, logprob)]), `output_ids`. Both work on the same dict.
"""

from __future__ import annotations

from typing import Any

from sgrun.engine.state.outputs import TokenLogprob
from sgrun.lang.backend import GenerationResult


class FinishReason(dict):
    """SGLang's finish reason ({"type": "stop", "matched": "\\n"}, {"type": "length", "length": 16})
    that also compares equal to sgrun's plain string ("stop", "length")."""

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            return self.get("type") == other
        return dict.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = None  # type: ignore[assignment]

    def __str__(self) -> str:
        return str(self.get("type"))


def finish_reason(reason: str | dict | None, matched: str | int | None, max_new_tokens: int,
                  message: str | None = None) -> FinishReason | None:
    if reason is None:
        return None
    if isinstance(reason, dict):       # a server that already speaks SGLang's shape
        return FinishReason(reason)
    if reason == "length":
        return FinishReason(type="length", length=max_new_tokens)
    if reason == "abort":
        return FinishReason(type="abort", message=message or "")
    return FinishReason(type=reason, matched=matched)


def logprob_entries(items: list[TokenLogprob], with_text: bool) -> list[list[Any]]:
    return [[t.logprob, t.token_id, t.token if with_text else None] for t in items]


def top_logprob_entries(items: list[TokenLogprob], with_text: bool) -> list[list[list[Any]]]:
    return [[[lp, tid, tok if with_text else None] for tid, tok, lp in t.top] for t in items]


def gen_meta(name: str | None, result: GenerationResult, options: dict[str, Any], max_new_tokens: int,
             input_logprobs: list[list[Any]] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "kind": "gen", "name": name, "text": result.text,
        "finish_reason": finish_reason(result.finish_reason, result.matched_stop, max_new_tokens),
        "matched_stop": result.matched_stop, "prompt_tokens": result.prompt_tokens,
        "cached_tokens": result.cached_tokens, "completion_tokens": result.completion_tokens,
        "output_ids": result.output_ids, "logprobs": None,
    }
    if result.logprobs is not None:
        with_text = bool(options.get("return_text_in_logprobs"))
        meta["logprobs"] = [(t.token, t.logprob) for t in result.logprobs]
        meta["output_token_logprobs"] = logprob_entries(result.logprobs, with_text)
        if options.get("top_logprobs_num"):
            meta["output_top_logprobs"] = top_logprob_entries(result.logprobs, with_text)
        meta["input_token_logprobs"] = input_logprobs or []
        known = [e[0] for e in meta["input_token_logprobs"] if e[0] is not None]
        if known:
            meta["normalized_prompt_logprob"] = sum(known) / len(known)
    return meta


def empty_result(prompt_tokens: int) -> GenerationResult:
    """What `gen(max_tokens=0)` reports: nothing generated, the prompt only prefilled."""
    return GenerationResult(text="", finish_reason="length", prompt_tokens=prompt_tokens, cached_tokens=0,
                            completion_tokens=0, texts=[""])
