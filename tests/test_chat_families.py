"""Chat and tool calls per model family, on the families' real chat templates (vendored under
tests/data/chat_templates/, sources in its README): the template comes from the model's own
metadata (a tokenizer folder's tokenizer_config.json), the tool-call format is detected from it,
tools, calls and results render in the family's own markup, Qwen3's thinking switch
(`chat_template_kwargs: {"enable_thinking": false}`) works with `--reasoning-parser qwen3`, and
the server's tool_choice modes hold on each family.

The model is the default SmolLM2 (weights and tokenizer) with the family's template in its
tokenizer folder: what is tested is the rendering, the detection, the switch and the parsers,
not the model's quality."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import jsonschema
import openai
import pytest

from server_fixtures import engine_fixture

from sgrun.server.app import build_app
from server_thread import ServerThread

TEMPLATES = Path(__file__).parent / "data" / "chat_templates"
# template file -> the tool-call format the server must detect from it
FAMILIES = {
    "Qwen-Qwen3-0.6B.jinja": "hermes",
    "Qwen3-Coder.jinja": "qwen3_coder",
    "meta-llama-Llama-3.1-8B-Instruct.jinja": "llama3_json",
    "meta-llama-Llama-3.2-3B-Instruct.jinja": "llama3_json",
    "HuggingFaceTB-SmolLM3-3B.jinja": "hermes",
    "microsoft-Phi-3.5-mini-instruct.jinja": "hermes",   # no tool markup: sgrun's own tools block
    "microsoft-Phi-4-mini-instruct.jinja": "phi4_mini",
    "google-gemma-3-it.jinja": "gemma",
}
# How each format writes a past call of get_weather(city="Paris") into the prompt.
CALL_IN_PROMPT = {"hermes": '"name": "get_weather"', "qwen3_coder": "<function=get_weather>",
                  "llama3_json": '"name": "get_weather"', "phi4_mini": '<|tool_call|>[{"name": "get_weather"',
                  "gemma": '```tool_code\nget_weather(city="Paris")\n```'}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                   "required": ["city"], "additionalProperties": False}}}
ASK = [{"role": "user", "content": "What's the weather in Paris?"}]
ANSWERED = ASK + [
    {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
        "name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "Paris: 21 C, sunny"}]

engine = engine_fixture(num_threads=2, memory_gb=0.3)


def family_tokenizer(engine, template_file: str, folder: Path):
    """A tokenizer folder as a model ships it: SmolLM2's tokenizer.json, and a tokenizer_config.json
    whose chat_template is the family's; loaded the way sgrun loads a model folder's tokenizer."""
    from sgrun.models.tokenizer import Tokenizer
    folder.mkdir(parents=True, exist_ok=True)
    engine.tokenizer.hf.save(str(folder / "tokenizer.json"))
    source = (TEMPLATES / template_file).read_text()
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "chat_template": source, "bos_token": None, "eos_token": "<|im_end|>", "add_bos_token": False}))
    tok = Tokenizer.from_folder(folder)
    assert tok.chat_template is not None and tok.chat_template.source == source
    return tok


@pytest.fixture
def serve_family(engine, tmp_path):
    """serve_family(template file, **build_app options) -> the server's URL, the engine answering
    with that family's tokenizer folder (same token ids as the weights' own)."""
    original = engine.parts.tokenizer
    servers = []

    def start(template_file: str, **options):
        engine.parts.tokenizer = family_tokenizer(engine, template_file, tmp_path / template_file)
        srv = ServerThread(build_app(engine, **options))
        servers.append(srv)
        return srv.__enter__().url

    yield start
    for srv in servers:
        srv.__exit__(None, None, None)
    engine.parts.tokenizer = original


@pytest.mark.parametrize("template_file", ["Qwen-Qwen3-0.6B.jinja", "google-gemma-3-it.jinja"])
def test_a_gguf_files_own_template_is_the_one_used(template_file):
    """From a GGUF file the template is its `tokenizer.chat_template` field: the default model's own
    metadata with that field replaced by a family's template gives that family's format."""
    from sgrun.constrain.tool_calls import detect_format
    from sgrun.models.gguf_file import GGUFFile
    from sgrun.models.loader import resolve_model_path
    from sgrun.models.tokenizer import Tokenizer
    meta = dict(GGUFFile(resolve_model_path(None)).metadata)
    source = (TEMPLATES / template_file).read_text()
    meta["tokenizer.chat_template"] = source
    tok = Tokenizer.from_gguf_fields(meta)
    assert tok.chat_template.source == source
    assert detect_format(tok.chat_template.source).name == FAMILIES[template_file]


@pytest.mark.parametrize("template_file", FAMILIES)
def test_the_format_is_detected_and_calls_and_results_render_in_it(engine, tmp_path, template_file):
    from sgrun.constrain.tool_calls import detect_format
    from sgrun.server.chat_prompt import render_prompt
    from sgrun.server.protocol import ChatCompletionRequest
    tok = family_tokenizer(engine, template_file, tmp_path)
    fmt = detect_format(tok.chat_template.source)
    assert fmt.name == FAMILIES[template_file]
    import msgspec
    req = msgspec.convert({"model": "m", "messages": ANSWERED, "tools": [WEATHER]}, ChatCompletionRequest)
    text = render_prompt(tok, fmt, req.messages, req.tools)
    assert "Current weather in a city." in text            # the tools, listed by the template or by sgrun
    assert CALL_IN_PROMPT[fmt.name] in text                # the past call, in the family's markup
    assert "Paris: 21 C, sunny" in text                    # the tool's result
    assert text.index(CALL_IN_PROMPT[fmt.name]) < text.index("Paris: 21 C, sunny")


def test_qwen3_thinking_switch_and_reasoning_parser(engine, serve_family):
    """Qwen3's own template under --reasoning-parser qwen3: enable_thinking false closes an empty
    think section in the prompt, so the answer has no reasoning and a response_format holds from
    the first token; the default leaves the section to the model; a bad kwarg is a 400."""
    url = serve_family("Qwen-Qwen3-0.6B.jinja", reasoning_parser="qwen3")
    off = httpx.post(url + "/apply_chat_template", json={"messages": ASK,
                                                         "chat_template_kwargs": {"enable_thinking": False}}).json()
    on = httpx.post(url + "/apply_chat_template", json={"messages": ASK}).json()
    assert off["text"].endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n"), off
    assert on["text"].endswith("<|im_start|>assistant\n"), on
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)
    model = client.models.list().data[0].id
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"],
              "additionalProperties": False}
    r = client.chat.completions.create(
        model=model, messages=ASK, max_tokens=30, temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": schema}},
        extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    message = r.choices[0].message
    assert getattr(message, "reasoning_content", None) is None
    jsonschema.validate(json.loads(message.content), schema)
    # With thinking on, a reasoning section the output writes is split off (regex forces one here).
    thought = client.chat.completions.create(model=model, messages=ASK, max_tokens=30, temperature=0,
                                             extra_body={"regex": r"<think>[a-z ]{1,20}</think>\n\nParis"})
    assert thought.choices[0].message.reasoning_content and thought.choices[0].message.content.strip() == "Paris"
    bad = httpx.post(url + "/v1/chat/completions", json={"model": model, "messages": ASK,
                                                          "chat_template_kwargs": {"messages": []}})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "chat_template_kwargs.messages"


@pytest.mark.parametrize("template_file", ["Qwen-Qwen3-0.6B.jinja", "Qwen3-Coder.jinja",
                                           "meta-llama-Llama-3.1-8B-Instruct.jinja",
                                           "meta-llama-Llama-3.2-3B-Instruct.jinja", "HuggingFaceTB-SmolLM3-3B.jinja",
                                           "microsoft-Phi-4-mini-instruct.jinja", "google-gemma-3-it.jinja"])
def test_tool_choice_modes_per_family(serve_family, template_file):
    """required, named, none and auto on the family's template and detected format: calls parse into
    OpenAI tool_calls valid against the tool's schema, and a result turn renders and runs."""
    url = serve_family(template_file)
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)
    model = client.models.list().data[0].id
    common = dict(model=model, tools=[WEATHER], temperature=0, max_tokens=60)
    for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        r = client.chat.completions.create(messages=ASK, tool_choice=choice, parallel_tool_calls=False, **common)
        assert r.choices[0].finish_reason == "tool_calls", r
        call = r.choices[0].message.tool_calls[0]
        assert call.function.name == "get_weather"
        jsonschema.validate(json.loads(call.function.arguments), WEATHER["function"]["parameters"])
    none = client.chat.completions.create(messages=ANSWERED, tool_choice="none", **common)
    assert none.choices[0].message.content and not none.choices[0].message.tool_calls
    auto = client.chat.completions.create(messages=ANSWERED, tool_choice="auto", **common)
    assert auto.choices[0].finish_reason in ("stop", "tool_calls", "length")
    for call in auto.choices[0].message.tool_calls or []:
        jsonschema.validate(json.loads(call.function.arguments), WEATHER["function"]["parameters"])


