"""The streamed chat completion: OpenAI chunks with content or tool-call deltas per choice."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from sgrun.server.chat import PreparedChat
from sgrun.server.engine_bridge import RunningRequest
from sgrun.server.openai_shapes import chat_logprobs, usage
from sgrun.server.protocol import (ChatChunkChoice, ChatCompletionChunk, ChatDelta, FunctionCallDelta,
                                   ToolCallDelta)
from sgrun.server.sse import DONE, sse, stream_failure
from sgrun.server.state import ServerState
from sgrun.server.tool_stream_parser import StreamingToolParser, ToolCallDeltaPiece


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
                yield stream_failure(state.metrics, ev.error, run.request_id)
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
            yield sse(ChatCompletionChunk(id=rid, created=created, model=model, choices=[],
                                          usage=usage(run.prompt_tokens, run.completion_tokens, run.cached_tokens)))
        yield DONE
    finally:
        run.abort()  # no-op when it finished; frees pages when the client went away
