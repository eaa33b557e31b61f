"""`separate_reasoning`: split a model's reasoning block off the front of its output."""

from __future__ import annotations

THINK = ("<think>", "</think>")

# The one table of reasoning tags: parser / model type -> (block start, block end), spelled as
# SGLang's --reasoning-parser names them. The <think> pair is what DeepSeek-R1, Qwen3, QwQ and
# most open reasoning models emit. `sgrun serve --reasoning-parser` (server/reasoning.py) and
# `separate_reasoning` both read it; `reasoning_tags` takes either spelling (deepseek_r1 too).
REASONING_TAGS: dict[str, tuple[str, str]] = {
    "deepseek-r1": THINK, "deepseek-v3": THINK, "qwen3": THINK, "qwen3-thinking": THINK, "glm45": THINK,
    "step3": THINK, "think": THINK, "kimi": ("\u25c1think\u25b7", "\u25c1/think\u25b7"),
}


def reasoning_tags(name: str) -> tuple[str, str] | None:
    """The tags of the parser `name` (case and - / _ ignored), or None for an unknown name."""
    return REASONING_TAGS.get(name.lower().replace("_", "-"))


def split_reasoning(text: str, model_type: str | None = None) -> tuple[str, str]:
    """(reasoning, answer). Without an end marker, text that opened a block is all reasoning;
    text with no markers at all is all answer."""
    tags = THINK if model_type is None else reasoning_tags(model_type)
    if tags is None:
        raise ValueError(f"separate_reasoning: unknown model_type {model_type!r}; known: "
                         f"{', '.join(sorted(REASONING_TAGS))} (or None)")
    start, end = tags
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
