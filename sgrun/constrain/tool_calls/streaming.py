"""Incremental parsing for streamed responses, in OpenAI's streaming shape: content deltas for
text before the calls; per call, a first delta with id and name (arguments ""), then argument
fragments; never two deltas for the same call index in one step.

Every step re-parses the whole text so far (outputs are short next to the cost of generating
them) and sends what is new; the formats' parses only ever extend content and arguments, so
what was sent stays a prefix of the final parse."""

from __future__ import annotations

from dataclasses import dataclass, field

from sgrun.constrain.tool_calls.call_format import CallFormat
from sgrun.constrain.tool_calls.tool_spec import CallDelta, ParsedCall, ToolSpec, new_call_id


@dataclass
class StreamStep:
    content: str = ""
    calls: list[CallDelta] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.content or self.calls)


class StreamingCallParser:
    def __init__(self, fmt: CallFormat, tools: list[ToolSpec]):
        self.format = fmt
        self.tools = {t.name: t for t in tools}
        self.text = ""
        self._content_sent = 0
        self._ids: list[str] = []          # per announced call
        self._names: list[str] = []
        self._args_sent: list[str] = []
        self._complete: list[bool] = []

    @property
    def any_calls(self) -> bool:
        return bool(self._ids)

    def feed(self, delta: str) -> StreamStep:
        self.text += delta
        return self._step(final=False)

    def finish(self) -> list[StreamStep]:
        """The remaining steps once the output ended (held-back text becomes content; argument
        text that could not share a step with its call's first delta follows in its own step)."""
        steps = []
        while True:
            step = self._step(final=True)
            if not step:
                return steps
            steps.append(step)

    def _step(self, final: bool) -> StreamStep:
        got = self.format.parse(self.text, self.tools, final=final)
        step = StreamStep()
        if len(got.content) > self._content_sent and got.content.startswith(self.text[:self._content_sent]):
            content = got.content
            if final and self._ids == [] and got.calls:
                content = content.rstrip()
            step.content = content[self._content_sent:]
            self._content_sent += len(step.content)
        for i, call in enumerate(got.calls):
            if call.name is None:
                break
            if i >= len(self._ids):
                self._ids.append(new_call_id())
                self._names.append(call.name)
                self._args_sent.append("")
                self._complete.append(False)
                step.calls.append(CallDelta(i, id=self._ids[i], name=call.name, arguments=""))
                continue  # its arguments go in a later step: one delta per index per step
            self._complete[i] = call.complete
            sent = self._args_sent[i]
            if len(call.arguments) > len(sent) and call.arguments.startswith(sent):
                fragment = call.arguments[len(sent):]
                self._args_sent[i] = call.arguments
                step.calls.append(CallDelta(i, arguments=fragment))
        return step

    def calls(self) -> list[ParsedCall]:
        """The calls as streamed so far (same ids), for the final accounting of a response."""
        return [ParsedCall(n, a, c, id=i) for i, n, a, c in zip(self._ids, self._names, self._args_sent, self._complete)]
