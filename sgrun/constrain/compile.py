"""compile_constraint: the one entry point from a user's constraint spec to a cached Constraint."""

from __future__ import annotations

import json
from typing import Any

from sgrun.constrain.automaton_constraint import AutomatonConstraint
from sgrun.constrain.byte_nfa import ByteNFA
from sgrun.constrain.cache import GLOBAL_CACHE
from sgrun.constrain.compile_budget import DEFAULT_COMPILE_BUDGET_S, compile_budget
from sgrun.constrain.constraint import Constraint
from sgrun.constrain.errors import ConstraintTooComplexError, EmptyConstraintError, InvalidSchemaError
from sgrun.constrain.schema_checks import MAX_DOCUMENT_DEPTH, check_document_depth
from sgrun.constrain.native_dfa import make_lazy_dfa, native_enabled, native_trie
from sgrun.constrain.region_memo import region_memo
from sgrun.constrain.token_table import token_table
from sgrun.errors import ConstraintError


def compile_constraint(tokenizer, *, json_schema: Any = None, regex: str | None = None, grammar: str | None = None,
                       choices: list[str] | None = None, triggers: list[dict] | None = None,
                       tool_calls: Any = None, reasoning: tuple[str, str] | None = None, structural_tag: Any = None,
                       whitespace: str = "compact", lenient: bool = False, key_order: str = "schema",
                       use_cache: bool = True, warm_up: bool = True,
                       budget_s: float | None = DEFAULT_COMPILE_BUDGET_S, isolate: bool = False) -> Constraint:
    """Compile exactly one of json_schema / regex / grammar / choices over the tokenizer's vocabulary.

    json_schema: dict, JSON text, or True (any JSON value; `{}` means the same, as in JSON Schema).
    regex: the whole output must fullmatch it. grammar: Lark text, a shipped grammar name
    (e.g. "json"), or GBNF text (detected by `::=`). choices: list of exact strings.
    whitespace: "compact" (no insignificant whitespace in JSON), "spaced" (compact, or one space
    after `,` and `:`: Python json.dumps' default ", " / ": ", which models are trained on), "flexible" (any
    JSON whitespace, llguidance's default), or a regex string used at each such place.
    lenient: loosen JSON Schema keywords sgrun cannot enforce exactly (drop them, or enforce a
    weaker form such as oneOf as anyOf) instead of refusing; each one is named in the result's
    `warnings` (and a Python warning). Unknown `format`s are annotations either way (a warning).
    key_order: "schema" (objects follow `properties` order, merged parts where declared) or
    "required-first" (required keys first, each group in schema order).
    budget_s: compile time budget, enforced inside the compiler; past it a
    ConstraintTooComplexError (CompileBudgetExceeded) says the constraint is too complex. None: no limit.
    isolate: build the automaton of a JSON Schema / regex / choices in a worker process
    (compile_worker), so a hostile compile never holds this process's GIL (a server's engine
    loop shares it); the result is the same constraint.
    warm_up: precompute masks of the states a request meets first (bounded; see AutomatonConstraint.warm_up).
    triggers: free text until one of the triggers appears, then that trigger's constraint (see
    triggered.py): a list of {"trigger": str, <one of json_schema / regex / choices>: ...}.
    tool_calls: a tool_calls.ToolCallConstraint (calls in a model's format, held to the tools).
    structural_tag: free text with triggered constrained segments, SGLang's / xgrammar's shape
    (structural_tag.py): {"structures": [{begin, schema, end}], "triggers": [...]} or {"format": {...}}.
    reasoning: (open, close), e.g. ("<think>", "</think>"): the output may start with a reasoning
    section (`open`, free text up to `close`); the constraint holds from there on. ("", close):
    the prompt already opened the section, so the output must close it first.
    """
    given = [k for k, v in (("json_schema", json_schema), ("regex", regex), ("grammar", grammar),
                            ("choices", choices), ("triggers", triggers), ("tool_calls", tool_calls),
                            ("structural_tag", structural_tag)) if v is not None]
    if len(given) != 1:
        raise ConstraintError(f"give exactly one of json_schema, regex, grammar, choices, triggers, tool_calls, structural_tag "
                              f"(got {given or 'none'})")
    kind = given[0]
    if reasoning is not None and kind == "grammar":
        raise ConstraintError("a reasoning section cannot precede a grammar constraint; use a JSON Schema or regex")
    if kind == "json_schema":
        schema = _load_schema(json_schema)
        spec = json.dumps(schema, sort_keys=False, separators=(",", ":"))
        options: tuple = (whitespace, lenient, key_order)
    elif kind == "regex":
        if not isinstance(regex, str):
            raise ConstraintError("regex must be a string")
        spec, options = regex, ()
    elif kind == "grammar":
        if not isinstance(grammar, str):
            raise ConstraintError("grammar must be a string (Lark/GBNF text or a shipped grammar name)")
        spec, options = grammar, ()
    elif kind == "triggers":
        from sgrun.constrain.trigger_spec import canonical_triggers
        spec, options = canonical_triggers(triggers), (whitespace,)
    elif kind == "tool_calls":
        spec, options = tool_calls.spec(), ()
    elif kind == "structural_tag":
        from sgrun.constrain.structural_tag import canonical_structural_tag
        spec, options = canonical_structural_tag(structural_tag), (whitespace,)
    else:
        if not isinstance(choices, (list, tuple)) or not choices or not all(isinstance(c, str) for c in choices):
            raise ConstraintError("choices must be a non-empty list of strings")
        if any(c == "" for c in choices):
            raise ConstraintError("choices must not contain the empty string (a choice must produce some text)")
        spec, options = json.dumps(list(choices)), ()

    def build_in_budget() -> Constraint:
        table = token_table(tokenizer)  # once per tokenizer, outside the budget
        if native_enabled():
            native_trie(table)  # likewise: the C++ mask walk's trie
        else:
            region_memo(table)  # likewise: the Python walks' shared mask memo, seeded with the common lexical classes
        with compile_budget(budget_s, what=kind.replace("_", " ")):
            try:
                return build(table)
            except RecursionError:
                raise ConstraintTooComplexError(f"the {kind} nests too deeply to compile; flatten it") from None

    def build(table) -> Constraint:
        warnings: list[str] = []
        if kind == "grammar":
            from sgrun.constrain.grammar import compile_grammar
            c = compile_grammar(grammar, table)
        else:
            if kind in ("json_schema", "regex", "choices"):
                from sgrun.constrain.compile_worker import build_nfa, build_nfa_isolated
                payload = schema if kind == "json_schema" else regex if kind == "regex" else choices
                opts = {"whitespace": whitespace, "lenient": lenient, "key_order": key_order} \
                    if kind == "json_schema" else {}
                nfa, root, warnings = build_nfa_isolated(kind, payload, opts, budget_s) if isolate \
                    else build_nfa(kind, payload, opts)
            elif kind == "triggers":
                from sgrun.constrain.trigger_spec import triggers_nfa
                nfa, root = triggers_nfa(triggers, whitespace)
            elif kind == "structural_tag":
                from sgrun.constrain.structural_tag import structural_tag_nfa
                nfa, root = structural_tag_nfa(structural_tag, whitespace)
            elif kind == "tool_calls":
                from sgrun.constrain.tool_calls.call_constraint import tool_calls_node
                nfa = ByteNFA()
                root = nfa.new_fragment()
                nfa.define_fragment(root, tool_calls_node(tool_calls, nfa))
            if reasoning is not None:
                from sgrun.constrain.triggered import after_reasoning
                inner, root = root, nfa.new_fragment()
                nfa.define_fragment(root, after_reasoning(("call", inner), *reasoning))
            if reasoning is not None or kind not in ("json_schema", "regex", "choices"):  # (build_nfa trimmed those)
                if root not in nfa.trim():
                    raise EmptyConstraintError(f"the {kind.replace('_', ' ')} constraint admits no output at all")
            c = AutomatonConstraint(kind, spec, make_lazy_dfa(nfa, root), table)
        c.warnings = list(warnings)
        c.attach_tokenizer(tokenizer)
        if warm_up:
            c.warm_up()  # precompute the first masks a request needs, here rather than on the engine loop
        return c

    if not use_cache:
        return build_in_budget()
    if reasoning is not None:
        options = options + (tuple(reasoning),)
    return GLOBAL_CACHE.get_or_compile((kind, spec, options, tokenizer.fingerprint), build_in_budget,
                                       refusal_key=budget_s)


def _load_schema(json_schema: Any) -> Any:
    if json_schema is True:
        return {}
    if isinstance(json_schema, (str, bytes)):
        try:
            json_schema = json.loads(json_schema)
        except json.JSONDecodeError as e:
            raise InvalidSchemaError(f"json_schema is not valid JSON: {e}") from None
        except RecursionError:
            raise InvalidSchemaError(f"json_schema nests more than {MAX_DOCUMENT_DEPTH} objects/arrays deep "
                                     f"(the limit)") from None
    if isinstance(json_schema, (dict, bool)):
        check_document_depth(json_schema)
        return json_schema
    raise InvalidSchemaError(f"json_schema must be a dict, a JSON string or True, not {type(json_schema).__name__}")
