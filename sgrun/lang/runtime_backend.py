"""`sgrun.Runtime`: an Engine in this process as a DSL backend."""

from __future__ import annotations

import weakref
from typing import Any

from sgrun.engine.state.outputs import RequestOutput
from sgrun.engine.state.sampling_params import SamplingParams
from sgrun.errors import SgrunError
from sgrun.lang.backend import Backend, GenerationResult, ScoreResult, TextCallback
from sgrun.engine.state.prompt_logprobs import prompt_logprobs
from sgrun.models.chat_template import ChatTemplate


class Runtime(Backend):
    """Runs programs on an in-process `sgrun.Engine`.

    `sgrun.Runtime(model=None, **engine_options)` starts an engine (options as `sgrun.Engine`;
    SGLang's `model_path=` is the same as `model=`); `sgrun.Runtime(engine=e)` wraps an existing
    one and leaves closing it to the caller."""

    def __init__(self, model: str | None = None, *, engine: Any = None, model_path: str | None = None,
                 **engine_options: Any):
        if model_path is not None:
            if model is not None and model != model_path:
                raise TypeError("give the model as model= or model_path=, not both")
            model = model_path
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
        streamed: list[str] = []  # sample 0's deltas (what a streaming program shows)
        if on_text is not None:
            produced = 0
            for event in handle:
                if event.index != 0:
                    continue
                produced += len(event.token_ids)
                streamed.append(event.text)
                meta: dict[str, Any] = {"completion_tokens": produced, "output_token_logprobs_length": produced}
                if return_logprob:
                    meta["output_token_logprobs"] = [[t.logprob, t.token_id, t.token] for t in event.logprobs]
                if event.text or return_logprob:
                    on_text(event.text, meta)
        out: RequestOutput = handle.result()
        if out.error:
            raise SgrunError(f"generation failed: {out.error}")
        sample = out.outputs[0]
        # When streaming, the program already holds the deltas: they are the text.
        text = "".join(streamed) if on_text is not None else sample.text
        logprobs = list(sample.logprobs or []) if return_logprob else None
        return GenerationResult(text=text, finish_reason=sample.finish_reason,
                                prompt_tokens=out.prompt_tokens, cached_tokens=out.cached_tokens,
                                completion_tokens=out.completion_tokens, output_ids=list(sample.token_ids),
                                logprobs=logprobs, matched_stop=sample.matched_stop,
                                texts=[text, *(o.text for o in out.outputs[1:])])

    def score(self, prompt: str, continuations: list[str]) -> ScoreResult:
        logprobs = [list(map(float, lps)) for lps in self.engine.score(prompt, continuations)]
        tok = self.engine.tokenizer
        prompt_ids = tok.encode(prompt)
        # The scored tokens are the last len(lps) of prompt + continuation, as the engine tokenizes it.
        token_ids = [tok.encode(prompt + c, add_bos=False)[-len(lps):] if lps else []
                     for c, lps in zip(continuations, logprobs)]
        return ScoreResult(logprobs=logprobs, prompt_tokens=len(prompt_ids), token_ids=token_ids,
                           tokens=[[tok.decode([t]) for t in ids] for ids in token_ids])

    def input_logprobs(self, prompt: str | list[int], start: int) -> list[list[Any]]:
        tok = self.engine.tokenizer
        ids = tok.encode(prompt) if isinstance(prompt, str) else list(prompt)
        return prompt_logprobs(self.engine, ids, start, tok.decode)

    def flush_cache(self) -> None:
        self.engine.flush_cache()

    def server_info(self) -> dict[str, Any]:
        return {"model_path": getattr(self.engine, "model_path", None), "max_context": self.engine.max_context,
                "backend": "sgrun.Runtime"}

    # SGLang's Runtime wraps an endpoint; programs reach it as `runtime.endpoint`.
    @property
    def endpoint(self) -> "Runtime":
        return self

    def get_model_name(self) -> str:
        return str(getattr(self.engine, "model_name", ""))

    def get_tokenizer(self) -> Any:
        return self.engine.tokenizer

    def close(self) -> None:
        if self._owns_engine:
            self._finalizer()

    def shutdown(self) -> None:
        self.close()

    def __enter__(self) -> "Runtime":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
