"""ASGI middleware that refuses requests before any handler runs: a missing or wrong API key
(401) and a body over the size limit (413), both as OpenAI error objects."""

from __future__ import annotations

import hmac

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sgrun.server.errors import APIError

# Paths anyone may read: load balancers and Prometheus scrapers carry no key.
OPEN_PATHS = frozenset({"/health", "/metrics"})


class _BodyTooLarge(Exception):
    pass


class RequestGuard:
    def __init__(self, app: ASGIApp, api_key: str | None, max_body_bytes: int, on_error=None):
        self.app = app
        self.api_key = api_key
        self.max_body_bytes = max_body_bytes
        self.on_error = on_error  # called with each APIError, for metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.api_key is not None and scope["path"] not in OPEN_PATHS and not self._authorised(scope):
            await self._refuse(APIError(401, "Incorrect or missing API key: send 'Authorization: Bearer <key>'",
                                        "authentication_error", code="invalid_api_key"), scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_body_bytes:
            await self._refuse(self._too_large(), scope, receive, send)
            return

        received = 0
        response_started = False

        async def counted_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    raise _BodyTooLarge()
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal response_started
            if message["type"] == "http.response.start":
                response_started = True
            await send(message)

        try:
            await self.app(scope, counted_receive, tracking_send)
        except _BodyTooLarge:
            if not response_started:  # chunked upload that grew past the limit
                await self._refuse(self._too_large(), scope, receive, send)

    def _too_large(self) -> APIError:
        return APIError(413, f"request body exceeds the limit of {self.max_body_bytes} bytes",
                        "invalid_request_error", code="request_too_large")

    def _authorised(self, scope: Scope) -> bool:
        for name, value in scope.get("headers", []):
            if name == b"authorization":
                scheme, _, token = value.decode("latin-1").partition(" ")
                return scheme.lower() == "bearer" and hmac.compare_digest(token.strip(), self.api_key or "")
            if name == b"x-api-key":
                return hmac.compare_digest(value.decode("latin-1").strip(), self.api_key or "")
        return False

    async def _refuse(self, err: APIError, scope: Scope, receive: Receive, send: Send) -> None:
        if self.on_error is not None:
            self.on_error(err)
        response = err.to_response()
        # Closing after an error we did not read the body for keeps the connection state clean.
        response.headers["connection"] = "close"
        await response(scope, receive, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
