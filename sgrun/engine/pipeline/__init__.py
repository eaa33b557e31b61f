"""Level 3 of the engine: the step pipeline and rank 0's tensor-parallel group.

Owns: step.py (one turn: schedule, run, sample, postprocess) and tp_group.py (starting and driving the
tensor-parallel workers).

May import: this folder and stages/, parts/, state/ (levels 2, 1, 0) only; never engine_builder.py,
startup_report.py or engine.py, which are built on it.
The folder is the level: tests/test_layering.py reads it (docs/architecture.md draws the map).
"""
