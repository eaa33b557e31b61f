"""A request's constraint, compiled by the handler itself before it submits: the spec names the
client field it came from, so a compile error is a 400 under that field; compile time and
refusals go to the metrics. Compiling runs on a worker thread, never on the event loop."""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sgrun.constrain import Constraint
from sgrun.constrain.compile_budget import DEFAULT_COMPILE_BUDGET_S
from sgrun.constrain.tool_calls import ToolSchemaError
from sgrun.engine.parts.request_constraint import compile_for_request
from sgrun.errors import ConstraintError
from sgrun.server.errors import APIError
from sgrun.server.metrics import ServerMetrics
from sgrun.server.state import ServerState
from sgrun.server.tool_format import tool_error

if TYPE_CHECKING:
    from sgrun.models.tokenizer import Tokenizer

log = logging.getLogger("sgrun.server")
_KIND_NAMES = {"json_schema": "JSON Schema", "regex": "regex", "grammar": "grammar", "choices": "choices list",
               "triggers": "triggers list", "tool_calls": "tools list",
               "structural_tag": "structural tag"}


@dataclass(frozen=True)
class ConstraintSpec:
    kind: str        # "json_schema" | "regex" | "grammar" | "choices" | "triggers" | "tool_calls"
    value: Any       # (compile_constraint's keyword and its value)
    param: str       # the request field a compile error points at
    reasoning: tuple[str, str] | None = None   # the constraint starts after this reasoning section
    tool_indices: tuple[int, ...] = ()         # tool_calls: each tool's position in the request's `tools`


def compile_spec(tokenizer: Tokenizer, spec: ConstraintSpec, metrics: ServerMetrics,
                 budget_s: float = DEFAULT_COMPILE_BUDGET_S) -> Constraint:
    started = time.perf_counter()
    try:
        # isolate: the automaton is built in a worker process, so a hostile compile cannot starve
        # the engine loop of the GIL (docs/benchmarks-constrain.md, "Compiles off the engine's thread").
        constraint = compile_for_request(tokenizer, reasoning=spec.reasoning, budget_s=budget_s,
                                         **{spec.kind: spec.value})
    except ConstraintError as exc:
        metrics.observe_constraint_refusal(spec.kind)
        if isinstance(exc, ToolSchemaError):  # names the tool, the keyword and its pointer
            raise tool_error(exc, spec.tool_indices) from exc
        raise APIError(400, f"{spec.param}: {exc}", param=spec.param, code="constraint_error") from exc
    except (RecursionError, TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:
        # The compiler choked on this input instead of refusing it: still the input's 400 (it
        # is malformed or beyond what we compile), and the traceback goes to the log to be fixed.
        metrics.observe_constraint_refusal(spec.kind)
        log.warning("compiling %s (%s) raised %s instead of a ConstraintError", spec.param, spec.kind,
                    type(exc).__name__, exc_info=True)
        raise APIError(400, f"{spec.param}: this {_KIND_NAMES[spec.kind]} is malformed or too complex to compile "
                            f"({type(exc).__name__}); check it against its specification and simplify it",
                       param=spec.param, code="constraint_error") from exc
    finally:
        metrics.observe_constraint_compile(time.perf_counter() - started)
    return constraint


def structural_tag_of(rf: Any) -> dict[str, Any]:
    """response_format {"type": "structural_tag", ...} -> compile_constraint's structural_tag
    (its shape is checked there: a bad one is a 400 under response_format)."""
    return {k: v for k, v in (("format", rf.format), ("structures", rf.structures), ("triggers", rf.triggers))
            if v is not None}


# Compiles get their own threads: a burst of slow constraints then queues here instead of
# taking every thread of asyncio's default pool, which tokenising and submitting need.
COMPILE_THREADS = 4
_EXECUTOR = ThreadPoolExecutor(max_workers=COMPILE_THREADS, thread_name_prefix="sgrun-compile")


async def compile_request_constraint(state: ServerState, spec: ConstraintSpec | None) -> Constraint | None:
    """Compile `spec` within the server's compile budget (`sgrun serve --constraint-budget`)."""
    if spec is None:
        return None
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_EXECUTOR, compile_spec, state.tokenizer, spec, state.metrics,
                                      state.constraint_budget_s)
