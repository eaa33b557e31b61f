"""`separate_reasoning`: split a model's reasoning block off the front of its output."""

from __future__ import annotations

# model_type -> (block start, block end). The <think> pair is what DeepSeek-R1, Qwen3, QwQ and
# most open reasoning models emit; None picks it.
_MARKERS: dict[str | None, tuple[str, str]] = {
    None: ("<think>", "</think>"), "deepseek-r1": ("<think>", "</think>"), "deepseek-v3": ("<think>", "</think>"),
    "qwen3": ("<think>", "</think>"), "qwen3-thinking": ("<think>", "</think>"), "glm45": ("<think>", "</think>"),
    "step3": ("<think>", "</think>"), "kimi": ("\u25c1think\u25b7", "\u25c1/think\u25b7"),
}


def split_reasoning(text: str, model_type: str | None = None) -> tuple[str, str]:
    """(reasoning, answer). Without an end marker, text that opened a block is all reasoning;
    text with no markers at all is all answer."""
    if model_type not in _MARKERS:
        known = ", ".join(sorted(k for k in _MARKERS if k))
        raise ValueError(f"separate_reasoning: unknown model_type {model_type!r}; known: {known} (or None)")
    start, end = _MARKERS[model_type]
    body = text.lstrip()
    opened = body.startswith(start)
    if opened:
        body = body[len(start):]
    if end in body:
        reasoning, answer = body.split(end, 1)
        return reasoning.strip(), answer.strip()
    if opened:
        return body.strip(), ""
    return "", text
