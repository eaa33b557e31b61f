"""The program IR: what `gen`, `select` and the role helpers return.

Nodes are plain data. `+` between nodes and strings builds an `ExprList`, so
`"I will use a " + select("tool", ...) + "."` is one expression the interpreter walks in order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Iterator

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


# Sampling fields `gen` accepts, mapped to their SamplingParams names.
GEN_PARAM_NAMES: dict[str, str] = {
    "max_tokens": "max_new_tokens", "stop": "stop", "stop_token_ids": "stop_token_ids",
    "temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p",
    "frequency_penalty": "frequency_penalty", "presence_penalty": "presence_penalty",
    "repetition_penalty": "repetition_penalty", "ignore_eos": "ignore_eos", "seed": "seed",
    "regex": "regex", "json_schema": "json_schema", "grammar": "grammar", "triggers": "triggers",
    "tool_calls": "tool_calls",
}


@dataclass(eq=False)
class Gen(Expr):
    name: str | None
    params: dict[str, Any]              # SamplingParams field name -> value (only what was given)
    return_logprob: bool = False

    def describe(self) -> str:
        shown = ", ".join(f"{k}={_short(v)}" for k, v in self.params.items())
        head = repr(self.name) if self.name else ""
        return f"gen({', '.join(x for x in (head, shown) if x)})"


@dataclass(eq=False)
class Select(Expr):
    name: str | None
    choices: list[str]
    temperature: float = 0.0

    def describe(self) -> str:
        return f"select({self.name!r}, choices={_short(self.choices)})"


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
        return_logprob: bool = False, *, stop_token_ids: list[int] | None = None,
        repetition_penalty: float | None = None, seed: int | None = None,
        triggers: list[dict[str, Any]] | None = None, tool_calls: dict[str, Any] | None = None) -> Expr:
    """Generate text from the model and append it (stored under `name` when given).

    `choices` makes this a `select` (as in SGLang): the choice with the highest length-normalised
    log-likelihood is taken. Unset parameters fall back to `run(**default_sampling)`, then to
    `SamplingParams` defaults (max_tokens 128).

    `triggers` keeps generation free until a trigger string appears, then holds the rest to that
    trigger's constraint: `gen("a", triggers=[{"trigger": "<json>", "json_schema": {...}}])`.
    `tool_calls` holds the output to tool calls in a model's format (sgrun.Agent uses it)."""
    if choices is not None:
        return _located(Select(name, _checked_choices(choices), temperature or 0.0))
    given = dict(max_tokens=max_tokens, stop=stop, temperature=temperature, top_p=top_p, top_k=top_k,
                 min_p=min_p, frequency_penalty=frequency_penalty, presence_penalty=presence_penalty,
                 ignore_eos=ignore_eos, regex=regex, json_schema=json_schema, grammar=grammar,
                 stop_token_ids=stop_token_ids, repetition_penalty=repetition_penalty, seed=seed,
                 triggers=triggers, tool_calls=tool_calls)
    params = {GEN_PARAM_NAMES[k]: v for k, v in given.items() if v is not None}
    if isinstance(params.get("stop"), str):
        params["stop"] = [params["stop"]]
    return _located(Gen(name, params, return_logprob))


def select(name: str | None = None, choices: list[str] | None = None, temperature: float = 0.0) -> Expr:
    """Append the choice with the highest length-normalised log-likelihood given the state."""
    return _located(Select(name, _checked_choices(choices), temperature))


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
    "Expr", "Text", "ExprList", "Gen", "Select", "RoleBegin", "RoleEnd", "to_expr", "gen", "select",
    "system", "user", "assistant", "role", "system_begin", "system_end", "user_begin", "user_end",
    "assistant_begin", "assistant_end",
]
