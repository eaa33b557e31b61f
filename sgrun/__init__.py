"""sgrun: a structured-generation and agent-oriented LLM serving runtime."""

from sgrun.engine.state.outputs import CompletionOutput, RequestOutput, StreamEvent, TokenLogprob
from sgrun.engine.state.sampling_params import SamplingParams
from sgrun.errors import ConstraintError, InvalidRequestError, ModelLoadError, SgrunError

__version__ = "0.1.0"


# The frontend DSL (sgrun.lang), loaded on first use like Engine: name -> defining module.
_DSL_EXPORTS = {
    "function": "sgrun.lang.function", "gen": "sgrun.lang.ir", "select": "sgrun.lang.ir",
    "gen_int": "sgrun.lang.ir", "gen_string": "sgrun.lang.ir", "separate_reasoning": "sgrun.lang.ir",
    "REGEX_INT": "sgrun.lang.ir", "REGEX_FLOAT": "sgrun.lang.ir", "REGEX_BOOL": "sgrun.lang.ir",
    "REGEX_STR": "sgrun.lang.ir", "flush_cache": "sgrun.lang.backend_calls",
    "get_server_info": "sgrun.lang.backend_calls", "global_config": "sgrun.lang.global_config",
    "token_length_normalized": "sgrun.lang.choices", "greedy_token_selection": "sgrun.lang.choices",
    "unconditional_likelihood_normalized": "sgrun.lang.choices", "ChoicesSamplingMethod": "sgrun.lang.choices",
    "ChoicesDecision": "sgrun.lang.choices",
    "system": "sgrun.lang.ir", "user": "sgrun.lang.ir", "assistant": "sgrun.lang.ir", "role": "sgrun.lang.ir",
    "system_begin": "sgrun.lang.ir", "system_end": "sgrun.lang.ir", "user_begin": "sgrun.lang.ir",
    "user_end": "sgrun.lang.ir", "assistant_begin": "sgrun.lang.ir", "assistant_end": "sgrun.lang.ir",
    "fork": "sgrun.lang.state", "ProgramState": "sgrun.lang.state", "ProgramError": "sgrun.lang.program_error",
    "Runtime": "sgrun.lang.runtime_backend", "RuntimeEndpoint": "sgrun.lang.endpoint_backend",
    "set_default_backend": "sgrun.lang.backend", "Agent": "sgrun.lang.agent", "AgentResult": "sgrun.lang.agent",
    "ToolCall": "sgrun.lang.agent", "function_to_tool": "sgrun.lang.tool_schema",
}


def __getattr__(name: str):
    # Heavy pieces load on first use so `import sgrun` stays cheap.
    if name == "Engine":
        from sgrun.engine.engine import Engine
        return Engine
    if name in _DSL_EXPORTS:
        import importlib
        return getattr(importlib.import_module(_DSL_EXPORTS[name]), name)
    raise AttributeError(f"module 'sgrun' has no attribute {name!r}")


__all__ = [
    "Engine", "SamplingParams", "RequestOutput", "CompletionOutput", "StreamEvent", "TokenLogprob",
    "SgrunError", "ConstraintError", "InvalidRequestError", "ModelLoadError", *_DSL_EXPORTS,
]
