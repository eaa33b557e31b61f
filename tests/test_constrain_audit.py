"""The soundness audit as a ratchet (benchmarks/audit_constraints.py, the same run the script
prints): the JSON-Schema-Test-Suite, our corpora and hypothesis-drawn schemas, every valid
instance reachable token by token through the masks on the SmolLM2 tokenizer and every invalid
one rejected before its end, in json.dumps' compact and default forms. Fails on any wrong
answer, and when the number passed for any file / source drops below the count recorded in
tests/data/audit_counts.json (the one place those numbers live; after an improvement, record
the new counts with `python benchmarks/audit_constraints.py --write-counts`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from constrain_fixtures import load_default_tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import audit_constraints as audit  # noqa: E402


@pytest.fixture(scope="module")
def audited():
    return audit.run(audit.all_items(), load_default_tokenizer())


def test_no_wrong_answer(audited):
    by_source, _ = audited
    wrong = [f"{name}: {w}" for name, r in sorted(by_source.items()) for w in r.wrong_cases]
    assert not wrong, "wrong answers:\n" + "\n".join(wrong)


def test_passed_counts_never_drop(audited):
    by_source, _ = audited
    recorded = json.loads(audit.COUNTS_FILE.read_text())["passed"]
    assert set(recorded) <= set(by_source), f"sources missing from the audit: {set(recorded) - set(by_source)}"
    drops = {k: (by_source[k].passed, v) for k, v in recorded.items() if by_source[k].passed < v}
    assert not drops, f"passed (now, recorded) dropped: {drops}"
