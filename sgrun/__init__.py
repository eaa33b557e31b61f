"""sgrun: a structured-generation and agent-oriented LLM serving runtime."""

from sgrun.engine.outputs import CompletionOutput, RequestOutput, StreamEvent, TokenLogprob
from sgrun.engine.sampling_params import SamplingParams
from sgrun.errors import ConstraintError, InvalidRequestError, ModelLoadError, SgrunError

__version__ = "0.1.0"


def __getattr__(name: str):
    # Heavy pieces load on first use so `import sgrun` stays cheap.
    if name == "Engine":
        from sgrun.engine.engine import Engine
        return Engine
    raise AttributeError(f"module 'sgrun' has no attribute {name!r}")


__all__ = [
    "Engine", "SamplingParams", "RequestOutput", "CompletionOutput", "StreamEvent", "TokenLogprob",
    "SgrunError", "ConstraintError", "InvalidRequestError", "ModelLoadError",
]
