"""Per-role prefix/suffix strings derived from the model's chat template.

Each role is rendered with a sentinel content and split around it, so a program's text equals
what the template produces for the same messages: `ChatRoles.prefix(role, first)` + content +
`ChatRoles.suffix(role)` for every message, in order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sgrun.errors import InvalidRequestError, SgrunError
from sgrun.models.chat_template import ChatTemplate

_SENTINEL = "\u2063sgrun-role-content\u2063"

# Earlier messages to render before a role, so the template sees a conversation it accepts
# (some templates insist on alternation or a leading system/user message).
_HISTORIES: dict[str, list[list[tuple[str, str]]]] = {
    "assistant": [[("system", "a"), ("user", "b")], [("user", "b")]],
    "user": [[("system", "a")], [("system", "a"), ("user", "b"), ("assistant", "c")],
             [("user", "b"), ("assistant", "c")]],
    "system": [[("system", "a")], [("user", "b")]],
}
_DEFAULT_HISTORIES = [[("system", "a"), ("user", "b"), ("assistant", "c")],
                      [("user", "b"), ("assistant", "c")], [("system", "a")]]


@dataclass
class RoleFormat:
    first_prefix: str      # when this role opens the conversation (may carry BOS, a default system prompt)
    prefix: str            # when it follows earlier messages
    suffix: str


@dataclass
class ChatRoles:
    template: ChatTemplate | None
    _formats: dict[str, RoleFormat | None] = field(default_factory=dict)

    def prefix(self, role: str, first: bool) -> str:
        fmt = self._format(role)
        return fmt.first_prefix if first else fmt.prefix

    def suffix(self, role: str) -> str:
        return self._format(role).suffix

    def supports(self, role: str) -> bool:
        try:
            self._format(role)
            return True
        except SgrunError:
            return False

    def end_marker(self, role: str) -> str:
        """Visible text that ends a role ("<|im_end|>"): a stop string for generation inside it."""
        return self.suffix(role).strip()

    def _format(self, role: str) -> RoleFormat:
        if role not in self._formats:
            self._formats[role] = self._derive(role)
        fmt = self._formats[role]
        if fmt is None:
            raise SgrunError(f"the model's chat template cannot render a {role!r} message; "
                             f"use another role or plain text")
        return fmt

    def _derive(self, role: str) -> RoleFormat | None:
        if self.template is None:
            # No template: plain "role: content" lines keep programs usable on base models.
            return RoleFormat(f"{role}: ", f"{role}: ", "\n")
        first = self._split([], role)
        later = None
        for history in _HISTORIES.get(role, _DEFAULT_HISTORIES):
            later = self._split([{"role": r, "content": c} for r, c in history], role)
            if later is not None:
                break
        if first is None and later is None:
            return None
        first_prefix, first_suffix = first or later
        prefix, suffix = later or first
        return RoleFormat(first_prefix=first_prefix, prefix=prefix, suffix=suffix or first_suffix)

    def _split(self, history: list[dict[str, str]], role: str) -> tuple[str, str] | None:
        assert self.template is not None
        try:
            base = self.template.render(history, add_generation_prompt=False) if history else ""
            full = self.template.render([*history, {"role": role, "content": _SENTINEL}],
                                        add_generation_prompt=False)
        except InvalidRequestError:
            return None
        if not full.startswith(base) or full.count(_SENTINEL) != 1:
            return None
        prefix, suffix = full[len(base):].split(_SENTINEL)
        return prefix, suffix
