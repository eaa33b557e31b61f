"""ModelRunner: a scheduled batch -> logits -> logit bias, penalties, constraint mask -> sampled
tokens (or, for scoring requests, the log-probabilities of their given tokens).

It owns the device the model runs on, the attention backend and the CUDA graphs. Each stage is
split into a host half that reads the sequences (`prepare`, `prepare_sampling`: plain lists and
pinned tensors) and a device half that touches only what the host half built (`run`,
`run_sampling`), so the step pipeline (step.py) can run the device half inline (depth 0) or on
its device worker (depth 1, overlap) while the engine thread moves on; `finish_sampling` reads
the drawn tokens back. `sample_logits` is the one sampling path (the step's job, and `sample`,
which with `forward` chains the halves for a batch run again in parts).
Both stages are pure with respect to the sequences (they read them, never change them), so the
step may retry them on part of a batch when one request's inputs make them fail (isolation.py).
Sampling rows come from sampling_rows.py (a plain decode is a draft of length 0); the draw and
the acceptance of drafts are sampler.py's `draw`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import torch

from sgrun.engine.parts.attention.backend import AttentionBackend, Segment
from sgrun.engine.parts.attention.choice import default_backend, make_attention_backend
from sgrun.engine.state.model_like import ModelLike
from sgrun.engine.state.page_pool import PagePool
from sgrun.engine.parts.sampler import (MaskKernel, apply_logit_bias, apply_penalties, constraint_mask_kernel, draw,
                                  row_argmax, token_logprobs)
from sgrun.engine.state.sampled import SampledLogprobs, SampledTokens, Scores
from sgrun.engine.parts.sampling_rows import SamplingInputs, penalised, sampling_inputs
from sgrun.engine.state.scoring import ScoringSequence
from sgrun.engine.state.sequence import Sequence
from sgrun.engine.stages.speculative import tokens_of
from sgrun.models.compiled_forward import CompiledForward
from sgrun.models.fused_decode import FusedDecode


@dataclass
class Logits:
    """One sequence's share of a forward: the next-token logits after each of `positions`."""
    rows: torch.Tensor        # [len(positions), vocab]
    positions: list[int]      # absolute token positions, ascending


@dataclass
class BatchInputs:
    """Everything one forward needs, built on the host from the sequences."""
    input_ids: torch.Tensor          # [T] (rows in `future_rows` are filled on the device)
    positions: torch.Tensor          # [T]
    segments: list[Segment]
    write_pages: torch.Tensor        # [T]
    write_offsets: torch.Tensor      # [T]
    logit_rows: torch.Tensor         # rows whose logits are wanted
    wanted: list[list[int] | None]   # per item: Sequence.logit_positions
    future_rows: list[int]           # batch rows whose token the previous step is still sampling
    future_src: list[int]            # ... and their index in that step's sampled tokens
    all_decode: bool


@dataclass
class SampleOutput:
    """The device half's result: the drawn rows ([2, R]: token, draft accepted; sampler.draw) on
    the device, a host copy in flight, and an event that says when that copy has landed (None on
    the CPU, where it already has)."""
    drawn: torch.Tensor
    host_drawn: torch.Tensor
    ready: torch.cuda.Event | None
    raw: torch.Tensor | None         # the rows before any processing, kept only when logprobs were asked for


def _to_device(values: list[int], device: torch.device) -> torch.Tensor:
    t = torch.tensor(values, dtype=torch.long)
    if device.type == "cuda":   # pinned staging: the copy is queued, the host does not wait
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


