"""`sgrun.RuntimeEndpoint`: a running `sgrun serve` as a DSL backend, over the native protocol
(`/generate`, `/score`, `/model_info`; see docs/native-api.md)."""

from __future__ import annotations

import dataclasses
import json
import threading
from typing import Any

import httpx

from sgrun.engine.state.outputs import TokenLogprob
from sgrun.engine.state.sampling_params import SamplingParams
from sgrun.errors import ConstraintError, InvalidRequestError, SgrunError
from sgrun.lang.backend import Backend, GenerationResult, ScoreResult, TextCallback
from sgrun.models.chat_template import ChatTemplate

_DEFAULTS = SamplingParams()


class RuntimeEndpoint(Backend):
    def __init__(self, url: str | None = None, api_key: str | None = None, timeout: float | None = 600.0,
                 max_connections: int = 256, *, base_url: str | None = None, verify: Any = None,
                 chat_template_name: str | None = None):
        """`url` is SGLang's `base_url` (either name works). `verify` and `chat_template_name` are
        accepted for SGLang programs: the connection is plain HTTP to loopback or a trusted host,
        and programs always use the chat template the server's model really has."""
        url = url if url is not None else base_url
        if not url:
            raise TypeError("RuntimeEndpoint needs the server's URL, e.g. RuntimeEndpoint('http://127.0.0.1:30000')")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.url = url.rstrip("/")
        self.base_url = self.url
        self.chat_template_name = chat_template_name
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

    def get_model_name(self) -> str:
        return str(self.model_info.get("model_path") or self.model_info.get("model_name"))

    @property
    def chat_template(self) -> ChatTemplate | None:
        self.model_info  # noqa: B018 - loads the template on first use
        return self._template

    # --- calls ------------------------------------------------------------------------------
    def generate(self, prompt: str, params: SamplingParams, return_logprob: bool = False,
                 on_text: TextCallback | None = None) -> GenerationResult:
        body = {"text": prompt, "sampling_params": _params_to_json(params),
                "return_logprob": return_logprob, "stream": on_text is not None}
        if return_logprob:
            body["top_logprobs_num"] = params.logprobs or 0
            body["return_text_in_logprobs"] = True
        if on_text is None:
            out = self._request("POST", "/generate", json=body)
            samples = out if isinstance(out, list) else [out]   # n > 1 answers a list
            first = samples[0]
            result = _result(first["text"], first.get("output_ids", []), first["meta_info"], return_logprob)
            result.texts = [x["text"] for x in samples]
            return result
        pieces: list[str] = []
        others: dict[int, list[str]] = {}   # samples 1.. of n > 1 (only sample 0 is shown while streaming)
        sent: dict[int, int] = {}           # characters of each sample's text received so far
        ids: list[int] = []
        logprobs: list[Any] = []
        tops: list[Any] = []
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
                index = event.get("index", 0)
                delta = _delta(event, sent.get(index, 0))
                sent[index] = sent.get(index, 0) + len(delta)
                if index != 0:
                    others.setdefault(index, []).append(delta)
                    continue
                ids = list(event.get("output_ids", ids))   # the ids so far, as SGLang streams them
                meta = event.get("meta_info", meta)
                logprobs.extend(meta.get("output_token_logprobs") or [])
                tops.extend(meta.get("output_top_logprobs") or [])
                pieces.append(delta)
                if delta or return_logprob:
                    done = int(meta.get("completion_tokens", len(ids)))
                    on_text(delta, {"completion_tokens": done,
                                    "output_token_logprobs_length": int(meta.get("output_token_logprobs_length", done)),
                                    "output_token_logprobs": list(meta.get("output_token_logprobs") or [])})
        meta = {**meta, "output_token_logprobs": logprobs, "output_top_logprobs": tops}
        result = _result("".join(pieces), ids, meta, return_logprob)
        result.texts = [result.text, *("".join(others[i]) for i in sorted(others))]
        return result

    def score(self, prompt: str, continuations: list[str]) -> ScoreResult:
        out = self._request("POST", "/score", json={"text": prompt, "continuations": continuations})
        return ScoreResult(logprobs=out["logprobs"], prompt_tokens=out.get("prompt_tokens", 0),
                           token_ids=out.get("token_ids"), tokens=out.get("tokens"))

    def input_logprobs(self, prompt: str | list[int], start: int) -> list[list[Any]]:
        body: dict[str, Any] = {"text": prompt} if isinstance(prompt, str) else {"input_ids": list(prompt)}
        body.update(sampling_params={"max_new_tokens": 0}, return_logprob=True, logprob_start_len=start,
                    return_text_in_logprobs=True)
        return [list(e) for e in self._request("POST", "/generate", json=body)["meta_info"]["input_token_logprobs"]]

    def cache_prefix(self, prompt: str) -> None:
        self._request("POST", "/generate", json={"text": prompt, "sampling_params": {"max_new_tokens": 0}})

    def flush_cache(self) -> None:
        self._request("POST", "/flush_cache", json={})

    def server_info(self) -> dict[str, Any]:
        return self._request("GET", "/server_info")

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


def _delta(event: dict[str, Any], received: int) -> str:
    """The new text of a stream event. The server sends the cumulative `text` (as SGLang's does;
    its client slices it) and sgrun's server also the `delta`; either is enough."""
    if "delta" in event:
        return event["delta"] or ""
    return (event.get("text") or "")[received:]


def _result(text: str, ids: list[int], meta: dict[str, Any], return_logprob: bool) -> GenerationResult:
    logprobs = None
    if return_logprob:
        entries = meta.get("output_token_logprobs") or []
        tops = meta.get("output_top_logprobs") or [[] for _ in entries]
        logprobs = [TokenLogprob(int(e[1]), e[2] or "", float(e[0]), [(int(t[1]), t[2] or "", float(t[0]))
                                                                      for t in (top or [])])
                    for e, top in zip(entries, tops)]
    finish = meta.get("finish_reason")
    if isinstance(finish, dict):       # SGLang's shape: {"type": "stop", "matched": ...}
        meta = {"matched_stop": finish.get("matched"), **meta}
        finish = finish.get("type")
    return GenerationResult(text=text, finish_reason=finish,
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
