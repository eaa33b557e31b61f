"""Running one engine request from asyncio: submit (with its constraint already compiled),
accumulate its events into the engine's own CompletionOutput per sample, and abort it when the
client goes away or the handler stops early, so its pages are freed."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from starlette.requests import Request

from sgrun.constrain import Constraint
from sgrun.engine.state.outputs import CompletionOutput, StreamEvent
from sgrun.engine.state.sampling_params import SamplingParams
from sgrun.server.errors import APIError, from_exception, generation_failed
from sgrun.server.field_mapping import FieldNames
from sgrun.server.metrics import ServerMetrics

if TYPE_CHECKING:
    from sgrun.engine.engine import Engine
    from sgrun.engine.state.request_handle import RequestHandle

log = logging.getLogger("sgrun.server")


class RunningRequest:
    """One submitted engine request, observed from asyncio."""

    def __init__(self, handle: RequestHandle, prompt_tokens: int, params: SamplingParams, metrics: ServerMetrics,
                 kind: str, arrival: float):
        self.handle = handle
        self.request_id: str = handle.request_id
        self.prompt_tokens = prompt_tokens
        self.params = params
        self.metrics = metrics
        self.kind = kind
        self.arrival = arrival
        self.first_token_time: float | None = None
        self.outputs = [CompletionOutput(index=i, text="", token_ids=[], finish_reason=None,
                                         logprobs=[] if params.logprobs is not None else None)
                        for i in range(params.n)]
        self.error: str | None = None     # the first engine-side failure of any sample
        self.finished = False
        self._recorded = False

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens served from the radix cache (the handle knows once the request is admitted)."""
        return min(self.handle.cached_tokens, self.prompt_tokens)

    @property
    def completion_tokens(self) -> int:
        return sum(len(o.token_ids) for o in self.outputs)

    async def events(self) -> AsyncIterator[StreamEvent]:
        """The engine's events, in order; aborts the request if the consumer stops early."""
        try:
            async for ev in self.handle:
                self._account(ev)
                yield ev
            self.finished = True
        finally:
            if not self.finished:
                self.abort()
            self._record()

    async def run_to_end(self, request: Request | None = None) -> list[CompletionOutput]:
        """Consume every event; if the HTTP client disconnects first, abort and raise."""
        async def consume() -> None:
            async for _ in self.events():
                pass

        if request is None:
            await consume()
            return self.outputs
        consumer = asyncio.ensure_future(consume())
        watcher = asyncio.ensure_future(_wait_for_disconnect(request))
        try:
            done, _ = await asyncio.wait({consumer, watcher}, return_when=asyncio.FIRST_COMPLETED)
            if consumer not in done:
                consumer.cancel()
                self.abort()
                raise APIError(499, "client closed the request", "client_disconnected")
            consumer.result()
        finally:
            watcher.cancel()
            if not consumer.done():
                consumer.cancel()
        return self.outputs

    def raise_if_failed(self) -> None:
        """A request the engine aborted because of an internal error is a 500 for this request."""
        if self.error is not None:
            raise generation_failed(self.error, self.request_id)

    def abort(self) -> None:
        if not self.finished:
            self.finished = True
            self.handle.abort()  # only queues a message for the engine loop; never raises

    def _account(self, ev: StreamEvent) -> None:
        out = self.outputs[ev.index]
        if ev.token_ids and self.first_token_time is None:
            self.first_token_time = time.perf_counter()
        out.text += ev.text
        out.token_ids.extend(ev.token_ids)
        if ev.logprobs and out.logprobs is not None:
            out.logprobs.extend(ev.logprobs)
        if ev.finish_reason is not None:
            out.finish_reason = ev.finish_reason
            out.matched_stop = ev.matched_stop
            if ev.error and self.error is None:
                self.error = ev.error
                log.error("engine request %s (sample %d) failed: %s", self.request_id, ev.index, ev.error)

    def _record(self) -> None:
        if self._recorded:
            return
        self._recorded = True
        end = time.perf_counter()
        ttft = None if self.first_token_time is None else self.first_token_time - self.arrival
        out_tokens = self.completion_tokens
        tpot = None
        if self.first_token_time is not None and out_tokens > self.params.n:
            tpot = (end - self.first_token_time) / (out_tokens / self.params.n - 1)
        aborted = any(o.finish_reason in (None, "abort") for o in self.outputs)
        self.metrics.observe_request(self.kind, self.prompt_tokens, out_tokens, ttft, tpot,
                                     status="error" if self.error else "aborted" if aborted else "ok",
                                     e2e=end - self.arrival)


async def _wait_for_disconnect(request: Request) -> None:
    # The body is already read, so the next ASGI message can only be the disconnect.
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def submit(engine: Engine, prompt: list[int], params: SamplingParams, constraint: Constraint | None,
                 metrics: ServerMetrics, kind: str, names: FieldNames, request_id: str | None = None
                 ) -> RunningRequest:
    """Submit on a worker thread (the engine checks the prompt against its context there); an
    error it raises is a 400 under the field name the client sent."""
    arrival = time.perf_counter()
    try:
        handle = await asyncio.to_thread(engine.submit, prompt, params, request_id, constraint)
    except Exception as exc:
        raise from_exception(exc, names) from exc
    return RunningRequest(handle, len(prompt), params, metrics, kind, arrival)


async def submit_all(engine: Engine, prompts: list[list[int]], params: list[SamplingParams],
                     constraint: Constraint | None, metrics: ServerMetrics, kind: str, names: FieldNames,
                     request_ids: list[str]) -> list[RunningRequest]:
    """Submit one engine request per prompt; if one is refused, those already running are aborted."""
    runs: list[RunningRequest] = []
    try:
        for p, sp, rid in zip(prompts, params, request_ids):
            runs.append(await submit(engine, p, sp, constraint, metrics, kind, names, rid))
    except BaseException:
        for r in runs:
            r.abort()
        raise
    return runs


async def merged_events(runs: list[RunningRequest]) -> AsyncIterator[tuple[int, StreamEvent]]:
    """Events of several requests interleaved as they arrive, tagged with the request's position.
    Stopping early aborts every request still running."""
    queue: asyncio.Queue[tuple[int, StreamEvent | None | BaseException]] = asyncio.Queue()

    async def pump(i: int, run: RunningRequest) -> None:
        try:
            async for ev in run.events():
                await queue.put((i, ev))
        except BaseException as exc:  # surface engine-side failures to the consumer
            await queue.put((i, exc))
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        await queue.put((i, None))

    tasks = [asyncio.ensure_future(pump(i, r)) for i, r in enumerate(runs)]
    remaining = len(runs)
    try:
        while remaining:
            i, item = await queue.get()
            if item is None:
                remaining -= 1
            elif isinstance(item, BaseException):
                remaining -= 1
                if not isinstance(item, asyncio.CancelledError):
                    raise item
            else:
                yield i, item
    finally:
        for t in tasks:
            t.cancel()
        for r in runs:
            r.abort()
