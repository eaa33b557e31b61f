"""Greedy outputs with n-gram speculation on and off are token for token the same in bf16, not
only in float32: a verify forward gives each draft position bitwise the logits that a plain
decode at that position gets. Its rows are decode rows of the paged kernel (model_runner.py),
whose result depends on a row's own query and context alone (paged_decode.cpp: fixed chunks
folded in order, whatever the batch, the threads or a cascade), and the int4 linears compute
every row alike at any row count (sgrun/kernels/cpu/matmul.py).

Real SmolLM2 weights, int4 with bf16 activations, compiled forward (the CPU default), and dense
bf16 weights (eager, to keep the test short). With dense weights the layers are row-invariant too
(the same C++ kernel), but the float32 lm_head goes through torch's GEMM, whose rows differ at
~4e-5 between one row and several: its greedy outputs agree, its logits are not bitwise, so only
the int4 engine is held to bitwise rows. The kernels that make rows invariant exist at every CPU
level but `scalar` (cpu_matmul.has_tiles()); there torch's kernels run and promise nothing of the kind. The
prefix cache is off: a cache hit prefills a prompt's tail at another row count, which changes
its rounding whether speculation is on or not.
"""

from __future__ import annotations

import pytest
import torch

import sgrun
from sgrun.engine.parts.attention.backend import Segment
from sgrun.kernels.cpu import matmul as cpu_matmul

# Truly absent only at the scalar level (SGRUN_CPU_ISA=scalar, or a CPU without SIMD): there torch's
# kernels run and promise nothing of the kind. Where the level has tiles they must have built
# (test_cpu_matmul.py::test_the_kernel_builds_at_every_level_the_cpu_runs), so this never skips silently.
pytestmark = pytest.mark.skipif(not cpu_matmul.has_tiles(),
                                reason="the scalar CPU level has no row-invariant kernels")

TOOL_RESULT = ('{"order_id": "A-1042", "customer": "Alice Smith", "email": "alice.smith@example.com", '
               '"tracking": "JD014600006281234567", "city": "Paris"}')


@pytest.fixture(scope="module")
def bf16_engine(model_path):
    engine = sgrun.Engine(str(model_path), dtype="bfloat16", num_threads=2, memory_gb=0.5, quantization="int4",
                          compile=True, enable_prefix_cache=False)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def dense_bf16_engine(model_path):
    engine = sgrun.Engine(str(model_path), dtype="bfloat16", num_threads=2, memory_gb=0.5, quantization="none",
                          compile=False, enable_prefix_cache=False)
    yield engine
    engine.close()


def _forward(engine, pool_rows: int, tokens: list[int], start: int, one_by_one: bool) -> torch.Tensor:
    """Logits of `tokens` at positions start.. (the pool's first `start` positions filled): one
    T = 1 forward per token, or one forward with every token a decode segment (a verify step)."""
    runner = engine.runner
    pages = torch.arange(pool_rows, dtype=torch.long)
    ps = engine.pool.page_size
    out = []
    for group in ([[j] for j in range(len(tokens))] if one_by_one else [list(range(len(tokens)))]):
        pos = torch.tensor([start + j for j in group], dtype=torch.long)
        segs = [Segment(q_start=i, q_len=1, ctx_len=int(p) + 1, pages=pages[: -(-(int(p) + 1) // ps)])
                for i, p in enumerate(pos)]
        runner.attn.prepare(pages[pos // ps], pos % ps, segs)
        out.append(runner.compiled.forward(torch.tensor([tokens[j] for j in group]), pos, runner.attn,
                                           torch.arange(len(group))))
    return torch.cat(out)


def test_verify_rows_are_bitwise_the_decodes_at_their_positions(bf16_engine):
    """The engine's own model, pool and backend, outside its scheduler (no request runs): a
    300-token context, then 7 tokens decoded one forward each vs in one verify-shaped forward.
    Their logits and the K/V they wrote are bitwise equal."""
    engine = bf16_engine
    assert engine.runner.compiled is not None and engine.runner.backend == "CppPagedAttention"
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(100, 40000, (300,), generator=gen).tolist()
    tokens = torch.randint(100, 40000, (7,), generator=gen).tolist()
    ps, n_pages = engine.pool.page_size, -(-(300 + 7) // engine.pool.page_size)
    pool, runner = engine.pool, engine.runner
    results, kv = [], []

    def run() -> None:   # on the engine's loop, which owns the pool
        pos = torch.arange(300)
        pages = torch.arange(n_pages, dtype=torch.long)
        for one_by_one in (True, False):
            with torch.inference_mode():
                runner.attn.prepare(pages[pos // ps], pos % ps, [Segment(0, 300, 300, pages[: -(-300 // ps)])])
                engine.model.forward(torch.tensor(prompt), pos, runner.attn, torch.tensor([299]))
                results.append(_forward(engine, n_pages, tokens, 300, one_by_one))
            kv.append([c[:, :n_pages].clone() for c in pool.k + pool.v])

    assert engine.run_on_loop(engine.request_pages) == 0   # the pages written here belong to nobody
    engine.run_on_loop(run)
    decode, verify = results
    assert all(torch.equal(decode[j], verify[j]) for j in range(7)), (decode - verify).abs().amax(dim=1)
    assert all(torch.equal(a, b) for a, b in zip(*kv))


@pytest.mark.parametrize("which", ["int4", "dense"])
def test_greedy_outputs_identical_with_speculation_on_and_off_in_bf16(which, request, chat_prompt):
    """A prompt that copies a tool result (long accepted drafts), code that repeats itself, and
    a free answer (drafts mostly rejected): the same tokens, text and finish with speculation on."""
    bf16_engine = request.getfixturevalue("bf16_engine" if which == "int4" else "dense_bf16_engine")
    prompts = [chat_prompt(f"Tool result of get_order:\n{TOOL_RESULT}\n\nRepeat the tool result exactly, as JSON."),
               "def area(width, height):\n    return width * height\n\n\ndef area(width, height):\n",
               chat_prompt("Why is the sky blue? Answer in two sentences.")]
    before = bf16_engine.stats()
    for prompt in prompts:
        got = [bf16_engine.generate(prompt, sgrun.SamplingParams(max_new_tokens=48, temperature=0,
                                                                  speculative_ngram=spec))[0].outputs[0]
               for spec in (False, True)]
        off, on = got
        assert on.token_ids == off.token_ids and on.text == off.text and on.finish_reason == off.finish_reason
    after = bf16_engine.stats()
    assert after["spec_accepted_tokens"] - before["spec_accepted_tokens"] >= 20   # the copy was drafted
