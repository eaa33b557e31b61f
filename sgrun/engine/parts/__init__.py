"""Level 1 of the engine: the parts the stages are made of.

Owns: the sampler and its per-row inputs (sampler.py, sampling_rows.py), the n-gram drafter, the attention backends
(attention/), CUDA graph capture, the device and dtype choice (device.py), the per-request constraint compile,
the tensor-parallel step broadcast, the torch.compile policy and the intake of requests (intake.py).

May import: this folder and state/ (level 0) only; never stages/, pipeline/ or the files above them.
attention/ is narrower still: of the engine it uses only state/page_pool.py.
The folder is the level: tests/test_layering.py reads it (docs/architecture.md draws the map).
"""
