"""The plain greedy draw (ModelRunner.draw_plain_greedy): the argmax read off the forward's rows in
place, only where it is the full path's draw; every other batch is declined."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from sgrun.engine.stages.model_runner import ModelRunner
from sgrun.engine.state.sampling_params import SamplingParams
from sgrun.engine.parts.sampling_rows import SamplingInputs

EOS = [2, 7]


def inputs(params: list[SamplingParams], ignore_eos_rows=(), banned=(), drafts=None) -> SamplingInputs:
    n = len(params)
    return SamplingInputs(seqs=[None] * n, params=params, seeds=[0] * n, steps=[0] * n, prompts=[[]] * n,
                          outputs=[[]] * n, bitmask=None, constrained=[], ignore_eos_rows=list(ignore_eos_rows),
                          banned=list(banned), drafts=drafts or [-1] * n, first_rows=list(range(n)))


def draw(si: SamplingInputs, rows: torch.Tensor):
    return ModelRunner.draw_plain_greedy(SimpleNamespace(eos_token_ids=EOS), si, rows)


def reference(si: SamplingInputs, rows: torch.Tensor) -> list[int]:
    x = rows.clone()
    for r in si.ignore_eos_rows:
        x[r, EOS] = float("-inf")
    for r, t in si.banned:
        x[r, t] = float("-inf")
    return x.argmax(-1).tolist()


def test_the_argmax_where_no_ban_is_hit_and_rows_untouched():
    g = torch.Generator().manual_seed(0)
    rows = torch.randn(5, 300, generator=g)
    rows[1, 40] = 50.0    # row 1's maximum: not banned there
    before = rows.clone()
    si = inputs([SamplingParams(temperature=0)] * 5, ignore_eos_rows=[0, 1], banned=[(1, 9)])
    out = draw(si, rows)
    assert out is not None and out.raw is None and out.ready is None
    assert out.host_drawn.tolist() == [reference(si, rows), [0] * 5]
    assert torch.equal(rows, before), "the forward's rows must be left as they were"


def test_a_banned_maximum_is_left_to_the_full_path():
    rows = torch.zeros(2, 100)
    rows[0, 7] = 3.0   # EOS is row 0's maximum, and row 0 ignores EOS
    assert draw(inputs([SamplingParams(temperature=0)] * 2, ignore_eos_rows=[0]), rows) is None
    rows[0, 7], rows[1, 30] = 0.0, 3.0   # row 1's maximum is a stop id banned short of min_new_tokens
    assert draw(inputs([SamplingParams(temperature=0)] * 2, banned=[(1, 30)]), rows) is None
    # A row whose maximum is EOS but that does not ban it takes it.
    rows[1, 30], rows[1, 2] = 0.0, 5.0
    assert draw(inputs([SamplingParams(temperature=0)] * 2), rows).host_drawn[0].tolist() == [0, 2]


def test_anything_to_apply_is_declined():
    rows = torch.randn(1, 64)
    declined = [SamplingParams(temperature=0.7), SamplingParams(temperature=0, logit_bias={3: 1.0}),
                SamplingParams(temperature=0, repetition_penalty=1.2), SamplingParams(temperature=0, logprobs=2)]
    for p in declined:
        assert draw(inputs([p]), rows) is None, p
    assert draw(inputs([SamplingParams(temperature=0)], drafts=[5]), rows) is None
    si = inputs([SamplingParams(temperature=0)])
    si.bitmask = torch.zeros(1, 2, dtype=torch.int32)
    assert draw(si, rows) is None


def test_engine_tokens_are_the_full_paths(engine, monkeypatch):
    """Greedy decodes with ignore_eos and min_new_tokens, through the engine both ways."""
    prompts = ["The three primary colors are", "def fibonacci(n):", "Q: What is 7 * 6?\nA:"]
    params = SamplingParams(max_new_tokens=24, temperature=0, ignore_eos=True)
    early = SamplingParams(max_new_tokens=12, temperature=0, min_new_tokens=6)
    calls = {"drawn": 0}
    plain = ModelRunner.draw_plain_greedy

    def counted(self, si, rows):
        got = plain(self, si, rows)
        calls["drawn"] += got is not None
        return got

    monkeypatch.setattr(ModelRunner, "draw_plain_greedy", counted)
    engine.flush_cache()
    fast = [o.token_ids for o in engine.generate(prompts, params)] + [o.token_ids for o in engine.generate(prompts, early)]
    assert calls["drawn"] > 0, "the plain draw never served a greedy decode"
    monkeypatch.setattr(ModelRunner, "draw_plain_greedy", lambda self, si, rows: None)
    engine.flush_cache()
    full = [o.token_ids for o in engine.generate(prompts, params)] + [o.token_ids for o in engine.generate(prompts, early)]
    assert fast == full
