"""ModelRunner: a scheduled batch -> logits -> logit bias, penalties, constraint mask -> sampled
tokens (or, for scoring requests, the log-probabilities of their given tokens).

It owns the device the model runs on and the attention backend. Both stages are pure with
respect to the sequences (they read them, never change them), so the engine may retry them on
part of a batch when one request's inputs make them fail (isolation.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from sgrun.engine.attention_backend import AttentionBackend, Segment, make_attention_backend
from sgrun.engine.page_pool import PagePool
from sgrun.engine.sampler import apply_logit_bias, apply_penalties, sample
from sgrun.engine.scoring import ScoringSequence
from sgrun.engine.sequence import Sequence
from sgrun.models.llama import LlamaModel


@dataclass
class Logits:
    """One sequence's share of a forward: the next-token logits after each of `positions`."""
    rows: torch.Tensor        # [len(positions), vocab]
    positions: list[int]      # absolute token positions, ascending


@dataclass
class SampledTokens:
    """Tokens a generating sequence accepts this step (one today; several when a speculative
    step verifies a draft), with the model's own logprobs when the request asked for them."""
    tokens: list[int]
    logprobs: list[float] | None = None
    top: list[list[tuple[int, float]]] | None = None   # top alternatives per token, best first
    # The model's log-probabilities of forced tokens that jump-forward appended last step (the
    # sequence's logprobs_pending_from on), computed by this step's forward: (logprob, top) each.
    forced: list[tuple[float, list[tuple[int, float]]]] | None = None
    # log_softmax of the sampling row, for a constrained request with logprobs: jump-forward may
    # replace the sampled token by a longer one predicted by the same row.
    row_logprobs: torch.Tensor | None = None


@dataclass
class Scores:
    """A scoring sequence's log-probabilities of its tokens at this step's positions."""
    logprobs: list[float]


