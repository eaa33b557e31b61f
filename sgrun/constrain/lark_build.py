"""Reading a Lark grammar within the compile budget: lark's LALR(1) parser for the fast path,
or just lark's compiled rules and terminals (its EBNF expansion, %import, %ignore) for Earley.

lark's LALR table construction is pure Python and superlinear in the grammar (measured: 400
rules ~3 s, 2,000 rules ~170 s on the loaded 2-core machine), and so is its Earley parser's
constructor (2,000 rules: 142 s), so neither is used for big grammars: a grammar with more than
IN_PROCESS_RULES rules goes straight to our Earley path (same lexer, same language; masks cost
about the same, docs/benchmarks-constrain.md "Grammars"), where only lark's grammar compiler
runs: in process up to IN_PROCESS_GRAMMAR_RULES rules, above that in a child Python process
(importing only lark) that is killed when the remaining budget runs out (2,000 rules: ~1.5 s),
which also keeps big compiles off this process's GIL, shared with the engine loop (a child
process costs ~0.3 s to start). Small grammars try LALR first, in process.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass

from sgrun.constrain.byte_dfa import ByteDFA, dfa_from_node
from sgrun.constrain.compile_budget import CompileBudgetExceeded, current_budget
from sgrun.constrain.errors import GrammarError, RegexError
from sgrun.constrain.regex_parser import parse_regex

IN_PROCESS_RULES = 120          # LALR is tried only up to this size (its table build is superlinear)
IN_PROCESS_GRAMMAR_RULES = 600  # lark's grammar compiler alone runs in process up to this (~0.75 ms a rule)
_RULE_LINE = re.compile(r"^\s*[?!]?[a-z_][a-z_0-9]*(\.-?\d+)?\s*:", re.MULTILINE)
_CHILD = r"""
import json, sys
from lark.load_grammar import load_grammar
text = sys.stdin.buffer.read().decode("utf-8")
try:
    g, _ = load_grammar(text, "<grammar>", None, False)
    terminals, rules, ignore = g.compile([sys.argv[1]], set())
except Exception as e:
    sys.stdout.buffer.write(b"E" + f"{type(e).__name__}: {e}".encode("utf-8", "replace"))
    sys.exit(0)
out = {"terminals": [[t.name, t.pattern.to_regexp(), sorted(t.pattern.flags), type(t.pattern).__name__ == "PatternStr",
                      t.priority] for t in terminals],
       "rules": [[r.origin.name, [[x.is_term, x.name] for x in r.expansion]] for r in rules], "ignore": list(ignore)}
sys.stdout.buffer.write(b"O" + json.dumps(out).encode("utf-8"))
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
    sentences), GrammarError. Only for grammars of at most IN_PROCESS_RULES rules."""
    return _in_process(text, start)


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


@dataclass
class TerminalSpec:
    name: str
    regexp: str
    flags: tuple[str, ...]
    is_string: bool
    priority: int


@dataclass
class GrammarParts:
    """What the Earley path needs from lark: terminals, BNF rules (lhs, [(is_terminal, name)]), %ignore."""
    terminals: list[TerminalSpec]
    rules: list[tuple[str, list[tuple[bool, str]]]]
    ignore: list[str]


def grammar_parts(text: str, start: str = "start") -> GrammarParts:
    """lark's grammar compiler only (no parser tables): in process for small grammars, in a
    child process killed at the budget's deadline for big ones."""
    if count_rules(text) <= IN_PROCESS_GRAMMAR_RULES:
        from lark.exceptions import LarkError
        from lark.load_grammar import load_grammar
        try:
            g, _ = load_grammar(text, "<grammar>", None, False)
            terminals, rules, ignore = g.compile([start], set())
        except LarkError as e:
            raise GrammarError(f"grammar does not compile: {e}") from None
        except Exception as e:  # lark raises plain exceptions for some syntax errors
            raise GrammarError(f"grammar does not compile: {e}") from None
        return GrammarParts(lark_terminal_specs(terminals),
                            [(str(r.origin.name), [(x.is_term, str(x.name)) for x in r.expansion]) for r in rules],
                            list(ignore))
    budget = current_budget()
    remaining = None if budget is None or budget.seconds == float("inf") else \
        max(0.05, budget.deadline - time.perf_counter())
    try:
        done = subprocess.run([sys.executable, "-I", "-c", _CHILD, start], input=text.encode("utf-8"),
                              capture_output=True, timeout=remaining)
    except subprocess.TimeoutExpired:
        assert budget is not None  # no timeout without a budget
        raise CompileBudgetExceeded(
            f"the grammar is too complex: reading its {count_rules(text)} rules took more than the "
            f"{budget.seconds:g} s budget; use fewer rules (or raise the compile budget)") from None
    out = done.stdout
    if done.returncode != 0 or not out:
        raise GrammarError(f"grammar does not compile: the grammar compiler failed ({done.stderr.decode()[-200:]})")
    if out[:1] == b"E":
        raise GrammarError(f"grammar does not compile: {out[1:].decode('utf-8', 'replace')}")
    data = json.loads(out[1:])
    return GrammarParts([TerminalSpec(n, r, tuple(f), s, p) for n, r, f, s, p in data["terminals"]],
                        [(lhs, [(bool(t), str(x)) for t, x in rhs]) for lhs, rhs in data["rules"]], data["ignore"])


def lark_terminal_specs(terminals) -> list[TerminalSpec]:
    return [TerminalSpec(t.name, t.pattern.to_regexp(), tuple(sorted(t.pattern.flags)),
                         type(t.pattern).__name__ == "PatternStr", t.priority) for t in terminals]


def terminal_dfas(terminals: list[TerminalSpec], terminal_nodes: dict | None = None
                  ) -> tuple[list[str], list[ByteDFA], list[tuple]]:
    """Each terminal as a byte DFA (`terminal_nodes` overrides by name: GBNF builds its own),
    with lark's tie-break rank (priority, then string before pattern, then name)."""
    names: list[str] = []
    dfas: list[ByteDFA] = []
    rank: list[tuple] = []
    for t in terminals:
        if terminal_nodes and t.name in terminal_nodes:
            node = terminal_nodes[t.name]
        else:
            if t.flags:
                raise GrammarError(f"terminal {t.name}: regex flags {''.join(t.flags)} are not supported")
            try:
                node = parse_regex(t.regexp).fullmatch_node()
            except RegexError as e:
                raise GrammarError(f"terminal {t.name}: {e}") from None
        names.append(t.name)
        dfas.append(dfa_from_node(node))
        rank.append((-t.priority, 0 if t.is_string else 1, t.name))
    return names, dfas, rank


def bnf_rules(rules: list[tuple[str, list[tuple[bool, str]]]], term_index: dict[str, int]
              ) -> list[tuple[str, list[tuple[str, object]]]]:
    """Rules as (lhs, [("T", terminal id) | ("N", nonterminal name)])."""
    return [(lhs, [("T", term_index[x]) if is_term else ("N", x) for is_term, x in rhs]) for lhs, rhs in rules]


def lark_rules(parser, term_index: dict[str, int]) -> list[tuple[str, list[tuple[str, object]]]]:
    """A lark parser's BNF rules in bnf_rules' form."""
    return bnf_rules([(str(r.origin.name), [(x.is_term, str(x.name)) for x in r.expansion]) for r in parser.rules],
                     term_index)


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
