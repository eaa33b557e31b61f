"""Running one engine request from asyncio: submit on a worker thread (the engine validates
and compiles constraints in the caller's thread), stream its events, and abort it when the
client goes away or the handler stops early, so its pages are freed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request

from sgrun.engine.outputs import RequestOutput, StreamEvent, TokenLogprob
from sgrun.engine.sampling_params import SamplingParams
from sgrun.errors import ConstraintError
from sgrun.server.errors import APIError, from_exception
from sgrun.server.metrics import ServerMetrics


@dataclass
class SampleState:
    """What has been generated so far for one sample (`index`) of a request."""
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    finish_reason: str | None = None
    matched_stop: str | int | None = None
    error: str | None = None


class RunningRequest:
    """One submitted engine request, observed from asyncio."""

    def __init__(self, handle: Any, prompt_tokens: int, params: SamplingParams, metrics: ServerMetrics,
                 kind: str, arrival: float):
        self.handle = handle
        self.request_id: str = handle.request_id
        self.prompt_tokens = prompt_tokens
        self.params = params
        self.metrics = metrics
        self.kind = kind
        self.arrival = arrival
        self.first_token_time: float | None = None
        self.samples = [SampleState() for _ in range(params.n)]
        self.finished = False
        self._recorded = False

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

    async def run_to_end(self, request: Request | None = None) -> list[SampleState]:
        """Consume every event; if the HTTP client disconnects first, abort and raise."""
        async def consume() -> None:
            async for _ in self.events():
                pass

        if request is None:
            await consume()
            return self.samples
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
        return self.samples

    async def final_output(self) -> RequestOutput | None:
        """The engine's RequestOutput once every event was consumed (for cached-token counts)."""
        try:
            return await asyncio.wait_for(self.handle.aresult(), timeout=5.0)
        except Exception:  # the summary is a nicety; never fail a finished request over it
            return None

    def abort(self) -> None:
        if not self.finished:
            self.finished = True
            try:
                self.handle.abort()
            except Exception:  # already finished or engine shutting down: nothing left to free
                pass

    @property
    def completion_tokens(self) -> int:
        return sum(len(s.token_ids) for s in self.samples)

    def _account(self, ev: StreamEvent) -> None:
        s = self.samples[ev.index]
        if ev.token_ids and self.first_token_time is None:
            self.first_token_time = time.perf_counter()
        s.text += ev.text
        s.token_ids.extend(ev.token_ids)
        if ev.logprobs:
            s.logprobs.extend(ev.logprobs)
        if ev.finish_reason is not None:
            s.finish_reason = ev.finish_reason
            s.matched_stop = ev.matched_stop
            s.error = ev.error

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
        errored = any(s.error for s in self.samples)
        aborted = any(s.finish_reason == "abort" for s in self.samples) or not all(s.finish_reason for s in self.samples)
        self.metrics.observe_request(self.kind, self.prompt_tokens, out_tokens, ttft, tpot,
                                     status="error" if errored else "aborted" if aborted else "ok",
                                     e2e=end - self.arrival)


async def _wait_for_disconnect(request: Request) -> None:
    # The body is already read, so the next ASGI message can only be the disconnect.
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def submit(engine: Any, prompt: list[int], params: SamplingParams, metrics: ServerMetrics, kind: str,
                 request_id: str | None = None, param_names: dict[str, str] | None = None,
                 param_prefix: str = "", constraint_param: str | None = None) -> RunningRequest:
    """Submit on a worker thread; validation and constraint errors become 400s."""
    arrival = time.perf_counter()
    started = time.perf_counter()
    try:
        handle = await asyncio.to_thread(engine.submit, prompt, params, request_id)
    except Exception as exc:
        err = from_exception(exc, param_prefix, param_names)
        if isinstance(exc, ConstraintError) and err.param is None:
            err.param = constraint_param
        raise err from exc
    if params.has_constraint:
        metrics.observe_constraint_submit(time.perf_counter() - started)
    return RunningRequest(handle, len(prompt), params, metrics, kind, arrival)


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
