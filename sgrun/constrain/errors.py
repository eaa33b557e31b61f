"""Errors the constraint compiler raises; all derive from sgrun.ConstraintError."""

from __future__ import annotations

from sgrun.errors import ConstraintError


class UnsupportedSchemaError(ConstraintError):
    """A JSON Schema keyword (or keyword value) that sgrun cannot enforce exactly."""

    def __init__(self, keyword: str, pointer: str, reason: str = ""):
        self.keyword = keyword
        self.pointer = pointer or "#"
        detail = f": {reason}" if reason else ""
        super().__init__(
            f"JSON Schema keyword {keyword!r} at {self.pointer} is not supported{detail}; "
            f"remove it, or compile with lenient=True to drop unsupported keywords with a warning")


class InvalidSchemaError(ConstraintError):
    """The schema is not a valid JSON Schema (bad JSON, wrong keyword value types, bad $ref)."""


class RegexError(ConstraintError):
    """A regular expression that is malformed or uses a feature we cannot compile to an automaton."""


class GrammarError(ConstraintError):
    """A Lark or GBNF grammar that does not parse or cannot be used incrementally."""


class ConstraintTooComplexError(ConstraintError):
    """The automaton would exceed the state/time budget; simplify the constraint."""


class EmptyConstraintError(ConstraintError):
    """The constraint admits no output at all (e.g. a `false` schema or contradictory keywords)."""
