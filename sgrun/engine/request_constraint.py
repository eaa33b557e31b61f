"""The one entry point that compiles a request's constraint: `Engine.submit` (from
SamplingParams) and the server's handlers (constraint_compile.py, from the request's field)
both call `compile_for_request`, so every request's constraint is built the same way: in a
worker process (a hostile compile never holds the engine loop's GIL) and always under the
compile budget (past it, a ConstraintTooComplexError says the constraint is too complex).
The web page's `/ui/constraint` check compiles through it too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sgrun.constrain.compile_budget import DEFAULT_COMPILE_BUDGET_S
from sgrun.engine.sampling_params import SamplingParams

if TYPE_CHECKING:
    from sgrun.constrain import Constraint
    from sgrun.models.tokenizer import Tokenizer

CONSTRAINT_KINDS = ("json_schema", "regex", "grammar", "choices", "triggers", "tool_calls", "structural_tag")


def constraint_of(params: SamplingParams) -> dict[str, Any]:
    """The constraint SamplingParams ask for, as compile_for_request's keywords."""
    kinds = {k: getattr(params, k) for k in CONSTRAINT_KINDS if getattr(params, k) is not None}
    return {**kinds, "reasoning": params.reasoning}


def compile_for_request(tokenizer: Tokenizer, *, budget_s: float = DEFAULT_COMPILE_BUDGET_S,
                        reasoning: tuple[str, str] | None = None, **kind: Any) -> Constraint:
    """Compile one constraint kind (`json_schema=`, `regex=`, `grammar=`, `choices=`,
    `triggers=`, `structural_tag=` or `tool_calls=`: a ToolCallConstraint or its dict form) for one request."""
    from sgrun.constrain import compile_constraint
    if budget_s is None or not budget_s > 0:
        raise ValueError(f"a request's constraint compiles under a positive time budget, got {budget_s!r}")
    calls = kind.get("tool_calls")
    if isinstance(calls, dict):
        from sgrun.constrain.tool_calls import ToolCallConstraint
        kind["tool_calls"] = ToolCallConstraint.from_dict(calls)
    return compile_constraint(tokenizer, reasoning=reasoning, isolate=True, budget_s=budget_s, **kind)
