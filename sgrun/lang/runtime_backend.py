"""`sgrun.Runtime`: an Engine in this process as a DSL backend."""

from __future__ import annotations

import weakref
from typing import Any

from sgrun.engine.outputs import RequestOutput
from sgrun.engine.sampling_params import SamplingParams
from sgrun.errors import SgrunError
from sgrun.lang.backend import Backend, GenerationResult, ScoreResult, TextCallback
from sgrun.models.chat_template import ChatTemplate


class Runtime(Backend):
    """Runs programs on an in-process `sgrun.Engine`.

    `sgrun.Runtime(model=None, **engine_options)` starts an engine (options as `sgrun.Engine`);
    `sgrun.Runtime(engine=e)` wraps an existing one and leaves closing it to the caller."""

    def __init__(self, model: str | None = None, *, engine: Any = None, **engine_options: Any):
        if engine is None:
            from sgrun.engine.engine import Engine  # heavy: load only when a Runtime is made
            engine = Engine(model=model, **engine_options)
            self._owns_engine = True
            # Stop the engine thread at exit even if nobody calls close(): a torch thread still
            # running during interpreter teardown aborts the process.
            self._finalizer = weakref.finalize(self, engine.close)
        else:
            if model is not None or engine_options:
                raise TypeError("pass either engine= or model/engine options, not both")
            self._owns_engine = False
        self.engine = engine

    @property
    def chat_template(self) -> ChatTemplate | None:
        return self.engine.tokenizer.chat_template

    def generate(self, prompt: str, params: SamplingParams, return_logprob: bool = False,
                 on_text: TextCallback | None = None) -> GenerationResult:
        if return_logprob and params.logprobs is None:
            params = params.replace(logprobs=0)
        handle = self.engine.submit(prompt, params)
        streamed: list[str] = []
        if on_text is not None:
            for event in handle:
                if event.index == 0 and event.text:
                    streamed.append(event.text)
                    on_text(event.text)
        out: RequestOutput = handle.result()
        if out.error:
            raise SgrunError(f"generation failed: {out.error}")
        sample = out.outputs[0]
        # When streaming, the program already holds the deltas: they are the text.
        text = "".join(streamed) if on_text is not None else sample.text
        logprobs = None
        if return_logprob:
            logprobs = [(lp.token, lp.logprob) for lp in (sample.logprobs or [])]
        return GenerationResult(text=text, finish_reason=sample.finish_reason,
                                prompt_tokens=out.prompt_tokens, cached_tokens=out.cached_tokens,
                                completion_tokens=out.completion_tokens, output_ids=list(sample.token_ids),
                                logprobs=logprobs, matched_stop=sample.matched_stop)

    def score(self, prompt: str, continuations: list[str]) -> ScoreResult:
        logprobs = self.engine.score(prompt, continuations)
        return ScoreResult(logprobs=[list(map(float, lps)) for lps in logprobs],
                           prompt_tokens=len(self.engine.tokenizer.encode(prompt)))

    def close(self) -> None:
        if self._owns_engine:
            self._finalizer()

    def shutdown(self) -> None:
        self.close()

    def __enter__(self) -> "Runtime":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
