"""Level 2 of the engine: the stages a step runs.

Owns: the scheduler, the model runner, speculative verification, postprocess, the statistics, the consistency
checks, and the tensor-parallel worker process of ranks 1..N-1 (tp_worker.py).

May import: this folder, parts/ and state/ (levels 1 and 0) only; never pipeline/ or the files above it.
A stage takes another stage's types from below (state/sampled.py), not from that stage.
The folder is the level: tests/test_layering.py reads it (docs/architecture.md draws the map).
"""
