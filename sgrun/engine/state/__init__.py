"""Level 0 of the engine: its data and small mechanisms.

Owns: the request's records (sequence.py, sampling_params.py, outputs.py, request_handle.py, sampled.py, scoring.py),
the KV page pool and the radix prefix cache (page_pool.py, radix_cache.py, radix_snapshot.py), the detokenizer,
the counter-based RNG, the engine's own check of a prompt (prompt_ids.py), prompt logprobs, the isolation of one request's failure (isolation.py) and the
model's protocol (model_like.py).

May import: modules of this folder only (and the packages below the engine: sgrun.models, sgrun.constrain,
sgrun.kernels, sgrun.errors, ...); nothing of parts/, stages/, pipeline/ or the files above them.
The folder is the level: tests/test_layering.py reads it (docs/architecture.md draws the map).
"""
