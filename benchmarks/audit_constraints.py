"""Soundness audit of the JSON Schema compiler that anyone can rerun: `python benchmarks/audit_constraints.py`.

Sources (nothing outside the repository):
- the JSON-Schema-Test-Suite, draft 2020-12 (vendored in tests/data/json-schema-test-suite), one
  row per file (the file is the keyword under test);
- our corpora: the generated SchemaStore-style sample (schema_corpus.py) and the hand-written
  real-world-like one (realworld_corpus.py), instances labelled by jsonschema;
- hypothesis-generated schemas and instances (schema_strategies.py, derandomized, so a rerun
  draws the same ones), labelled by jsonschema's 2020-12 validator with its format checker;
- hand-written cases of the families enforced exactly for issue 55 (exact_families.py), one
  row per family; the key-order-any row compiles with key_order="any" and serializes each
  instance's keys in its own order.

Each schema is compiled twice: with the defaults (compact JSON) and with whitespace="spaced".
Every instance is serialized as common serializers print it: `json.dumps(v, separators=(",", ":"),
ensure_ascii=False)` for the default constraint and `json.dumps(v)` (", " / ": ", \\u escapes)
for the spaced one, keys in the compiler's order (schema_order.py), and integral floats printed as
integers the way JavaScript's JSON.stringify prints them (1.0 -> 1: the same JSON number from draft 6
on, and the only form sgrun generates for "integer", since strict consumers reject 1.0). Then, on the real SmolLM2
tokenizer, token by token:
- a valid instance must be reachable: each token's bit is set in the state's mask, the token
  advances the automaton, and EOS is allowed at the end;
- an invalid instance must be rejected before its end: some token is masked out (the automaton
  dies), or EOS is not allowed after the last token.
A mask bit that disagrees with the automaton's step is a wrong answer too. A schema may instead be
refused with a ConstraintError that names what it refuses (an UnsupportedSchemaError names its
keyword). Results per instance and serialization: passed / refused / wrong, plus "by design" for
the suite's format-as-annotation tests (sgrun asserts the formats it knows).

The counts the test suite ratchets on are tests/data/audit_counts.json (tests/test_constrain_audit.py):
`--write-counts` records this run's, `--doc FILE` rewrites the table between the audit markers.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("SGRUN_CACHE", os.path.join(tempfile.gettempdir(), "sgcache"))

from schema_order import SchemaOrder  # noqa: E402

from sgrun.constrain.json_schema import canonical_numbers  # noqa: E402

SUITE_DIR = ROOT / "tests/data/json-schema-test-suite/draft2020-12"
COUNTS_FILE = ROOT / "tests/data/audit_counts.json"
DOC_FILE = ROOT / "docs/constraint-audit.md"
FORMAT_ANNOTATION = "only an annotation by default"
GENERATED_SCHEMAS = 40       # of schema_corpus.generate
HYPOTHESIS_SCHEMAS = 80      # derandomized draws of schema_strategies.SCHEMAS
SERIALIZERS = (("compact", "compact"), ("default", "spaced"))  # (json.dumps form, whitespace option)


@dataclass
class Item:
    """One schema and its labelled instances (data, valid, description)."""
    source: str
    schema: Any
    instances: list[tuple[Any, bool, str]]
    description: str = ""
    key_order: str = "schema"  # "any": compiled with key_order="any", keys serialized in the instance's order


@dataclass
class Row:
    passed: int = 0
    refused: int = 0
    wrong: int = 0
    by_design: int = 0
    wrong_cases: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)

    def add(self, other: "Row") -> None:
        self.passed += other.passed
        self.refused += other.refused
        self.wrong += other.wrong
        self.by_design += other.by_design


# --- sources --------------------------------------------------------------------------------
def suite_items(suite_dir: Path = SUITE_DIR) -> list[Item]:
    out = []
    for path in sorted(suite_dir.glob("*.json")):
        for case in json.loads(path.read_text()):
            out.append(Item(f"suite/{path.name}", case["schema"],
                            [(t["data"], t["valid"], t["description"]) for t in case["tests"]], case["description"]))
    return out


def corpus_items(generated: int = GENERATED_SCHEMAS) -> list[Item]:
    from realworld_corpus import cases as realworld_cases
    from schema_corpus import generate
    out = []
    for source, cases in (("corpus/generated", generate(generated)), ("corpus/realworld", realworld_cases())):
        for case in cases:
            inst = [(json.loads(t), True, "valid") for t in case.valid] + \
                   [(json.loads(t), False, "invalid") for t in case.invalid]
            out.append(Item(source, case.schema, inst, case.name))
    return out


def family_items() -> list[Item]:
    """The hand-written cases of the families enforced exactly for issue 55 (exact_families.py),
    one row per family, labelled by jsonschema like the corpora."""
    from exact_families import FAMILIES
    from schema_strategies import validator
    out = []
    for family, cases in FAMILIES.items():
        for case in cases:
            v = validator(case.schema)
            inst = [(x, v.is_valid(x), "hand-written") for x in case.valid + case.invalid]
            out.append(Item(f"families/{family}", case.schema, inst, case.name, case.key_order))
    return out


def hypothesis_items(n: int = HYPOTHESIS_SCHEMAS) -> list[Item]:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from schema_strategies import SCHEMAS, VALUES, validator
    drawn: list[tuple[Any, list]] = []

    @settings(max_examples=n, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True,
              database=None)
    @given(schema=SCHEMAS, instances=st.lists(VALUES, min_size=4, max_size=8))
    def draw(schema, instances):
        drawn.append((schema, instances))

    draw()
    out = []
    for k, (schema, instances) in enumerate(drawn):
        v = validator(schema)
        out.append(Item("hypothesis", schema, [(x, v.is_valid(x), "drawn") for x in instances], f"draw {k}"))
    return out


# --- checking -----------------------------------------------------------------------------------
def serialize(order: SchemaOrder | None, value: Any, form: str) -> str:
    """`value` as a serializer prints it, keys in the compiler's order (order None: the value's own)."""
    ordered = canonical_numbers(value if order is None else order.order(value))
    if form == "compact":
        return json.dumps(ordered, separators=(",", ":"), ensure_ascii=False)
    return json.dumps(ordered)


def reaches_end(c, tok, text: str, masks: bool = True) -> tuple[bool, str]:
    """Walk the tokenizer's encoding of `text` through c's masks. (True, "") if every token is
    allowed and EOS is allowed at the end; (False, "") if the constraint stops it somewhere;
    (None, why) if a mask bit disagrees with the automaton (a wrong mask). masks=False: the
    automaton's steps only (invalid instances: a mask equals the steps wherever the valid
    instances' walks and tests/test_constrain_masks.py look, and computing every dense state's
    mask of ~1k invalid instances would triple the audit's time)."""
    if not masks:
        state = c.initial_state
        for t in tok.encode(text, add_bos=False):
            state = c.advance(state, t)
            if state is None:
                return False, ""
        return c.is_accepting(state), ""
    words = None
    state = c.initial_state
    eos = int(c.table.eos_ids[0])
    for t in tok.encode(text, add_bos=False):
        words = c.allowed_tokens(state).numpy()
        bit = bool((int(words[t >> 5]) >> (t & 31)) & 1)
        nxt = c.advance(state, t)
        if bit != (nxt is not None):
            return None, f"mask bit {bit} for token {t} {tok.decode([t])!r} but the automaton {'moves' if nxt is not None else 'dies'}"
        if nxt is None:
            return False, ""
        state = nxt
    words = c.allowed_tokens(state).numpy()
    eos_bit = bool((int(words[eos >> 5]) >> (eos & 31)) & 1)
    if eos_bit != c.is_accepting(state):
        return None, f"EOS bit {eos_bit} but accepting {c.is_accepting(state)}"
    return eos_bit, ""


