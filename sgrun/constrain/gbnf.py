"""GBNF (llama.cpp's grammar format) -> a Lark grammar for the Earley path.

GBNF is character-level, so the grammar runs on the Earley path with every split of the text
into terminals (earley_automaton.py): its language is exactly llama.cpp's. Rules that are not
(transitively) recursive are regular: each becomes one terminal whose byte DFA we build from its
regex AST directly (so nullable rules and character classes need no Lark regex). Recursive
rules become Lark rules over those terminals.
Returned: the Lark text (terminals get placeholder patterns) and the real terminal automata.
Supported: llama.cpp's syntax (strings and character classes with \\x \\u \\U escapes, ranges,
negation, `.`, groups, * + ? {m} {m,} {m,n}, # comments, multi-line rules). Refused with the line:
token matches (<[id]>, <token>, !<...>), which constrain token ids rather than text.
"""

from __future__ import annotations

from dataclasses import dataclass

from sgrun.constrain.errors import GrammarError
from sgrun.constrain.regex_ast import EMPTY, Node, alt, chars, lit, negate_ranges, rep, seq

MAX_REPEAT = 1000

# GBNF AST: ("alt", [seq...]); seq = list of (atom, lo, hi); atom = ("ref", name) | ("lit", str)
#           | ("class", ranges) | ("group", alt)


@dataclass
class GbnfTranslation:
    lark_text: str
    terminals: dict[str, Node]


