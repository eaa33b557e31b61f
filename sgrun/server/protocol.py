"""msgspec Structs for every request and response body the server reads or writes.

Requests ignore unknown fields (OpenAI clients send fields we do not use); field types are
checked by msgspec so a wrong type becomes a 400 naming the field."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

# --------------------------------------------------------------------------- shared pieces


class FunctionDef(msgspec.Struct):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolDef(msgspec.Struct):
    function: FunctionDef
    type: str = "function"


class ToolChoiceFunction(msgspec.Struct):
    name: str


class ToolChoiceNamed(msgspec.Struct):
    function: ToolChoiceFunction
    type: str = "function"


class FunctionCall(msgspec.Struct):
    name: str
    arguments: str


class ToolCall(msgspec.Struct):
    id: str
    function: FunctionCall
    type: str = "function"


class ContentPart(msgspec.Struct):
    type: str
    text: str | None = None


class ChatMessage(msgspec.Struct):
    role: str
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None


class JsonSchemaFormat(msgspec.Struct):
    name: str = "response"
    schema: dict[str, Any] | bool | None = None
    strict: bool | None = None
    description: str | None = None


class ResponseFormat(msgspec.Struct):
    type: str
    json_schema: JsonSchemaFormat | None = None
    # type "structural_tag" (constrain/structural_tag.py): SGLang's shape, or xgrammar's newer `format`.
    structures: list[Any] | None = None
    triggers: list[Any] | None = None
    format: Any = None


class StreamOptions(msgspec.Struct):
    include_usage: bool = False


class PromptTokensDetails(msgspec.Struct):
    cached_tokens: int = 0


class Usage(msgspec.Struct):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | None = None


# --------------------------------------------------------------------------- chat requests


class ChatCompletionRequest(msgspec.Struct):
    model: str
    messages: list[ChatMessage]
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    n: int | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    response_format: ResponseFormat | None = None
    tools: list[ToolDef] | None = None
    tool_choice: str | ToolChoiceNamed | None = None
    parallel_tool_calls: bool | None = None
    user: str | None = None
    # Extras SGLang and vLLM accept.
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    regex: str | None = None
    ebnf: str | None = None
    ignore_eos: bool | None = None
    stop_token_ids: list[int] | None = None
    skip_special_tokens: bool | None = None
    speculative_ngram: bool | None = None   # n-gram speculative decoding (None: the server's default)
    # True: refuse (400) a constraint whose shortest output exceeds max_tokens instead of cutting the
    # output there with finish "length" (None: the server's default, `sgrun serve --strict-budget`).
    strict_budget: bool | None = None
    # Extra variables for the chat template, as vLLM and SGLang take them: {"enable_thinking": false}
    # turns Qwen3's thinking off.
    chat_template_kwargs: dict[str, Any] | None = None


# --------------------------------------------------------------------------- chat responses


class TopLogprob(msgspec.Struct):
    token: str
    logprob: float
    bytes: list[int] | None


class ChatTokenLogprob(msgspec.Struct):
    token: str
    logprob: float
    bytes: list[int] | None
    top_logprobs: list[TopLogprob]


class ChatLogprobs(msgspec.Struct):
    content: list[ChatTokenLogprob] | None


class ResponseMessage(msgspec.Struct):
    role: str
    content: str | None
    tool_calls: list[ToolCall] | None = None
    refusal: str | None = None
    reasoning_content: str | None = None


class ChatChoice(msgspec.Struct):
    index: int
    message: ResponseMessage
    finish_reason: str | None
    logprobs: ChatLogprobs | None = None


class ChatCompletionResponse(msgspec.Struct):
    id: str
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    object: str = "chat.completion"
    system_fingerprint: str | None = None


class FunctionCallDelta(msgspec.Struct, omit_defaults=True):
    name: str | None = None
    arguments: str | None = None


class ToolCallDelta(msgspec.Struct, omit_defaults=True):
    index: int
    id: str | None = None
    type: str | None = None
    function: FunctionCallDelta | None = None


class ChatDelta(msgspec.Struct, omit_defaults=True):
    role: str | None = None
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


class ChatChunkChoice(msgspec.Struct):
    index: int
    delta: ChatDelta
    finish_reason: str | None = None
    logprobs: ChatLogprobs | None = None


class ChatCompletionChunk(msgspec.Struct):
    id: str
    created: int
    model: str
    choices: list[ChatChunkChoice]
    object: str = "chat.completion.chunk"
    usage: Usage | None = None


# --------------------------------------------------------------------------- completions


class CompletionRequest(msgspec.Struct):
    model: str
    prompt: str | list[str | int | list[int]]
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    n: int | None = None
    best_of: int | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    logprobs: int | None = None
    echo: bool | None = None
    suffix: str | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    user: str | None = None
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    regex: str | None = None
    ebnf: str | None = None
    json_schema: dict[str, Any] | None = None
    ignore_eos: bool | None = None
    stop_token_ids: list[int] | None = None
    skip_special_tokens: bool | None = None
    speculative_ngram: bool | None = None   # n-gram speculative decoding (None: the server's default)
    # True: refuse (400) a constraint whose shortest output exceeds max_tokens instead of cutting the
    # output there with finish "length" (None: the server's default, `sgrun serve --strict-budget`).
    strict_budget: bool | None = None


class CompletionLogprobs(msgspec.Struct):
    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float] | None]
    text_offset: list[int]


class CompletionChoice(msgspec.Struct):
    index: int
    text: str
    finish_reason: str | None
    logprobs: CompletionLogprobs | None = None


class CompletionResponse(msgspec.Struct):
    id: str
    created: int
    model: str
    choices: list[CompletionChoice]
    object: str = "text_completion"
    usage: Usage | None = None


# --------------------------------------------------------------------------- models


class ModelCard(msgspec.Struct):
    id: str
    created: int
    owned_by: str = "sgrun"
    object: str = "model"
    max_model_len: int | None = None


class ModelList(msgspec.Struct):
    data: list[ModelCard]
    object: str = "list"


# --------------------------------------------------------------------------- native protocol


class GenerateRequest(msgspec.Struct):
    """SGLang's /generate body. Fields SGLang clients may send that sgrun has no use for
    (lora_path, session_id, image_data, ...) are ignored."""
    text: str | list[str] | None = None
    input_ids: list[int | list[int]] | None = None
    sampling_params: dict[str, Any] | None = None
    stream: bool = False
    return_logprob: bool | None = False
    top_logprobs_num: int | None = 0
    # First prompt position whose logprob goes into meta_info.input_token_logprobs (None: none).
    logprob_start_len: int | None = None
    # False: logprob entries carry None instead of the token text (SGLang's default); unset: text.
    return_text_in_logprobs: bool | None = None
    rid: str | list[str] | None = None


# [logprob (None for a prompt's first token), token_id, token_text (None without return_text_in_logprobs)]
LogprobEntry = tuple[float | None, int, str | None]


class GenerateMetaInfo(msgspec.Struct, omit_defaults=True):
    id: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    # SGLang's shape: {"type": "stop", "matched": "\n" | token_id | null}, {"type": "length",
    # "length": N}, {"type": "abort", "message": ...}; null while a stream runs.
    finish_reason: dict[str, Any] | None = None
    matched_stop: str | int | None = None
    e2e_latency: float | None = None
    input_token_logprobs: list[LogprobEntry] | None = None
    # Per output token (in a stream: this event's tokens); per position a best-first list of those.
    output_token_logprobs: list[LogprobEntry] | None = None
    output_top_logprobs: list[list[LogprobEntry]] | None = None
    output_token_logprobs_length: int | None = None   # in a stream: output logprobs so far


class GenerateResult(msgspec.Struct):
    text: str
    output_ids: list[int]
    meta_info: GenerateMetaInfo


class GenerateStreamEvent(msgspec.Struct):
    """As SGLang streams: `text` and `output_ids` are everything so far; `delta` is the new text."""
    index: int
    text: str
    delta: str
    output_ids: list[int]
    meta_info: GenerateMetaInfo


class ScoreRequest(msgspec.Struct):
    continuations: list[str | list[int]]
    text: str | None = None
    input_ids: list[int] | None = None


class ScoreResponse(msgspec.Struct):
    logprobs: list[list[float]]
    sum_logprobs: list[float]
    num_tokens: list[int]
    prompt_tokens: int
    token_ids: list[list[int]] | None = None    # the scored tokens of each continuation
    tokens: list[list[str]] | None = None       # and their text


class ModelInfo(msgspec.Struct):
    model_name: str
    model_path: str | None
    chat_template: str | None
    chat_template_accepts_tools: bool
    eos_token_ids: list[int]
    bos_token_id: int | None
    vocab_size: int
    max_context: int
    special_tokens: dict[str, int]
    tokenizer_fingerprint: str


class TokenizeRequest(msgspec.Struct):
    text: str
    add_bos: bool | None = None


class TokenizeResponse(msgspec.Struct):
    input_ids: list[int]
    count: int


class DetokenizeRequest(msgspec.Struct):
    input_ids: list[int]
    skip_special_tokens: bool = False


class DetokenizeResponse(msgspec.Struct):
    text: str


class ApplyChatTemplateRequest(msgspec.Struct):
    messages: list[ChatMessage]
    tools: list[ToolDef] | None = None
    add_generation_prompt: bool = True
    chat_template_kwargs: dict[str, Any] | None = None


class ApplyChatTemplateResponse(msgspec.Struct):
    text: str
    input_ids: list[int]


class AbortRequest(msgspec.Struct):
    rid: str


Finish = Literal["stop", "length", "abort", "tool_calls"]