class ModelRunner:
    def __init__(self, model: LlamaModel, pool: PagePool, eos_token_ids: frozenset[int] | set[int],
                 device: str | torch.device | None = None):
        self.model = model
        self.pool = pool
        self.device = torch.device(device) if device is not None else pool.k[0].device
        self.eos_token_ids = sorted(eos_token_ids)
        cfg = model.cfg
        self.attn: AttentionBackend = make_attention_backend(pool, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim,
                                                             device=self.device)
        self.forward_calls = 0
        self.tokens_computed = 0  # tokens run through the model (prefill + decode), for cache accounting
        self.model_time = 0.0   # seconds inside the model forward itself (the rest is engine overhead)

    # --- batch -> logits --------------------------------------------------------------------
    def forward(self, items: list[tuple[Sequence, int]]) -> list[Logits | None]:
        """Compute `n` new tokens of each (sequence, n). Returns, per item, the logits its
        sequence wants this step (Sequence.logit_positions), or None."""
        ps = self.pool.page_size
        ids: list[int] = []
        positions: list[torch.Tensor] = []
        segments: list[Segment] = []
        rows: list[int] = []
        wanted: list[list[int] | None] = []
        t = 0
        for seq, n in items:
            start, end = seq.num_computed, seq.num_computed + n
            ids.extend(seq.tokens[start:end])
            positions.append(torch.arange(start, end))
            pages = torch.tensor(seq.page_table[: -(-end // ps)], dtype=torch.long)
            segments.append(Segment(q_start=t, q_len=n, ctx_len=end, pages=pages))
            want = seq.logit_positions(start, end)
            wanted.append(want)
            rows.extend(t + p - start for p in want or ())
            t += n
        pos = torch.cat(positions)
        # Page and offset of every new token, from its sequence's page table.
        write_pages = torch.cat([seg.pages[p // ps] for seg, p in zip(segments, positions)])
        self.attn.prepare(write_pages, pos % ps, segments)
        self.forward_calls += 1
        self.tokens_computed += t
        input_ids, rows_t = torch.tensor(ids, dtype=torch.long), torch.tensor(rows, dtype=torch.long)
        t0 = time.perf_counter()
        logits = self.model.forward(input_ids, pos, self.attn, rows_t)
        self.model_time += time.perf_counter() - t0
        out: list[Logits | None] = []
        row = 0
        for want in wanted:
            if want is None:
                out.append(None)
                continue
            out.append(Logits(logits[row:row + len(want)], want))
            row += len(want)
        return out

    # --- logits -> tokens -------------------------------------------------------------------
    def sample(self, items: list[tuple[Sequence, Logits]]) -> list[SampledTokens | Scores]:
        """Per item: scores for a scoring sequence, else its sampled token. Restores the
        sequences' generators if it raises, so a retry draws the same numbers."""
        out: list[SampledTokens | Scores | None] = [None] * len(items)
        gen_idx = []
        for i, (seq, logits) in enumerate(items):
            if isinstance(seq, ScoringSequence):
                out[i] = self._score(seq, logits)
            else:
                gen_idx.append(i)
        if gen_idx:
            for i, result in zip(gen_idx, self._sample([items[i] for i in gen_idx])):
                out[i] = result
        return out  # type: ignore[return-value]

    @staticmethod
    def _score(seq: ScoringSequence, logits: Logits) -> Scores:
        if not logits.positions:
            return Scores([])
        lp = torch.log_softmax(logits.rows, dim=-1)
        targets = torch.tensor([seq.tokens[p + 1] for p in logits.positions])
        return Scores(lp.gather(1, targets[:, None])[:, 0].tolist())

    def _sample(self, items: list[tuple[Sequence, Logits]]) -> list[SampledTokens]:
        seqs = [s for s, _ in items]
        gens = [s.generator for s in seqs if s.generator is not None]
        saved = [g.get_state() for g in gens]
        try:
            rows = torch.cat([lg.rows[-1:] for _, lg in items])
            raw = rows.clone() if any(s.params.logprobs is not None for s in seqs) else None
            params = [s.params for s in seqs]
            apply_logit_bias(rows, params)
            apply_penalties(rows, params, [s.tokens[:s.prompt_len] for s in seqs], [s.output_ids for s in seqs])
            self._mask(rows, seqs)
            result = sample(rows, params, [s.generator for s in seqs], [s.params.logprobs for s in seqs], raw)
        except BaseException:
            for g, state in zip(gens, saved):
                g.set_state(state)
            raise
        out = []
        for i, (seq, logits) in enumerate(items):
            if result.logprobs is None or seq.params.logprobs is None:
                out.append(SampledTokens([result.tokens[i]]))
                continue
            got = SampledTokens([result.tokens[i]], [result.logprobs[i]], [result.top[i]])
            if seq.logprobs_pending_from is not None:
                got.forced = _forced_logprobs(seq, logits, seq.params.logprobs)
            if seq.matcher is not None and seq.params.jump_forward:
                got.row_logprobs = torch.log_softmax(raw[i], dim=-1)
            out.append(got)
        return out

    def _mask(self, rows: torch.Tensor, seqs: list[Sequence]) -> None:
        """Constraint masks (in place, constrained rows only), and EOS banned for ignore_eos."""
        constrained = [i for i, s in enumerate(seqs) if s.matcher is not None]
        if constrained:
            from sgrun.constrain import apply_bitmask
            from sgrun.constrain.bitmask import allocate_bitmask
            bitmask = allocate_bitmask(rows.shape[0], rows.shape[1])   # all allowed; filled for constrained rows
            for i in constrained:
                seqs[i].matcher.fill_bitmask(bitmask[i])
            apply_bitmask(rows, bitmask, torch.tensor(constrained))
        for i, s in enumerate(seqs):
            if s.params.ignore_eos and s.matcher is None:
                rows[i, self.eos_token_ids] = float("-inf")


def _forced_logprobs(seq: Sequence, logits: Logits, k: int) -> list[tuple[float, list[tuple[int, float]]]]:
    """The model's log-probability (and top-k) of each forced token after logprobs_pending_from,
    from the rows before the sampling row (row for position p predicts the token at p + 1)."""
    positions = logits.positions[:-1]
    if not positions:
        return []
    lp = torch.log_softmax(logits.rows[:-1].float(), dim=-1)
    targets = torch.tensor([seq.tokens[p + 1] for p in positions])
    chosen = lp.gather(1, targets[:, None])[:, 0].tolist()
    if k <= 0:
        return [(c, []) for c in chosen]
    vals, ids = lp.topk(k, dim=-1)
    return [(c, list(zip(i, v))) for c, i, v in zip(chosen, ids.tolist(), vals.tolist())]
