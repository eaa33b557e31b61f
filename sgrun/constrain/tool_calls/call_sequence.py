"""Reading the calls of a section one after another: each call, then (optionally) its closer, then
the separator that begins the next one. Every format that writes several calls in a row shares this
loop; what differs is how one call is read and which marks stand between calls."""

from __future__ import annotations

from typing import Callable

from sgrun.constrain.tool_calls.call_format import json_object_call, skip_ws
from sgrun.constrain.tool_calls.tool_spec import PartialCall

# Reads one call at text[start:] (after optional whitespace): (the call so far, or None when no call
# starts there; the index just past it once it is whole, else None).
CallReader = Callable[[str, int], "tuple[PartialCall | None, int | None]"]


def read_call_sequence(text: str, read_call: CallReader, separator: str, *, start: int = 0,
                       closer: str = "", terminator: str = "") -> list[PartialCall]:
    """The calls in text[start:], the last possibly incomplete. Whitespace may stand around the marks.

    - `closer`: text each call must be followed by (Hermes' `</tool_call>`); until it shows the
      call stays incomplete.
    - `separator`: text that begins the next call (`<tool_call>`, `,`, `;`); anything else ends
      the sequence.
    - `terminator`: with one (Mistral's `]`), a call is complete only once the separator or the
      terminator follows it, so a streamed call is not reported finished while the list may still
      go on in a way the parse cannot read."""
    calls: list[PartialCall] = []
    i = start
    while True:
        call, end = read_call(text, i)
        if call is None:
            return calls
        calls.append(call)
        if end is None:
            call.complete = False
            return calls
        k = skip_ws(text, end)
        if closer:
            if not text.startswith(closer, k):
                call.complete = False
                return calls
            k = skip_ws(text, k + len(closer))
        if text.startswith(separator, k):
            i = k + len(separator)
            continue
        if terminator and not text.startswith(terminator, k):
            call.complete = False
        return calls


def read_json_calls(text: str, args_keys: tuple[str, ...], separator: str, *, start: int = 0,
                    closer: str = "", terminator: str = "") -> list[PartialCall]:
    """`read_call_sequence` over `{"name": ..., "<one of args_keys>": ...}` objects."""
    def read_call(t: str, i: int) -> tuple[PartialCall | None, int | None]:
        return json_object_call(t, i, ("name",), args_keys)
    return read_call_sequence(text, read_call, separator, start=start, closer=closer, terminator=terminator)
