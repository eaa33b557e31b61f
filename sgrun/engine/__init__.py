"""The serving engine: continuous batching over a paged KV pool with a radix prefix cache.

Owns, room by room (lowest first; tests/test_layering.py keeps imports pointing down):
data (sequence.py, sampling_params.py, outputs.py, scoring.py, page_pool.py, radix_cache.py,
request_handle.py, detokenizer.py, isolation.py, model_like.py), parts (sampler.py,
sampling_rows.py, ngram_draft.py, attention/, cuda_graph_runner.py, device.py,
request_constraint.py, step_broadcast.py), stages (scheduler.py, model_runner.py,
speculative.py, postprocess.py, stats.py, consistency.py, tp_worker.py), the step pipeline
(step.py) and rank 0's tensor-parallel group (tp_group.py), the builder (engine_builder.py,
startup_report.py) and the facade (engine.py: `sgrun.Engine`). docs/architecture.md walks a
request through them.

May import: sgrun.models, sgrun.constrain, sgrun.kernels / the CPU kernels, sgrun.errors,
sgrun.child_process. Never sgrun.lang, sgrun.server or the CLI, which are built on it.
"""
