"""sgrun's kernels, one home with a folder per backend.

- `cpu/` (`sgrun.kernels.cpu`): the C++ CPU kernels (the weight-only matmuls, the paged decode and
  prefill attention, the decode blocks), their one build-and-dispatch helper (build.py), the CPU
  level they run at (isa.py) and the Python loader of each kernel; built at first use per CPU level
  (docs/cpu_kernels.md).
- `triton/` (`sgrun.kernels.triton`): the Triton GPU kernels (paged attention, KV writes, the
  constraint bitmask), each with a pure-torch reference (docs/kernels.md).

Importing this package imports neither backend: no triton, no C++ build. Each backend may import
only sgrun.cache_paths, sgrun.errors and sgrun.child_process (tests/test_layering.py); the models
and the engine import the kernels, never the other way round.
"""
