"""The program IR: what `gen`, `select` and the role helpers return.

Nodes are plain data. `+` between nodes and strings builds an `ExprList`, so
`"I will use a " + select("tool", ...) + "."` is one expression the interpreter walks in order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

from sgrun.lang.choices import ChoicesSamplingMethod, token_length_normalized
from sgrun.lang.program_error import find_call_site


class Expr:
    """Base of every IR node. Records where the user wrote it, for error messages."""

    call_site: str = ""

    def __add__(self, other: Any) -> "ExprList":
        return ExprList([self, to_expr(other)])

    def __radd__(self, other: Any) -> "ExprList":
        return ExprList([to_expr(other), self])

    def describe(self) -> str:
        return type(self).__name__

    def walk(self) -> Iterator["Expr"]:
        yield self


@dataclass(eq=False)
class Text(Expr):
    text: str

    def describe(self) -> str:
        shown = self.text if len(self.text) <= 40 else self.text[:37] + "..."
        return f"text {shown!r}"


@dataclass(eq=False)
class ExprList(Expr):
    items: list[Expr]

    def __post_init__(self) -> None:
        flat: list[Expr] = []
        for item in self.items:
            flat.extend(item.items if isinstance(item, ExprList) else [item])
        self.items = flat

    def __add__(self, other: Any) -> "ExprList":
        return ExprList([*self.items, to_expr(other)])

    def __radd__(self, other: Any) -> "ExprList":
        return ExprList([to_expr(other), *self.items])

    def walk(self) -> Iterator[Expr]:
        for item in self.items:
            yield from item.walk()


# Sampling fields `gen` accepts, mapped to their SamplingParams names (SGLang's names and sgrun's).
GEN_PARAM_NAMES: dict[str, str] = {
    "max_tokens": "max_new_tokens", "max_new_tokens": "max_new_tokens", "min_tokens": "min_new_tokens",
    "min_new_tokens": "min_new_tokens", "n": "n", "stop": "stop", "stop_token_ids": "stop_token_ids",
    "stop_regex": "stop_regex", "temperature": "temperature", "top_p": "top_p", "top_k": "top_k",
    "min_p": "min_p", "frequency_penalty": "frequency_penalty", "presence_penalty": "presence_penalty",
    "repetition_penalty": "repetition_penalty", "ignore_eos": "ignore_eos", "seed": "seed",
    "regex": "regex", "json_schema": "json_schema", "grammar": "grammar", "triggers": "triggers",
    "tool_calls": "tool_calls", "strict_budget": "strict_budget",
}

# Per-call options that are not sampling parameters: what to report about the call's logprobs
# (SGLang's names), and `dtype`, which becomes a regex when the call runs.
CALL_OPTION_NAMES = ("return_logprob", "logprob_start_len", "top_logprobs_num", "return_text_in_logprobs", "dtype")

# The regexes a `dtype` stands for. Same patterns as SGLang's constants of these names, so a
# program that uses them (or gen(dtype=...)) constrains exactly as it does there.
REGEX_INT = r"[-+]?[0-9]+[ \n]*"
REGEX_FLOAT = r"[-+]?[0-9]*\.?[0-9]+[ \n]*"
REGEX_BOOL = r"(True|False)"
REGEX_STR = r"\"[\w\d\s]*\""


@dataclass(eq=False)
class Gen(Expr):
    name: str | None
    params: dict[str, Any]              # SamplingParams field name -> value (only what was given)
    options: dict[str, Any] = field(default_factory=dict)   # CALL_OPTION_NAMES -> value (only what was given)

    @property
    def return_logprob(self) -> bool:
        return bool(self.options.get("return_logprob"))

    def describe(self) -> str:
        shown = ", ".join(f"{k}={_short(v)}" for k, v in {**self.params, **self.options}.items())
        head = repr(self.name) if self.name else ""
        return f"gen({', '.join(x for x in (head, shown) if x)})"


@dataclass(eq=False)
class Select(Expr):
    name: str | None
    choices: list[str]
    temperature: float = 0.0
    choices_method: ChoicesSamplingMethod = token_length_normalized

    def describe(self) -> str:
        return f"select({self.name!r}, choices={_short(self.choices)})"


@dataclass(eq=False)
class VarScopeBegin(Expr):
    """`with s.var_scope(name):` opens: the text appended until VarScopeEnd becomes variable `name`."""
    name: str


@dataclass(eq=False)
class VarScopeEnd(Expr):
    name: str


@dataclass(eq=False)
class SeparateReasoning(Expr):
    """After `gen(name)`: move a leading <think>...</think> out of `name` into `name_reasoning_content`."""
    name: str
    model_type: str | None = None


@dataclass(eq=False)
class AppendForks(Expr):
    """`forks.join("concate_and_append")`: append each fork's text since the fork, in order."""
    forks: list[Any]                    # ProgramStates (typed loosely: state.py imports this module)


