"""Request bodies -> typed msgspec Structs, with the limits JSON parsing needs: a body nested
deeper than MAX_NESTING (anywhere, free-form fields such as a JSON Schema or
`sampling_params` included) is a 400 naming where, never a RecursionError further in."""

from __future__ import annotations

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
    except RecursionError:
        raise _too_deep(None) from None
    check_nesting(value)
    return value


def _too_deep(path: str | None) -> APIError:
    where = f" at '{path}'" if path else ""
    return bad_request(f"request body is nested more than {MAX_NESTING} levels deep{where}; "
                       f"flatten it", param=path, code="nesting_too_deep")


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
