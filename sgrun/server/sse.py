"""Server-sent events framing: one `data:` line per JSON object, the `[DONE]` sentinel, the
error tail of a stream the engine aborted, and the response type that always closes its
generator (so an abandoned stream aborts its engine request at once)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import msgspec
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from sgrun.server.errors import generation_failed
from sgrun.server.metrics import ServerMetrics

log = logging.getLogger("sgrun.server")
DONE = b"data: [DONE]\n\n"
_encode = msgspec.json.Encoder().encode


def sse(obj: Any) -> bytes:
    return b"data: " + _encode(obj) + b"\n\n"


def stream_failure(metrics: ServerMetrics, error: str, request_id: str) -> bytes:
    """The SSE tail for a stream whose request the engine aborted: the error event, then [DONE]
    (engine_bridge has logged the error under `request_id`)."""
    err = generation_failed(error, request_id)
    log.error("%s: stream ended with a 500 error event: %s", request_id, err.message)
    metrics.observe_error(err)
    return err.to_sse() + DONE


class SSEResponse(StreamingResponse):
    media_type = "text/event-stream"

    def __init__(self, content: AsyncIterator[bytes]):
        super().__init__(content, headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            # Starlette stops iterating on disconnect but leaves the generator open; closing it
            # runs its `finally`, which aborts the engine request and frees its pages now.
            aclose = getattr(self.body_iterator, "aclose", None)
            if aclose is not None:
                await aclose()
