"""The Triton path end to end on the CPU: the engine with attention_backend="triton" runs every
kernel (KV write, split-K decode, extend over a cached prefix, the bitmask) through Triton's
interpreter on CPU tensors, and must be greedy-equal to the torch backend. Tiny random model
(random:tiny) so the interpreter stays fast; conftest.py sets TRITON_INTERPRET=1."""

from __future__ import annotations

import random

import pytest
import torch

import sgrun
import sgrun.kernels.triton

GREEDY = sgrun.SamplingParams(max_new_tokens=6, temperature=0.0, ignore_eos=True)


def _prompts() -> list[list[int]]:
    rng = random.Random(0)
    shared = [rng.randrange(1, 500) for _ in range(40)]              # 2.5 pages: a cacheable prefix
    return [[rng.randrange(1, 500) for _ in range(n)] for n in (5, 17, 33)] + [shared + [7, 8], shared + [9]]


def _run(backend: str, prompts: list[list[int]]) -> tuple[list[list[int]], list[int], str, dict]:
    with sgrun.Engine("random:tiny", dtype="float32", device="cpu", attention_backend=backend, memory_gb=0.05,
                      max_batch_tokens=64, debug_checks=True) as eng:
        batched = [o.token_ids for o in eng.generate(prompts[:4], GREEDY)]
        cached = eng.submit(prompts[4], GREEDY)          # shares 40 tokens with prompts[3]: 32 from the cache
        batched.append(cached.result().token_ids)
        regex = eng.generate([prompts[0]], sgrun.SamplingParams(max_new_tokens=8, temperature=0.0,
                                                                regex="[a-c]{2}x[0-9]+"))[0].text
        report = eng.startup_report()
        assert eng.run_on_loop(eng.request_pages) == 0
        return batched, [cached.cached_tokens], regex, report


def test_triton_backend_is_greedy_equal_to_torch_on_cpu(monkeypatch: pytest.MonkeyPatch):
    calls = []
    triton_bitmask = sgrun.kernels.triton.apply_bitmask

    def spy(logits, bitmask, rows=None):
        calls.append(rows.numel())
        return triton_bitmask(logits, bitmask, rows)

    monkeypatch.setattr(sgrun.kernels.triton, "apply_bitmask", spy)
    prompts = _prompts()
    torch_out = _run("torch", prompts)
    assert not calls                                    # the torch backend masks with the torch op
    triton_out = _run("triton", prompts)
    assert calls, "the Triton bitmask kernel was not applied"
    assert triton_out[0] == torch_out[0]                # batched + prefix-cached greedy tokens
    assert triton_out[1] == torch_out[1] == [32]        # the second shared-prefix request hit the cache
    assert triton_out[2] == torch_out[2] and triton_out[2][:3] in {a + b + "x" for a in "abc" for b in "abc"}
    assert triton_out[3]["attention_backend"] == "TritonPagedAttention"
    assert torch_out[3]["attention_backend"] == "TorchPagedAttention"


def test_engine_tensors_live_on_its_device():
    # On `meta` a stray CPU tensor in any op raises: the model, the pool and the RoPE tables
    # are placed by the engine's device setting. (A meta engine cannot compute; CUDA is the
    # `gpu`-marked test's job.)
    from sgrun.engine.parts.device import tensors_of
    from sgrun.engine.state.page_pool import PagePool
    from sgrun.models.llama import LlamaModel
    from sgrun.models.random_model import preset_config, random_weights
    cfg = preset_config("random:tiny")
    model = LlamaModel(cfg, random_weights(cfg), torch.float32, device="meta")
    assert {t.device.type for t in tensors_of(model)} == {"meta"}
    for layer in model.layers:
        assert {t.device.type for t in tensors_of(layer)} == {"meta"}
    pool = PagePool(cfg.num_layers, 8, 16, cfg.num_kv_heads, cfg.head_dim, torch.float32, "meta")
    from sgrun.engine.parts.attention.torch_backend import TorchPagedAttention
    from sgrun.engine.parts.attention.backend import Segment
    attn = TorchPagedAttention(pool, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim)
    pages = torch.tensor([3, 1])
    attn.prepare(torch.tensor([1, 1, 1]), torch.tensor([0, 1, 2]),
                 [Segment(q_start=0, q_len=2, ctx_len=18, pages=pages), Segment(q_start=2, q_len=1, ctx_len=19, pages=pages)])
    ids, pos = torch.tensor([1, 2, 3], device="meta"), torch.tensor([16, 17, 18], device="meta")
    logits = model.forward(ids, pos, attn, torch.tensor([1, 2], device="meta"))
    assert logits.device.type == "meta" and logits.shape == (2, cfg.vocab_size)


def test_device_setting_is_checked():
    from sgrun.engine.parts.device import resolve_device
    from sgrun.errors import InvalidRequestError
    assert resolve_device("cpu").type == "cpu"
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    for bad, why in (("tpu", "'auto', 'cpu', 'cuda' or 'cuda:N'"), ("cuda:99", "cuda")):
        if bad.startswith("cuda") and not torch.cuda.is_available():
            why = "no CUDA device"
        with pytest.raises(InvalidRequestError, match=why):
            resolve_device(bad)
    with pytest.raises(InvalidRequestError, match="cuda_graph"):
        sgrun.Engine("random:tiny", device="cpu", cuda_graph=True)


@pytest.mark.gpu
def test_cuda_graphs_and_overlap_keep_greedy_outputs_on_cuda():
    assert torch.cuda.is_available(), "the gpu marker needs a CUDA device"
    prompts = _prompts()
    outs = {}
    for name, kw in (("eager", dict(cuda_graph=False, overlap=False)), ("graphs", dict(overlap=False)),
                     ("graphs+overlap", {}), ("torch", dict(attention_backend="torch"))):
        with sgrun.Engine("random:tiny", dtype="float32", device="cuda", memory_gb=0.2, max_running=8, **kw) as eng:
            outs[name] = [o.token_ids for o in eng.generate(prompts, GREEDY)]
            report = eng.startup_report()
            if name.startswith("graphs"):
                assert report["cuda_graph_sizes"][-1] == 8 and eng.runner.graph_replays > 0
    assert outs["eager"] == outs["graphs"] == outs["graphs+overlap"] == outs["torch"]
