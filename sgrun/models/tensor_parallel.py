"""Tensor-parallel sharding of a llama-shaped model (Megatron style; ModelConfig.llama_shaped).

Rank r of N holds:
- a slice of the attention heads: q/k/v projections split by output rows (column-parallel), the
  o projection split by input columns (row-parallel);
- a slice of the MLP: gate/up split by rows, down split by columns;
- the embedding, norms and lm_head whole (vocab-parallel is optional and not done: the lm_head
  is small next to the layers for the models this runs).
Each row-parallel projection yields a partial sum, so the model all-reduces right after it.

Query heads always stay with their key/value head (GQA groups are never split across ranks when
there are enough KV heads): KV heads are dealt out as evenly as possible, so 3 KV heads over 2
ranks give 2 and 1 (uneven, but exact). With fewer KV heads than ranks, each KV head is
replicated on N / KV ranks and its query group is split between them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from sgrun.errors import InvalidRequestError
from sgrun.models.config import ModelConfig


@dataclass(frozen=True)
class ShardPlan:
    rank: int
    world: int
    q_heads: range          # global indices of this rank's query heads
    kv_heads: range         # global indices of this rank's key/value heads
    mlp_rows: range         # this rank's rows of the MLP intermediate dimension

    def local_config(self, cfg: ModelConfig) -> ModelConfig:
        return dataclasses.replace(cfg, num_heads=len(self.q_heads), num_kv_heads=len(self.kv_heads),
                                   intermediate_size=len(self.mlp_rows))


def _even(n: int, world: int, rank: int) -> range:
    """Rank `rank`'s part of range(n) split into `world` contiguous parts, sizes differing by <= 1."""
    base, extra = divmod(n, world)
    start = rank * base + min(rank, extra)
    return range(start, start + base + (1 if rank < extra else 0))


def plan_shard(cfg: ModelConfig, rank: int, world: int) -> ShardPlan:
    if world > 1 and not cfg.llama_shaped:
        # q/k norms over all heads, experts and sandwich norms are not sharded here (yet).
        raise InvalidRequestError(f"tensor parallelism runs the llama-shaped architectures (llama, mistral, qwen2); "
                                  f"this model is {cfg.arch}: run it with tp=1", field="tp")
    H, KV = cfg.num_heads, cfg.num_kv_heads
    group = H // KV
    if world < 1 or not 0 <= rank < world:
        raise InvalidRequestError(f"tensor-parallel rank {rank} of {world} is out of range", field="tp")
    if cfg.intermediate_size < world:
        raise InvalidRequestError(f"tp={world} is more ranks than the MLP has rows ({cfg.intermediate_size})",
                                  field="tp")
    if KV >= world:
        kv = _even(KV, world, rank)
        q = range(kv.start * group, kv.stop * group)
    else:
        if world % KV or group % (world // KV):
            raise InvalidRequestError(
                f"tp={world} does not divide this model's attention: {KV} key/value heads with {group} query "
                f"heads each; use a tp that divides {KV}, or a multiple of {KV} that divides {H}", field="tp")
        share = world // KV                   # ranks per KV head
        kv_head, part = divmod(rank, share)
        per = group // share
        kv = range(kv_head, kv_head + 1)
        q = range(kv_head * group + part * per, kv_head * group + (part + 1) * per)
    return ShardPlan(rank, world, q, kv, _even(cfg.intermediate_size, world, rank))


def _rows(t: torch.Tensor, heads: range, head_dim: int) -> torch.Tensor:
    return t[heads.start * head_dim: heads.stop * head_dim]


def shard_weights(cfg: ModelConfig, weights: dict[str, torch.Tensor], plan: ShardPlan) -> dict[str, torch.Tensor]:
    """This rank's slice of Hugging Face-named weights (the names LlamaModel reads)."""
    D = cfg.head_dim
    out: dict[str, torch.Tensor] = {}
    for name, t in weights.items():
        if ".self_attn.q_proj." in name:
            out[name] = _rows(t, plan.q_heads, D)
        elif ".self_attn.k_proj." in name or ".self_attn.v_proj." in name:
            out[name] = _rows(t, plan.kv_heads, D)
        elif name.endswith(".self_attn.o_proj.weight"):
            out[name] = t[:, plan.q_heads.start * D: plan.q_heads.stop * D]
        elif ".mlp.gate_proj." in name or ".mlp.up_proj." in name:
            out[name] = t[plan.mlp_rows.start: plan.mlp_rows.stop]
        elif name.endswith(".mlp.down_proj.weight"):
            out[name] = t[:, plan.mlp_rows.start: plan.mlp_rows.stop]
        else:
            out[name] = t                     # embedding, norms, lm_head, o/down biases: whole
    return {k: v.contiguous() for k, v in out.items()}
