"""What SGLang's own client (`sglang.RuntimeEndpoint`, `sglang.Runtime`) needs from a server beyond
/generate: the model's name in the shape its chat-template matcher reads, /server_info,
/health_generate and /concate_and_append_request. See docs/sglang-compat.md."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from sgrun.engine.state.sampling_params import SamplingParams
from sgrun.server.errors import bad_request
from sgrun.server.state import ServerState

# Chat layout -> a model-name fragment SGLang's `get_chat_template_by_model_path` maps to that
# layout's template. The client chooses its template from `model_path` only, so the name carries it.
_LAYOUT_TAGS: list[tuple[str, str, str]] = [
    # (layout name, marker of a rendered user turn "XQX", tag SGLang's matcher recognises)
    ("chatml", "<|im_start|>user\nXQX<|im_end|>", "chatml-tinyllama"),
    ("llama-3-instruct", "<|start_header_id|>user<|end_header_id|>\n\nXQX<|eot_id|>", "llama-3-instruct"),
    ("gemma-it", "<start_of_turn>user\nXQX<end_of_turn>", "gemma-it"),
    ("llama-2-chat", "[INST] XQX [/INST]", "llama-2-chat"),
]


def chat_layout(state: ServerState) -> tuple[str, str] | None:
    """(layout name, SGLang matcher tag) of the model's chat template, None when unknown."""
    template = state.tokenizer.chat_template
    if template is None:
        return None
    try:
        rendered = template.render([{"role": "user", "content": "XQX"}], add_generation_prompt=False)
    except Exception:  # noqa: BLE001 - a template that cannot render one user turn has no known layout
        return None
    for name, marker, tag in _LAYOUT_TAGS:
        if marker in rendered:
            return name, tag
    return None


def reported_model_path(state: ServerState) -> str:
    """The model's name (never a file path), plus the layout tag when the chat template is one
    SGLang knows: "SmolLM2 135M Instruct (chatml-tinyllama)" makes SGLang's client pick chatml."""
    name = re.sub(r"[\\/]", "-", state.model_name)
    layout = chat_layout(state)
    return f"{name} ({layout[1]})" if layout else name


def server_info(state: ServerState) -> dict[str, Any]:
    """SGLang's /server_info fields that describe this server (the rest are its launch flags)."""
    engine = state.engine
    stats = engine.stats()
    layout = chat_layout(state)
    from sgrun import __version__
    return {
        "model_path": reported_model_path(state), "served_model_name": state.model_name,
        "chat_template": layout[0] if layout else None, "context_length": state.max_context,
        "max_total_num_tokens": stats["pages_total"] * stats["page_size"], "page_size": stats["page_size"],
        "max_running_requests": getattr(getattr(engine, "scheduler", None), "max_running", None),
        "version": __version__, "backend": "sgrun",
        "internal_states": [{"running": stats["running"], "waiting": stats["waiting"],
                             "cache_hit_rate": stats["cache_hit_rate"]}],
    }


async def health_generate(state: ServerState) -> bool:
    """One real one-token generation: the engine loop, the model and sampling all work."""
    if not state.engine.is_alive():
        return False
    handle = state.engine.submit("ping", SamplingParams(max_new_tokens=1, temperature=0.0))
    out = await asyncio.to_thread(handle.result)
    return out.error is None


def check_concat_request(body: Any) -> tuple[list[str], str]:
    """/concate_and_append_request {"src_rids": [...], "dst_rid": "..."}.

    SGLang copies the forks' KV cache behind the destination request's. sgrun has no KV addressed
    by request id; what the client does next is send the joined text with its next /generate,
    whose prefix (the state before the fork, and the first fork) the radix cache already holds.
    So the request is checked and acknowledged, and the following request does the work."""
    if not isinstance(body, dict):
        raise bad_request("send a JSON object with src_rids and dst_rid", param="src_rids")
    src, dst = body.get("src_rids"), body.get("dst_rid")
    if not isinstance(src, list) or not all(isinstance(r, str) for r in src):
        raise bad_request("src_rids must be a list of request ids", param="src_rids")
    if not isinstance(dst, str):
        raise bad_request("dst_rid must be a request id", param="dst_rid")
    return src, dst