def get_weather(city: str) -> str:
    """Current weather in a city."""
    return f"{city}: 21 C, sunny"


@pytest.mark.parametrize("template_file", ["Qwen-Qwen3-0.6B.jinja", "Qwen3-Coder.jinja",
                                           "meta-llama-Llama-3.2-3B-Instruct.jinja",
                                           "microsoft-Phi-4-mini-instruct.jinja", "google-gemma-3-it.jinja"])
def test_sgrun_agent_speaks_each_familys_format(engine, tmp_path, template_file):
    """sgrun.Agent without a call_format takes the one the backend's template describes, calls the
    tool in it (tool_choice required), feeds the result back in the family's way and answers."""
    import sgrun
    original = engine.parts.tokenizer
    engine.parts.tokenizer = family_tokenizer(engine, template_file, tmp_path)
    try:
        agent = sgrun.Agent(tools=[get_weather], tool_choice="required", max_steps=2, max_tokens=16,
                            call_max_tokens=48)
        result = agent.run("What's the weather in Paris?", backend=sgrun.Runtime(engine=engine))
    finally:
        engine.parts.tokenizer = original
    assert agent.format.name == FAMILIES[template_file]
    assert result.tool_calls and result.tool_calls[0].name == "get_weather", result
    assert result.tool_calls[0].error is None and isinstance(result.tool_calls[0].arguments["city"], str)
    assert result.finish_reason in ("answer", "max_steps")
