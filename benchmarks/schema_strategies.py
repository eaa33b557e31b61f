"""Hypothesis strategies for JSON Schemas and instances: scalar leaves (numbers with bounds and
multipleOf, strings with lengths / patterns / formats, enums, consts) under objects, arrays and
the applicators (anyOf / oneOf / allOf / not / if-then-else / dependent keywords). Used by the
soundness property test and by benchmarks/audit_constraints.py (labels from jsonschema)."""

from __future__ import annotations

import jsonschema
from hypothesis import strategies as st

_scalar_schemas = st.one_of(
    st.fixed_dictionaries({"type": st.sampled_from(["integer", "number"])},
                          optional={"minimum": st.integers(-50, 50), "maximum": st.integers(-50, 50),
                                    "exclusiveMinimum": st.integers(-50, 50), "multipleOf": st.sampled_from([2, 3, 5])}),
    st.fixed_dictionaries({"type": st.just("string")},
                          optional={"minLength": st.integers(0, 4), "maxLength": st.integers(0, 6),
                                    "pattern": st.sampled_from(["^a", "b$", "[0-9]", "^x*$"]),
                                    "format": st.sampled_from(["date", "email", "semver"])}),
    st.fixed_dictionaries({"enum": st.lists(st.one_of(st.integers(-3, 3), st.sampled_from(["a", "b", None, True])),
                                            min_size=1, max_size=4)}),
    st.fixed_dictionaries({"type": st.sampled_from(["boolean", "null", ["string", "null"]])}),
    st.fixed_dictionaries({"const": st.sampled_from([1, "a", None, False])}),
)


def _composite(children):
    names = st.sampled_from(["a", "b", "c"])
    return st.one_of(
        st.fixed_dictionaries({"type": st.just("object"), "properties": st.dictionaries(names, children, max_size=3)},
                              optional={"required": st.lists(names, max_size=2, unique=True),
                                        "additionalProperties": st.one_of(st.booleans(), children),
                                        "minProperties": st.integers(0, 3), "maxProperties": st.integers(0, 3),
                                        "dependentRequired": st.dictionaries(names, st.lists(names, max_size=2,
                                                                                             unique=True), max_size=2)}),
        st.fixed_dictionaries({"type": st.just("array"), "items": children},
                              optional={"minItems": st.integers(0, 2), "maxItems": st.integers(0, 3),
                                        "uniqueItems": st.booleans()}),
        st.fixed_dictionaries({"anyOf": st.lists(children, min_size=1, max_size=3)}),
        st.fixed_dictionaries({"oneOf": st.lists(children, min_size=1, max_size=3)}),
        st.fixed_dictionaries({"allOf": st.lists(children, min_size=1, max_size=3)}),
        st.fixed_dictionaries({"not": children}),
        st.fixed_dictionaries({"if": children, "then": children}, optional={"else": children}),
        # discriminator-style conditions and negations, which compile by exact rewrites
        st.fixed_dictionaries({"if": st.fixed_dictionaries({"properties": st.dictionaries(
            names, st.fixed_dictionaries({"const": st.sampled_from(["a", "b", "x1"])}), min_size=1, max_size=2)},
            optional={"required": st.lists(names, max_size=2, unique=True), "type": st.just("object")}),
            "then": children}, optional={"else": children}),
        st.fixed_dictionaries({"not": st.one_of(
            st.fixed_dictionaries({"required": st.lists(names, min_size=1, max_size=2, unique=True)}),
            st.fixed_dictionaries({"anyOf": st.lists(st.fixed_dictionaries(
                {"required": st.lists(names, min_size=1, max_size=2, unique=True)}), min_size=1, max_size=2)}))},
            optional={"type": st.just("object"), "properties": st.dictionaries(names, children, max_size=2)}),
        st.fixed_dictionaries({"type": st.just("object"), "properties": st.dictionaries(names, children, max_size=3),
                               "dependentSchemas": st.dictionaries(names, children, min_size=1, max_size=2)}),
    )


SCHEMAS = st.recursive(_scalar_schemas, _composite, max_leaves=6)
VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-60, 60), st.sampled_from([0.5, -2.5, 10.0]),
              st.sampled_from(["", "a", "ab", "b", "x1", "2024-02-29", "a@b.co", "xx", "abcdefg", "1.2.3"])),
    lambda kids: st.one_of(st.lists(kids, max_size=3), st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), kids,
                                                                       max_size=3)),
    max_leaves=6)


def validator(schema):
    # sgrun enforces the formats it knows (format-assertion); jsonschema checks those too.
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
