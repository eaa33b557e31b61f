"""The router in front of data-parallel replicas: one OpenAI-compatible endpoint that forwards
each request to the `sgrun serve` replica most likely to hold its prefix in cache.

It is a thin HTTP proxy (starlette + httpx): bodies pass through untouched, streams are relayed
chunk by chunk, and a client that disconnects has its upstream connection closed, which the
replica sees as a disconnect and answers by aborting the request and freeing its pages.
Replicas are health-checked in the background; one that fails is taken out of rotation (and put
back when /health answers again), and requests in flight on it fail with a clear 503.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from sgrun.server.replica_metrics import render_merged_metrics
from sgrun.server.routing_policy import Replica, RoutingPolicy

log = logging.getLogger("sgrun.router")
logging.getLogger("httpx").setLevel(logging.WARNING)   # one line per proxied request and health probe is noise

# POST endpoints whose prompt decides the replica; every other POST goes to the least loaded.
ROUTED_PATHS = {"/v1/chat/completions", "/v1/completions", "/generate", "/score"}
BROADCAST_PATHS = {"/flush_cache", "/abort_request"}
_FORWARDED_HEADERS = ("authorization", "content-type", "x-request-id", "accept")


class RouterError(Exception):
    def __init__(self, status: int, message: str, code: str):
        super().__init__(message)
        self.status, self.message, self.code = status, message, code

    def to_response(self) -> Response:
        body = {"error": {"message": self.message, "type": "server_error" if self.status >= 500 else
                          "invalid_request_error", "param": None, "code": self.code}}
        return Response(msgspec.json.encode(body), status_code=self.status, media_type="application/json")


def prompt_key(path: str, body: Any) -> str:
    """The text the routing decision is keyed on: what the replica's cache will be keyed on,
    approximately (tools and messages in order, or the raw prompt)."""
    if not isinstance(body, dict):
        return ""
    if path == "/v1/chat/completions":
        parts = []
        if body.get("tools"):
            parts.append(msgspec.json.encode(body["tools"]).decode())
        for m in body.get("messages") or []:
            if not isinstance(m, dict):
                continue
            content = m.get("content")
            if isinstance(content, list):
                content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
            parts.append(f"<{m.get('role')}>{content or ''}")
            if m.get("tool_calls"):
                parts.append(msgspec.json.encode(m["tool_calls"]).decode())
        return "".join(parts)
    prompt = body.get("prompt") if path == "/v1/completions" else body.get("text", body.get("input_ids"))
    if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int):
        prompt = prompt[0]                     # a batch: route on its first prompt
    if isinstance(prompt, list):
        return " ".join(str(t) for t in prompt)
    return prompt if isinstance(prompt, str) else ""


class Router:
    def __init__(self, worker_urls: list[str], policy: str = "cache_aware", health_interval: float = 2.0,
                 max_body_bytes: int = 8 << 20, request_timeout: float | None = None):
        if not worker_urls:
            raise ValueError("the router needs at least one --worker URL")
        self.replicas = [Replica(url=u.rstrip("/").removesuffix("/v1"), index=i) for i, u in enumerate(worker_urls)]
        self.policy = RoutingPolicy(policy)
        self.health_interval = health_interval
        self.max_body_bytes = max_body_bytes
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(request_timeout, connect=5.0),
                                        limits=httpx.Limits(max_connections=None, max_keepalive_connections=64))
        self._health_task: asyncio.Task | None = None

    # --- lifecycle --------------------------------------------------------------------------
    async def start(self) -> None:
        await self.check_health()
        self._health_task = asyncio.create_task(self._health_loop())

    async def stop(self) -> None:
        if self._health_task:
            self._health_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._health_task
        await self.client.aclose()

    async def _health_loop(self) -> None:
        while True:
            await asyncio.sleep(self.health_interval)
            await self.check_health()

    async def check_health(self) -> None:
        async def probe(r: Replica) -> None:
            try:
                resp = await self.client.get(f"{r.url}/health", timeout=2.0)
                ok = resp.status_code == 200
            except httpx.HTTPError as exc:
                ok, r.last_error = False, f"{type(exc).__name__}: {exc}"
            if ok != r.healthy:
                log.warning("replica %d (%s) is now %s", r.index, r.url, "healthy" if ok else "out of rotation")
            r.healthy = ok
        await asyncio.gather(*(probe(r) for r in self.replicas))

    def _mark_failed(self, r: Replica, exc: Exception) -> None:
        r.healthy, r.last_error = False, f"{type(exc).__name__}: {exc}"
        log.error("replica %d (%s) failed: %s; taken out of rotation", r.index, r.url, r.last_error)

    # --- forwarding -------------------------------------------------------------------------
    async def read_body(self, request: Request) -> bytes:
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > self.max_body_bytes:
            raise RouterError(413, f"request body is over {self.max_body_bytes} bytes; send a smaller one",
                              "request_too_large")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > self.max_body_bytes:
                raise RouterError(413, f"request body is over {self.max_body_bytes} bytes; send a smaller one",
                                  "request_too_large")
            chunks.append(chunk)
        return b"".join(chunks)

    def pick(self, path: str, parsed: Any) -> Replica:
        key = prompt_key(path, parsed) if path in ROUTED_PATHS else ""
        policy = self.policy if path in ROUTED_PATHS else RoutingPolicy("least_load")
        chosen = policy.choose(self.replicas, key)
        if chosen is None:
            raise RouterError(503, "no replica is healthy; check the workers' logs and /health", "no_replica")
        return chosen

    async def forward(self, request: Request) -> Response:
        path = request.url.path
        body = await self.read_body(request) if request.method == "POST" else b""
        headers = {k: v for k, v in request.headers.items() if k.lower() in _FORWARDED_HEADERS}
        if path in BROADCAST_PATHS:
            return await self._broadcast(request, path, body, headers)
        parsed = _decode(body) if body else None   # once: for the routing key and for stream detection
        streaming = isinstance(parsed, dict) and parsed.get("stream") is True
        for _ in range(len(self.replicas)):
            replica = self.pick(path, parsed)
            upstream = self.client.build_request(request.method, f"{replica.url}{path}", params=request.query_params,
                                                 content=body, headers=headers)
            replica.in_flight += 1
            replica.routed += 1
            try:
                resp = await _until_disconnect(request, self.client.send(upstream, stream=True))
            except httpx.ConnectError as exc:  # never reached the replica: safe to try another one
                replica.in_flight -= 1
                self._mark_failed(replica, exc)
                continue
            except httpx.HTTPError as exc:
                replica.in_flight -= 1
                self._mark_failed(replica, exc)
                raise RouterError(503, f"replica {replica.index} failed before answering ({type(exc).__name__}); "
                                       "the request was not completed, retry it", "replica_failed") from exc
            except BaseException:
                replica.in_flight -= 1
                raise
            if streaming and resp.status_code == 200:
                return RelayedStream(self, replica, resp)
            try:
                content = await _until_disconnect(request, resp.aread())
            except httpx.HTTPError as exc:
                self._mark_failed(replica, exc)
                raise RouterError(503, f"replica {replica.index} failed mid-answer ({type(exc).__name__}); "
                                       "the request was not completed, retry it", "replica_failed") from exc
            finally:
                replica.in_flight -= 1
                await resp.aclose()
            return Response(content, status_code=resp.status_code,
                            media_type=resp.headers.get("content-type", "application/json"))
        raise RouterError(503, "no replica is reachable; check the workers' logs and /health", "no_replica")

    async def _broadcast(self, request: Request, path: str, body: bytes, headers: dict[str, str]) -> Response:
        live = [r for r in self.replicas if r.healthy]
        if not live:
            raise RouterError(503, "no replica is healthy", "no_replica")
        results = await asyncio.gather(*(self.client.post(f"{r.url}{path}", content=body, headers=headers)
                                         for r in live), return_exceptions=True)
        for r, res in zip(live, results):
            if isinstance(res, Exception):
                self._mark_failed(r, res)
        answers = [res for res in results if isinstance(res, httpx.Response)]
        if not answers:
            raise RouterError(503, "no replica answered", "no_replica")
        best = min(answers, key=lambda a: a.status_code)    # one success is success
        return Response(best.content, status_code=best.status_code,
                        media_type=best.headers.get("content-type", "application/json"))

    # --- router's own endpoints -------------------------------------------------------------
    def health_body(self) -> tuple[int, dict[str, Any]]:
        rows = [{"url": r.url, "healthy": r.healthy, "in_flight": r.in_flight, "routed": r.routed,
                 **({"last_error": r.last_error} if not r.healthy and r.last_error else {})} for r in self.replicas]
        ok = any(r.healthy for r in self.replicas)
        return (200 if ok else 503), {"status": "ok" if ok else "unavailable", "replicas": rows}

    async def metrics_text(self) -> bytes:
        async def scrape(r: Replica) -> str:
            if not r.healthy:
                return ""
            try:
                resp = await self.client.get(f"{r.url}/metrics", timeout=5.0)
                return resp.text if resp.status_code == 200 else ""
            except httpx.HTTPError:
                return ""
        texts = await asyncio.gather(*(scrape(r) for r in self.replicas))
        return render_merged_metrics(self.replicas, list(texts))


class RelayedStream(StreamingResponse):
    """Relays a replica's SSE stream; when the client goes away (or the stream ends) the upstream
    response is closed at once, so the replica aborts a request nobody reads any more."""

    def __init__(self, router: Router, replica: Replica, upstream: httpx.Response):
        self.router, self.replica, self.upstream = router, replica, upstream
        super().__init__(self._chunks(), status_code=upstream.status_code,
                         media_type=upstream.headers.get("content-type", "text/event-stream"))

    async def _chunks(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self.upstream.aiter_raw():
                yield chunk
        except httpx.HTTPError as exc:
            self.router._mark_failed(self.replica, exc)
            err = {"error": {"message": f"replica {self.replica.index} failed mid-stream ({type(exc).__name__}); "
                                        "the answer is incomplete, retry the request",
                             "type": "server_error", "param": None, "code": "replica_failed"}}
            yield b"data: " + msgspec.json.encode(err) + b"\n\ndata: [DONE]\n\n"

    async def __call__(self, scope, receive, send) -> None:  # type: ignore[override]
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.replica.in_flight -= 1
            await self.upstream.aclose()


def _decode(body: bytes) -> Any:
    try:
        return msgspec.json.decode(body)
    except Exception:  # noqa: BLE001 - a malformed body still goes to a replica, which answers 400
        return None


async def _until_disconnect(request: Request, work: Awaitable[Any]) -> Any:
    """Await `work`, cancelling it if the HTTP client disconnects first (closing the upstream
    connection, which makes the replica abort the request)."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(request))
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            return task.result()
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        raise RouterError(499, "client closed the request", "client_disconnected")
    finally:
        watcher.cancel()


async def _disconnected(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


def build_router_app(worker_urls: list[str], policy: str = "cache_aware", **kwargs: Any) -> Starlette:
    router = Router(worker_urls, policy=policy, **kwargs)

    def guarded(fn: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        async def handler(request: Request) -> Response:
            try:
                return await fn(request)
            except RouterError as err:
                return err.to_response()
        return handler

    async def health(request: Request) -> Response:
        status, body = router.health_body()
        return Response(msgspec.json.encode(body), status_code=status, media_type="application/json")

    async def metrics(request: Request) -> Response:
        return Response(await router.metrics_text(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await router.start()
        try:
            yield
        finally:
            await router.stop()

    app = Starlette(routes=[
        Route("/health", health, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/{path:path}", guarded(router.forward), methods=["GET", "POST"]),
    ], lifespan=lifespan)
    app.state.router = router
    return app
