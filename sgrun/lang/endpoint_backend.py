"""`sgrun.RuntimeEndpoint`: a running `sgrun serve` as a DSL backend, over the native protocol
(`/generate`, `/score`, `/model_info`; see docs/native-api.md)."""

from __future__ import annotations

import dataclasses
import json
import threading
from typing import Any

import httpx

from sgrun.engine.sampling_params import SamplingParams
from sgrun.errors import ConstraintError, InvalidRequestError, SgrunError
from sgrun.lang.backend import Backend, GenerationResult, ScoreResult, TextCallback
from sgrun.models.chat_template import ChatTemplate

_DEFAULTS = SamplingParams()


class RuntimeEndpoint(Backend):
    def __init__(self, url: str, api_key: str | None = None, timeout: float | None = 600.0,
                 max_connections: int = 256):
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.url = url.rstrip("/")
        self._client = httpx.Client(
            base_url=self.url, headers=headers,
            timeout=httpx.Timeout(timeout, connect=30.0),
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections))
        self._model_info: dict[str, Any] | None = None
        self._template: ChatTemplate | None = None
        self._info_lock = threading.Lock()

    # --- model description ----------------------------------------------------------------
    @property
    def model_info(self) -> dict[str, Any]:
        with self._info_lock:
            if self._model_info is None:
                self._model_info = self._request("GET", "/model_info")
                self._template = _template_from_info(self._model_info)
            return self._model_info

    @property
    def chat_template(self) -> ChatTemplate | None:
        self.model_info  # noqa: B018 - loads the template on first use
        return self._template

    # --- calls ------------------------------------------------------------------------------
    def generate(self, prompt: str, params: SamplingParams, return_logprob: bool = False,
                 on_text: TextCallback | None = None) -> GenerationResult:
        body = {"text": prompt, "sampling_params": _params_to_json(params),
                "return_logprob": return_logprob, "stream": on_text is not None}
        if on_text is None:
            out = self._request("POST", "/generate", json=body)
            return _result(out["text"], out.get("output_ids", []), out["meta_info"], return_logprob)
        pieces: list[str] = []
        ids: list[int] = []
        logprobs: list[Any] = []
        meta: dict[str, Any] = {}
        with self._client.stream("POST", "/generate", json=body) as response:
            if response.status_code != 200:
                response.read()
                raise _error_from(response)
            for line in response.iter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[len("data:"):].strip()
                if data == "[DONE]":
                    break
                event = json.loads(data)
                if "error" in event:
                    raise SgrunError(f"generation failed on the server: {event['error'].get('message')}")
                if event.get("index", 0) != 0:
                    continue
                if event.get("text"):
                    pieces.append(event["text"])
                    on_text(event["text"])
                ids.extend(event.get("output_ids", []))
                meta = event.get("meta_info", meta)
                logprobs.extend(meta.get("output_token_logprobs") or [])
        meta = {**meta, "output_token_logprobs": logprobs}
        return _result("".join(pieces), ids, meta, return_logprob)

    def score(self, prompt: str, continuations: list[str]) -> ScoreResult:
        out = self._request("POST", "/score", json={"text": prompt, "continuations": continuations})
        return ScoreResult(logprobs=out["logprobs"], prompt_tokens=out.get("prompt_tokens", 0))

    def flush_cache(self) -> None:
        self._request("POST", "/flush_cache", json={})

    def close(self) -> None:
        self._client.close()

    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._client.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise SgrunError(f"cannot reach the sgrun server at {self.url}: {exc}") from exc
        if response.status_code != 200:
            raise _error_from(response)
        return response.json()


def _params_to_json(params: SamplingParams) -> dict[str, Any]:
    """Only the fields that differ from the defaults (the server fills in the rest)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(params):
        value = getattr(params, f.name)
        if f.name == "logprobs" or value == getattr(_DEFAULTS, f.name):
            continue
        if f.name == "logit_bias":
            value = {str(k): v for k, v in value.items()}
        out[f.name] = value
    out["max_new_tokens"] = params.max_new_tokens  # explicit: the server's default may differ
    return out


def _result(text: str, ids: list[int], meta: dict[str, Any], return_logprob: bool) -> GenerationResult:
    logprobs = None
    if return_logprob:
        logprobs = [(entry[2], float(entry[0])) for entry in meta.get("output_token_logprobs") or []]
    return GenerationResult(text=text, finish_reason=meta.get("finish_reason"),
                            prompt_tokens=int(meta.get("prompt_tokens", 0)),
                            cached_tokens=int(meta.get("cached_tokens", 0)),
                            completion_tokens=int(meta.get("completion_tokens", len(ids))),
                            output_ids=list(ids), logprobs=logprobs, matched_stop=meta.get("matched_stop"))


def _error_from(response: httpx.Response) -> SgrunError:
    try:
        err = response.json()["error"]
        message, code, param = err.get("message", ""), err.get("code"), err.get("param")
    except (ValueError, KeyError, TypeError, AttributeError):
        message, code, param = response.text[:500], None, None
    text = f"server returned {response.status_code}: {message}"
    if code == "constraint_error":
        return ConstraintError(text)
    if response.status_code in (400, 413):
        return InvalidRequestError(text, field=param)
    return SgrunError(text)


def _template_from_info(info: dict[str, Any]) -> ChatTemplate | None:
    source = info.get("chat_template")
    if not source:
        return None
    by_id = {i: tok for tok, i in (info.get("special_tokens") or {}).items()}
    bos = info.get("bos_token")
    if bos is None and info.get("bos_token_id") is not None:
        bos = by_id.get(info["bos_token_id"])
    eos = info.get("eos_token")
    if eos is None and info.get("eos_token_ids"):
        # The template's eos_token is the GGUF/tokenizer eos; with several ids take the lowest.
        eos = by_id.get(min(info["eos_token_ids"]))
    return ChatTemplate(source, bos, eos)
