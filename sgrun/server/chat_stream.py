"""The streamed chat completion: OpenAI chunks with content, reasoning or tool-call deltas per
choice. Tool calls stream in OpenAI's shape (sgrun.constrain.tool_calls.streaming): a call's first
delta has id, type and name with arguments "", then argument fragments; never two deltas for one
call index in a chunk; finish_reason "tool_calls" (or "length" when a call was cut short)."""

from __future__ import annotations

import copy
import time
from collections.abc import AsyncIterator
from typing import Any

from sgrun.constrain.tool_calls import CallDelta, StreamingCallParser
from sgrun.constrain.tool_calls.streaming import StreamStep
from sgrun.server.chat import PreparedChat
from sgrun.server.engine_bridge import RunningRequest
from sgrun.server.openai_shapes import chat_logprobs, usage
from sgrun.server.protocol import (ChatChunkChoice, ChatCompletionChunk, ChatDelta, FunctionCallDelta,
                                   ToolCallDelta)
from sgrun.server.reasoning import ReasoningSplitter
from sgrun.server.sse import DONE, sse, stream_failure
from sgrun.server.state import ServerState
from sgrun.server.tool_format import tool_specs


def _tool_deltas(deltas: list[CallDelta]) -> list[ToolCallDelta] | None:
    out = []
    for d in deltas:
        if d.name is not None:
            out.append(ToolCallDelta(index=d.index, id=d.id, type="function",
                                     function=FunctionCallDelta(name=d.name, arguments="")))
        elif d.arguments:
            out.append(ToolCallDelta(index=d.index, function=FunctionCallDelta(arguments=d.arguments)))
    return out or None


class _ChoiceStream:
    """One choice's text -> the deltas to send: reasoning first, then content or tool calls."""

    def __init__(self, state: ServerState, prepared: PreparedChat):
        self.reasoning: ReasoningSplitter | None = copy.copy(prepared.reasoning) if prepared.reasoning else None
        self.calls = (StreamingCallParser(state.tool_format, tool_specs(prepared.plan.tools))
                      if prepared.plan.expects_calls else None)

    def deltas(self, text: str, final: bool) -> list[ChatDelta]:
        reasoning, answer = self.reasoning.feed(text, final) if self.reasoning is not None else ("", text)
        if self.calls is None:
            steps = [StreamStep(content=answer)]
        else:
            steps = [self.calls.feed(answer)] + (self.calls.finish() if final else [])
        out = []
        for i, step in enumerate(steps):
            r = reasoning if i == 0 else ""
            if step or r:
                out.append(ChatDelta(content=step.content or None, reasoning_content=r or None,
                                     tool_calls=_tool_deltas(step.calls)))
        return out


async def chat_stream(state: ServerState, prepared: PreparedChat, run: RunningRequest, model: str,
                      include_usage: bool) -> AsyncIterator[bytes]:
    """OpenAI chunks: a role delta per choice, content / reasoning / tool-call deltas, a finish
    chunk per choice, an optional usage chunk, then [DONE]."""
    created = int(time.time())
    rid = prepared.request_id

    def chunk(index: int, delta: ChatDelta, finish: str | None = None, logprobs: Any = None) -> bytes:
        return sse(ChatCompletionChunk(id=rid, created=created, model=model, choices=[
            ChatChunkChoice(index=index, delta=delta, finish_reason=finish, logprobs=logprobs)]))

    n = prepared.params.n
    choices = [_ChoiceStream(state, prepared) for _ in range(n)]
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
            choice = choices[ev.index]
            deltas = choice.deltas(ev.text, final=ev.finish_reason is not None)
            if not deltas and logprobs is not None:
                deltas = [ChatDelta(content="")]
            for k, delta in enumerate(deltas):
                yield chunk(ev.index, delta, logprobs=logprobs if k == 0 else None)
            if ev.finish_reason is not None:
                finish = ev.finish_reason
                if finish == "stop" and choice.calls is not None and choice.calls.any_calls:
                    finish = "tool_calls"
                yield chunk(ev.index, ChatDelta(), finish=finish)
        if include_usage:
            yield sse(ChatCompletionChunk(id=rid, created=created, model=model, choices=[],
                                          usage=usage(run.prompt_tokens, run.completion_tokens, run.cached_tokens)))
        yield DONE
    finally:
        run.abort()  # no-op when it finished; frees pages when the client went away
