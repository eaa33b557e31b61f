"""Prebuilt minimal DFAs of the string formats, shipped in format_tables.json.gz: regex,
idn-hostname and idn-email take seconds to build (large Unicode classes, nested groups), the
others milliseconds to a second of a loaded machine (the exact uri and email grammars), all of
it spent by the first schema naming the format, inside its compile budget.

Regenerate after changing string_formats (tests/test_constrain_formats.py checks the shipped
tables against a fresh build):  python -m sgrun.constrain.format_tables
"""

from __future__ import annotations

import gzip
import json
import unicodedata
from pathlib import Path

from sgrun.constrain.byte_dfa import ByteDFA, dfa_from_node, fully_live, minimize
from sgrun.constrain.string_formats import IDN_LABEL_MAX_CODEPOINTS, KNOWN_FORMATS, REGEX_DEPTH, format_node

TABLED_FORMATS = tuple(sorted(KNOWN_FORMATS))  # (the fast ones too: no per-process build at first use)
TABLE_PATH = Path(__file__).with_name("format_tables.json.gz")


def build(fmt: str) -> ByteDFA:
    """The minimal DFA of a format's decoded strings, built from string_formats."""
    node = format_node(fmt)
    return minimize(node[1] if node[0] == "dfa" else dfa_from_node(node, max_states=200_000))


def inputs() -> dict:
    """What the tables depend on besides string_formats' code."""
    import idna
    return {"unicodedata": unicodedata.unidata_version, "idna": idna.__version__,
            "regex_depth": REGEX_DEPTH, "idn_label_max_codepoints": IDN_LABEL_MAX_CODEPOINTS}


_loaded: dict | None = None


def load(fmt: str) -> ByteDFA | None:
    """The shipped table's DFA for `fmt`, or None when it is not tabled (or the file is absent)."""
    global _loaded
    if fmt not in TABLED_FORMATS:
        return None
    if _loaded is None:
        try:
            with gzip.open(TABLE_PATH, "rt", encoding="ascii") as f:
                _loaded = json.load(f)
        except FileNotFoundError:
            _loaded = {"formats": {}}
    text = _loaded["formats"].get(fmt)
    if text is None:
        return None
    t = json.loads(text)  # (each format's own JSON text: the first use of `date` parses no IDN table)
    edges = [[(int(m, 16), int(x)) for m, x in row] for row in t["edges"]]
    return fully_live(ByteDFA(edges, set(t["accepting"])))


def table_inputs() -> dict:
    load(TABLED_FORMATS[0])
    return dict((_loaded or {}).get("inputs", {}))


def write() -> None:
    out = {"inputs": inputs(), "formats": {}}
    for fmt in TABLED_FORMATS:
        d = build(fmt)
        out["formats"][fmt] = json.dumps({"edges": [[[format(m, "x"), t] for m, t in row] for row in d.edges],
                                          "accepting": sorted(d.accepting)}, separators=(",", ":"))
        print(f"{fmt}: {d.num_states} states")
    with gzip.open(TABLE_PATH, "wt", encoding="ascii", compresslevel=9) as f:
        json.dump(out, f, separators=(",", ":"))


if __name__ == "__main__":
    write()
