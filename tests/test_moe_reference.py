"""The MoE reference forward (sgrun/models/moe.py): routing rules and the grouped run, on tiny
dense experts: ties go to the lower expert index, norm_topk_prob renormalises, each chosen expert
runs once per step on exactly the rows that chose it, an expert nobody chose is never called, and
the result equals a per-token loop over its experts."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from sgrun.models.moe import MoEWeights, moe_forward, route
from sgrun.models.quant_linear import make_linear


class Counting:
    """A linear that records the rows of each call."""

    def __init__(self, weight: torch.Tensor, calls: list):
        self.inner, self.calls, self.out_features = make_linear(weight, None, "none", torch.float32), calls, weight.shape[0]

    def __call__(self, x):
        self.calls.append(x.shape[0])
        return self.inner(x)


def _moe(E=6, hidden=8, ff=4, top_k=2, norm=True, seed=0):
    gen = torch.Generator().manual_seed(seed)
    calls = {e: [] for e in range(E)}
    gate_up = [Counting(torch.randn(2 * ff, hidden, generator=gen), calls[e]) for e in range(E)]
    down = [make_linear(torch.randn(hidden, ff, generator=gen), None, "none", torch.float32) for _ in range(E)]
    router = torch.randn(E, hidden, generator=gen)
    return MoEWeights(router, gate_up, down, top_k, norm), calls


def test_ties_go_to_the_lower_index_and_norm_topk_prob_renormalises():
    moe, _ = _moe()
    moe.router = torch.zeros_like(moe.router)          # every expert equally likely
    experts, weights = route(torch.randn(3, 8), moe)
    assert experts.tolist() == [[0, 1]] * 3
    assert torch.allclose(weights, torch.full((3, 2), 0.5))
    moe.norm_topk_prob = False
    _, weights = route(torch.randn(3, 8), moe)
    assert torch.allclose(weights, torch.full((3, 2), 1 / 6))


def test_grouped_forward_equals_a_per_token_loop_and_skips_unchosen_experts():
    moe, calls = _moe(E=8, top_k=2, seed=3)
    x = torch.randn(5, 8, generator=torch.Generator().manual_seed(4))
    out = moe_forward(x, x, moe, F.silu)
    experts, weights = route(x, moe)
    chosen = set(experts.flatten().tolist())
    for e in range(8):   # one call per chosen expert, on the rows that chose it; none for the others
        assert calls[e] == ([int((experts == e).any(1).sum())] if e in chosen else [])
    assert len(chosen) < 8, "the test wants an expert nobody chose"
    for t in range(5):
        want = torch.zeros(8)
        for e, w in zip(experts[t].tolist(), weights[t].tolist()):
            gate, up = moe.gate_up[e].inner(x[t:t + 1]).chunk(2, dim=-1)
            want += w * moe.down[e](F.silu(gate) * up)[0]
        torch.testing.assert_close(out[t], want, atol=1e-5, rtol=1e-5)
