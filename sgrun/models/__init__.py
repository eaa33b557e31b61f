"""Model definitions and loading (GGUF files, safetensors folders), tensor-parallel sharding,
the compiled decode forward and the CPU matmul kernels' Python side.

May import: sgrun.errors, sgrun.child_process and the CPU kernels. Never the engine or above.
"""
