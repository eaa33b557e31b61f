"""One tool's arguments as a sub-automaton of the call constraint, compiled by sgrun's own JSON
Schema compiler with the tool's parameters as the document root, so `$ref`/`$defs` resolve
against that tool's own parameters (never against a wrapper schema). Objects that do not say
otherwise hold only their declared properties (closed_objects.py).

JSON-argument formats call the whole parameters fragment. Keyword-argument formats (pythonic,
Qwen3-Coder XML) need the properties one by one: `properties()` lists them with a value node each,
and for XML a raw-text node for plain string parameters (written without quotes)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sgrun.constrain.byte_dfa import ByteDFA, product
from sgrun.constrain.byte_nfa import ByteNFA
from sgrun.constrain.errors import ConstraintTooComplexError, InvalidSchemaError, UnsupportedSchemaError
from sgrun.constrain.json_schema import ANNOTATIONS, SchemaCompiler, pattern_search_dfa
from sgrun.constrain.string_leaf import format_dfa
from sgrun.constrain.json_string import any_text_dfa, length_dfa
from sgrun.constrain.regex_ast import Node, alt, lit
from sgrun.constrain.string_formats import KNOWN_FORMATS
from sgrun.constrain.tool_calls.closed_objects import closed_parameters
from sgrun.constrain.tool_calls.tool_spec import ToolSchemaError, ToolSpec
from sgrun.errors import ConstraintError

_ROOT_URI = "https://sgrun.invalid/root.json"
# Top-level keywords a keyword-argument format can honour: the object's own shape.
_KWARGS_KEYWORDS = frozenset({"type", "properties", "required", "additionalProperties"})
# What compiling a malformed schema can raise besides a ConstraintError (which is a ValueError).
_SCHEMA_FAILURES = (ValueError, TypeError, KeyError, AttributeError, IndexError, RecursionError)
_RAW_STRING_KEYWORDS = frozenset({"type", "minLength", "maxLength", "pattern", "format", "enum", "const"})


@dataclass
class Property:
    name: str
    required: bool
    schema: Any
    value: Node                 # the value as JSON
    raw_string: bool            # a plain string: keyword formats may write it without quotes


class ToolArguments:
    def __init__(self, index: int, tool: ToolSpec, nfa: ByteNFA, whitespace: str = "compact"):
        self.index = index
        self.tool = tool
        self._nfa = nfa
        self._whitespace = whitespace
        self._compiler: SchemaCompiler | None = None

    def _fail(self, exc: Exception) -> ToolSchemaError:
        if not isinstance(exc, ConstraintError):  # the compiler choked on a malformed schema
            return ToolSchemaError(self.index, self.tool.name, f"the parameters schema is malformed "
                                   f"({type(exc).__name__}: {exc}); check it against JSON Schema")
        if isinstance(exc, UnsupportedSchemaError):
            return ToolSchemaError(self.index, self.tool.name, str(exc), keyword=exc.keyword, pointer=exc.pointer)
        return ToolSchemaError(self.index, self.tool.name, str(exc))

    @property
    def compiler(self) -> SchemaCompiler:
        if self._compiler is None:
            params = self.tool.parameters
            if not isinstance(params, (dict, bool)):
                raise ToolSchemaError(self.index, self.tool.name, "parameters must be a JSON Schema object")
            try:
                self._compiler = SchemaCompiler(closed_parameters(params), whitespace=self._whitespace,
                                                nfa=self._nfa)
            except ConstraintError as exc:
                raise self._fail(exc) from None
        return self._compiler

    def json_node(self) -> Node:
        """The arguments object, exactly as response_format would enforce these parameters."""
        try:
            return ("call", self.compiler.compile_root())
        except (ConstraintTooComplexError, ToolSchemaError):
            raise
        except _SCHEMA_FAILURES as exc:
            raise self._fail(exc) from None

    def _root_object(self) -> tuple[dict, str, str]:
        c = self.compiler
        schema, ptr, base = c.root, "#", c.index.base_for(c.root, _ROOT_URI)
        for _ in range(16):  # a root that is a bare $ref to the real object (pydantic does this)
            if not (isinstance(schema, dict) and "$ref" in schema):
                break
            schema, ptr, base = c.index.resolve(schema["$ref"], base, ptr)
        if schema is True or schema == {}:
            return {"type": "object"}, ptr, base
        if not isinstance(schema, dict):
            raise ToolSchemaError(self.index, self.tool.name, "parameters must be a JSON Schema object")
        return schema, ptr, base

    def properties(self, format_name: str) -> tuple[list[Property], bool]:
        """(properties in schema order, whether other keys are allowed) for formats that write
        arguments as name=value pairs. Keywords that constrain the object as a whole are refused:
        such formats cannot enforce them."""
        try:
            schema, ptr, base = self._root_object()
            for key in schema:
                if key not in _KWARGS_KEYWORDS and key not in ANNOTATIONS and not key.startswith("$sgrun"):
                    raise UnsupportedSchemaError(key, f"{ptr}/{key}" if ptr != "#" else f"#/{key}",
                                                 f"the {format_name} call format writes arguments one by one "
                                                 f"and cannot enforce it; use a JSON call format")
            t = schema.get("type", "object")
            if t != "object" and t != ["object"]:
                raise UnsupportedSchemaError("type", f"{ptr}/type", "tool parameters must be an object")
            props = schema.get("properties", {})
            required = schema.get("required", [])
            if not isinstance(props, dict) or not isinstance(required, list):
                raise InvalidSchemaError(f"properties/required at {ptr} must be an object/list")
            missing = [r for r in required if r not in props]
            if missing:
                raise UnsupportedSchemaError("required", f"{ptr}/required",
                                             f"required {missing[0]!r} has no entry in properties")
            out = []
            for name, sub in props.items():
                pptr = f"{ptr}/properties/{name.replace('~', '~0').replace('/', '~1')}"
                value = self.compiler.call(sub, pptr, base)
                out.append(Property(name, name in required, sub, value, self._is_raw_string(sub, pptr, base)))
            return out, schema.get("additionalProperties", True) is not False
        except (ConstraintTooComplexError, ToolSchemaError):
            raise
        except _SCHEMA_FAILURES as exc:
            raise self._fail(exc) from None

    def resolved(self, schema: Any, ptr: str, base: str) -> Any:
        for _ in range(16):
            if not (isinstance(schema, dict) and "$ref" in schema):
                break
            schema, ptr, base = self.compiler.index.resolve(schema["$ref"], base, ptr)
        return schema

    def _is_raw_string(self, schema: Any, ptr: str, base: str) -> bool:
        return is_plain_string(self.resolved(schema, ptr, base))

    def raw_string_node(self, prop: Property, forbidden: str) -> Node:
        """The decoded string value of a plain string property, written raw (no quotes, no
        escapes); it may not contain `forbidden` (the text that closes the value)."""
        c = self.compiler
        s = self.resolved(prop.schema, "#", c.index.base_for(c.root, _ROOT_URI))
        pptr = f"#/properties/{prop.name}"
        values = s.get("enum", [s["const"]] if "const" in s else None)
        if values is not None:
            return alt(*(lit(v) for v in values if isinstance(v, str) and forbidden not in v))
        lo, hi = int(s.get("minLength", 0)), s.get("maxLength")
        d: ByteDFA = any_text_dfa() if (lo == 0 and hi is None) else length_dfa(lo, None if hi is None else int(hi))
        if "pattern" in s:
            try:
                d = product(d, pattern_search_dfa(s["pattern"]))
            except UnsupportedSchemaError as e:
                raise self._fail(UnsupportedSchemaError("pattern", f"{pptr}/pattern", str(e))) from None
        fmt = s.get("format")
        if fmt is not None:
            if fmt not in KNOWN_FORMATS:
                raise self._fail(UnsupportedSchemaError("format", f"{pptr}/format", f"format {fmt!r} is not enforced"))
            d = product(d, format_dfa(fmt))
        d = product(d, pattern_search_dfa(_regex_literal(forbidden)), "minus")
        return ("dfa", d)


def _regex_literal(text: str) -> str:
    return "".join("\\" + ch if ch in r".^$*+?{}[]\|()/" else ch for ch in text)


def is_plain_string(schema: Any) -> bool:
    """A (resolved) schema that only ever describes a string, with keywords a raw-text value can
    honour: such values are written without quotes by keyword-argument formats."""
    if not isinstance(schema, dict):
        return False
    if not {k for k in schema if k not in ANNOTATIONS} <= _RAW_STRING_KEYWORDS:
        return False
    if schema.get("type") == "string":
        return True
    values = schema.get("enum", [schema["const"]] if "const" in schema else None)
    return "type" not in schema and isinstance(values, list) and bool(values) and all(isinstance(v, str) for v in values)
