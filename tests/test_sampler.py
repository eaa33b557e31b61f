"""The device sampler: counter-based noise (a request's draw depends only on its seed and step),
the distribution it samples, the filters, and that every tensor it makes lives on the logits'
device (checked on the `meta` device, where mixing in a CPU tensor raises)."""

from __future__ import annotations

import torch

from sgrun.engine.state.counter_rng import gumbel, uniform
from sgrun.engine.parts.sampler import apply_logit_bias, apply_penalties, sample_tokens, token_logprobs
from sgrun.engine.state.sampling_params import SamplingParams


def test_noise_is_a_function_of_seed_and_step_alone():
    seeds = torch.tensor([7, 7, 8, 2 ** 62 + 7], dtype=torch.int64)
    steps = torch.tensor([0, 1, 0, 0], dtype=torch.int64)
    u = uniform(seeds, steps, 1000)
    alone = uniform(seeds[1:2], steps[1:2], 1000)
    assert torch.equal(u[1], alone[0])
    # Different seed, different step, or a seed differing only in its high bits: different noise.
    assert not torch.equal(u[0], u[1]) and not torch.equal(u[0], u[2]) and not torch.equal(u[0], u[3])
    assert float(u.min()) > 0.0 and float(u.max()) < 1.0


def test_noise_is_uniform():
    u = uniform(torch.arange(64, dtype=torch.int64), torch.zeros(64, dtype=torch.int64), 4096).flatten()
    counts = torch.histc(u, bins=16, min=0.0, max=1.0)
    expected = u.numel() / 16
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 40.0, chi2            # 15 degrees of freedom: p ~ 5e-4 at 40
    # Neighbouring columns and neighbouring steps are uncorrelated.
    assert abs(float(torch.corrcoef(torch.stack([u[:-1], u[1:]]))[0, 1])) < 0.01
    g = gumbel(torch.tensor([3]), torch.tensor([5]), 200000)
    assert abs(float(g.mean()) - 0.5772) < 0.02      # Euler-Mascheroni: the Gumbel mean


def test_sampled_frequencies_follow_the_distribution():
    probs = torch.tensor([0.6, 0.3, 0.1, 0.0])
    logits = probs.log()[None, :].expand(4000, 4).contiguous()
    params = [SamplingParams(temperature=1.0)] * 4000
    tokens = sample_tokens(logits, params, [11] * 4000, list(range(4000)))
    freq = torch.bincount(tokens, minlength=4).float() / 4000
    torch.testing.assert_close(freq, probs, atol=0.03, rtol=0)
    assert int(freq[3] * 4000) == 0


def test_a_seeded_row_samples_the_same_alone_and_in_any_batch():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 300, generator=gen)
    params = [SamplingParams(temperature=0.9, top_p=0.95, seed=1), SamplingParams(temperature=0.0),
              SamplingParams(temperature=1.3, top_k=20), SamplingParams(temperature=0.7, min_p=0.05),
              SamplingParams(temperature=1.0)]
    seeds, steps = [5, 0, 9, 123, 77], [3, 0, 0, 8, 1]
    batched = sample_tokens(logits.clone(), params, seeds, steps)
    for i in range(5):
        alone = sample_tokens(logits[i:i + 1].clone(), params[i:i + 1], seeds[i:i + 1], steps[i:i + 1])
        assert int(alone[0]) == int(batched[i])
    order = [4, 2, 0, 3, 1]
    shuffled = sample_tokens(logits[order].clone(), [params[i] for i in order], [seeds[i] for i in order],
                             [steps[i] for i in order])
    assert shuffled.tolist() == [int(batched[i]) for i in order]
    assert int(batched[1]) == int(logits[1].argmax())


def test_filters_leave_only_the_allowed_tokens():
    logits = torch.tensor([[4.0, 3.0, 2.0, 1.0, 0.0]]).expand(300, 5).contiguous()
    for params, allowed in ((SamplingParams(temperature=1.0, top_k=2), {0, 1}),
                            (SamplingParams(temperature=1.0, top_p=0.5), {0}),
                            (SamplingParams(temperature=1.0, min_p=0.3), {0, 1})):
        tokens = sample_tokens(logits, [params] * 300, list(range(300)), [0] * 300)
        assert set(tokens.tolist()) == allowed, params


