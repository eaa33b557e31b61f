"""engine_builder.py: EngineOptions is where sgrun.Engine's keyword arguments are written (Engine's
signature is made from it), and the option checks run before any model is loaded."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

import sgrun
from sgrun.engine.engine_builder import options_with
from sgrun.engine.engine_builder import EngineOptions, build_engine_parts
from sgrun.errors import InvalidRequestError


def test_engine_keywords_are_the_options_fields():
    # The keywords are written once, in EngineOptions; Engine's signature (help(), editors) is made from it.
    params = inspect.signature(sgrun.Engine.__init__).parameters
    option_fields = {f.name: f.default for f in dataclasses.fields(EngineOptions)}
    assert {name: p.default for name, p in params.items() if name not in ("self", "options")} == option_fields
    assert [p.kind for name, p in params.items() if name not in ("self", "model", "options")] == \
        [inspect.Parameter.KEYWORD_ONLY] * (len(option_fields) - 1)


def test_options_and_overrides_build_one_options_object():
    base = EngineOptions(memory_gb=0.5, dtype="float32")
    got = options_with(base, "m.gguf", {"max_running": 8})
    assert got == dataclasses.replace(base, model="m.gguf", max_running=8)
    assert options_with(None, None, {}) == EngineOptions()
    with pytest.raises(TypeError, match="'max_runing'"):
        sgrun.Engine("random:tiny", max_runing=8)   # a misspelt keyword is refused by name, before loading


def test_every_keyword_still_reaches_the_engine():
    with sgrun.Engine("random:tiny", dtype="float32", device="cpu", memory_gb=0.05, max_running=3,
                      page_size=8, speculative_num_draft=4, enable_prefix_cache=False) as eng:
        assert (eng.options.max_running, eng.options.page_size, eng.options.speculative_num_draft) == (3, 8, 4)
        assert eng.scheduler.max_running == 3 and eng.pool.page_size == 8 and eng.cache is None
        assert eng.generate([[1, 2, 3]], sgrun.SamplingParams(max_new_tokens=3, ignore_eos=True))[0].token_ids


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
    from sgrun.engine.pipeline.tp_group import running_workers
    assert not running_workers()
