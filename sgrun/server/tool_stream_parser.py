"""Streaming tool-call parsing: generated text arrives in deltas and leaves as content deltas or
tool-call deltas (a new call's id and name, then argument fragments), for the call format of
tool_format.py."""

from __future__ import annotations

import json
from dataclasses import dataclass

from sgrun.server.tool_format import CALL_CLOSE, CALL_OPEN, new_call_id


@dataclass
class ToolCallDeltaPiece:
    """One step of streamed tool-call output: a new call (id + name) or an argument fragment."""
    index: int
    id: str | None = None
    name: str | None = None
    arguments: str | None = None


class StreamingToolParser:
    """Splits streamed text into content deltas and tool-call deltas.

    Text is held back while it could still be the start of `<tool_call>`; once it cannot, the
    output is an ordinary answer and passes through. Inside a call, the name is emitted when
    it is complete, then argument text as it arrives (tracking JSON nesting to find its end)."""

    _NAME_KEY = '"name"'
    _ARGS_KEY = '"arguments"'

    def __init__(self) -> None:
        self.buffer = ""          # text not yet turned into deltas
        self.mode = "undecided"   # "undecided" | "text" | "calls"
        self.num_calls = 0
        self.any_calls = False
        # state inside the current call
        self._in_call = False
        self._name_sent = False
        self._in_args = False
        self._depth = 0
        self._in_string = False
        self._escaped = False
        self._args_started = False

    def feed(self, delta: str) -> tuple[str, list[ToolCallDeltaPiece]]:
        """Returns (content text to send, tool-call pieces to send) for this delta."""
        self.buffer += delta
        if self.mode == "undecided":
            head = self.buffer.lstrip()
            if not head:
                return "", []
            if head.startswith(CALL_OPEN):
                self.mode = "calls"
                self.buffer = head
            elif CALL_OPEN.startswith(head):
                return "", []
            else:
                self.mode = "text"
        if self.mode == "text":
            out, self.buffer = self.buffer, ""
            return out, []
        return "", self._parse_calls()

    def finish(self) -> tuple[str, list[ToolCallDeltaPiece]]:
        """Flush at the end: held-back text that never became a call is content."""
        if self.mode == "undecided":
            out, self.buffer = self.buffer, ""
            return out, []
        if self.mode == "text":
            out, self.buffer = self.buffer, ""
            return out, []
        return "", self._parse_calls()

    def _parse_calls(self) -> list[ToolCallDeltaPiece]:
        pieces: list[ToolCallDeltaPiece] = []
        progressed = True
        while progressed:
            progressed = False
            if not self._in_call:
                head = self.buffer.lstrip()
                if head.startswith(CALL_OPEN):
                    self.buffer = head[len(CALL_OPEN):]
                    self._start_call()
                    progressed = True
                continue
            if not self._name_sent:
                name = self._try_name()
                if name is None:
                    break
                pieces.append(ToolCallDeltaPiece(self.num_calls, id=new_call_id(), name=name, arguments=""))
                self.any_calls = True
                self._name_sent = True
                progressed = True
                continue
            if not self._in_args:
                i = self.buffer.find(self._ARGS_KEY)
                if i < 0:
                    break
                j = self.buffer.find(":", i + len(self._ARGS_KEY))
                if j < 0:
                    break
                self.buffer = self.buffer[j + 1:].lstrip()
                self._in_args = True
                progressed = True
                continue
            fragment, done = self._scan_args()
            if fragment:
                pieces.append(ToolCallDeltaPiece(self.num_calls, arguments=fragment))
            if done:
                end = self.buffer.find(CALL_CLOSE)
                if end < 0:
                    break
                self.buffer = self.buffer[end + len(CALL_CLOSE):]
                self._in_call = False
                self.num_calls += 1
                progressed = True
        return pieces

    def _start_call(self) -> None:
        self._in_call = True
        self._name_sent = False
        self._in_args = False
        self._depth = 0
        self._in_string = False
        self._escaped = False
        self._args_started = False

    def _try_name(self) -> str | None:
        i = self.buffer.find(self._NAME_KEY)
        if i < 0:
            return None
        j = self.buffer.find(":", i + len(self._NAME_KEY))
        if j < 0:
            return None
        k = j + 1
        while k < len(self.buffer) and self.buffer[k].isspace():
            k += 1
        try:
            name, end = json.JSONDecoder().raw_decode(self.buffer, k)
        except json.JSONDecodeError:
            return None
        if not isinstance(name, str):
            return None
        # Keep anything after the name (e.g. ',"arguments":') in the buffer.
        self.buffer = self.buffer[end:]
        return name

    def _scan_args(self) -> tuple[str, bool]:
        """Consume argument text from the buffer; returns (fragment, arguments complete)."""
        out = []
        consumed = 0
        done = False
        for ch in self.buffer:
            if self._args_started and self._depth == 0 and not self._in_string:
                done = True
                break
            consumed += 1
            out.append(ch)
            if not self._args_started:
                if ch.isspace():
                    out.pop()
                    continue
                self._args_started = True
                if ch in "{[":
                    self._depth = 1
                elif ch == '"':
                    self._in_string = True
                continue
            if self._in_string:
                if self._escaped:
                    self._escaped = False
                elif ch == "\\":
                    self._escaped = True
                elif ch == '"':
                    self._in_string = False
            elif ch == '"':
                self._in_string = True
            elif ch in "{[":
                self._depth += 1
            elif ch in "}]":
                self._depth -= 1
        else:
            if self._args_started and self._depth == 0 and not self._in_string:
                done = True
        self.buffer = self.buffer[consumed:]
        return "".join(out), done