def test_penalties_and_bias_and_logprobs():
    logits = torch.zeros(2, 6)
    params = [SamplingParams(temperature=0.0, presence_penalty=1.0, frequency_penalty=0.5, logit_bias={5: 2.0}),
              SamplingParams(temperature=0.0, repetition_penalty=2.0, logprobs=2)]
    logits[1, 1] = 4.0
    apply_logit_bias(logits, params)
    apply_penalties(logits, params, [[0], [1]], [[2, 2], []])
    assert logits[0].tolist() == [0.0, 0.0, -2.0, 0.0, 0.0, 2.0]
    assert logits[1, 1] == 2.0                     # 4 / 2: seen in the prompt
    tokens = sample_tokens(logits, params, [0, 0], [0, 0]).tolist()
    assert tokens == [5, 1]
    (chosen, top), = token_logprobs(logits[1:].clone(), tokens[1:], 2)
    assert chosen == max(v for _, v in top) and len(top) == 2 and top[0][0] == 1


def test_every_sampler_tensor_lives_on_the_logits_device():
    # On `meta` a stray CPU tensor in an op raises, so this proves device placement without CUDA.
    logits = torch.empty(3, 50, device="meta")
    params = [SamplingParams(temperature=0.8, top_k=5, top_p=0.9, min_p=0.1, repetition_penalty=1.2,
                             frequency_penalty=0.3, logit_bias={4: 1.0}),
              SamplingParams(temperature=0.0), SamplingParams(temperature=1.0, presence_penalty=0.5)]
    apply_logit_bias(logits, params)
    apply_penalties(logits, params, [[1, 2], [3], [4]], [[5], [], [6, 6]])
    tokens = sample_tokens(logits, params, [1, 2, 3], [0, 1, 2])
    assert tokens.device.type == "meta" and tokens.shape == (3,)


def test_extreme_hashes_stay_inside_the_unit_interval_and_never_beat_a_mask():
    # The top 24-bit value rounds to exactly 1.0 in float32 unless clamped; its Gumbel noise was
    # +inf, -inf + inf is NaN, and argmax picked the masked column (a constrained request then
    # sampled a token its constraint rejects).
    from sgrun.engine.state.counter_rng import bits_to_unit
    bits = torch.tensor([[0, 1 << 8, 0xFFFFFF00, 0xFFFFFFFF]], dtype=torch.int64)
    u = bits_to_unit(bits)
    assert bool(((u > 0) & (u < 1)).all())
    noise = -torch.log(-torch.log(u))
    assert bool(torch.isfinite(noise).all())
    logits = torch.tensor([[0.0, -float("inf"), -float("inf"), -float("inf")]])
    assert int((logits + noise).argmax(dim=-1)) == 0


def test_row_argmax_is_torchs_argmax_ties_nan_and_masked_rows_included():
    """The CPU fast path (numpy's argmax) picks what torch's does: the first maximum, a NaN as the
    maximum, index 0 for a row masked to -inf; on strided rows too; int64 either way."""
    from sgrun.engine.parts.sampler import row_argmax
    g = torch.Generator().manual_seed(0)
    rows = torch.randn(6, 49152, generator=g)
    rows[1, 100] = rows[1, 7] = rows[1].max() + 1.0          # a tie: the first index wins
    rows[2, :] = float("-inf")                                 # every token masked
    rows[3, 500] = float("nan")                                # a NaN counts as the maximum
    rows[4, 3] = rows[4, 9] = float("nan")
    rows[5, :] = 0.0                                           # all equal
    for x in (rows, rows[:, ::2], rows[::2]):
        got = row_argmax(x)
        assert got.dtype == torch.int64 and torch.equal(got, x.argmax(dim=-1)), (got, x.argmax(dim=-1))
    assert row_argmax(rows).tolist()[:6] == [rows[0].argmax().item(), 7, 0, 500, 3, 0]
