"""The starlette app: one plain handler per route (each reads the app's ServerState), request
decoding with msgspec, and the error boundary that turns every failure into an OpenAI error
object without touching the engine."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import msgspec
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from sgrun.constrain.compile_budget import DEFAULT_COMPILE_BUDGET_S
from sgrun.server import chat, completions, generate_api, loads, playground, sglang_compat
from sgrun.server.chat_prompt import render_prompt
from sgrun.server.chat_stream import chat_stream
from sgrun.server.errors import APIError, from_exception, internal_error
from sgrun.server.guards import RequestGuard, request_id_of
from sgrun.server.metrics import CONTENT_TYPE, ServerMetrics
from sgrun.server.protocol import (AbortRequest, ApplyChatTemplateRequest, ApplyChatTemplateResponse,
                                   ChatCompletionRequest, CompletionRequest, DetokenizeRequest, DetokenizeResponse,
                                   GenerateRequest, ModelCard, ModelList, ScoreRequest, TokenizeRequest,
                                   TokenizeResponse)
from sgrun.server.request_body import decode_body
from sgrun.server.request_limits import check_prompt_ids
from sgrun.server.sse import SSEResponse
from sgrun.server.state import ServerState
from sgrun.constrain.tool_calls import get_format
from sgrun.server.reasoning import reasoning_tags
from sgrun.server.tool_plan import plan_tools
from sgrun.errors import SgrunError

if TYPE_CHECKING:
    from sgrun.engine.engine import Engine

log = logging.getLogger("sgrun.server")

DEFAULT_MAX_BODY_BYTES = 8 << 20
_encode = msgspec.json.Encoder().encode
Handler = Callable[[Request], Awaitable[Response]]


def json_response(obj: Any, status: int = 200) -> Response:
    return Response(_encode(obj), status_code=status, media_type="application/json")


def server_state(request: Request) -> ServerState:
    return request.app.state.sgrun


def guarded(fn: Handler) -> Handler:
    """Every handler failure becomes an OpenAI error response; a bug is a 500 for this request
    only, never a crash of the server or the engine. Every 5xx is logged with the request id its
    message quotes; the traceback stays in the log."""
    @functools.wraps(fn)
    async def handler(request: Request) -> Response:
        metrics = server_state(request).metrics
        rid = request_id_of(request.scope)
        try:
            return await fn(request)
        except APIError as err:
            if err.status >= 500:
                log.error("%s %s %s -> %d: %s", rid, request.method, request.url.path, err.status, err.message)
            metrics.observe_error(err)
            return err.to_response(rid)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the boundary
            log.exception("%s %s %s -> 500: unhandled %s", rid, request.method, request.url.path,
                          type(exc).__name__)
            err = internal_error(f"{type(exc).__name__} while handling {request.url.path}", rid)
            metrics.observe_error(err)
            return err.to_response(rid)
    return handler


# --------------------------------------------------------------------------- OpenAI API


@guarded
async def chat_completions(request: Request) -> Response:
    state = server_state(request)
    req = await decode_body(request, ChatCompletionRequest)
    if req.stream:
        prepared, run = await chat.start_chat(state, req)
        include_usage = bool(req.stream_options and req.stream_options.include_usage)
        return SSEResponse(chat_stream(state, prepared, run, req.model, include_usage))
    return json_response(await chat.chat_completion(state, req, request))


@guarded
async def text_completions(request: Request) -> Response:
    state = server_state(request)
    req = await decode_body(request, CompletionRequest)
    if req.stream:
        prepared, runs = await completions.start_completions(state, req)
        return SSEResponse(completions.completion_stream(state, req, prepared, runs))
    return json_response(await completions.completion(state, req, request))


@guarded
async def list_models(request: Request) -> Response:
    state = server_state(request)
    return json_response(ModelList(data=[ModelCard(id=state.model_name, created=state.started,
                                                   max_model_len=state.max_context)]))


@guarded
async def get_model(request: Request) -> Response:
    state = server_state(request)
    name = request.path_params["model"]
    state.check_model(name)
    return json_response(ModelCard(id=name, created=state.started, max_model_len=state.max_context))


# --------------------------------------------------------------------------- operations


async def health(request: Request) -> Response:
    alive = server_state(request).engine.is_alive()
    return json_response({"status": "ok" if alive else "unhealthy"}, 200 if alive else 503)


async def metrics_endpoint(request: Request) -> Response:
    body = await asyncio.to_thread(server_state(request).metrics.render)
    return Response(body, media_type=CONTENT_TYPE)


async def load_report(request: Request) -> Response:
    """What smg's load-aware policies read (loads.py); open like /metrics, which says as much."""
    body = await asyncio.to_thread(loads.load_report, server_state(request), request.app.state.load_rate,
                                   request.app.state.load_kv_usage)
    return json_response(body)


