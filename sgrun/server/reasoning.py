"""--reasoning-parser: a model's `<think>…</think>` section leaves as `reasoning_content` (whole,
or as reasoning deltas while streaming), the rest as the answer. The request's constraint or
tool grammar only starts after the section (compile_constraint's `reasoning` option)."""

from __future__ import annotations

from dataclasses import dataclass

from sgrun.errors import SgrunError
from sgrun.lang.reasoning_split import REASONING_TAGS
from sgrun.lang.reasoning_split import reasoning_tags as known_tags


def reasoning_tags(name: str | None) -> tuple[str, str] | None:
    """--reasoning-parser's tags (the one table: lang/reasoning_split.py), None without one."""
    if name is None:
        return None
    tags = known_tags(name)
    if tags is None:
        raise SgrunError(f"unknown reasoning parser {name!r}; choose one of {', '.join(sorted(REASONING_TAGS))}")
    return tags


@dataclass
class ReasoningSplitter:
    """Splits a growing output into reasoning and answer text. `in_prompt`: the chat template
    already opened the section at the end of the prompt, so the output starts inside it."""
    open_tag: str
    close_tag: str
    in_prompt: bool = False

    def __post_init__(self) -> None:
        self.text = ""
        self._reasoning_sent = 0
        self._answer_sent = 0

    def split(self, text: str, final: bool) -> tuple[str, str]:
        """(reasoning, answer) of `text`; while not final, a tail that may still be a tag is withheld."""
        body = text
        if not self.in_prompt:
            head = body.lstrip()
            if not head.startswith(self.open_tag):
                if not final and self.open_tag.startswith(head):
                    return "", ""  # may still become the opening tag
                return "", body
            body = head[len(self.open_tag):]
        end = body.find(self.close_tag)
        if end >= 0:
            return body[:end].strip(), body[end + len(self.close_tag):].lstrip()
        if final:
            return body.strip(), ""  # cut off while reasoning: all of it was reasoning
        held = next((k for k in range(min(len(self.close_tag) - 1, len(body)), 0, -1)
                     if self.close_tag.startswith(body[-k:])), 0)
        return body[:len(body) - held].lstrip(), ""

    def feed(self, delta: str, final: bool = False) -> tuple[str, str]:
        """New (reasoning, answer) text since the last call."""
        self.text += delta
        reasoning, answer = self.split(self.text, final)
        if not final:
            reasoning = reasoning.rstrip() if answer == "" and reasoning.endswith((" ", "\n")) else reasoning
        r = reasoning[self._reasoning_sent:] if reasoning.startswith(reasoning[:self._reasoning_sent]) else ""
        a = answer[self._answer_sent:]
        self._reasoning_sent = max(self._reasoning_sent, len(reasoning))
        self._answer_sent = max(self._answer_sent, len(answer))
        return r, a
