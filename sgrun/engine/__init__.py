"""The serving engine: continuous batching over a paged KV pool with a radix prefix cache.

Its folders are its levels, lowest first (tests/test_layering.py reads the level from the folder and
keeps every import pointing down or sideways within a level):
- state/ (level 0): data and small mechanisms (sequence.py, sampling_params.py, outputs.py, scoring.py,
  page_pool.py, radix_cache.py, request_handle.py, detokenizer.py, isolation.py, model_like.py, ...);
- parts/ (level 1): the parts the stages are made of (sampler.py, sampling_rows.py, ngram_draft.py,
  attention/, cuda_graph_runner.py, device.py, request_constraint.py, step_broadcast.py, intake.py, ...);
- stages/ (level 2): the stages (scheduler.py, model_runner.py, speculative.py, postprocess.py, stats.py,
  consistency.py, tp_worker.py);
- pipeline/ (level 3): the step pipeline (step.py) and rank 0's tensor-parallel group (tp_group.py);
- on top, in this order: the builder (engine_builder.py), startup_report.py and the facade (engine.py:
  `sgrun.Engine`). docs/architecture.md walks a request through them.

May import: sgrun.models, sgrun.constrain, sgrun.kernels.cpu / sgrun.kernels.triton, sgrun.errors,
sgrun.child_process. Never sgrun.lang, sgrun.server or the CLI, which are built on it.
"""
