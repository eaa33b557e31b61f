"""ASGI middleware in front of every handler: gives each HTTP request an id (the
`x-request-id` response header, and the id 5xx messages and the server log quote), and refuses
a missing or wrong API key (401) and a body over the size limit (413), as OpenAI error objects.

A body whose declared Content-Length is over the limit gets its 413 as soon as the headers
arrive, as nginx answers: a client that waits before sending (or sends `Expect: 100-continue`,
which is then never told to continue) reads the reason at once. The response's bytes go out
first; the guard then reads and drops whatever body the client still sends (up to a size bound,
and until it has been idle for a while) before the response ends and the connection closes, so a
client that uploads the whole body before reading is not reset before it reads the 413. A
chunked upload that grows past the limit is drained first and then answered the same way."""

from __future__ import annotations

import asyncio
import hmac
import uuid
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sgrun.server.errors import APIError

# Paths anyone may read: load balancers, gateways and Prometheus scrapers carry no key.
OPEN_PATHS = frozenset({"/health", "/metrics", "/v1/loads"})
# The web page and its static files hold no data; the page asks for the key its API calls need.
OPEN_PAGE_PATHS = frozenset({"/"})
OPEN_PREFIX = "/ui/static/"
# How much of an oversized body is read and dropped so the client can see the 413; past this the
# connection is closed (a client that keeps sending that long is not waiting for an answer).
DRAIN_LIMIT_BYTES = 64 << 20
# After an early 413, how long the guard waits for more of the body before it closes: a client
# that sends nothing in this time is waiting for the answer it already has (nginx's
# lingering_timeout is 5 s).
DRAIN_IDLE_S = 5.0


class BodyTooLarge(APIError):
    def __init__(self, limit: int):
        super().__init__(413, f"request body exceeds the limit of {limit} bytes; send a smaller body",
                         "invalid_request_error", code="request_too_large")


def request_id_of(scope: Scope) -> str | None:
    return scope.get("state", {}).get("request_id")


class RequestGuard:
    def __init__(self, app: ASGIApp, api_key: str | None, max_body_bytes: int,
                 on_error: Callable[[APIError], None] | None = None):
        self.app = app
        self.api_key = api_key
        self.max_body_bytes = max_body_bytes
        self.on_error = on_error  # called with each APIError, for metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = "req-" + uuid.uuid4().hex[:16]
        scope.setdefault("state", {})["request_id"] = rid
        if self.api_key is not None and not _is_open(scope["path"]) and not self._authorised(scope):
            await self._refuse(APIError(401, "Incorrect or missing API key: send 'Authorization: Bearer <key>'",
                                        "authentication_error", code="invalid_api_key"), scope, receive, send)
            return
        declared = _header_int(scope, b"content-length")
        if declared is not None and declared > self.max_body_bytes:
            await self._refuse_early(BodyTooLarge(self.max_body_bytes), scope, receive, send,
                                     drain=not _expects_continue(scope))
            return

        received = 0
        response_started = False

        async def counted_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                body_done = not message.get("more_body", False)
                if received > self.max_body_bytes:
                    if not body_done:  # drop the rest first, so the client can read the 413
                        await drain_body(receive)
                    raise BodyTooLarge(self.max_body_bytes)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal response_started
            if message["type"] == "http.response.start":
                response_started = True
                headers = list(message.get("headers", []))
                if not any(k == b"x-request-id" for k, _ in headers):
                    message = {**message, "headers": [*headers, (b"x-request-id", rid.encode())]}
            await send(message)

        try:
            await self.app(scope, counted_receive, tracking_send)
        except BodyTooLarge as err:  # a chunked upload that grew past the limit outside a handler
            if not response_started:
                await self._refuse(err, scope, receive, send)

    def _authorised(self, scope: Scope) -> bool:
        for name, value in scope.get("headers", []):
            if name == b"authorization":
                scheme, _, token = value.decode("latin-1").partition(" ")
                return scheme.lower() == "bearer" and hmac.compare_digest(token.strip(), self.api_key or "")
            if name == b"x-api-key":
                return hmac.compare_digest(value.decode("latin-1").strip(), self.api_key or "")
        return False

    async def _refuse(self, err: APIError, scope: Scope, receive: Receive, send: Send, drain: bool = False) -> None:
        if self.on_error is not None:
            self.on_error(err)
        if drain:
            await drain_body(receive)
        response = err.to_response(request_id_of(scope))
        # Closing after an error we did not read the body for keeps the connection state clean.
        response.headers["connection"] = "close"
        await response(scope, receive, send)


    async def _refuse_early(self, err: APIError, scope: Scope, receive: Receive, send: Send, drain: bool) -> None:
        """Answer `err` before reading the body: its status, headers and whole body are sent at
        once, the response is held open while whatever body the client sends is dropped (never
        with `Expect: 100-continue`: reading would tell the client to continue), then it ends
        and the connection closes."""
        if self.on_error is not None:
            self.on_error(err)
        response = err.to_response(request_id_of(scope))
        response.headers["connection"] = "close"
        await send({"type": "http.response.start", "status": response.status_code, "headers": response.raw_headers})
        await send({"type": "http.response.body", "body": response.body, "more_body": True})
        if drain:
            await drain_body(receive, idle_s=DRAIN_IDLE_S)
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def drain_body(receive: Receive, limit: int = DRAIN_LIMIT_BYTES, idle_s: float | None = None) -> None:
    """Read and drop the rest of a request body (up to `limit` bytes), so the client, still
    sending, is not reset before it can read the response. With `idle_s`, stop once nothing has
    arrived for that long (a client waiting for the answer sends nothing more)."""
    dropped = 0
    while dropped <= limit:
        try:
            message = await asyncio.wait_for(receive(), idle_s)
        except asyncio.TimeoutError:
            return
        if message["type"] != "http.request":
            return
        dropped += len(message.get("body", b""))
        if not message.get("more_body", False):
            return


def _header_int(scope: Scope, name: bytes) -> int | None:
    for key, value in scope.get("headers", []):
        if key == name:
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _expects_continue(scope: Scope) -> bool:
    return any(k == b"expect" and v.lower() == b"100-continue" for k, v in scope.get("headers", []))


def _is_open(path: str) -> bool:
    return path in OPEN_PATHS or path in OPEN_PAGE_PATHS or path.startswith(OPEN_PREFIX)
