"""Building lark's LALR parser for a grammar, within the compile budget.

lark's table construction is pure Python, superlinear in the grammar (measured: 400 rules ~3 s,
2,000 rules ~170 s on the loaded 2-core machine) and has no check points we could tick, so
grammars with more than IN_PROCESS_RULES rules are built in a child Python process (importing
only lark) that is killed when the remaining budget runs out; the parser comes back through
lark's own save/load (0.1 s for 400 rules). That also keeps the big builds off this process's
GIL, which the engine loop shares. Small grammars (the shipped ones, typical user grammars)
build in process: a child process costs ~0.3 s to start.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
import time

from sgrun.constrain.byte_dfa import ByteDFA, dfa_from_node
from sgrun.constrain.compile_budget import CompileBudgetExceeded, current_budget
from sgrun.constrain.errors import GrammarError, RegexError
from sgrun.constrain.regex_parser import parse_regex

IN_PROCESS_RULES = 120
_RULE_LINE = re.compile(r"^\s*[?!]?[a-z_][a-z_0-9]*(\.-?\d+)?\s*:", re.MULTILINE)
_CHILD = r"""
import io, sys
from lark import Lark
text = sys.stdin.buffer.read().decode("utf-8")
start = sys.argv[1]
try:
    parser = Lark(text, parser="lalr", lexer="contextual", start=start, strict=True)
except Exception as e:
    sys.stdout.buffer.write(b"E" + f"{type(e).__name__}: {e}".encode("utf-8", "replace"))
    sys.exit(0)
out = io.BytesIO()
parser.save(out)
sys.stdout.buffer.write(b"O" + out.getvalue())
"""


class LalrConflict(GrammarError):
    """The grammar is valid Lark but not LALR(1) (a shift/reduce or reduce/reduce conflict);
    the caller falls back to the Earley path. The message names the rules in conflict."""


_CONFLICT = re.compile(r"Shift/Reduce conflict|Reduce/Reduce collision", re.IGNORECASE)


def count_rules(text: str) -> int:
    return len(_RULE_LINE.findall(text))


def build_lark(text: str, start: str = "start"):
    """lark.Lark(text, parser="lalr", lexer="contextual", strict=True), or LalrConflict (not LALR(1):
    strict, because lark otherwise resolves shift/reduce conflicts as shift, which silently drops
    sentences), GrammarError, CompileBudgetExceeded."""
    from lark import Lark
    if count_rules(text) <= IN_PROCESS_RULES:
        return _in_process(text, start)
    budget = current_budget()
    remaining = None if budget is None else max(0.05, budget.deadline - time.perf_counter())
    try:
        done = subprocess.run([sys.executable, "-I", "-c", _CHILD, start], input=text.encode("utf-8"),
                              capture_output=True, timeout=remaining)
    except subprocess.TimeoutExpired:
        assert budget is not None  # no timeout without a budget
        raise CompileBudgetExceeded(
            f"the grammar is too complex: building its LALR parser ({count_rules(text)} rules) took more than "
            f"the {budget.seconds:g} s budget; use fewer rules (or raise the compile budget)") from None
    out = done.stdout
    if done.returncode != 0 or not out:
        raise GrammarError(f"grammar does not compile: the parser build failed ({done.stderr.decode()[-200:]})")
    if out[:1] == b"E":
        message = out[1:].decode("utf-8", "replace")
        if _CONFLICT.search(message):
            raise LalrConflict(message)
        raise GrammarError(f"grammar does not compile: {message}")
    return Lark.load(io.BytesIO(out[1:]))


def _in_process(text: str, start: str):
    from lark import Lark
    from lark.exceptions import GrammarError as LarkGrammarError
    from lark.exceptions import LarkError
    try:
        return Lark(text, parser="lalr", lexer="contextual", start=start, strict=True)
    except (LarkGrammarError, LarkError) as e:
        if _CONFLICT.search(str(e)):
            raise LalrConflict(str(e)) from None
        raise GrammarError(f"grammar does not compile: {e}") from None
    except Exception as e:  # lark raises plain exceptions for some syntax errors
        raise GrammarError(f"grammar does not compile: {e}") from None


def build_lark_earley(text: str, start: str = "start"):
    """The grammar compiled by lark for its Earley parser: we only read its rules and terminals
    (lark's own EBNF expansion, templates, %import, %ignore). No table is built, so this is
    cheap even for grammars with thousands of rules."""
    from lark import Lark
    from lark.exceptions import LarkError
    try:
        return Lark(text, parser="earley", lexer="dynamic", start=start)
    except LarkError as e:
        raise GrammarError(f"grammar does not compile: {e}") from None
    except Exception as e:  # lark raises plain exceptions for some syntax errors
        raise GrammarError(f"grammar does not compile: {e}") from None


def terminal_dfas(parser, terminal_nodes: dict | None = None) -> tuple[list[str], list[ByteDFA], list[tuple]]:
    """Each lark terminal as a byte DFA (`terminal_nodes` overrides by name: GBNF builds its own),
    with lark's tie-break rank (priority, then string before pattern, then name)."""
    names: list[str] = []
    dfas: list[ByteDFA] = []
    rank: list[tuple] = []
    for t in parser.terminals:
        pattern = t.pattern
        if terminal_nodes and t.name in terminal_nodes:
            node = terminal_nodes[t.name]
        else:
            if pattern.flags:
                raise GrammarError(f"terminal {t.name}: regex flags {pattern.flags} are not supported")
            try:
                node = parse_regex(pattern.to_regexp()).fullmatch_node()
            except RegexError as e:
                raise GrammarError(f"terminal {t.name}: {e}") from None
        names.append(t.name)
        dfas.append(dfa_from_node(node))
        is_string = type(pattern).__name__ == "PatternStr"
        rank.append((-t.priority, 0 if is_string else 1, t.name))
    return names, dfas, rank


def lark_rules(parser, term_index: dict[str, int]) -> list[tuple[str, list[tuple[str, object]]]]:
    """lark's BNF rules as (lhs, [("T", terminal id) | ("N", nonterminal name)])."""
    return [(str(r.origin.name), [("T", term_index[s.name]) if s.is_term else ("N", str(s.name))
                                  for s in r.expansion]) for r in parser.rules]


def productive_rules(parser) -> set[str]:
    """Nonterminals that derive at least one terminal string (fixpoint over lark's rules)."""
    rules = [(r.origin.name, [(s.name, s.is_term) for s in r.expansion]) for r in parser.rules]
    productive: set[str] = set()
    changed = True
    while changed:
        changed = False
        for origin, expansion in rules:
            if origin not in productive and all(is_term or name in productive for name, is_term in expansion):
                productive.add(origin)
                changed = True
    return productive