@dataclass(eq=False)
class RoleBegin(Expr):
    role: str

    def describe(self) -> str:
        return f"{self.role}_begin()"


@dataclass(eq=False)
class RoleEnd(Expr):
    role: str

    def describe(self) -> str:
        return f"{self.role}_end()"


def to_expr(value: Any) -> Expr:
    if isinstance(value, Expr):
        return value
    if isinstance(value, str):
        return Text(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return Text(str(value))
    raise TypeError(f"cannot add {type(value).__name__} to a program: use str, gen(), select() or a role block")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


# --- the public constructors ------------------------------------------------------------

def gen(name: str | None = None, max_tokens: int | None = None, stop: str | list[str] | None = None,
        temperature: float | None = None, top_p: float | None = None, top_k: int | None = None,
        min_p: float | None = None, frequency_penalty: float | None = None,
        presence_penalty: float | None = None, ignore_eos: bool | None = None, regex: str | None = None,
        json_schema: Any = None, grammar: str | None = None, choices: list[str] | None = None,
        return_logprob: bool | None = None, *, min_tokens: int | None = None, n: int | None = None,
        stop_token_ids: list[int] | None = None, stop_regex: str | list[str] | None = None,
        repetition_penalty: float | None = None, seed: int | None = None,
        logprob_start_len: int | None = None, top_logprobs_num: int | None = None,
        return_text_in_logprobs: bool | None = None, dtype: type | str | None = None,
        choices_method: ChoicesSamplingMethod | None = None,
        triggers: list[dict[str, Any]] | None = None, tool_calls: dict[str, Any] | None = None,
        strict_budget: bool | None = None) -> Expr:
    """Generate text from the model and append it (stored under `name` when given).

    Arguments carry SGLang's names and meaning. `choices` makes this a `select`. `dtype`
    (int, float, bool, str or their names) constrains the output to that type's literal (the value
    stays a string, as in SGLang). `n` > 1 stores the list of samples and appends the first.
    `max_tokens=0` generates nothing: the text so far is only prefilled into the cache.
    `return_logprob` (with `logprob_start_len`, `top_logprobs_num`, `return_text_in_logprobs`)
    puts token logprobs into `get_meta_info(name)`. Unset parameters fall back to
    `run(**defaults)`, then to `SamplingParams` defaults (max_tokens 128).

    `triggers` keeps generation free until a trigger string appears, then holds the rest to that
    trigger's constraint: `gen("a", triggers=[{"trigger": "<json>", "json_schema": {...}}])`.
    `tool_calls` holds the output to tool calls in a model's format (sgrun.Agent uses it).
    Under a constraint whose shortest output does not fit `max_tokens`, the call generates
    `max_tokens` tokens and ends with finish "length" (as OpenAI's API does); `strict_budget=True`
    raises OutputBudgetError up front instead (docs/constrained-decoding.md)."""
    if choices is not None:
        return _located(Select(name, _checked_choices(choices), temperature or 0.0,
                               choices_method or token_length_normalized))
    given = dict(max_tokens=max_tokens, min_tokens=min_tokens, n=n, stop=stop, stop_token_ids=stop_token_ids,
                 stop_regex=stop_regex, temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p,
                 frequency_penalty=frequency_penalty, presence_penalty=presence_penalty, ignore_eos=ignore_eos,
                 regex=regex, json_schema=json_schema, grammar=grammar, repetition_penalty=repetition_penalty,
                 seed=seed, triggers=triggers, tool_calls=tool_calls, strict_budget=strict_budget)
    params = {GEN_PARAM_NAMES[k]: v for k, v in given.items() if v is not None}
    for key in ("stop", "stop_regex"):
        if isinstance(params.get(key), str):
            params[key] = [params[key]]
    options = dict(return_logprob=return_logprob, logprob_start_len=logprob_start_len,
                   top_logprobs_num=top_logprobs_num, return_text_in_logprobs=return_text_in_logprobs,
                   dtype=_checked_dtype(dtype))
    return _located(Gen(name, params, {k: v for k, v in options.items() if v is not None}))


def gen_int(name: str | None = None, **kwargs: Any) -> Expr:
    """gen(name, dtype=int, ...): an integer literal."""
    return gen(name, dtype=int, **kwargs)


def gen_string(name: str | None = None, **kwargs: Any) -> Expr:
    """gen(name, dtype=str, ...): a double-quoted string of word characters and spaces."""
    return gen(name, dtype=str, **kwargs)


_DTYPES = {int: "int", float: "float", bool: "bool", str: "str"}


def _checked_dtype(dtype: type | str | None) -> str | None:
    if dtype is None:
        return None
    name = _DTYPES.get(dtype, dtype) if isinstance(dtype, type) else dtype
    if name not in _DTYPES.values():
        raise ValueError(f"dtype must be one of int, float, bool, str (or their names), got {dtype!r}")
    return name


def dtype_constraint(dtype: str) -> tuple[str, list[str]]:
    """(regex, extra stop strings) for a gen's dtype; numbers end at a space or newline, as in SGLang."""
    return {"int": (REGEX_INT, [" ", "\n"]), "float": (REGEX_FLOAT, [" ", "\n"]),
            "bool": (REGEX_BOOL, []), "str": (REGEX_STR, [])}[dtype]


def select(name: str | None = None, choices: list[str] | None = None, temperature: float = 0.0,
           choices_method: ChoicesSamplingMethod | None = None) -> Expr:
    """Append the choice the `choices_method` picks from the choices' token logprobs given the
    state (by default the highest length-normalised log-likelihood)."""
    return _located(Select(name, _checked_choices(choices), temperature, choices_method or token_length_normalized))


def separate_reasoning(expr: Any = None, model_type: str | None = None) -> Expr:
    """Wrap a gen: after it runs, a leading reasoning block (<think>...</think>) moves out of the
    variable (and the text) into `<name>_reasoning_content`."""
    if expr is None:
        raise ValueError("separate_reasoning needs the gen(...) whose output to split")
    inner = to_expr(expr)
    names = [node.name for node in inner.walk() if isinstance(node, (Gen, Select)) and node.name]
    if not names:
        raise ValueError("separate_reasoning needs a named gen(...) or select(...) to split")
    return ExprList([inner, *(_located(SeparateReasoning(n, model_type)) for n in names)])


def _checked_choices(choices: Iterable[str] | None) -> list[str]:
    out = list(choices or [])
    if not out or any(not isinstance(c, str) or not c for c in out):
        raise ValueError("select needs a non-empty list of non-empty strings as choices")
    return out


def _role(role: str, content: Any) -> Expr:
    if content is None:
        return ExprList([_located(RoleBegin(role)), _located(RoleEnd(role))])
    return ExprList([_located(RoleBegin(role)), to_expr(content), _located(RoleEnd(role))])


def system(content: Any = None) -> Expr:
    return _role("system", content)


def user(content: Any = None) -> Expr:
    return _role("user", content)


def assistant(content: Any = None) -> Expr:
    return _role("assistant", content)


def role(name: str, content: Any = None) -> Expr:
    """A block of any role the chat template renders (e.g. "tool")."""
    return _role(name, content)


def system_begin() -> Expr:
    return _located(RoleBegin("system"))


def system_end() -> Expr:
    return _located(RoleEnd("system"))


def user_begin() -> Expr:
    return _located(RoleBegin("user"))


def user_end() -> Expr:
    return _located(RoleEnd("user"))


def assistant_begin() -> Expr:
    return _located(RoleBegin("assistant"))


def assistant_end() -> Expr:
    return _located(RoleEnd("assistant"))


def _located(node: Expr) -> Expr:
    node.call_site = find_call_site()
    return node


__all__ = [
    "Expr", "Text", "ExprList", "Gen", "Select", "RoleBegin", "RoleEnd", "VarScopeBegin", "VarScopeEnd",
    "SeparateReasoning", "AppendForks", "to_expr", "gen", "gen_int", "gen_string", "select", "separate_reasoning",
    "REGEX_INT", "REGEX_FLOAT", "REGEX_BOOL", "REGEX_STR",
    "system", "user", "assistant", "role", "system_begin", "system_end", "user_begin", "user_end",
    "assistant_begin", "assistant_end",
]
