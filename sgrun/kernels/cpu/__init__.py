"""sgrun's C++ CPU kernels, their one build-and-dispatch helper and the CPU level they run at.

Owns every C++ source (the weight-only matmuls, the paged decode and prefill attention), the
build on first use for one CPU level at a time (build.py: per-level compiler flags, a cache key
that includes the level), the level detection and its SGRUN_CPU_ISA override (isa.py), and the
Python loaders of each kernel (matmul.py, paged_decode.py, prefill_attention.py), and prebuild.py,
which starts an engine's builds side by side.
May import: torch, platformdirs and itself only. Imported by models/ (the linears) and engine/
(the attention backends), never the other way round.
"""
