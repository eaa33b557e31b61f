"""Mixture-of-experts: the routed MLP of Qwen3-MoE, OLMoE and Mixtral, the reference forward.

Routing (one rule for every architecture): softmax over the E router logits in float32, the
top_k experts taken by probability (ties: the lower expert index first), their weights
renormalised to sum 1 when `norm_topk_prob` (Qwen3-MoE as configured; Mixtral always, which is
the same as a softmax over the top-k logits; OLMoE never). Each token's output is the sum over its
chosen experts, in ascending expert index, of weight * down(act(gate) * up), summed in float32.

Tokens are grouped per expert: each chosen expert runs once per step on the rows that chose it,
and an expert no token chose is never touched (its weights are not read).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sgrun.models.layers import mlp
from sgrun.models.quant_linear import Linear


@dataclass
class MoEWeights:
    router: torch.Tensor          # float32 [E, hidden], applied to the normed MLP input in float32
    gate_up: list[Linear]         # E fused gate|up linears
    down: list[Linear]            # E down linears
    top_k: int
    norm_topk_prob: bool

    @property
    def num_experts(self) -> int:
        return len(self.gate_up)


def route(x: torch.Tensor, moe: MoEWeights) -> tuple[torch.Tensor, torch.Tensor]:
    """x [T, hidden] float32 -> (experts [T, k] int64 ascending per row, weights [T, k] float32)."""
    probs = torch.softmax(x.float() @ moe.router.t(), dim=-1)
    # A stable descending sort keeps equal probabilities in index order: ties go to the lower index.
    top_p, top_i = torch.sort(probs, dim=-1, descending=True, stable=True)
    top_p, top_i = top_p[:, : moe.top_k], top_i[:, : moe.top_k]
    if moe.norm_topk_prob:
        top_p = top_p / top_p.sum(dim=-1, keepdim=True)
    order = top_i.argsort(dim=-1)        # ascending expert index: the summation order
    return top_i.gather(1, order), top_p.gather(1, order)


def moe_forward(x: torch.Tensor, x_gemm: torch.Tensor, moe: MoEWeights, act) -> torch.Tensor:
    """x: the normed MLP input [T, hidden] (residual dtype) for the router; x_gemm: the same in the
    GEMM dtype for the experts. Returns [T, hidden] float32."""
    experts, weights = route(x, moe)
    T = x.shape[0]
    out = torch.zeros(T, x.shape[1], dtype=torch.float32, device=x.device)
    # Expert by expert in ascending index: each chosen expert runs once on every row that chose
    # it, and each row receives its experts' terms in ascending index order.
    chosen = experts.unique().tolist()
    for e in chosen:
        hit = experts == e                                  # [T, k], at most one True per row
        rows = hit.any(dim=1).nonzero(as_tuple=True)[0]
        w = (weights * hit).sum(dim=1)[rows]                # that expert's weight for each row
        y = mlp(x_gemm[rows], moe.gate_up[e], moe.down[e], act).float()
        out.index_add_(0, rows, y * w[:, None])
    return out
