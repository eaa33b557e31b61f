"""OpenAI-shaped API errors: one exception type the handlers raise, and the mapping from
project exceptions and msgspec decode errors to it. A 5xx never carries a traceback or a file
path: its message says in one line what failed and gives the request id under which the
server log holds the details."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import msgspec
from starlette.responses import Response

from sgrun.errors import ConstraintError, InvalidRequestError, ModelLoadError

if TYPE_CHECKING:
    from sgrun.server.field_mapping import FieldNames


class ErrorBody(msgspec.Struct):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(msgspec.Struct):
    error: ErrorBody


class APIError(Exception):
    """An error a client caused (or a server fault) with its HTTP status and OpenAI error fields."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code

    def body(self) -> ErrorResponse:
        return ErrorResponse(ErrorBody(self.message, self.type, self.param, self.code))

    def to_response(self, request_id: str | None = None) -> Response:
        headers = {"x-request-id": request_id} if request_id else None
        return Response(msgspec.json.encode(self.body()), status_code=self.status,
                        media_type="application/json", headers=headers)

    def to_sse(self) -> bytes:
        return b"data: " + msgspec.json.encode(self.body()) + b"\n\n"


# Absolute POSIX or Windows paths, as they appear in tracebacks and OS error messages.
_PATH_TEXT = re.compile(r"(?:[A-Za-z]:\\|(?<![\w.:/])/)(?:[\w.+@-]+[/\\])+[\w.+@-]*")


def scrub(text: str, limit: int = 300) -> str:
    """One line of `text` without file paths: what a client may see of an internal failure."""
    if "Traceback (most recent call last)" in text:
        head, _, tail = text.partition("Traceback (most recent call last)")
        lines = [ln.strip() for ln in tail.splitlines() if ln.strip()]
        text = head.strip().rstrip(":") + (": " + lines[-1] if lines else "")
    line = " ".join(text.split())
    line = _PATH_TEXT.sub("<path>", line)
    return line if len(line) <= limit else line[: limit - 3] + "..."


def internal_error(what: str, request_id: str | None) -> APIError:
    ref = f" (request id {request_id}; the server log has the details)" if request_id else ""
    return APIError(500, f"internal error: {scrub(what)}{ref}", "internal_error", code="internal_error")


def generation_failed(error: str, request_id: str | None = None) -> APIError:
    """The engine aborted a request because of an internal error (never the client's fault)."""
    ref = f" (request id {request_id})" if request_id else ""
    return APIError(500, f"generation failed: {scrub(error)}{ref}", "internal_error", code="generation_failed")


def bad_request(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, "invalid_request_error", param, code)


# msgspec says e.g. "Expected `int`, got `str` - at `$.messages[0].role`".
_PATH = re.compile(r" - at `\$\.?(?P<path>[^`]*)`$")
_MISSING = re.compile(r"missing required field `(?P<field>[^`]+)`")


def from_decode_error(exc: msgspec.DecodeError) -> APIError:
    """Turn a msgspec decode/validation error into a 400 naming the offending field."""
    text = str(exc)
    m = _PATH.search(text)
    param = m.group("path") if m and m.group("path") else None
    if param and "[...]" in param:  # msgspec does not name keys of free-form objects: name the object
        param = param.split("[...]")[0] or None
    if isinstance(exc, msgspec.ValidationError):
        detail = text[: m.start()] if m else text
        missing = _MISSING.search(detail)
        if missing:  # name the missing field itself, not the object holding it
            param = f"{param}.{missing.group('field')}" if param else missing.group("field")
        where = f" at '{param}'" if param else ""
        return bad_request(f"invalid request body{where}: {detail}", param=param, code="invalid_type")
    return bad_request(f"request body is not valid JSON: {text}", code="invalid_json")


def from_exception(exc: BaseException, names: "FieldNames | None" = None) -> APIError:
    """Map exceptions raised while validating or submitting a request to API errors; `names`
    turns the engine's field name into the client's (e.g. max_new_tokens -> max_tokens)."""
    if isinstance(exc, APIError):
        return exc
    field = getattr(exc, "field", None)
    param = names.client(field) if names is not None else field
    if isinstance(exc, ConstraintError):
        return APIError(400, str(exc), "invalid_request_error", param=param, code="constraint_error")
    if isinstance(exc, InvalidRequestError):
        # An error that can say itself under the client's field name does (max_tokens, not max_new_tokens).
        text = exc.message_for(param) if param and hasattr(exc, "message_for") else str(exc)
        return APIError(400, text, "invalid_request_error", param=param, code="invalid_value")
    if isinstance(exc, msgspec.DecodeError):
        return from_decode_error(exc)
    if isinstance(exc, ModelLoadError):
        return APIError(400, scrub(str(exc)), "invalid_request_error", code="model_error")
    return internal_error(type(exc).__name__, None)
