"""Server-sent events: the response type that always closes its generator (so an aborted
stream aborts its engine request at once), and the chat-completion chunk stream."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import msgspec
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from sgrun.server.chat import PreparedChat, chat_logprobs, usage
from sgrun.server.engine_bridge import RunningRequest
from sgrun.server.errors import generation_failed
from sgrun.server.protocol import (ChatChunkChoice, ChatCompletionChunk, ChatDelta, FunctionCallDelta,
                                   ToolCallDelta)
from sgrun.server.state import ServerState
from sgrun.server.tools import StreamingToolParser, ToolCallDeltaPiece

DONE = b"data: [DONE]\n\n"
_encode = msgspec.json.Encoder().encode


def stream_failure(state: ServerState, error: str) -> bytes:
    """The SSE tail for a stream whose request the engine aborted: the error event, then [DONE]."""
    err = generation_failed(error)
    state.metrics.observe_error(err)
    return err.to_sse() + DONE


def sse(obj: Any) -> bytes:
    return b"data: " + _encode(obj) + b"\n\n"


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


def _tool_deltas(pieces: list[ToolCallDeltaPiece]) -> list[ToolCallDelta]:
    out = []
    for p in pieces:
        if p.name is not None:
            out.append(ToolCallDelta(index=p.index, id=p.id, type="function",
                                     function=FunctionCallDelta(name=p.name, arguments=p.arguments or "")))
        elif p.arguments:
            out.append(ToolCallDelta(index=p.index, function=FunctionCallDelta(arguments=p.arguments)))
    return out


async def chat_stream(state: ServerState, prepared: PreparedChat, run: RunningRequest, model: str,
                      include_usage: bool) -> AsyncIterator[bytes]:
    """OpenAI chunks: a role delta per choice, content / tool-call deltas, a finish chunk per
    choice, an optional usage chunk, then [DONE]."""
    created = int(time.time())
    rid = prepared.request_id

    def chunk(index: int, delta: ChatDelta, finish: str | None = None, logprobs: Any = None) -> bytes:
        return sse(ChatCompletionChunk(id=rid, created=created, model=model, choices=[
            ChatChunkChoice(index=index, delta=delta, finish_reason=finish, logprobs=logprobs)]))

    n = prepared.params.n
    parsers = [StreamingToolParser() if prepared.plan.expects_calls else None for _ in range(n)]
    want_logprobs = prepared.params.logprobs is not None
    top_n = prepared.params.logprobs or 0
    try:
        for i in range(n):
            yield chunk(i, ChatDelta(role="assistant", content=""))
        async for ev in run.events():
            if ev.error:
                yield stream_failure(state, ev.error)
                return
            logprobs = chat_logprobs(state.tokenizer, ev.logprobs, top_n) if (want_logprobs and ev.logprobs) else None
            parser = parsers[ev.index]
            if parser is None:
                if ev.text or logprobs is not None:
                    yield chunk(ev.index, ChatDelta(content=ev.text), logprobs=logprobs)
            else:
                text, pieces = parser.feed(ev.text)
                if ev.finish_reason is not None:
                    more_text, more_pieces = parser.finish()
                    text += more_text
                    pieces += more_pieces
                if text or pieces or logprobs is not None:
                    yield chunk(ev.index, ChatDelta(content=text or None, tool_calls=_tool_deltas(pieces) or None),
                                logprobs=logprobs)
            if ev.finish_reason is not None:
                finish = ev.finish_reason
                if finish == "stop" and parser is not None and parser.any_calls:
                    finish = "tool_calls"
                yield chunk(ev.index, ChatDelta(), finish=finish)
        if include_usage:
            final = await run.final_output()
            cached = final.cached_tokens if final is not None else 0
            yield sse(ChatCompletionChunk(id=rid, created=created, model=model, choices=[],
                                          usage=usage(run.prompt_tokens, run.completion_tokens, cached)))
        yield DONE
    finally:
        run.abort()  # no-op when it finished; frees pages when the client went away
