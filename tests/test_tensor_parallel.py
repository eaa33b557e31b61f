"""Tensor parallelism: the shard plan, the sharded math, and a real TP=2 engine on CPU (gloo,
two processes, SmolLM2 float32) against TP=1; the ranks start from sgrun's own entry point, so
a program read from stdin or a script without a __main__ guard can start a TP engine."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import sgrun
from sgrun.errors import InvalidRequestError
from sgrun.models.config import ModelConfig
from sgrun.models.tensor_parallel import plan_shard, shard_weights


def _cfg(heads: int, kv: int, inter: int = 64) -> ModelConfig:
    return ModelConfig(vocab_size=32, hidden_size=heads * 4, intermediate_size=inter, num_layers=1,
                       num_heads=heads, num_kv_heads=kv, head_dim=4, max_position=64)


def test_plan_keeps_query_heads_with_their_kv_head():
    # SmolLM2-135M: 9 query heads in 3 groups over 2 ranks -> 2 groups and 1 group.
    plans = [plan_shard(_cfg(9, 3), r, 2) for r in range(2)]
    assert [list(p.kv_heads) for p in plans] == [[0, 1], [2]]
    assert [list(p.q_heads) for p in plans] == [[0, 1, 2, 3, 4, 5], [6, 7, 8]]
    # Llama-3-8B shape: 32 q / 8 kv over 4 ranks.
    p = plan_shard(_cfg(32, 8), 3, 4)
    assert list(p.kv_heads) == [6, 7] and list(p.q_heads) == list(range(24, 32))
    # Fewer KV heads than ranks: each KV head replicated on 2 ranks, its group split.
    plans = [plan_shard(_cfg(8, 2), r, 4) for r in range(4)]
    assert [list(p.kv_heads) for p in plans] == [[0], [0], [1], [1]]
    assert [list(p.q_heads) for p in plans] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert sum(len(p.mlp_rows) for p in plans) == 64


def test_plan_refuses_what_cannot_be_split_naming_tp():
    with pytest.raises(InvalidRequestError, match="tp=4") as err:
        plan_shard(_cfg(9, 3), 0, 4)          # 3 KV heads cannot be replicated evenly over 4 ranks
    assert err.value.field == "tp"


def test_plan_refuses_architectures_it_does_not_shard():
    # Llama-shaped architectures shard (qkv bias and llama3 rope included); the others say so.
    import dataclasses
    llama3 = dataclasses.replace(_cfg(8, 2), rope_scaling={"rope_type": "llama3", "factor": 8.0}, qkv_bias=True)
    assert plan_shard(llama3, 0, 2).q_heads == range(0, 4)
    for arch, extra in [("qwen3", dict(qk_norm="head")), ("qwen3moe", dict(qk_norm="head", num_experts=4, experts_per_token=2)),
                        ("gemma3", dict(sandwich_norm=True, hidden_act="gelu_tanh"))]:
        with pytest.raises(InvalidRequestError, match=f"this model is {arch}: run it with tp=1") as err:
            plan_shard(dataclasses.replace(_cfg(8, 2), arch=arch, **extra), 0, 2)
        assert err.value.field == "tp"


def test_sharded_layer_sums_to_the_full_layer():
    torch.manual_seed(0)
    cfg = _cfg(6, 3, inter=10)
    D, hid = cfg.head_dim, cfg.hidden_size
    w = {"model.layers.0.self_attn.q_proj.weight": torch.randn(6 * D, hid),
         "model.layers.0.self_attn.k_proj.weight": torch.randn(3 * D, hid),
         "model.layers.0.self_attn.v_proj.weight": torch.randn(3 * D, hid),
         "model.layers.0.self_attn.o_proj.weight": torch.randn(hid, 6 * D),
         "model.layers.0.mlp.gate_proj.weight": torch.randn(10, hid),
         "model.layers.0.mlp.up_proj.weight": torch.randn(10, hid),
         "model.layers.0.mlp.down_proj.weight": torch.randn(hid, 10),
         "model.norm.weight": torch.randn(hid)}
    x = torch.randn(5, hid)
    full_mlp = F.linear(F.silu(F.linear(x, w["model.layers.0.mlp.gate_proj.weight"])) *
                        F.linear(x, w["model.layers.0.mlp.up_proj.weight"]), w["model.layers.0.mlp.down_proj.weight"])
    heads = torch.randn(5, 6 * D)             # attention output per query head, concatenated
    full_o = F.linear(heads, w["model.layers.0.self_attn.o_proj.weight"])
    mlp_sum, o_sum, q_rows = 0, 0, []
    for rank in range(2):
        plan = plan_shard(cfg, rank, 2)
        s = shard_weights(cfg, w, plan)
        mlp_sum = mlp_sum + F.linear(F.silu(F.linear(x, s["model.layers.0.mlp.gate_proj.weight"])) *
                                     F.linear(x, s["model.layers.0.mlp.up_proj.weight"]),
                                     s["model.layers.0.mlp.down_proj.weight"])
        local = heads[:, plan.q_heads.start * D: plan.q_heads.stop * D]
        o_sum = o_sum + F.linear(local, s["model.layers.0.self_attn.o_proj.weight"])
        q_rows.append(s["model.layers.0.self_attn.q_proj.weight"])
        assert torch.equal(s["model.norm.weight"], w["model.norm.weight"])
    torch.testing.assert_close(mlp_sum, full_mlp)
    torch.testing.assert_close(o_sum, full_o)
    assert torch.equal(torch.cat(q_rows), w["model.layers.0.self_attn.q_proj.weight"])


def test_tp2_on_a_random_weight_model_matches_tp1_and_reports_communication():
    # The GPU check's TP step runs random-weight shapes; every rank must draw the same weights.
    # (Before the module's TP engine starts: one TP engine per process at a time.)
    params = sgrun.SamplingParams(max_new_tokens=6, temperature=0, ignore_eos=True)
    prompts = [[5, 6, 7, 8, 9], [10, 11, 12, 40, 41, 42]]
    with sgrun.Engine("random:tiny", dtype="float32", memory_gb=0.05) as e:
        ref = [o.outputs[0].token_ids for o in e.generate(prompts, params)]
    with sgrun.Engine("random:tiny", dtype="float32", memory_gb=0.05, tp=2) as e:
        assert [o.outputs[0].token_ids for o in e.generate(prompts, params)] == ref
        stats = e.stats()
    assert stats["tp_steps"] >= 6 and stats["tp_all_reduce_seconds"] > 0


TP_PROGRAM = """
import sgrun
params = sgrun.SamplingParams(max_new_tokens=6, temperature=0, ignore_eos=True)
with sgrun.Engine("random:tiny", dtype="float32", memory_gb=0.05, tp=2) as e:
    print("TOKENS", e.generate([[5, 6, 7, 8, 9]], params)[0].token_ids)
    print("TP", e.stats()["tp"])
