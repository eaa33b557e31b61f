"""The web page at `/`: static files shipped in the package (sgrun/server/static/, no build
step, nothing fetched from elsewhere) and the two small JSON endpoints only the page uses:

- GET  /ui/engine      running/waiting requests, KV pages, prefix-cache hit rate, recent TTFT and
                       TPOT, the radix tree (a snapshot taken on the engine loop thread), the
                       model's recommended sampling for the page's controls;
- POST /ui/constraint  compile a JSON Schema / regex / grammar and report the result or the
                       refusal (with the JSON Schema keyword named); with `text`, also check that
                       text with an independent validator (jsonschema, Python's re, Lark).

The page and its files are open like /health (they hold no data); the JSON endpoints need the
API key like every other endpoint.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from importlib import metadata, resources
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from sgrun.engine.parts.request_constraint import compile_for_request
from sgrun.errors import ConstraintError
from sgrun.server.errors import APIError
from sgrun.server.request_body import decode_body

STATIC_FILES = {"index.html": "text/html; charset=utf-8", "app.js": "text/javascript; charset=utf-8",
                "style.css": "text/css; charset=utf-8"}
# The snapshot waits for the engine loop to finish its current step; a page poll gives up after this.
SNAPSHOT_TIMEOUT_S = 5.0
_encode = msgspec.json.Encoder().encode


class ConstraintCheck(msgspec.Struct, forbid_unknown_fields=True):
    kind: str                       # json_schema | regex | grammar
    source: Any                     # the schema (object or bool), or the regex / grammar text
    text: str | None = None         # an output to validate


def _json(obj: Any, status: int = 200) -> Response:
    return Response(_encode(obj), status_code=status, media_type="application/json")


def _static(name: str) -> Response:
    body = resources.files("sgrun.server").joinpath("static", name).read_bytes()
    return Response(body, media_type=STATIC_FILES[name], headers={"Cache-Control": "no-cache"})


async def index(request: Request) -> Response:
    return _static("index.html")


async def static_file(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in STATIC_FILES:
        raise APIError(404, f"no static file {name!r}", "not_found_error")
    return _static(name)


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _recommended(state: Any) -> dict[str, Any]:
    cached = getattr(state, "_recommended_sampling", None)
    if cached is None:
        from sgrun.models.generation_defaults import DEFAULT, recommended_sampling
        path = getattr(state.engine, "model_path", None)
        try:
            rec = recommended_sampling(path) if path else DEFAULT
        except (OSError, ValueError):  # an unreadable file: the page still works with the default
            rec = DEFAULT
        cached = {**rec.as_params(), "source": rec.source}
        state._recommended_sampling = cached
    return cached


async def _tree(engine: Any) -> dict[str, Any] | None:
    if not hasattr(engine, "run_on_loop") or not engine.is_alive():
        return None  # e.g. a multi-replica front: no single tree to draw
    from sgrun.engine.state.radix_snapshot import describe, take_snapshot
    snap = await asyncio.wait_for(asyncio.to_thread(engine.run_on_loop, lambda: take_snapshot(engine.cache)),
                                  SNAPSHOT_TIMEOUT_S)
    return await asyncio.to_thread(describe, snap, engine.tokenizer)


async def engine_view(state: Any) -> Response:
    engine = state.engine
    stats = await asyncio.to_thread(engine.stats)
    try:
        tree = await _tree(engine)
    except asyncio.TimeoutError:
        tree = None
    recent = state.metrics.recent_latencies()
    ttfts = [t for t, _ in recent if t is not None]
    tpots = [t for _, t in recent if t is not None]
    return _json({
        "model": state.model_name, "dtype": str(getattr(engine, "dtype", "")).replace("torch.", ""),
        "device": str(getattr(engine, "device", "cpu")), "engine": stats, "radix_tree": tree,
        "recent": {"count": len(recent), "ttft_p50": _percentile(ttfts, 0.5), "ttft_p90": _percentile(ttfts, 0.9),
                   "tpot_p50": _percentile(tpots, 0.5), "tpot_p90": _percentile(tpots, 0.9),
                   "ttft_last": ttfts[-1] if ttfts else None, "tpot_last": tpots[-1] if tpots else None},
        "recommended_sampling": _recommended(state),
    })


def _validate(kind: str, source: Any, text: str, constraint: Any) -> dict[str, Any]:
    """Check `text` with a validator that shares no code with the compiler that produced it."""
    if kind == "json_schema":
        import jsonschema
        try:
            instance = json.loads(text)
        except ValueError as exc:
            return {"valid": False, "validator": "json.loads", "validation_error": str(exc)}
        errors = sorted(jsonschema.Draft202012Validator(source).iter_errors(instance), key=lambda e: list(e.path))
        return {"valid": not errors, "validator": f"jsonschema {metadata.version('jsonschema')}",
                "validation_error": errors[0].message if errors else None}
    if kind == "regex":
        try:
            ok = re.fullmatch(source, text, re.DOTALL) is not None
            return {"valid": ok, "validator": "Python re.fullmatch", "validation_error": None if ok else "no full match"}
        except re.error:
            pass  # a pattern Python's re cannot read (our dialect differs slightly): use the automaton
    elif kind == "grammar":
        import lark
        try:
            parser = lark.Lark(source, start="start")
        except (lark.exceptions.LarkError, KeyError):
            parser = None  # GBNF or a shipped grammar name: not Lark text
        if parser is not None:
            try:
                parser.parse(text)
                return {"valid": True, "validator": "Lark parser", "validation_error": None}
            except lark.exceptions.LarkError as exc:
                return {"valid": False, "validator": "Lark parser", "validation_error": str(exc).splitlines()[0]}
    ok = bool(constraint.matches(text))
    return {"valid": ok, "validator": "sgrun automaton (no independent validator for this input)",
            "validation_error": None if ok else "the automaton rejects it"}


async def constraint_check(state: Any, req: ConstraintCheck) -> Response:
    if req.kind not in ("json_schema", "regex", "grammar"):
        raise APIError(400, f"kind must be json_schema, regex or grammar; got {req.kind!r}", param="kind")
    if req.kind != "json_schema" and not isinstance(req.source, str):
        raise APIError(400, f"source must be a string for kind {req.kind}", param="source")
    started = time.perf_counter()
    try:
        # The requests' entry point: in a worker process, under the compile budget, so a hostile
        # schema typed into the page cannot hold the server.
        constraint = await asyncio.to_thread(compile_for_request, state.tokenizer, **{req.kind: req.source})
    except ConstraintError as exc:
        return _json({"ok": False, "message": str(exc), "keyword": getattr(exc, "keyword", None),
                      "pointer": getattr(exc, "pointer", None), "error_type": type(exc).__name__})
    except (RecursionError, TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:
        return _json({"ok": False, "message": f"malformed or too complex to compile ({type(exc).__name__})",
                      "keyword": None, "pointer": None, "error_type": type(exc).__name__})
    out: dict[str, Any] = {"ok": True, "compile_ms": 1e3 * (time.perf_counter() - started),
                           "detail": type(constraint).__name__}
    if req.text is not None:
        out.update(await asyncio.to_thread(_validate, req.kind, req.source, req.text, constraint))
    return _json(out)


def routes(guarded: Any, server_state: Any) -> list[Route]:
    @guarded
    async def engine_endpoint(request: Request) -> Response:
        return await engine_view(server_state(request))

    @guarded
    async def constraint_endpoint(request: Request) -> Response:
        return await constraint_check(server_state(request), await decode_body(request, ConstraintCheck))

    return [
        Route("/", index, methods=["GET"]),
        Route("/ui/static/{name}", guarded(static_file), methods=["GET"]),
        Route("/ui/engine", engine_endpoint, methods=["GET"]),
        Route("/ui/constraint", constraint_endpoint, methods=["POST"]),
    ]