def refusal_names_its_reason(e: Exception) -> bool:
    from sgrun.constrain.errors import UnsupportedSchemaError
    if isinstance(e, UnsupportedSchemaError):
        return e.keyword in str(e) and e.pointer in str(e)
    return bool(str(e))


def audit_item(item: Item, tok) -> Row:
    from sgrun.constrain import compile_constraint
    from sgrun.constrain.errors import EmptyConstraintError
    from sgrun.errors import ConstraintError
    row = Row()
    order = SchemaOrder(item.schema) if item.key_order == "schema" else None
    for form, whitespace in SERIALIZERS:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                c = compile_constraint(tok, json_schema=item.schema, whitespace=whitespace, warm_up=False,
                                       key_order=item.key_order)
        except EmptyConstraintError:
            for data, valid, desc in item.instances:  # nothing matches: right exactly when nothing is valid
                if valid:
                    row.wrong += 1
                    row.wrong_cases.append(f"{item.description} / {desc}: empty language")
                else:
                    row.passed += 1
            continue
        except ConstraintError as e:
            row.refused += len(item.instances)
            row.refusals.append(f"{item.description}: {str(e)[:160]}")
            if not refusal_names_its_reason(e):
                row.wrong += 1
                row.wrong_cases.append(f"{item.description}: refusal without a reason: {e!r}")
            continue
        for data, valid, desc in item.instances:
            text = serialize(order, data, form)
            got, why = reaches_end(c, tok, text, masks=valid)
            if got is None:
                row.wrong += 1
                row.wrong_cases.append(f"{item.description} / {desc} [{form}]: {text[:200]}: {why}")
            elif got == valid:
                row.passed += 1
            elif not got and FORMAT_ANNOTATION in desc:
                row.by_design += 1  # the suite's format-as-annotation tests: sgrun asserts known formats
            else:
                row.wrong += 1
                row.wrong_cases.append(f"{item.description} / {desc} [{form}]: {text[:200]} "
                                       f"{'rejected though valid' if valid else 'accepted though invalid'}")
    return row


