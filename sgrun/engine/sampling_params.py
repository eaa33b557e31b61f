"""SamplingParams: one struct shared by the DSL, the server and the engine."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from sgrun.errors import InvalidRequestError


@dataclass
class SamplingParams:
    max_new_tokens: int = 128
    temperature: float = 1.0          # 0 means greedy
    top_p: float = 1.0
    top_k: int = 0                    # 0 or -1: disabled
    min_p: float = 0.0
    repetition_penalty: float = 1.0   # 1.0: off (multiplicative, as in transformers)
    frequency_penalty: float = 0.0    # OpenAI semantics (additive, scaled by count)
    presence_penalty: float = 0.0
    logit_bias: dict[int, float] = field(default_factory=dict)
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    logprobs: int | None = None       # None: off; k >= 0: chosen token's logprob plus top-k alternatives
    n: int = 1
    skip_special_tokens: bool = True
    # Constraints (compiled by the engine off its loop); at most one of these.
    json_schema: Any = None           # dict, JSON string, or True for "any JSON object"
    regex: str | None = None
    grammar: str | None = None        # Lark text, a shipped grammar name, or GBNF
    choices: list[str] | None = None
    jump_forward: bool = True

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "SamplingParams":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise InvalidRequestError(f"unknown sampling parameter(s): {', '.join(unknown)}", field=unknown[0])
        return cls(**d).validated()

    def replace(self, **changes: Any) -> "SamplingParams":
        return dataclasses.replace(self, **changes)

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    @property
    def has_constraint(self) -> bool:
        return any(x is not None and x is not False for x in (self.json_schema, self.regex, self.grammar, self.choices))

    def validated(self, vocab_size: int | None = None) -> "SamplingParams":
        """Check every field; with `vocab_size`, token ids named in logit_bias and stop_token_ids too."""
        def bad(fieldname: str, why: str) -> InvalidRequestError:
            return InvalidRequestError(f"{fieldname} {why}", field=fieldname)

        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise bad("max_new_tokens", f"must be an integer >= 1, got {self.max_new_tokens!r}")
        if not 0.0 <= self.temperature <= 100.0:
            raise bad("temperature", f"must be in [0, 100], got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise bad("top_p", f"must be in (0, 1], got {self.top_p}")
        if not isinstance(self.top_k, int) or self.top_k < -1:
            raise bad("top_k", f"must be -1, 0 (off) or a positive integer, got {self.top_k!r}")
        if not 0.0 <= self.min_p <= 1.0:
            raise bad("min_p", f"must be in [0, 1], got {self.min_p}")
        if not 0.0 < self.repetition_penalty <= 10.0:
            raise bad("repetition_penalty", f"must be in (0, 10], got {self.repetition_penalty}")
        for name in ("frequency_penalty", "presence_penalty"):
            if not -2.0 <= getattr(self, name) <= 2.0:
                raise bad(name, f"must be in [-2, 2], got {getattr(self, name)}")
        if self.logprobs is not None and not (isinstance(self.logprobs, int) and 0 <= self.logprobs <= 20):
            raise bad("logprobs", f"must be an integer in [0, 20], got {self.logprobs!r}")
        if not isinstance(self.n, int) or not 1 <= self.n <= 64:
            raise bad("n", f"must be an integer in [1, 64], got {self.n!r}")
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise bad("stop", "must be a list of non-empty strings")
        if self.seed is not None and not isinstance(self.seed, int):
            raise bad("seed", f"must be an integer, got {self.seed!r}")
        try:
            self.logit_bias = {int(k): float(v) for k, v in (self.logit_bias or {}).items()}
        except (TypeError, ValueError):
            raise bad("logit_bias", "must map token ids to numbers") from None
        if any(not -100.0 <= v <= 100.0 for v in self.logit_bias.values()):
            raise bad("logit_bias", "values must be in [-100, 100]")
        if vocab_size is not None:
            bad_ids = [t for t in self.logit_bias if not 0 <= t < vocab_size]
            if bad_ids:
                raise bad("logit_bias", f"names token id {bad_ids[0]}, outside the vocabulary [0, {vocab_size})")
            bad_ids = [t for t in self.stop_token_ids if not isinstance(t, int) or not 0 <= t < vocab_size]
            if bad_ids:
                raise bad("stop_token_ids", f"holds {bad_ids[0]!r}, outside the vocabulary [0, {vocab_size})")
        given = [n for n in ("json_schema", "regex", "grammar", "choices")
                 if getattr(self, n) is not None and getattr(self, n) is not False]
        if len(given) > 1:
            raise bad(given[1], f"cannot be combined with {given[0]}: give one constraint per request")
        return self


_FIELDS = frozenset(f.name for f in dataclasses.fields(SamplingParams))
_dataclass_init = SamplingParams.__init__


def _checked_init(self: SamplingParams, *args: Any, **kwargs: Any) -> None:
    # An unknown keyword is a user error naming the field (a ValueError), not a bare TypeError.
    unknown = sorted(set(kwargs) - _FIELDS)
    if unknown:
        raise InvalidRequestError(f"unknown sampling parameter(s): {', '.join(unknown)}; known: "
                                  f"{', '.join(sorted(_FIELDS))}", field=unknown[0])
    _dataclass_init(self, *args, **kwargs)


SamplingParams.__init__ = _checked_init  # type: ignore[method-assign]