"""


def _run_program(args, tmp_path, **kw):
    # This checkout's sgrun, whatever the installed one is; run from elsewhere, so nothing is
    # found by accident in the working directory.
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    run = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                         env=env, **kw)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in run.stdout.splitlines() if " " in line)
    return lines["TOKENS"], lines["TP"]


def test_tp2_starts_from_stdin_and_from_a_script_without_a_main_guard(tmp_path):
    # multiprocessing's spawn re-imports the caller's main module: from `python - <<EOF` rank 1
    # died with FileNotFoundError '<stdin>', and a script needed a __main__ guard.
    params = sgrun.SamplingParams(max_new_tokens=6, temperature=0, ignore_eos=True)
    with sgrun.Engine("random:tiny", dtype="float32", memory_gb=0.05) as e:
        expected = str(e.generate([[5, 6, 7, 8, 9]], params)[0].token_ids)
    assert _run_program(["-"], tmp_path, input=TP_PROGRAM) == (expected, "2")
    script = tmp_path / "no_guard.py"
    script.write_text(TP_PROGRAM)
    assert _run_program([str(script)], tmp_path) == (expected, "2")


def test_a_worker_rank_is_started_as_a_module_with_its_arguments():
    from sgrun.engine.stages.tp_worker import WorkerSpec, parse_spec
    spec = WorkerSpec("random:tiny", torch.bfloat16, "none", 1, 2, "tcp://127.0.0.1:1234", 3, 20.0, "gloo", "cpu")
    assert parse_spec(spec.argv() + ["--ready-fd", "7"]) == (spec, 7)
    run = subprocess.run([sys.executable, "-m", "sgrun.engine.stages.tp_worker", "--help"], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
    assert run.returncode == 0 and "--ready-fd" in run.stdout


SHARED = "You are a careful assistant. Answer in one short sentence. " * 4
PROMPTS = [SHARED + q for q in ("What is the capital of France?", "Name a prime number.", "What colour is the sky?",
                                "Say hello.")] + ["def fib(n):", "Once upon a time", "1, 2, 3,", "The best tea is"]
GREEDY = sgrun.SamplingParams(max_new_tokens=32, temperature=0)
CONSTRAINED = sgrun.SamplingParams(max_new_tokens=24, temperature=0,
                                   json_schema={"type": "object", "properties": {"n": {"type": "integer"}},
                                                "required": ["n"]})


@pytest.fixture(scope="module")
def reference():
    with sgrun.Engine(dtype="float32", quantization="none", max_batch_tokens=32, memory_gb=0.3) as e:
        return ([o.outputs[0].token_ids for o in e.generate(PROMPTS, GREEDY)],
                e.generate(["Give me a number as JSON:"], CONSTRAINED)[0].outputs[0].text)


@pytest.fixture(scope="module")
def tp_engine():
    # Chunked prefill (32-token budget) and the prefix cache on; a short collective timeout so
    # the dead-rank test is bounded.
    engine = sgrun.Engine(dtype="float32", quantization="none", max_batch_tokens=32, memory_gb=0.3, tp=2,
                          tp_timeout=20)   # dense: exact equality with tp=1 (int4 tiles quantize activations per shard)
    yield engine
    engine.close()


def test_tp2_greedy_equals_tp1(reference, tp_engine):
    ref_ids, ref_json = reference
    outs = tp_engine.generate(PROMPTS, GREEDY)
    assert [o.outputs[0].token_ids for o in outs] == ref_ids
    assert sum(o.cached_tokens for o in outs) > 0          # the shared prefix came from the cache
    assert tp_engine.generate(["Give me a number as JSON:"], CONSTRAINED)[0].outputs[0].text == ref_json
    stats = tp_engine.stats()
    assert stats["tp"] == 2 and stats["running"] == 0
    assert stats["tp_steps"] > 0 and stats["tp_comm_seconds_per_step"] > 0


def test_a_killed_rank_stops_the_engine_with_a_clear_error(tp_engine):
    # Runs last: it ends the module's TP engine.
    handle = tp_engine.submit("Count to one thousand:", sgrun.SamplingParams(max_new_tokens=400, ignore_eos=True,
                                                                             temperature=0))
    events = iter(handle)
    next(events)                                            # generating
    tp_engine.parts.tp_group.procs[0].kill()   # rank 1's process
    t0 = time.monotonic()
    out = handle.result(timeout=60)
    assert time.monotonic() - t0 < 45
    assert out.outputs[0].finish_reason == "abort"
    assert "tensor-parallel rank 1" in (out.error or "")
    assert not tp_engine.is_alive()
    with pytest.raises(RuntimeError, match="rank 1"):
        tp_engine.submit("again", GREEDY)