def schema_keywords(schema: Any) -> set[str]:
    """JSON Schema keywords (those the suite has a file for) used anywhere in `schema`."""
    out: set[str] = set()

    def visit(s: Any) -> None:
        if isinstance(s, list):
            for x in s:
                visit(x)
            return
        if not isinstance(s, dict):
            return
        for k, v in s.items():
            out.add(k)
            if k in ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas"):
                if isinstance(v, dict):
                    for sub in v.values():
                        visit(sub)
            elif k not in ("enum", "const", "required", "examples", "default"):
                visit(v)

    visit(schema)
    return {k.lstrip("$") for k in out} & KEYWORDS


KEYWORDS = {p.stem for p in SUITE_DIR.glob("*.json")} | {"format", "type"}


def run(items: list[Item], tok) -> tuple[dict[str, Row], dict[str, Row]]:
    """Rows per source file, and per keyword (each schema's result counted under every keyword it uses)."""
    by_source: dict[str, Row] = {}
    by_keyword: dict[str, Row] = {}
    for item in items:
        r = audit_item(item, tok)
        src = by_source.setdefault(item.source, Row())
        src.add(r)
        src.wrong_cases += r.wrong_cases
        src.refusals += r.refusals
        for k in schema_keywords(item.schema):
            by_keyword.setdefault(k, Row()).add(r)
    return by_source, by_keyword


def all_items() -> list[Item]:
    return suite_items() + corpus_items() + family_items() + hypothesis_items()


# --- reporting --------------------------------------------------------------------------------
def table(rows: dict[str, Row], first: str, total: bool = True) -> str:
    lines = [f"| {first} | passed | refused | wrong | by design |", "|---|---:|---:|---:|---:|"]
    sums = Row()
    for name in sorted(rows):
        r = rows[name]
        sums.add(r)
        lines.append(f"| {name} | {r.passed} | {r.refused} | {r.wrong} | {r.by_design} |")
    if total:
        lines.append(f"| **total** | **{sums.passed}** | {sums.refused} | **{sums.wrong}** | {sums.by_design} |")
    return "\n".join(lines)


def counts_of(rows: dict[str, Row]) -> dict[str, int]:
    return {name: rows[name].passed for name in sorted(rows)}


BEGIN, END = "<!-- audit table: begin -->", "<!-- audit table: end -->"


def write_doc(path: Path, by_source: dict[str, Row], by_keyword: dict[str, Row], header: str) -> None:
    text = path.read_text()
    body = f"{BEGIN}\n{header}\n\nPer file / source:\n\n{table(by_source, 'file / source')}\n\n" \
           f"Per keyword (a schema's instances counted under every keyword it uses):\n\n" \
           f"{table(by_keyword, 'keyword', total=False)}\n{END}"
    a, b = text.index(BEGIN), text.index(END) + len(END)
    path.write_text(text[:a] + body + text[b:])


def main() -> None:
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write-counts", action="store_true", help=f"record the passed counts in {COUNTS_FILE.name}")
    ap.add_argument("--doc", type=Path, nargs="?", const=DOC_FILE, help="rewrite the audit table in this doc")
    ap.add_argument("--show", type=int, default=5, help="wrong answers / refusals listed per source")
    args = ap.parse_args()
    from sgrun.models.loader import load_tokenizer
    tok = load_tokenizer(None)
    t0 = time.perf_counter()
    items = all_items()
    by_source, by_keyword = run(items, tok)
    took = time.perf_counter() - t0
    print(table(by_source, "file / source"))
    print()
    print(table(by_keyword, "keyword", total=False))
    for name, r in sorted(by_source.items()):
        for w in r.wrong_cases[: args.show]:
            print(f"WRONG {name}: {w}")
    from bench_options import cpu_line, uptime
    print(f"{len(items)} schemas, {took:.1f} s; {cpu_line()}; {uptime()}")
    recorded = json.loads(COUNTS_FILE.read_text()) if COUNTS_FILE.exists() else {}
    drops = {k: (v, by_source[k].passed if k in by_source else 0) for k, v in recorded.get("passed", {}).items()
             if (by_source[k].passed if k in by_source else 0) < v}
    for k, (was, now) in drops.items():
        print(f"RATCHET {k}: passed {now} < recorded {was}")
    if args.write_counts:
        COUNTS_FILE.write_text(json.dumps({"passed": counts_of(by_source)}, indent=1) + "\n")
        print(f"wrote {COUNTS_FILE}")
    if args.doc:
        write_doc(args.doc, by_source, by_keyword,
                  f"Command: `python benchmarks/audit_constraints.py`; {len(items)} schemas, "
                  f"{sum(len(i.instances) for i in items)} instances x {len(SERIALIZERS)} serializations.")
        print(f"wrote the table into {args.doc}")
    if any(r.wrong for r in by_source.values()) or drops:
        sys.exit(1)


if __name__ == "__main__":
    main()