@guarded
async def flush_cache(request: Request) -> Response:
    freed = await asyncio.to_thread(server_state(request).engine.flush_cache)
    return json_response({"flushed": True, "pages_freed": freed})


# --------------------------------------------------------------------------- native protocol


@guarded
async def generate(request: Request) -> Response:
    state = server_state(request)
    req = await decode_body(request, GenerateRequest)
    if req.stream:
        job = await generate_api.start_generate(state, req)
        return SSEResponse(generate_api.generate_stream(state, req, job))
    return json_response(await generate_api.generate(state, req, request))


@guarded
async def score(request: Request) -> Response:
    return json_response(await generate_api.score(server_state(request), await decode_body(request, ScoreRequest)))


@guarded
async def model_info(request: Request) -> Response:
    return json_response(generate_api.model_info(server_state(request)))


@guarded
async def server_info(request: Request) -> Response:
    return json_response(await asyncio.to_thread(sglang_compat.server_info, server_state(request)))


@guarded
async def health_generate(request: Request) -> Response:
    ok = await sglang_compat.health_generate(server_state(request))
    return json_response({"status": "ok" if ok else "unhealthy"}, 200 if ok else 503)


@guarded
async def concate_and_append(request: Request) -> Response:
    body = await decode_body(request, dict)
    src, dst = sglang_compat.check_concat_request(body)
    return json_response({"success": True, "src_rids": src, "dst_rid": dst,
                          "note": "sgrun joins forks by text: the next /generate with the joined text reuses "
                                  "the cached prefix"})


@guarded
async def tokenize(request: Request) -> Response:
    state = server_state(request)
    req = await decode_body(request, TokenizeRequest)
    ids = await asyncio.to_thread(state.tokenizer.encode, req.text, req.add_bos)
    return json_response(TokenizeResponse(input_ids=ids, count=len(ids)))


@guarded
async def detokenize(request: Request) -> Response:
    state = server_state(request)
    req = await decode_body(request, DetokenizeRequest)
    if req.input_ids:
        check_prompt_ids(req.input_ids, state.tokenizer.vocab_size, "input_ids")
    text = await asyncio.to_thread(state.tokenizer.decode, req.input_ids, req.skip_special_tokens)
    return json_response(DetokenizeResponse(text=text))


@guarded
async def apply_chat_template(request: Request) -> Response:
    state = server_state(request)
    req = await decode_body(request, ApplyChatTemplateRequest)
    plan = plan_tools(req.tools, None, None)

    def render() -> tuple[str, list[int]]:
        text = render_prompt(state.tokenizer, state.tool_format, req.messages, plan.tools, req.add_generation_prompt,
                             req.chat_template_kwargs)
        return text, state.tokenizer.encode(text, add_bos=None)
    try:
        text, ids = await asyncio.to_thread(render)
    except SgrunError as exc:  # e.g. a template that fails to render these messages
        raise from_exception(exc) from exc
    return json_response(ApplyChatTemplateResponse(text=text, input_ids=ids))


