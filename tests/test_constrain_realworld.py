"""The hand-written real-world-like sample (benchmarks/realworld_corpus.py: SchemaStore,
Kubernetes, Snowplow, Washington Post, GitHub and Glaive function shapes), MaskBench's way: each
schema compiles with the defaults and accepts every valid instance and no invalid one, or is
refused for a reason we document (uniqueItems over open string items, which no finite automaton
can check; a draft-04 `const` that makes a oneOf non-exclusive; unicode property classes)."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

from constrain_fixtures import load_default_tokenizer
from sgrun.constrain import compile_constraint
from sgrun.errors import ConstraintError

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from realworld_corpus import cases  # noqa: E402

# (and a format outside JSON Schema 2020-12's, such as OpenAPI's byte or a semver: refused by name,
# docs/constrained-decoding.md "String formats")
KNOWN_REFUSALS = ("uniqueItems", "'oneOf' at #/definitions/status", "unicode property classes",
                  "is not a JSON Schema 2020-12 format")


def test_realworld_sample_is_sound_and_passes():
    tok = load_default_tokenizer()
    passed, refused, failures = 0, [], []
    all_cases = cases()
    for case in all_cases:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                c = compile_constraint(tok, json_schema=case.schema, use_cache=False, warm_up=False)
        except ConstraintError as e:
            refused.append(case.name)
            assert any(k in str(e) for k in KNOWN_REFUSALS), f"{case.name}: unexpected refusal {e}"
            continue
        accepted_invalid = [t for t in case.invalid if c.matches_bytes(t.encode())]
        assert not accepted_invalid, f"{case.name}: invalidation error on {accepted_invalid[0]}"
        rejected = [t for t in case.valid if not c.matches(t)]  # token by token, as MaskBench walks
        if rejected:
            failures.append(f"{case.name}: {rejected[0][:120]}")
        else:
            passed += 1
    assert not failures, "valid instances rejected:\n" + "\n".join(failures)
    # (88 before formats outside 2020-12 were refused: k8s_configmap's byte, gh_semver_release's
    # and gh_string_formats' semver are refused by name now)
    assert passed >= 85 and len(all_cases) >= 97, (passed, refused)
