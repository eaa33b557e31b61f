"""Request bodies -> typed msgspec Structs, with the limits JSON parsing needs: a body nested
deeper than MAX_NESTING (anywhere, free-form fields such as a JSON Schema or
`sampling_params` included) is a 400 naming where, never a RecursionError further in."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any, TypeVar

import msgspec
from starlette.requests import Request

from sgrun.server.errors import APIError, bad_request, from_decode_error

T = TypeVar("T")

# JSON nesting levels a body may have. Real requests (messages, tool schemas, JSON Schemas)
# stay far below; the constraint compiler and json.dumps never meet a deeper structure.
MAX_NESTING = 100


async def decode_body(request: Request, type_: type[T]) -> T:
    body = await request.body()
    if not body:
        raise APIError(400, "request body is empty; send a JSON object", code="invalid_json")
    try:
        value = msgspec.json.decode(body, type=type_)
    except msgspec.DecodeError as exc:
        raise from_decode_error(exc) from exc
    except RecursionError:  # deeper than msgspec goes: find where, from the text
        raise _too_deep(await asyncio.to_thread(deep_path_in_text, body)) from None
    check_nesting(value)
    return value


# Strings (with escapes) and the structural characters of JSON text; numbers and literals are
# skipped, which is all a depth scan needs.
_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}:,]')


def deep_path_in_text(body: bytes, limit: int = MAX_NESTING) -> str | None:
    """The path (as '$.a[0].b' without '$.') where JSON text first nests past `limit`."""
    stack: list[list] = []          # [is_object, key or index]
    pending_key: str | None = None
    for m in _TOKENS.finditer(body):
        tok = m.group()
        if tok in (b"{", b"["):
            if len(stack) >= limit:
                return _render_path(stack) or None
            stack.append([tok == b"{", None if tok == b"{" else 0])
        elif tok in (b"}", b"]"):
            if stack:
                stack.pop()
        elif tok == b",":
            if stack and not stack[-1][0]:
                stack[-1][1] += 1
        elif tok == b":":
            if stack and stack[-1][0]:
                stack[-1][1] = pending_key
        elif stack and stack[-1][0]:
            try:
                pending_key = json.loads(tok)
            except ValueError:
                pending_key = "?"
    return None


def _render_path(stack: list[list]) -> str:
    out = ""
    for is_object, key in stack:
        if is_object:
            out += f".{key}" if out else str(key)
        else:
            out += f"[{key}]"
    return out


def _too_deep(path: str | None) -> APIError:
    """`param` is the top-level field holding the deep part; the message shows where it starts."""
    field = re.split(r"[.\[]", path, maxsplit=1)[0] if path else None
    shown = path if path is None or len(path) <= 60 else path[:57] + "..."
    where = f" at '{shown}'" if shown else ""
    return bad_request(f"request body is nested more than {MAX_NESTING} levels deep{where}; "
                       f"flatten it", param=field or None, code="nesting_too_deep")


def check_nesting(value: Any, limit: int = MAX_NESTING) -> None:
    """Iterative depth check over decoded JSON (Structs, lists, dicts); raises a 400 naming the
    first path past `limit`."""
    stack: list[tuple[Any, int, str]] = [(value, 0, "")]
    while stack:
        item, depth, path = stack.pop()
        if depth > limit:
            raise _too_deep(path or None)
        if isinstance(item, msgspec.Struct):
            for name in item.__struct_fields__:
                child = getattr(item, name)
                if isinstance(child, (msgspec.Struct, list, dict)):
                    stack.append((child, depth + 1, f"{path}.{name}" if path else name))
        elif isinstance(item, list):
            for i, child in enumerate(item):
                if isinstance(child, (msgspec.Struct, list, dict)):
                    stack.append((child, depth + 1, f"{path}[{i}]"))
        elif isinstance(item, dict):
            for key, child in item.items():
                if isinstance(child, (msgspec.Struct, list, dict)):
                    stack.append((child, depth + 1, f"{path}.{key}" if path else str(key)))
