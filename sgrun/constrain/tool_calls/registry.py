"""The call formats by name, and which one a chat template speaks."""

from __future__ import annotations

from sgrun.constrain.tool_calls.call_format import CallFormat
from sgrun.constrain.tool_calls.gemma_tool_code import GemmaToolCodeFormat
from sgrun.constrain.tool_calls.hermes import HermesFormat
from sgrun.constrain.tool_calls.llama3_json import Llama3JsonFormat
from sgrun.constrain.tool_calls.mistral import MistralFormat
from sgrun.constrain.tool_calls.phi4_mini import Phi4MiniFormat
from sgrun.constrain.tool_calls.pythonic import PythonicFormat
from sgrun.constrain.tool_calls.qwen3_coder import Qwen3CoderFormat
from sgrun.errors import InvalidRequestError

# Detection order matters: Qwen3-Coder templates also contain `<tool_call>`; Gemma's marker is its
# turn markup (its templates have no tool markup), so it comes after every format with its own.
FORMATS: dict[str, CallFormat] = {f.name: f for f in (Qwen3CoderFormat(), PythonicFormat(), MistralFormat(),
                                                      Llama3JsonFormat(), Phi4MiniFormat(), GemmaToolCodeFormat(),
                                                      HermesFormat())}
ALIASES = {"qwen": "hermes", "qwen25": "hermes", "qwen2_5": "hermes", "qwen3": "hermes", "llama3": "llama3_json",
           "llama": "llama3_json", "qwen3_xml": "qwen3_coder", "qwen3coder": "qwen3_coder",
           "llama4_pythonic": "pythonic", "gemma3": "gemma", "gemma_tool_code": "gemma", "phi4": "phi4_mini"}
DEFAULT_FORMAT = "hermes"


def get_format(name: str) -> CallFormat:
    key = ALIASES.get(name.lower().replace("-", "_"), name.lower().replace("-", "_"))
    if key not in FORMATS:
        raise InvalidRequestError(f"unknown tool-call parser {name!r}; choose one of {', '.join(sorted(FORMATS))}",
                                  field="tool_call_parser")
    return FORMATS[key]


def detect_format(template_source: str | None) -> CallFormat:
    """The format a chat template describes (by the call markup it writes or asks for); Hermes
    when the template says nothing about tool calls (sgrun then writes its own tools block)."""
    if template_source:
        for fmt in FORMATS.values():
            if any(marker in template_source for marker in fmt.template_markers):
                return fmt
    return FORMATS[DEFAULT_FORMAT]
