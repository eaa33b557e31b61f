"""The step pipeline (engine/pipeline/step.py) end to end on a tiny random model: one turn visits the
scheduler (which first settles what the turn before computed and finished), the runner and the
postprocessor once each, in that order; no stage holds the Engine; depth 0 and depth 1 give the
same tokens."""

from __future__ import annotations

import sgrun
from sgrun.engine.engine import Engine

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


def _engine(**kw) -> Engine:
    return sgrun.Engine("random:tiny", dtype="float32", device="cpu", memory_gb=0.05, max_batch_tokens=64,
                        debug_checks=True, **kw)


def _record(eng: Engine, calls: list[str]) -> None:
    """Wrap each stage's entry points (on the instances) to log which stage ran, in order."""
    def wrap(obj, name, stage):
        real = getattr(obj, name)

        def recorded(*a, **k):
            calls.append(f"{stage}.{name}")
            return real(*a, **k)
        setattr(obj, name, recorded)

    for name in ("schedule", "settle"):
        wrap(eng.scheduler, name, "scheduler")
    for name in ("run", "run_sampling", "finish_sampling"):
        wrap(eng.runner, name, "runner")
    wrap(eng.post, "accept", "postprocess")


def _turns(calls: list[str]) -> list[list[str]]:
    """The calls split where a turn starts (the scheduler's `schedule`)."""
    turns: list[list[str]] = []
    for c in calls:
        if c == "scheduler.schedule" or not turns:
            turns.append([])
        turns[-1].append(c)
    return turns


def test_one_step_visits_scheduler_runner_postprocess_in_order():
    # At depth 0 a turn is one step (at depth 1 a turn completes step N between launching N+1's
    # forward and its sampling, and the device jobs run on the worker thread).
    params = sgrun.SamplingParams(max_new_tokens=12, temperature=0.0, json_schema=SCHEMA)
    with _engine(overlap=False) as eng:
        calls: list[str] = []
        eng.run_on_loop(lambda: _record(eng, calls))
        out = eng.generate([[5, 6, 7, 8]], params)[0]
        assert out.finish_reason in ("stop", "length")
        turns = [t for t in _turns(list(calls)) if any(c.startswith("runner.") for c in t)]
    assert turns, calls
    for turn in turns:
        stages = [c.split(".")[0] for c in turn]
        # scheduler (settle the last turn, then schedule) -> runner -> postprocess: each once, in order.
        collapsed = [s for i, s in enumerate(stages) if i == 0 or s != stages[i - 1]]
        assert collapsed in (["scheduler", "runner", "postprocess"], ["scheduler", "runner"]), turn
        assert turn[0] == "scheduler.schedule" and "scheduler.settle" not in turn[2:], turn


def test_no_stage_holds_the_engine_and_both_depths_agree():
    prompts = [[5, 6, 7, 8], [9, 10, 11], [12, 13, 14, 15, 16]]
    params = [sgrun.SamplingParams(max_new_tokens=10, temperature=0.0, ignore_eos=True),
              sgrun.SamplingParams(max_new_tokens=8, temperature=0.8, seed=3, n=2),
              sgrun.SamplingParams(max_new_tokens=12, temperature=0.0, json_schema=SCHEMA)]
    got = []
    for overlap in (False, True):
        with _engine(overlap=overlap) as eng:
            for stage in (eng.pipeline, eng.scheduler, eng.runner, eng.post, eng.parts.speculation):
                assert not any(isinstance(v, Engine) for v in vars(stage).values()), stage
            assert eng.pipeline.depth == int(overlap)
            got.append([[(c.token_ids, c.finish_reason) for c in o.outputs] for o in eng.generate(prompts, params)])
            assert eng.run_on_loop(eng.request_pages) == 0
    assert got[0] == got[1]
