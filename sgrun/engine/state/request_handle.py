"""RequestHandle: the caller's side of a submitted request.

The engine thread pushes StreamEvents; callers consume them blocking (`for ev in handle`) or
from asyncio (`async for ev in handle`) through a thread-safe bridge.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from typing import TYPE_CHECKING, AsyncIterator, Callable, Iterator

from sgrun.engine.state.outputs import CompletionOutput, RequestOutput, StreamEvent

if TYPE_CHECKING:
    from sgrun.engine.state.sequence import Sequence


class RequestHandle:
    def __init__(self, abort_fn: Callable[[str], None], request_id: str, prompt_ids: list[int], n: int):
        self.request_id = request_id
        self.prompt_ids = prompt_ids
        self.n = n
        self._abort_fn = abort_fn
        self._queue: queue.SimpleQueue[StreamEvent] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._aqueue: asyncio.Queue[StreamEvent] | None = None
        self._finished = 0
        self._consumed = False
        self.seqs: list[Sequence] = []
        self.finish_time: float | None = None   # when the last sample's final event was pushed
        self._final_pushed = 0

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens served from the radix cache (known once the request is admitted)."""
        return self.seqs[0].cached_tokens if self.seqs else 0

    @property
    def finished(self) -> bool:
        """True once the caller has consumed the final event of every sample."""
        return self._finished >= self.n

    # Engine thread side.
    def push(self, ev: StreamEvent) -> None:
        if ev.finish_reason is not None:
            self._final_pushed += 1
            if self._final_pushed >= self.n:   # stamped before the caller can see the event
                self.finish_time = time.monotonic()
        with self._lock:
            if self._aqueue is not None:
                self._loop.call_soon_threadsafe(self._aqueue.put_nowait, ev)
            else:
                self._queue.put(ev)

    # Caller side.
    def __iter__(self) -> Iterator[StreamEvent]:
        while self._finished < self.n:
            ev = self._queue.get()
            if ev.finish_reason is not None:
                self._finished += 1
            yield ev

    async def _aiter(self) -> AsyncIterator[StreamEvent]:
        with self._lock:
            if self._aqueue is None:
                self._loop = asyncio.get_running_loop()
                self._aqueue = asyncio.Queue()
                while not self._queue.empty():
                    self._aqueue.put_nowait(self._queue.get())
        while self._finished < self.n:
            ev = await self._aqueue.get()
            if ev.finish_reason is not None:
                self._finished += 1
            yield ev

    def __aiter__(self) -> AsyncIterator[StreamEvent]:
        return self._aiter()

    def abort(self) -> None:
        self._abort_fn(self.request_id)

    def result(self, timeout: float | None = None) -> RequestOutput:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._finished < self.n:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                ev = self._queue.get(timeout=left)
            except queue.Empty:
                raise TimeoutError(f"request {self.request_id} did not finish in {timeout} s") from None
            if ev.finish_reason is not None:
                self._finished += 1
        return self.build_output()

    async def aresult(self) -> RequestOutput:
        async for _ in self:
            pass
        return self.build_output()

    def build_output(self) -> RequestOutput:
        """Assemble the final output; valid once every sample has finished."""
        outs, errors = [], [s.output.error for s in self.seqs if s.output.error]
        for s in self.seqs:
            outs.append(CompletionOutput(index=s.index, text=s.detok.text if s.detok else "",
                                         token_ids=list(s.output_ids), finish_reason=s.output.finish_reason,
                                         logprobs=list(s.output.logprobs) if s.params.logprobs is not None else None,
                                         matched_stop=s.output.matched_stop))
        firsts = [s.output.first_token_time for s in self.seqs if s.output.first_token_time is not None]
        return RequestOutput(
            request_id=self.request_id, prompt_token_ids=self.prompt_ids, outputs=outs,
            prompt_tokens=len(self.prompt_ids), cached_tokens=self.seqs[0].cached_tokens,
            completion_tokens=sum(s.num_output for s in self.seqs),
            arrival_time=min(s.arrival_time for s in self.seqs),
            first_token_time=min(firsts) if firsts else None, finish_time=self.finish_time,
            error=errors[0] if errors else None)
