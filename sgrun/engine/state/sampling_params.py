"""SamplingParams: one struct shared by the DSL, the server and the engine.

`validated()` is the one place every field's type and range is checked; errors are
InvalidRequestError naming the SamplingParams field (the server maps it to the client's name).
Nothing that passes it can fail later in the sampler or the detokenizer because of its value."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sgrun.errors import InvalidRequestError

MAX_SEED = (1 << 63) - 1          # seeds are 63-bit: sample i of n uses (seed + i) mod 2**63
MAX_N = 64
MAX_LOGPROBS = 20
MAX_STOP_STRINGS = 16
MAX_STOP_CHARS = 512
MAX_STOP_TOKEN_IDS = 1024
MAX_CHOICES = 10_000
MAX_CHOICE_CHARS = 10_000
MAX_NEW_TOKENS = 1 << 30          # the engine also checks prompt + max_new_tokens against its context


@dataclass
class SamplingParams:
    max_new_tokens: int = 128
    min_new_tokens: int = 0           # EOS, stop ids and stop strings do not end the output before this
    temperature: float = 1.0          # 0 means greedy
    top_p: float = 1.0
    top_k: int = 0                    # 0 or -1: disabled; else 1..vocab_size
    min_p: float = 0.0
    repetition_penalty: float = 1.0   # 1.0: off (multiplicative, as in transformers)
    frequency_penalty: float = 0.0    # OpenAI semantics (additive, scaled by count)
    presence_penalty: float = 0.0
    logit_bias: dict[int, float] = field(default_factory=dict)
    seed: int | None = None           # 0..2**63-1
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    stop_regex: list[str] = field(default_factory=list)  # ends at the first match in the output (kept, as SGLang)
    ignore_eos: bool = False
    logprobs: int | None = None       # None: off; k >= 0: chosen token's logprob plus top-k alternatives
    n: int = 1
    skip_special_tokens: bool = True
    # SGLang's client always sends this. It only changes slow (Python) HF tokenizers; sgrun decodes
    # like a fast tokenizer, which ignores it too, so it is accepted and type-checked only.
    spaces_between_special_tokens: bool = True
    # Constraints (compiled off the engine loop); at most one of these.
    json_schema: Any = None           # dict, JSON string, or True for "any JSON object"
    regex: str | None = None
    grammar: str | None = None        # Lark text, a shipped grammar name, or GBNF
    choices: list[str] | None = None
    # Free text until a trigger appears, then that trigger's constraint (like structural tags):
    # [{"trigger": "<json>", "json_schema": {...}}, {"trigger": "ANSWER:", "choices": [...]}].
    triggers: list[dict[str, Any]] | None = None
    # Tool calls in a model's call format, held to the tools' schemas (JSON form of
    # sgrun.constrain.tool_calls.ToolCallConstraint: format, tools, mode, parallel, answer_schema).
    tool_calls: dict[str, Any] | None = None
    # Free text with triggered segments, SGLang's / xgrammar's structural tag (constrain/structural_tag.py):
    # {"structures": [{"begin", "schema", "end"}], "triggers": [...]} or {"format": {...}}.
    structural_tag: dict[str, Any] | str | None = None
    # The output may open with a reasoning section (open tag, close tag); the constraint starts after it.
    reasoning: tuple[str, str] | list[str] | None = None
    jump_forward: bool = True
    # Under a constraint whose shortest valid output needs more than max_new_tokens: False (the
    # default, as OpenAI's API) runs it anyway and ends with finish "length" at max_new_tokens;
    # True refuses it up front (OutputBudgetError naming the count). See constrain/budget.py.
    strict_budget: bool = False
    # N-gram speculative decoding (prompt lookup, engine/parts/ngram_draft.py): None follows the engine's
    # default (`Engine(speculative_ngram=...)`, `sgrun serve --speculative-ngram`). Outputs are the
    # same in distribution (greedy: token for token); only the speed changes.
    speculative_ngram: bool | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], vocab_size: int | None = None) -> "SamplingParams":
        if not isinstance(d, Mapping):
            raise InvalidRequestError(f"sampling parameters must be an object, got {_kind(d)}")
        unknown = sorted(str(k) for k in set(d) - _FIELDS)
        if unknown:
            raise InvalidRequestError(f"unknown sampling parameter(s): {', '.join(unknown)}; known: "
                                      f"{', '.join(sorted(_FIELDS))}", field=unknown[0])
        return cls(**d).validated(vocab_size)

    def replace(self, **changes: Any) -> "SamplingParams":
        return dataclasses.replace(self, **changes)

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    @property
    def has_constraint(self) -> bool:
        return any(x is not None and x is not False for x in (self.json_schema, self.regex, self.grammar, self.choices,
                                                              self.triggers, self.tool_calls, self.structural_tag))

    def sample_seed(self, index: int) -> int | None:
        """The seed of sample `index` of n: seed + index, wrapped into the 63-bit range."""
        return None if self.seed is None else (self.seed + index) & MAX_SEED

    def validated(self, vocab_size: int | None = None) -> "SamplingParams":
        """Check every field (normalising `stop` given as one string and logit_bias keys given as
        digit strings); with `vocab_size`, token ids and top_k against the vocabulary too."""
        self.max_new_tokens = _int("max_new_tokens", self.max_new_tokens, 1, MAX_NEW_TOKENS)
        self.min_new_tokens = _int("min_new_tokens", self.min_new_tokens, 0, MAX_NEW_TOKENS)
        self.temperature = _number("temperature", self.temperature, 0.0, 100.0)
        self.top_p = _number("top_p", self.top_p, 0.0, 1.0, low_open=True)
        self.top_k = _top_k(self.top_k, vocab_size)
        self.min_p = _number("min_p", self.min_p, 0.0, 1.0)
        self.repetition_penalty = _number("repetition_penalty", self.repetition_penalty, 0.0, 10.0, low_open=True)
        self.frequency_penalty = _number("frequency_penalty", self.frequency_penalty, -2.0, 2.0)
        self.presence_penalty = _number("presence_penalty", self.presence_penalty, -2.0, 2.0)
        self.logit_bias = _logit_bias(self.logit_bias, vocab_size)
        if self.seed is not None:
            self.seed = _int("seed", self.seed, 0, MAX_SEED)
        self.stop = _stop(self.stop)
        self.stop_regex = _stop_regex(self.stop_regex)
        self.stop_token_ids = _token_ids("stop_token_ids", self.stop_token_ids, vocab_size)
        for name in ("ignore_eos", "skip_special_tokens", "spaces_between_special_tokens", "jump_forward",
                     "strict_budget"):
            if not isinstance(getattr(self, name), bool):
                raise _bad(name, f"must be true or false, got {_kind(getattr(self, name))}")
        if self.speculative_ngram is not None and not isinstance(self.speculative_ngram, bool):
            raise _bad("speculative_ngram", f"must be true, false or null (the server's default), "
                                            f"got {_kind(self.speculative_ngram)}")
        if self.logprobs is not None:
            self.logprobs = _int("logprobs", self.logprobs, 0, MAX_LOGPROBS)
        self.n = _int("n", self.n, 1, MAX_N)
        _check_constraints(self)
        return self


_FIELDS = frozenset(f.name for f in dataclasses.fields(SamplingParams))


def _bad(name: str, why: str) -> InvalidRequestError:
    return InvalidRequestError(f"{name} {why}", field=name)


def _kind(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:40] + '...' if len(text) > 40 else text}"


def _int(name: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(name, f"must be an integer in [{low}, {high}], got {_kind(value)}")
    if not low <= value <= high:
        raise _bad(name, f"must be an integer in [{low}, {high}], got {value}")
    return value


def _number(name: str, value: Any, low: float, high: float, low_open: bool = False) -> float:
    interval = f"{'(' if low_open else '['}{low:g}, {high:g}]"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _bad(name, f"must be a number in {interval}, got {_kind(value)}")
    value = float(value)
    if not math.isfinite(value) or not (low < value if low_open else low <= value) or value > high:
        raise _bad(name, f"must be a number in {interval}, got {value}")
    return value


def _top_k(value: Any, vocab_size: int | None) -> int:
    high = vocab_size if vocab_size is not None else (1 << 31) - 1
    if isinstance(value, bool) or not isinstance(value, int) or not (value in (-1, 0) or 1 <= value <= high):
        got = value if isinstance(value, int) and not isinstance(value, bool) else _kind(value)
        raise _bad("top_k", f"must be -1 or 0 (off) or an integer in [1, {high}] (the vocabulary size), got {got}")
    return value


def _token_id(name: str, value: Any, vocab_size: int | None) -> int:
    high = (vocab_size if vocab_size is not None else 1 << 31) - 1
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)   # JSON object keys are strings: {"50256": -100}
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
        where = f"outside the vocabulary [0, {high + 1})" if isinstance(value, int) else "not a token id"
        raise _bad(name, f"holds {_kind(value)}, {where}")
    return value


def _token_ids(name: str, value: Any, vocab_size: int | None) -> list[int]:
    if not isinstance(value, (list, tuple)):
        raise _bad(name, f"must be a list of token ids, got {_kind(value)}")
    if len(value) > MAX_STOP_TOKEN_IDS:
        raise _bad(name, f"may hold at most {MAX_STOP_TOKEN_IDS} ids, got {len(value)}")
    if any(isinstance(t, str) for t in value):
        raise _bad(name, "must be a list of integer token ids, not strings")
    return [_token_id(name, t, vocab_size) for t in value]


def _logit_bias(value: Any, vocab_size: int | None) -> dict[int, float]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _bad("logit_bias", f"must map token ids to numbers, got {_kind(value)}")
    out: dict[int, float] = {}
    for k, v in value.items():
        tid = _token_id("logit_bias", k, vocab_size)
        out[tid] = _number("logit_bias", v, -100.0, 100.0)
    return out


def _strings(field: str, value: Any, noun: str, nouns: str) -> list[str]:
    """A string or a bounded list of non-empty, bounded strings (stop strings, stop patterns)."""
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise _bad(field, f"must be a {noun} or a list of {nouns}, got {_kind(value)}")
    kind = "strings" if noun == "string" else "patterns"
    if len(value) > MAX_STOP_STRINGS:
        raise _bad(field, f"may hold at most {MAX_STOP_STRINGS} {kind}, got {len(value)}")
    for s in value:
        if not isinstance(s, str) or not s:
            raise _bad(field, f"must be a list of non-empty {nouns}, got {_kind(s)}")
        if len(s) > MAX_STOP_CHARS:
            raise _bad(field, f"{kind} may be at most {MAX_STOP_CHARS} characters, got {len(s)}")
    return list(value)


def _stop(value: Any) -> list[str]:
    return _strings("stop", value, "string", "strings")


def _stop_regex(value: Any) -> list[str]:
    patterns = _strings("stop_regex", value, "regular expression", "regular expressions")
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise _bad("stop_regex", f"{pattern!r} is not a valid regular expression: {exc}") from None
    return patterns


def _check_constraints(p: SamplingParams) -> None:
    given = [n for n in ("json_schema", "regex", "grammar", "choices", "triggers", "tool_calls", "structural_tag")
             if getattr(p, n) is not None and getattr(p, n) is not False]
    if len(given) > 1:
        raise _bad(given[1], f"cannot be combined with {given[0]}: give one constraint per request")
    if p.triggers is not None and (not isinstance(p.triggers, list) or not p.triggers
                                   or not all(isinstance(t, Mapping) for t in p.triggers)):
        raise _bad("triggers", f"must be a non-empty list of {{\"trigger\": ..., <constraint>: ...}} objects, "
                               f"got {_kind(p.triggers)}")
    if p.structural_tag is not None and not isinstance(p.structural_tag, (Mapping, str)):
        raise _bad("structural_tag", f"must be an object (or its JSON text) with 'format', or 'structures' and "
                                     f"'triggers', got {_kind(p.structural_tag)}")
    if p.tool_calls is not None and not isinstance(p.tool_calls, Mapping):
        raise _bad("tool_calls", f"must be an object with format, tools and mode, got {_kind(p.tool_calls)}")
    if p.reasoning is not None:
        r = p.reasoning
        if not isinstance(r, (list, tuple)) or len(r) != 2 or not all(isinstance(t, str) and t for t in r):
            raise _bad("reasoning", f"must be [open_tag, close_tag], e.g. [\"<think>\", \"</think>\"], got {_kind(r)}")
        p.reasoning = (r[0], r[1])
    if p.json_schema is not None and p.json_schema is not False and not isinstance(p.json_schema, (Mapping, str, bool)):
        raise _bad("json_schema", f"must be a JSON Schema object, a JSON string or true, got {_kind(p.json_schema)}")
    for name in ("regex", "grammar"):
        value = getattr(p, name)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise _bad(name, f"must be a non-empty string, got {_kind(value)}")
    if p.choices is not None:
        c = p.choices
        if not isinstance(c, (list, tuple)) or not c:
            raise _bad("choices", f"must be a non-empty list of strings, got {_kind(c)}")
        if len(c) > MAX_CHOICES:
            raise _bad("choices", f"may hold at most {MAX_CHOICES} strings, got {len(c)}")
        for s in c:
            if not isinstance(s, str) or not s:
                raise _bad("choices", f"must be a list of non-empty strings, got {_kind(s)}")
            if len(s) > MAX_CHOICE_CHARS:
                raise _bad("choices", f"strings may be at most {MAX_CHOICE_CHARS} characters, got {len(s)}")


_dataclass_init = SamplingParams.__init__


def _checked_init(self: SamplingParams, *args: Any, **kwargs: Any) -> None:
    # An unknown keyword is a user error naming the field (a ValueError), not a bare TypeError.
    unknown = sorted(set(kwargs) - _FIELDS)
    if unknown:
        raise InvalidRequestError(f"unknown sampling parameter(s): {', '.join(unknown)}; known: "
                                  f"{', '.join(sorted(_FIELDS))}", field=unknown[0])
    _dataclass_init(self, *args, **kwargs)


SamplingParams.__init__ = _checked_init  # type: ignore[method-assign]
