"""engine_builder.py: EngineOptions mirrors sgrun.Engine's keyword arguments, and the option checks
run before any model is loaded."""

from __future__ import annotations

import dataclasses
import inspect
import multiprocessing

import pytest

import sgrun
from sgrun.engine.engine_builder import EngineOptions, build_engine_parts
from sgrun.errors import InvalidRequestError


def test_options_match_engine_signature():
    # Engine(...) spells its keywords out (help(), editors); EngineOptions must not drift from them.
    params = inspect.signature(sgrun.Engine.__init__).parameters
    engine_args = {name: p.default for name, p in params.items() if name != "self"}
    option_fields = {f.name: f.default for f in dataclasses.fields(EngineOptions)}
    assert engine_args == option_fields
    assert [p.kind for name, p in params.items() if name not in ("self", "model")] == \
        [inspect.Parameter.KEYWORD_ONLY] * (len(option_fields) - 1)


def test_options_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        EngineOptions().tp = 2   # type: ignore[misc]


@pytest.mark.parametrize("options, field", [
    (dict(tp=0), "tp"),
    (dict(tp=True), "tp"),
    (dict(speculative_num_draft=0), "speculative_num_draft"),
    (dict(speculative_ngram_min=3, speculative_ngram_max=2), "speculative_ngram_min"),
    (dict(device="tpu"), "device"),
])
def test_bad_options_fail_before_loading(options, field):
    # "no-such-model.gguf" would fail to load: the option check must come first and name the field.
    with pytest.raises(InvalidRequestError) as err:
        build_engine_parts(EngineOptions(model="no-such-model.gguf", **options))
    assert err.value.field == field
    with pytest.raises(InvalidRequestError) as err:
        sgrun.Engine("no-such-model.gguf", **options)
    assert err.value.field == field


def test_a_start_that_fails_after_the_workers_started_stops_them():
    # compile is refused with tp > 1 only once the model is sharded and rank 1 runs.
    with pytest.raises(InvalidRequestError) as err:
        sgrun.Engine("random:tiny", dtype="float32", memory_gb=0.05, tp=2, compile=True)
    assert err.value.field == "compile"
    assert not [p for p in multiprocessing.active_children() if p.is_alive()]