class ModelRunner:
    def __init__(self, model: ModelLike, pool: PagePool, eos_token_ids: frozenset[int] | set[int],
                 attention_backend: str | None = None, cascade_attention: bool = True,
                 compiled: CompiledForward | None = None, fused: FusedDecode | None = None,
                 wrap_attention: Callable[[AttentionBackend], AttentionBackend] | None = None,
                 mask_kernel: MaskKernel | None = None):
        """`fused`: the forward with C++ blocks (fused_decode.py), used for the batches it is
        eligible for (it is the fastest: docs/cpu_kernels.md); `compiled`: the torch.compile'd twin
        of model.forward, used for the others it is eligible for once its graphs are ready
        (compiled_forward.py); without either (or above their row limits) the forward runs eagerly.
        `wrap_attention`: what the model's forward gets instead of the backend (tensor parallelism's
        rank 0 records each batch there to broadcast it: tp_group.py); `mask_kernel`: the
        constraint-mask kernel (default: sampler.constraint_mask_kernel's for the backend)."""
        self.model = model
        self.compiled = compiled
        self.fused = fused
        self.pool = pool
        self.device = pool.k[0].device
        self.eos_token_ids = sorted(eos_token_ids)
        cfg = model.cfg
        # The backend itself (`kernels`), and what the forward is handed (`attn`: the same, or its wrapper).
        # The model's attention scale and per-layer sliding windows are told to the backend once here.
        self.kernels: AttentionBackend = make_attention_backend(
            pool, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, backend=attention_backend,
            cascade=cascade_attention, query_dtype=getattr(model, "dtype", None),
            scale=getattr(model, "attn_scale", None), windows=getattr(model, "layer_windows", None))
        self.attn = wrap_attention(self.kernels) if wrap_attention is not None else self.kernels
        self.backend = type(self.attn).__name__
        self.apply_bitmask = mask_kernel or constraint_mask_kernel(attention_backend or default_backend(self.device))
        self.graphs = None   # a CudaGraphRunner once captured (engine start-up, CUDA + Triton only)
        self.forward_calls = 0
        self.graph_replays = 0
        self.future_tokens = 0   # inputs read on the device from the previous step's sample (overlap)
        self.tokens_computed = 0  # tokens run through the model (prefill + decode), for cache accounting
        self.model_time = 0.0   # seconds inside the model forward itself (the rest is engine overhead)

    def capture_cuda_graphs(self, max_batch: int, max_context: int):
        """Capture the decode graphs (CUDA + Triton backend); returns their CaptureReport."""
        from sgrun.engine.parts.cuda_graph_runner import CudaGraphRunner
        self.graphs = CudaGraphRunner(self.model, self.attn, max_batch, max_context, self.pool.scratch_page)
        return self.graphs.capture()

    # --- batch -> logits --------------------------------------------------------------------
    def prepare(self, items: list[tuple[Sequence, int]], future: dict[int, int] | None = None) -> BatchInputs:
        """Host half of a forward. `future`: seq_id -> index, in the previous step's sampled
        tokens, of a sequence's last token when that token is still on the device."""
        ps = self.pool.page_size
        ids: list[int] = []
        positions: list[int] = []
        write_pages: list[int] = []
        segments: list[Segment] = []
        rows: list[int] = []
        wanted: list[list[int] | None] = []
        future_rows: list[int] = []
        future_src: list[int] = []
        verifying = False   # verify rows stay off the CUDA graphs (captured for one row per sequence)
        t = 0
        for seq, n in items:
            start, end = seq.num_computed, seq.num_computed + n
            known = seq.token_slice(start, end)
            ids.extend(known)
            if len(known) < n:   # the pending token: the previous step's sample, read on the device
                assert future is not None and len(known) == n - 1, "a pending token without its step"
                ids.append(0)
                future_rows.append(t + n - 1)
                future_src.append(future[seq.seq_id])
            positions.extend(range(start, end))
            table = seq.page_table[: -(-end // ps)]
            write_pages.extend(table[p // ps] for p in range(start, end))
            pages = torch.tensor(table, dtype=torch.long)
            if seq.speculation.draft:   # a verify step: each row attends as the decode of its position would
                segments.extend(Segment(q_start=t + j, q_len=1, ctx_len=start + j + 1, pages=pages) for j in range(n))
                verifying = True
            else:
                segments.append(Segment(q_start=t, q_len=n, ctx_len=end, pages=pages))
            want = seq.logit_positions(start, end)
            wanted.append(want)
            rows.extend(t + p - start for p in want or ())
            t += n
        dev = self.device
        return BatchInputs(_to_device(ids, dev), _to_device(positions, dev), segments,
                           torch.tensor(write_pages, dtype=torch.long), torch.tensor(positions, dtype=torch.long) % ps,
                           _to_device(rows, dev), wanted, future_rows, future_src,
                           not verifying and all(s.q_len == 1 for s in segments))

    def run(self, inputs: BatchInputs, prev_tokens: torch.Tensor | None = None) -> torch.Tensor:
        """Device half: logits [len(logit_rows), vocab] float32 (not synchronised)."""
        input_ids = inputs.input_ids
        if inputs.future_rows:
            self.future_tokens += len(inputs.future_rows)
            input_ids = input_ids.clone()
            dev = self.device
            input_ids[_to_device(inputs.future_rows, dev)] = prev_tokens[_to_device(inputs.future_src, dev)]
        self.forward_calls += 1
        self.tokens_computed += input_ids.shape[0]
        t0 = time.perf_counter()
        segs = inputs.segments
        if (self.graphs is not None and inputs.all_decode
                and self.graphs.can_run(len(segs), max(s.ctx_len for s in segs))):
            from sgrun.engine.parts.attention.triton_backend import page_table
            logits = self.graphs.run(input_ids, inputs.positions, page_table(segs).to(self.device),
                                     torch.tensor([s.ctx_len for s in segs], dtype=torch.int32).to(self.device),
                                     inputs.write_pages.to(self.device), inputs.write_offsets.to(self.device))
            self.graph_replays += 1
            if inputs.logit_rows.shape[0] != len(segs):
                logits = logits[inputs.logit_rows]
        else:
            self.attn.prepare(inputs.write_pages, inputs.write_offsets, segs)
            forward = self.forward_for(input_ids.shape[0])
            logits = forward(input_ids, inputs.positions, self.attn, inputs.logit_rows)
        self.model_time += time.perf_counter() - t0
        return logits

    def forward_for(self, num_tokens: int):
        """The forward a batch of `num_tokens` runs: the C++ blocks, else the compiled graphs (when
        ready), else eager. (The blocks measured 102.7 tok/s at batch 1 against the graphs' 76.6.)"""
        compiled, fused = self.compiled, self.fused
        if fused is not None and fused.eligible(num_tokens):
            return fused.forward
        if compiled is not None and compiled.eligible(num_tokens):
            return compiled.forward
        return self.model.forward

    @staticmethod
    def split(inputs: BatchInputs, logits: torch.Tensor) -> list[Logits | None]:
        out: list[Logits | None] = []
        row = 0
        for want in inputs.wanted:
            if want is None:
                out.append(None)
                continue
            out.append(Logits(logits[row:row + len(want)], want))
            row += len(want)
        return out

    def forward(self, items: list[tuple[Sequence, int]]) -> list[Logits | None]:
        """Compute `n` new tokens of each (sequence, n). Returns, per item, the logits its
        sequence wants this step (Sequence.logit_positions), or None."""
        inputs = self.prepare(items)
        return self.split(inputs, self.run(inputs))

    # --- logits -> tokens -------------------------------------------------------------------
    def sample(self, items: list[tuple[Sequence, Logits]]) -> list[SampledTokens | Scores]:
        """Per item: scores for a scoring sequence, else the tokens it accepts, from the logits
        each item brings (a batch run again in parts): the step's own three calls, in order."""
        out: list[SampledTokens | Scores | None] = [None] * len(items)
        gen = [i for i, (seq, _) in enumerate(items) if not isinstance(seq, ScoringSequence)]
        for i, (seq, logits) in enumerate(items):
            if isinstance(seq, ScoringSequence):
                out[i] = self.score(seq, logits)
        if gen:
            seqs, logits_of = [items[i][0] for i in gen], [items[i][1] for i in gen]
            rows = torch.cat([lg.rows[-(len(seq.speculation.draft) + 1):] for seq, lg in zip(seqs, logits_of)])
            si = self.prepare_sampling(seqs)
            for i, got in zip(gen, self.finish_sampling(seqs, si, self.sample_logits(si, rows), logits_of)):
                out[i] = got
        return out  # type: ignore[return-value]

    @staticmethod
    def score(seq: ScoringSequence, logits: Logits) -> Scores:
        targets = [seq.tokens[p + 1] for p in logits.positions]
        return Scores([lp for lp, _ in token_logprobs(logits.rows, targets, 0)])

    def prepare_sampling(self, seqs: list[Sequence]) -> SamplingInputs:
        """Host half: every sequence's rows (len(draft) + 1 each, sampling_rows.py) with its
        constraint bitmask filled on the CPU, while the device may still run the forward."""
        return sampling_inputs(seqs, self.model.cfg.vocab_size, pin=self.device.type == "cuda")

    def process_rows(self, si: SamplingInputs, rows: torch.Tensor) -> None:
        """In place: logit bias, penalties, constraint masks, EOS / stop-id bans (all but the
        temperature and truncation filters, which the draw applies)."""
        params, dev = si.params, rows.device
        apply_logit_bias(rows, params)
        apply_penalties(rows, params, si.prompts, si.outputs)
        if si.bitmask is not None:
            self.apply_bitmask(rows, si.bitmask.to(dev, non_blocking=True), _to_device(si.constrained, dev))
        if si.ignore_eos_rows:
            r_ids = [i for i in si.ignore_eos_rows for _ in self.eos_token_ids]
            c_ids = self.eos_token_ids * len(si.ignore_eos_rows)
            if dev.type == "cpu" and rows.dtype == torch.float32 and rows.is_contiguous():
                # numpy's fancy assignment on the same memory: 8.5 us against the index tensors'
                # 32 us per step (AMD EPYC Zen 3), the same elements set.
                rows.numpy()[r_ids, c_ids] = float("-inf")
            else:
                rows[_to_device(r_ids, dev), _to_device(c_ids, dev)] = float("-inf")
        if si.banned:
            rows[_to_device([i for i, _ in si.banned], dev), _to_device([t for _, t in si.banned], dev)] = float("-inf")

    def sample_logits(self, si: SamplingInputs, logits: torch.Tensor, rows: list[int] | None = None) -> SampleOutput:
        """The device half of sampling, the one path every draw takes: the forward's `logits`
        rows `rows` (None: all, in order) -> processed and drawn. When every row is taken in order
        (a plain decode batch) greedy rows with nothing to apply are drawn in place
        (draw_plain_greedy); else a copy (run_sampling processes its rows in place), without
        index_select's index tensor when it is every row (30 us at batch 1)."""
        if rows is None or (len(rows) == logits.shape[0] and rows == list(range(len(rows)))):
            plain = self.draw_plain_greedy(si, logits)
            return plain if plain is not None else self.run_sampling(si, logits.clone())
        picked = torch.tensor(rows, dtype=torch.long).to(logits.device)
        return self.run_sampling(si, logits.index_select(0, picked))

    def draw_plain_greedy(self, si: SamplingInputs, rows: torch.Tensor) -> SampleOutput | None:
        """The draw of a CPU batch whose every row is greedy with nothing to apply but EOS / stop-id
        bans (no logit bias, penalties, constraint, logprobs or draft), read off the forward's
        rows in place: their argmax, where no row's is a token banned there (a ban lowers only
        its token, so it moves an argmax only where that token was the argmax). None otherwise:
        the caller copies and runs the full path (run_sampling), with the same result.

        Why: at batch 1 the copy, the processing and the draw ran ~0.3-0.6 ms a step on caches the
        forward had just flushed (docs/cpu_kernels.md, "The plain greedy draw"); this is one argmax."""
        if rows.device.type != "cpu" or si.bitmask is not None or si.has_drafts:
            return None
        if any(not p.greedy or p.logit_bias or p.logprobs is not None or penalised(p) for p in si.params):
            return None
        drawn = row_argmax(rows.float())
        if si.ignore_eos_rows or si.banned:
            tokens = drawn.tolist()
            eos = set(self.eos_token_ids)
            if any(tokens[r] in eos for r in si.ignore_eos_rows) or any(tokens[r] == t for r, t in si.banned):
                return None
        out = torch.stack([drawn, torch.zeros_like(drawn)])
        return SampleOutput(out, out, None, None)

    def run_sampling(self, si: SamplingInputs, rows: torch.Tensor) -> SampleOutput:
        """Device half: process the rows, then draw (sampler.draw); the host copy
        of the drawn rows is queued, not waited for."""
        rows = rows.float()
        raw = rows.clone() if any(p.logprobs is not None for p in si.params) else None
        self.process_rows(si, rows)
        drawn = draw(rows, si)
        if drawn.device.type == "cuda":
            host = torch.empty(drawn.shape, dtype=drawn.dtype, pin_memory=True)
            host.copy_(drawn, non_blocking=True)
            ready = torch.cuda.Event()
            ready.record()
            return SampleOutput(drawn, host, ready, raw)
        return SampleOutput(drawn, drawn, None, raw)

    @staticmethod
    def finish_sampling(seqs: list[Sequence], si: SamplingInputs, out: SampleOutput,
                        logits: list[Logits | None] | None = None) -> list[SampledTokens]:
        """Wait for the drawn rows (only them) and hand each sequence its tokens, with the
        model's own logprobs (the rows before any processing, as OpenAI reports them) if asked,
        and, given each sequence's `logits` of this step (read on the host: depth 0), those of
        the tokens jump-forward forced last step (`forced_logprobs`, attached only here)."""
        if out.ready is not None:
            out.ready.synchronize()
        res = []
        logits = logits or [None] * len(seqs)
        for seq, first, (tokens, accepted), lg in zip(seqs, si.first_rows, tokens_of(seqs, si, out.host_drawn.tolist()),
                                                      logits):
            got = SampledTokens(tokens, accepted_draft=accepted)
            k = seq.params.logprobs
            if lg is not None and k is not None and seq.constraint.logprobs_pending_from is not None:
                got.forced = forced_logprobs(seq, lg, k)
            if k is not None and out.raw is not None:
                lp = torch.log_softmax(out.raw[first:first + len(tokens)], dim=-1)
                pairs = token_logprobs(lp, tokens, k, normalised=True)
                # The row of each token, kept where jump-forward may replace any of them.
                got.logprobs = SampledLogprobs([c for c, _ in pairs], [t for _, t in pairs],
                                               lp if seq.constraint.matcher is not None and seq.params.jump_forward else None)
            res.append(got)
        return res


def forced_logprobs(seq: Sequence, logits: Logits, k: int) -> list[tuple[float, list[tuple[int, float]]]]:
    """The model's log-probability (and top-k) of each forced token after logprobs_pending_from,
    from the rows before the sampling row (row for position p predicts the token at p + 1)."""
    positions = logits.positions[:-1]
    return token_logprobs(logits.rows[:-1], [seq.tokens[p + 1] for p in positions], k)