class _Parser:
    def __init__(self, text: str):
        self.s = text
        self.i = 0

    def error(self, msg: str) -> GrammarError:
        line = self.s.count("\n", 0, self.i) + 1
        return GrammarError(f"GBNF line {line}: {msg}")

    def ws(self, newlines: bool = True) -> None:
        while self.i < len(self.s):
            c = self.s[self.i]
            if c == "#":
                while self.i < len(self.s) and self.s[self.i] != "\n":
                    self.i += 1
            elif c in " \t\r" or (newlines and c == "\n"):
                self.i += 1
            else:
                break

    def name(self) -> str:
        j = self.i
        while self.i < len(self.s) and (self.s[self.i].isalnum() or self.s[self.i] in "-_"):
            self.i += 1
        if j == self.i:
            raise self.error(f"expected a rule name at {self.s[self.i:self.i + 10]!r}")
        return self.s[j:self.i]

    def rules(self) -> dict[str, tuple]:
        out: dict[str, tuple] = {}
        self.ws()
        while self.i < len(self.s):
            name = self.name()
            self.ws(newlines=False)
            if not self.s.startswith("::=", self.i):
                raise self.error(f"expected '::=' after {name}")
            self.i += 3
            body = self.alternatives(top=True)
            if name in out:
                out[name] = ("alt", out[name][1] + body[1])
            else:
                out[name] = body
            self.ws()
        return out

    def alternatives(self, top: bool) -> tuple:
        seqs = [self.sequence(top)]
        while self.i < len(self.s) and self.s[self.i] == "|":
            self.i += 1
            seqs.append(self.sequence(top))
        return ("alt", seqs)

    def _rule_start_ahead(self) -> bool:
        # In a top-level body a newline ends the rule when the next line starts "name ::=".
        j = self.i
        while j < len(self.s) and (self.s[j].isalnum() or self.s[j] in "-_"):
            j += 1
        k = j
        while k < len(self.s) and self.s[k] in " \t":
            k += 1
        return j > self.i and self.s.startswith("::=", k)

    def sequence(self, top: bool) -> list:
        items = []
        while True:
            self.ws(newlines=not top)
            if top and self.i < len(self.s) and self.s[self.i] == "\n":
                # continuation lines are allowed unless the next line starts a new rule
                save = self.i
                self.ws()
                if self.i >= len(self.s) or self._rule_start_ahead():
                    self.i = save
                    while self.i < len(self.s) and self.s[self.i] in "\n":
                        self.i += 1
                    return items
                continue
            if self.i >= len(self.s) or self.s[self.i] in "|)":
                return items
            atom = self.atom()
            lo, hi = 1, 1
            c = self.s[self.i] if self.i < len(self.s) else ""
            if c == "*":
                lo, hi = 0, None
                self.i += 1
            elif c == "+":
                lo, hi = 1, None
                self.i += 1
            elif c == "?":
                lo, hi = 0, 1
                self.i += 1
            elif c == "{":
                lo, hi = self.repetition()
            items.append((atom, lo, hi))

    def repetition(self) -> tuple[int, int | None]:
        """{m}, {m,}, {m,n} (llama.cpp's bounded repetition)."""
        j = self.s.find("}", self.i)
        body = self.s[self.i + 1:j] if j >= 0 else ""
        parts = [p.strip() for p in body.split(",")]
        if j < 0 or len(parts) > 2 or not parts[0].isdigit() or (len(parts) == 2 and parts[1]
                                                                  and not parts[1].isdigit()):
            raise self.error("a repetition must be {m}, {m,} or {m,n} with whole numbers")
        lo = int(parts[0])
        hi = lo if len(parts) == 1 else (int(parts[1]) if parts[1] else None)
        if hi is not None and hi < lo:
            raise self.error(f"repetition {{{body}}}: the maximum is below the minimum")
        if max(lo, hi or 0) > MAX_REPEAT:
            raise self.error(f"repetition {{{body}}}: at most {MAX_REPEAT} repeats are supported")
        self.i = j + 1
        return lo, hi

    def atom(self) -> tuple:
        c = self.s[self.i]
        if c == "<" or self.s.startswith("!<", self.i):
            raise self.error("token matches (<[id]>, <token>, !<...>) are not supported: sgrun constrains text, "
                             "not token ids; write the token's text as a string literal instead")
        if c == '"':
            self.i += 1
            out = []
            while self.i < len(self.s) and self.s[self.i] != '"':
                out.append(self.char())
            if self.i >= len(self.s):
                raise self.error("unterminated string")
            self.i += 1
            return ("lit", "".join(out))
        if c == "[":
            self.i += 1
            neg = self.s.startswith("^", self.i)
            if neg:
                self.i += 1
            ranges = []
            while self.i < len(self.s) and self.s[self.i] != "]":
                lo = self.char()
                if self.s.startswith("-", self.i) and not self.s.startswith("-]", self.i):
                    self.i += 1
                    hi = self.char()
                    ranges.append((ord(lo), ord(hi)))
                else:
                    ranges.append((ord(lo), ord(lo)))
            if self.i >= len(self.s):
                raise self.error("unterminated character class")
            self.i += 1
            r = tuple(sorted(ranges))
            return ("class", negate_ranges(r) if neg else r)
        if c == "(":
            self.i += 1
            body = self.alternatives(top=False)
            self.ws()
            if not self.s.startswith(")", self.i):
                raise self.error("missing ')'")
            self.i += 1
            return ("group", body)
        if c == ".":
            self.i += 1
            return ("class", ((0, 0x10FFFF),))
        return ("ref", self.name())

    def char(self) -> str:
        if self.i >= len(self.s):
            raise self.error("unterminated string or character class")
        c = self.s[self.i]
        if c != "\\":
            self.i += 1
            return c
        if self.i + 1 >= len(self.s):
            raise self.error("a backslash ends the grammar")
        e = self.s[self.i + 1]
        self.i += 2
        simple = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "[": "[", "]": "]", "-": "-", "^": "^"}
        if e in simple:
            return simple[e]
        width = {"x": 2, "u": 4, "U": 8}.get(e)
        if width:
            h = self.s[self.i:self.i + width]
            if len(h) != width or any(ch not in "0123456789abcdefABCDEF" for ch in h):
                raise self.error(f"\\{e} needs {width} hex digits")
            self.i += width
            if int(h, 16) > 0x10FFFF:
                raise self.error(f"\\{e}{h} is beyond the last Unicode code point")
            return chr(int(h, 16))
        raise self.error(f"unknown escape \\{e}")


