"""The one entry point that compiles a request's constraint: `Engine.submit` (from
SamplingParams) and the server's handlers (constraint_compile.py, from the request's field)
both call `compile_for_request`, so every request's constraint is built the same way: in a
worker process (a hostile compile never holds the engine loop's GIL) and always under the
compile budget (past it, a ConstraintTooComplexError says the constraint is too complex).
The web page's `/ui/constraint` check compiles through it too. `warm_constraint_index` builds
the compiler's per-tokenizer tables at engine start, off the request path.
"""

from __future__ import annotations

import logging
import traceback
from typing import TYPE_CHECKING, Any

from sgrun.constrain.compile_budget import DEFAULT_COMPILE_BUDGET_S
from sgrun.engine.state.sampling_params import SamplingParams

if TYPE_CHECKING:
    from sgrun.constrain import Constraint
    from sgrun.models.tokenizer import Tokenizer

log = logging.getLogger("sgrun.engine")

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


def warm_constraint_index(tokenizer: Tokenizer) -> None:
    """Build the constraint compiler's per-tokenizer tables now (~1 s), so the first constrained
    request does not pay for them: the vocabulary index, the token spellings the output budget
    reads (0.4 s), and the C++ mask walk's trie (0.2 s) where it runs. Only a warm-up: a failure
    is logged, and compile reports real errors later."""
    try:
        from sgrun.constrain.token_spelling import vocab_spelling
        from sgrun.constrain.token_table import token_table
        from sgrun.constrain.vocab_index import vocab_index
        table = token_table(tokenizer)
        vocab_index(table)
        vocab_spelling(table)
        from sgrun.constrain.native_dfa import native_enabled, native_trie
        if native_enabled():
            native_trie(table)
    except Exception:  # noqa: BLE001 - only a warm-up
        log.debug("vocabulary index warm-up failed:\n%s", traceback.format_exc())
