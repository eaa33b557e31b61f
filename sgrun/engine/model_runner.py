"""ModelRunner: a scheduled batch -> logits -> logit bias, penalties, constraint mask -> sampled
tokens (or, for scoring requests, the log-probabilities of their given tokens).

It owns the device the model runs on, the attention backend and the CUDA graphs. Each stage is
split into a host half that reads the sequences (`prepare`, `prepare_sampling`: plain lists and
pinned tensors) and a device half that touches only what the host half built (`run`,
`run_sampling`), so the overlap scheduler (overlap.py) can run the device half on its worker
while the engine thread moves on. `forward` and `sample` chain both halves for the plain step.
Both stages are pure with respect to the sequences (they read them, never change them), so the
engine may retry them on part of a batch when one request's inputs make them fail (isolation.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from sgrun.engine.attention_backend import AttentionBackend, Segment, make_attention_backend
from sgrun.engine.page_pool import PagePool
from sgrun.engine.sampler import SampleResult, apply_logit_bias, apply_penalties, logprob_result, sample_tokens
from sgrun.engine.sampling_params import SamplingParams
from sgrun.engine.scoring import ScoringSequence
from sgrun.engine.sequence import Sequence
from sgrun.models.compiled_forward import CompiledForward
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
    # replace the sampled token by a longer one predicted by the same row ([tokens, vocab], one
    # row per token, for a verify step).
    row_logprobs: torch.Tensor | None = None
    # A verify step (speculative.py): how many of the sequence's draft tokens were accepted (the
    # tokens are those plus one sampled token); None for a plain step.
    accepted_draft: int | None = None


@dataclass
class Scores:
    """A scoring sequence's log-probabilities of its tokens at this step's positions."""
    logprobs: list[float]


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
class SamplingInputs:
    """The host half of sampling: per-row parameters, penalty histories, constraint masks."""
    seqs: list[Sequence]
    params: list[SamplingParams]
    seeds: list[int]
    steps: list[int]
    prompts: list[list[int]]         # penalty histories, copied (empty for rows without penalties)
    outputs: list[list[int]]
    bitmask: torch.Tensor | None     # [B, words] int32 (pinned on CUDA), constrained rows filled
    constrained: list[int]
    ignore_eos_rows: list[int]       # rows whose EOS is banned (ignore_eos, or short of min_new_tokens)
    banned: list[tuple[int, int]] = field(default_factory=list)   # (row, stop id) short of min_new_tokens


@dataclass
class SampleOutput:
    """The device half's result: token ids on the device, a host copy in flight, and an event
    that says when that copy has landed (None on the CPU, where it already has)."""
    tokens: torch.Tensor
    host_tokens: torch.Tensor
    ready: torch.cuda.Event | None
    logits: torch.Tensor | None      # processed rows, kept only when logprobs were asked for
    raw: torch.Tensor | None


def _to_device(values: list[int], device: torch.device) -> torch.Tensor:
    t = torch.tensor(values, dtype=torch.long)
    if device.type == "cuda":   # pinned staging: the copy is queued, the host does not wait
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


class ModelRunner:
    def __init__(self, model: LlamaModel, pool: PagePool, eos_token_ids: frozenset[int] | set[int],
                 attention_backend: str | None = None, cascade_attention: bool = True,
                 compiled: CompiledForward | None = None):
        """`compiled`: the torch.compile'd twin of model.forward, used for batches it is
        eligible for (compiled_forward.py); None runs every forward eagerly."""
        self.model = model
        self.compiled = compiled
        self.pool = pool
        self.device = pool.k[0].device
        self.eos_token_ids = sorted(eos_token_ids)
        cfg = model.cfg
        self.attn: AttentionBackend = make_attention_backend(pool, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim,
                                                             backend=attention_backend, cascade=cascade_attention)
        wrap = getattr(model, "wrap_attention", None)   # tensor parallelism records the batch to broadcast it
        if wrap is not None:
            self.attn = wrap(self.attn)
        self.backend = type(self.attn).__name__
        self.graphs = None   # a CudaGraphRunner once captured (engine start-up, CUDA + Triton only)
        self.forward_calls = 0
        self.graph_replays = 0
        self.future_tokens = 0   # inputs read on the device from the previous step's sample (overlap)
        self.tokens_computed = 0  # tokens run through the model (prefill + decode), for cache accounting
        self.model_time = 0.0   # seconds inside the model forward itself (the rest is engine overhead)

    def capture_cuda_graphs(self, max_batch: int, max_context: int):
        """Capture the decode graphs (CUDA + Triton backend); returns their CaptureReport."""
        from sgrun.engine.cuda_graph_runner import CudaGraphRunner
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
            if seq.draft:   # a verify step: each row attends as the decode of its position would
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
            from sgrun.engine.attention_triton import page_table
            logits = self.graphs.run(input_ids, inputs.positions, page_table(segs).to(self.device),
                                     torch.tensor([s.ctx_len for s in segs], dtype=torch.int32).to(self.device),
                                     inputs.write_pages.to(self.device), inputs.write_offsets.to(self.device))
            self.graph_replays += 1
            if inputs.logit_rows.shape[0] != len(segs):
                logits = logits[inputs.logit_rows]
        else:
            self.attn.prepare(inputs.write_pages, inputs.write_offsets, segs)
            compiled = self.compiled
            forward = (compiled.forward if compiled is not None and compiled.eligible(input_ids.shape[0])
                       else self.model.forward)
            logits = forward(input_ids, inputs.positions, self.attn, inputs.logit_rows)
        self.model_time += time.perf_counter() - t0
        return logits

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
        """Per item: scores for a scoring sequence, else its sampled token."""
        out: list[SampledTokens | Scores | None] = [None] * len(items)
        gen_idx, drafted = [], []
        for i, (seq, logits) in enumerate(items):
            if isinstance(seq, ScoringSequence):
                out[i] = self._score(seq, logits)
            elif seq.draft:
                drafted.append(i)
            else:
                gen_idx.append(i)
        if drafted:   # speculative steps: every draft verified in one sampling pass (speculative.py)
            from sgrun.engine.speculative import verify_drafts
            for i, got in zip(drafted, verify_drafts(self, [items[i] for i in drafted])):
                out[i] = got
        if gen_idx:
            seqs = [items[i][0] for i in gen_idx]
            rows = torch.cat([items[i][1].rows[-1:] for i in gen_idx])
            result = self.run_sampling(self.prepare_sampling(seqs), rows)
            for j, (i, got) in enumerate(zip(gen_idx, self.finish_sampling(seqs, result))):
                seq = seqs[j]
                if seq.params.logprobs is not None:
                    if seq.logprobs_pending_from is not None:
                        got.forced = _forced_logprobs(seq, items[i][1], seq.params.logprobs)
                    if seq.matcher is not None and seq.params.jump_forward:
                        got.row_logprobs = torch.log_softmax(result.raw[j], dim=-1)
                out[i] = got
        return out  # type: ignore[return-value]

    @staticmethod
    def _score(seq: ScoringSequence, logits: Logits) -> Scores:
        if not logits.positions:
            return Scores([])
        lp = torch.log_softmax(logits.rows, dim=-1)
        targets = torch.tensor([seq.tokens[p + 1] for p in logits.positions]).to(lp.device)
        return Scores(lp.gather(1, targets[:, None])[:, 0].tolist())

    def prepare_sampling(self, seqs: list[Sequence]) -> SamplingInputs:
        """Host half: parameters, seeds (noise = hash(seed, step)), and the constraint bitmask
        filled by the matchers on the CPU — while the device may still be running the forward."""
        constrained = [i for i, s in enumerate(seqs) if s.matcher is not None]
        bitmask = None
        if constrained:
            from sgrun.constrain.bitmask import allocate_bitmask
            bitmask = allocate_bitmask(len(seqs), self.model.cfg.vocab_size)   # all allowed
            if self.device.type == "cuda":
                bitmask = bitmask.pin_memory()
            for i in constrained:
                seqs[i].matcher.fill_bitmask(bitmask[i])
        penalised = [s.params.repetition_penalty != 1.0 or s.params.frequency_penalty != 0.0
                     or s.params.presence_penalty != 0.0 for s in seqs]
        prompts = [s.tokens[:s.prompt_len] if p else [] for s, p in zip(seqs, penalised)]
        outputs = [list(s.output_ids) if p else [] for s, p in zip(seqs, penalised)]
        # min_new_tokens: nothing may end an unconstrained sequence before it (EOS and stop ids banned).
        early = [s.matcher is None and s.num_output < s.params.min_new_tokens for s in seqs]
        return SamplingInputs(seqs, [s.params for s in seqs], [s.sample_seed for s in seqs],
                              [s.num_output for s in seqs], prompts, outputs, bitmask, constrained,
                              [i for i, s in enumerate(seqs) if (s.params.ignore_eos and s.matcher is None) or early[i]],
                              [(i, t) for i, s in enumerate(seqs) if early[i] for t in s.params.stop_token_ids])

    def process_rows(self, si: SamplingInputs, rows: torch.Tensor) -> None:
        """In place: logit bias, penalties, constraint masks, EOS / stop-id bans (all but the
        temperature and truncation filters, which the sampler applies)."""
        params, dev = si.params, rows.device
        apply_logit_bias(rows, params)
        apply_penalties(rows, params, si.prompts, si.outputs)
        if si.bitmask is not None:
            mask = si.bitmask.to(dev, non_blocking=True)
            which = _to_device(si.constrained, dev)
            if self.backend == "TritonPagedAttention":
                from sgrun.kernels import apply_bitmask
            else:
                from sgrun.constrain import apply_bitmask
            apply_bitmask(rows, mask, which)
        if si.ignore_eos_rows:
            r = _to_device([i for i in si.ignore_eos_rows for _ in self.eos_token_ids], dev)
            c = _to_device(self.eos_token_ids * len(si.ignore_eos_rows), dev)
            rows[r, c] = float("-inf")
        if si.banned:
            rows[_to_device([i for i, _ in si.banned], dev), _to_device([t for _, t in si.banned], dev)] = float("-inf")

    def run_sampling(self, si: SamplingInputs, rows: torch.Tensor) -> SampleOutput:
        """Device half: bias, penalties, mask (the Triton bitmask kernel when the Triton
        backend runs), then tokens; their host copy is queued, not waited for."""
        params = si.params
        want_lp = any(p.logprobs is not None for p in params)
        raw = rows.clone() if want_lp else None
        self.process_rows(si, rows)
        dev = rows.device
        tokens = sample_tokens(rows, params, si.seeds, si.steps)
        if dev.type == "cuda":
            host = torch.empty(tokens.shape, dtype=tokens.dtype, pin_memory=True)
            host.copy_(tokens, non_blocking=True)
            ready = torch.cuda.Event()
            ready.record()
            return SampleOutput(tokens, host, ready, rows if want_lp else None, raw)
        return SampleOutput(tokens, tokens, None, rows if want_lp else None, raw)

    @staticmethod
    def finish_sampling(seqs: list[Sequence], out: SampleOutput) -> list[SampledTokens]:
        """Wait for the sampled tokens (only them) and hand them out per sequence."""
        if out.ready is not None:
            out.ready.synchronize()
        if out.logits is None:
            result = SampleResult(out.host_tokens.tolist(), None, None)
        else:
            result = logprob_result(out.tokens, out.logits, [s.params.logprobs for s in seqs], out.raw)
        res = []
        for i, seq in enumerate(seqs):
            if result.logprobs is None or seq.params.logprobs is None:
                res.append(SampledTokens([result.tokens[i]]))
            else:
                res.append(SampledTokens([result.tokens[i]], [result.logprobs[i]], [result.top[i]]))
        return res


def _forced_logprobs(seq: Sequence, logits: Logits, k: int) -> list[tuple[float, list[tuple[int, float]]]]:
    """The model's log-probability (and top-k) of each forced token after logprobs_pending_from,
    from the rows before the sampling row (row for position p predicts the token at p + 1)."""
    positions = logits.positions[:-1]
    if not positions:
        return []
    lp = torch.log_softmax(logits.rows[:-1].float(), dim=-1)
    targets = torch.tensor([seq.tokens[p + 1] for p in positions]).to(lp.device)
    chosen = lp.gather(1, targets[:, None])[:, 0].tolist()
    if k <= 0:
        return [(c, []) for c in chosen]
    vals, ids = lp.topk(k, dim=-1)
    return [(c, list(zip(i, v))) for c, i, v in zip(chosen, ids.tolist(), vals.tolist())]