def gbnf_to_lark(text: str) -> GbnfTranslation:
    rules = _Parser(text).rules()
    if "root" not in rules:
        raise GrammarError("GBNF grammar has no 'root' rule")
    for name, body in rules.items():
        for ref in _refs(body):
            if ref not in rules:
                raise GrammarError(f"GBNF rule {name!r} refers to undefined rule {ref!r}")
    recursive = _recursive_rules(rules)
    terminals: dict[str, Node] = {}
    term_names: dict[object, str] = {}
    lark_rules: list[str] = []

    def regex_of(body: tuple, seen: tuple = ()) -> Node:
        return alt(*(seq(*(rep(atom_node(a, seen), lo, hi) for a, lo, hi in s)) for s in body[1]))

    def atom_node(a: tuple, seen: tuple) -> Node:
        kind = a[0]
        if kind == "lit":
            return lit(a[1])
        if kind == "class":
            return chars(*a[1])
        if kind == "group":
            return regex_of(a[1], seen)
        return regex_of(rules[a[1]], seen + (a[1],))

    def terminal(node: Node, hint: str) -> str:
        """Named terminal for a regular node; '?' suffix if it can match the empty string."""
        from sgrun.constrain.byte_dfa import dfa_from_node, product
        key = node
        if key not in term_names:
            d = dfa_from_node(node)
            nullable = d.start in d.accepting
            if nullable:
                d = product(d, dfa_from_node(EMPTY), "minus")
            name = f"T{len(term_names)}_{_ident(hint).upper()}"
            term_names[key] = name
            terminals[name] = ("dfa", d) if d.accepting else ("alt", ())
            terminals[name + "?"] = nullable  # type: ignore[assignment]
        name = term_names[key]
        empty_only = terminals[name] == ("alt", ())
        if empty_only:
            return ""
        return f"{name}?" if terminals[name + "?"] else name

    def lark_body(body: tuple) -> str:
        alts = []
        for s in body[1]:
            parts = []
            for a, lo, hi in s:
                if a[0] == "ref" and a[1] in recursive:
                    item = _rule_name(a[1])
                elif a[0] == "group" and _refs(a[1]) & recursive:
                    item = f"({lark_body(a[1])})"
                else:
                    item = terminal(atom_node(a, ()), a[1] if a[0] == "ref" else "lit")
                    if not item:
                        continue
                    if item.endswith("?") and (lo, hi) != (1, 1):
                        item = f"({item[:-1]})"
                        lo = 0 if lo == 1 else lo
                if (lo, hi) == (1, 1):
                    parts.append(item)
                elif (lo, hi) == (0, 1):
                    parts.append(f"[{item}]" if not item.endswith("?") else item)
                elif (lo, hi) == (0, None):
                    parts.append(f"{item.rstrip('?')}*")
                elif (lo, hi) == (1, None):
                    parts.append(f"{item.rstrip('?')}+")
                elif hi is None:
                    parts.append(f"{item} ~ {lo} {item}*")
                else:
                    parts.append(f"{item} ~ {lo}..{hi}")
            alts.append(" ".join(parts))
        return " | ".join(a if a else "" for a in alts)

    if "root" in recursive:
        for name in rules:
            if name in recursive:
                lark_rules.append(f"{_rule_name(name)}: {lark_body(rules[name])}")
        start = f"start: {_rule_name('root')}"
    else:
        start = f"start: {terminal(regex_of(rules['root'], ('root',)), 'root') or ''}"
    lines = [start] + lark_rules
    real = {k: v for k, v in terminals.items() if not k.endswith("?")}
    for k, name in enumerate(real):
        lines.append(f'{name}: "\\x00\\x01{k}\\x02"')  # placeholder; the DFA comes from `terminals`
    return GbnfTranslation("\n".join(lines) + "\n", real)


def _rule_name(name: str) -> str:
    return "r_" + _ident(name).lower()


def _ident(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name)


def _refs(body: tuple) -> set[str]:
    out: set[str] = set()
    for s in body[1]:
        for a, _, _ in s:
            if a[0] == "ref":
                out.add(a[1])
            elif a[0] == "group":
                out |= _refs(a[1])
    return out


def _recursive_rules(rules: dict[str, tuple]) -> set[str]:
    """Rules that reach themselves, plus every rule that refers to such a rule."""
    graph = {n: _refs(b) for n, b in rules.items()}

    def reaches(src: str, dst: str) -> bool:
        seen, todo = set(), [src]
        while todo:
            n = todo.pop()
            for m in graph[n]:
                if m == dst:
                    return True
                if m not in seen:
                    seen.add(m)
                    todo.append(m)
        return False

    cyclic = {n for n in rules if reaches(n, n)}
    out = set(cyclic)
    changed = True
    while changed:
        changed = False
        for n in rules:
            if n not in out and graph[n] & out:
                out.add(n)
                changed = True
    return out
