"""Attention over the paged KV pool: the backend seam and its backends.

Owns: `backend.py` (the batch metadata `Segment`, the `AttentionBackend` protocol), `choice.py`
(the start-up choice `make_attention_backend` / `default_backend`), `torch_backend.py` (pure torch, the gather
path), `cpp_backend.py` (the Python side of the CPU C++ kernels: decode in place, prefill, cascade),
`cascade.py` (finding prefixes several decodes share) and `triton_backend.py` (the CUDA kernels
of `sgrun.kernels.triton`).

May import: `sgrun.engine.state.page_pool` (the pool it reads and writes), the C++ kernel loaders
in `sgrun.kernels.cpu` (`paged_decode`, `prefill_attention`),
`sgrun.kernels.triton`, `sgrun.errors`, torch. Nothing else of the engine: the model runner imports
this package, never the other way round (tests/test_layering.py).
"""
