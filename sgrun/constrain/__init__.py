"""Constraints -> token-level automata over a model's vocabulary: regex, JSON Schema, grammars
(Lark / GBNF), choices; packed token bitmasks; jump-forward; the compiled-constraint cache.

May import: sgrun.errors, sgrun.child_process (its compile worker), sgrun.kernels.cpu (the build helper of
its C++ lazy DFA). Never the engine or above:
the engine sees a constraint only through sequence.py's TokenMatcher / CompiledConstraint."""

from sgrun.constrain.bitmask import allocate_bitmask, apply_bitmask, num_words, unpack_bitmask
from sgrun.constrain.cache import GLOBAL_CACHE, ConstraintCache
from sgrun.constrain.compile import compile_constraint
from sgrun.constrain.constraint import Constraint, Matcher
from sgrun.constrain.errors import (ConstraintTooComplexError, EmptyConstraintError, GrammarError, InvalidSchemaError, RegexError,
                                    UnsupportedSchemaError)

__all__ = [
    "compile_constraint", "Constraint", "Matcher", "apply_bitmask", "allocate_bitmask", "num_words",
    "unpack_bitmask", "ConstraintCache", "GLOBAL_CACHE", "UnsupportedSchemaError", "InvalidSchemaError",
    "RegexError", "GrammarError", "ConstraintTooComplexError", "EmptyConstraintError",
]