@guarded
async def abort_request(request: Request) -> Response:
    req = await decode_body(request, AbortRequest)
    server_state(request).engine.abort(req.rid)
    return json_response({"aborted": True})


async def http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
    return APIError(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}", kind).to_response()


ROUTES = [
    Route("/v1/chat/completions", chat_completions, methods=["POST"]),
    Route("/v1/completions", text_completions, methods=["POST"]),
    Route("/v1/models", list_models, methods=["GET"]),
    Route("/v1/models/{model:path}", get_model, methods=["GET"]),
    Route("/health", health, methods=["GET"]),
    Route("/metrics", metrics_endpoint, methods=["GET"]),
    Route("/v1/loads", load_report, methods=["GET"]),   # for SGLang's gateway, smg (docs/scale-out.md)
    Route("/generate", generate, methods=["POST"]),
    Route("/score", score, methods=["POST"]),
    Route("/model_info", model_info, methods=["GET"]),
    Route("/get_model_info", model_info, methods=["GET"]),
    Route("/tokenize", tokenize, methods=["POST"]),
    Route("/detokenize", detokenize, methods=["POST"]),
    Route("/apply_chat_template", apply_chat_template, methods=["POST"]),
    Route("/abort_request", abort_request, methods=["POST"]),
    Route("/flush_cache", flush_cache, methods=["POST"]),
    # What SGLang's own client calls (docs/sglang-compat.md).
    Route("/server_info", server_info, methods=["GET"]),
    Route("/get_server_info", server_info, methods=["GET"]),
    Route("/health_generate", health_generate, methods=["GET"]),
    Route("/concate_and_append_request", concate_and_append, methods=["POST"]),
    *playground.routes(guarded, server_state),   # the web page at / and its JSON endpoints
]


def build_app(engine: Engine, *, served_model_names: list[str] | None = None, api_key: str | None = None,
              max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, close_engine_on_shutdown: bool = False,
              tool_call_parser: str | None = None, reasoning_parser: str | None = None,
              constraint_budget_s: float = DEFAULT_COMPILE_BUDGET_S, strict_budget: bool = False,
              load_kv_usage: str = "held") -> RequestGuard:
    """The ASGI app serving `engine`. The first of `served_model_names` (else the model's name) is
    the id /v1/models lists; see ServerState for the names requests may use. tool_call_parser
    names the call format (default: detected from the chat template); reasoning_parser splits
    `<think>` sections into reasoning_content. constraint_budget_s bounds each constraint's compile
    time (past it the request gets a 400 saying the constraint is too complex). strict_budget
    refuses a constraint whose shortest output exceeds max_tokens for requests that do not say
    (default: such a request runs and ends with finish "length", as OpenAI's API). load_kv_usage:
    how /v1/loads reads KV usage for smg, "held" or "cache" (loads.py)."""
    if load_kv_usage not in loads.KV_USAGE_READINGS:
        raise ValueError(f"load_kv_usage must be one of {loads.KV_USAGE_READINGS}, got {load_kv_usage!r}")
    metrics = ServerMetrics(engine)
    state = ServerState.for_engine(engine, served_model_names, metrics,
                                   tool_format=get_format(tool_call_parser) if tool_call_parser else None,
                                   reasoning=reasoning_tags(reasoning_parser), constraint_budget_s=constraint_budget_s,
                                   strict_budget=strict_budget)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        if close_engine_on_shutdown:
            await asyncio.to_thread(engine.close)

    app = Starlette(routes=ROUTES, exception_handlers={HTTPException: http_error}, lifespan=lifespan)
    app.state.sgrun = state
    app.state.load_rate = loads.GenerationRate()
    app.state.load_kv_usage = load_kv_usage
    guarded_app = RequestGuard(app, api_key, max_body_bytes, on_error=metrics.observe_error)
    guarded_app.state = state  # type: ignore[attr-defined]  # tests reach the engine through it
    return guarded_app
