"""A Python function -> an OpenAI-style tool description whose parameters are a JSON Schema,
built from its signature, type hints and docstring."""

from __future__ import annotations

import dataclasses
import enum
import inspect
import re
import types
import typing
from typing import Any, Callable

from sgrun.errors import SgrunError

_SCALARS: dict[type, dict[str, Any]] = {
    str: {"type": "string"}, int: {"type": "integer"}, float: {"type": "number"},
    bool: {"type": "boolean"}, type(None): {"type": "null"},
}


def type_to_schema(tp: Any) -> dict[str, Any]:
    """JSON Schema for a type hint (str/int/float/bool, list/tuple/dict, Optional/Union,
    Literal, Enum, dataclasses, TypedDict)."""
    if tp is inspect.Parameter.empty or tp is Any:
        return {}
    if tp in _SCALARS:
        return dict(_SCALARS[tp])
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        schema = type_to_schema(args[0])
        notes = [a for a in args[1:] if isinstance(a, str)]
        return {**schema, "description": notes[0]} if notes else schema
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin in (typing.Union, types.UnionType):
        options = [type_to_schema(a) for a in args]
        return options[0] if len(options) == 1 else {"anyOf": options}
    if origin in (list, set, frozenset, typing.Sequence) or tp in (list, set, frozenset):
        return {"type": "array", "items": type_to_schema(args[0])} if args else {"type": "array"}
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": type_to_schema(args[0])}
        return {"type": "array", "prefixItems": [type_to_schema(a) for a in args],
                "minItems": len(args), "maxItems": len(args)}
    if origin is dict or tp is dict:
        if len(args) == 2 and args[1] is not Any:
            return {"type": "object", "additionalProperties": type_to_schema(args[1])}
        return {"type": "object"}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return {"enum": [m.value for m in tp]}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        fields = dataclasses.fields(tp)
        required = [f.name for f in fields
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        return _object({f.name: type_to_schema(hints[f.name]) for f in fields}, required)
    if isinstance(tp, type) and typing.is_typeddict(tp):
        hints = typing.get_type_hints(tp)
        return _object({k: type_to_schema(v) for k, v in hints.items()}, sorted(tp.__required_keys__))
    raise SgrunError(f"cannot describe type {tp!r} as JSON Schema; annotate the parameter with "
                     f"str, int, float, bool, list[...], dict[str, ...], Literal[...], an Enum or a dataclass")


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def function_to_tool(func: Callable[..., Any], name: str | None = None,
                     description: str | None = None) -> dict[str, Any]:
    """{"type": "function", "function": {"name", "description", "parameters"}} for `func`."""
    signature = inspect.signature(func)
    try:
        hints = typing.get_type_hints(func, include_extras=True)
    except (NameError, TypeError) as exc:
        raise SgrunError(f"tool {func.__name__!r}: cannot resolve its type hints: {exc}") from exc
    summary, param_docs = parse_docstring(inspect.getdoc(func) or "")
    properties: dict[str, Any] = {}
    required: list[str] = []
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        schema = type_to_schema(hints.get(param.name, param.annotation))
        if param.name in param_docs and "description" not in schema:
            schema["description"] = param_docs[param.name]
        if param.default is param.empty:
            required.append(param.name)
        elif param.default is None or isinstance(param.default, (str, int, float, bool)):
            schema["default"] = param.default
        properties[param.name] = schema
    return {"type": "function", "function": {
        "name": name or func.__name__,
        "description": description if description is not None else summary,
        "parameters": _object(properties, required),
    }}


_SECTION = re.compile(r"^(Args|Arguments|Parameters|Params|Returns|Return|Raises|Yields|Examples?|Notes?)\s*:\s*$")
_PARAM_LINE = re.compile(r"^\s*\**(\w+)\**\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SPHINX = re.compile(r"^\s*:param\s+(?:\w+\s+)?(\w+)\s*:\s*(.*)$")


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """(summary, {param: description}) from a Google- or Sphinx-style docstring."""
    summary: list[str] = []
    params: dict[str, str] = {}
    section: str | None = None          # None while still in the summary paragraph
    current: str | None = None          # parameter whose description continues
    param_indent: int | None = None     # indentation of parameter lines in an Args section
    for line in doc.strip().splitlines():
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if (m := _SECTION.match(stripped)) is not None:
            section, current, param_indent = m.group(1).lower(), None, None
        elif (m := _SPHINX.match(line)) is not None:
            section, current = "sphinx", m.group(1)
            params[current] = m.group(2).strip()
        elif section is None:
            if stripped:
                summary.append(stripped)
            elif summary:
                section = "body"
        elif section in ("args", "arguments", "parameters", "params") and stripped:
            m = _PARAM_LINE.match(line)
            if m is not None and (param_indent is None or indent <= param_indent):
                param_indent, current = indent, m.group(1)
                params[current] = m.group(2).strip()
            elif current is not None:
                params[current] = f"{params[current]} {stripped}".strip()
        elif section == "sphinx" and current is not None and stripped and not stripped.startswith(":"):
            params[current] = f"{params[current]} {stripped}".strip()
    return " ".join(summary), params
