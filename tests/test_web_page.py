"""The web page at `/` in a real headless browser (Debian's chromium, driven by playwright):
the page asks for the API key once, a chat message streams an answer with its token counts,
TTFT and tok/s, a JSON Schema compiles (and an unsupported one is refused with its keyword
named), its generated output is validated, a required tool call comes back with arguments that fit
the tool's parameters, and the engine view draws the radix tree and keeps updating. SGRUN_SCREENSHOT_DIR=docs/ also writes the screenshots the README shows."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import httpx
import jsonschema
import pytest
from playwright.sync_api import expect, sync_playwright

from sgrun.server.app import build_app
from server_thread import ServerThread

API_KEY = "page-test-key"
CHROMIUM = os.environ.get("SGRUN_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
UNSUPPORTED_SCHEMA = '{"type": "object", "properties": {"a": {"$dynamicRef": "#meta"}}}'


@pytest.fixture(scope="module")
def page_server(shared_engine):
    with ServerThread(build_app(shared_engine, api_key=API_KEY)) as srv:
        yield srv


def test_page_and_static_files_are_open_but_its_data_needs_the_key(page_server):
    assert "<title>sgrun</title>" in httpx.get(page_server.url + "/").text
    assert httpx.get(page_server.url + "/ui/static/app.js").headers["content-type"].startswith("text/javascript")
    assert httpx.get(page_server.url + "/ui/static/nope.js").status_code == 404
    assert httpx.get(page_server.url + "/ui/engine").status_code == 401
    view = httpx.get(page_server.url + "/ui/engine", headers={"Authorization": f"Bearer {API_KEY}"}).json()
    assert view["engine"]["pages_total"] > 0 and view["recommended_sampling"]["temperature"] == 0.2
    refused = httpx.post(page_server.url + "/ui/constraint", headers={"Authorization": f"Bearer {API_KEY}"},
                         json={"kind": "json_schema", "source": {"type": "object", "properties": {"a": {"$dynamicRef": "#m"}}}})
    assert refused.status_code == 200 and refused.json()["ok"] is False and refused.json()["keyword"] == "$dynamicRef"
    bad = httpx.post(page_server.url + "/ui/constraint", headers={"Authorization": f"Bearer {API_KEY}"},
                     json={"kind": "nonsense", "source": "x"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "kind"


def test_page_in_a_headless_browser(page_server):
    assert CHROMIUM, "chromium not found: apt-get install chromium (or set SGRUN_CHROMIUM)"
    shots = os.environ.get("SGRUN_SCREENSHOT_DIR")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 820})
        page.goto(page_server.url + "/")
        # The key is asked for once; every later call carries it.
        expect(page.locator("#key-dialog")).to_be_visible(timeout=15_000)
        page.fill("#key-input", API_KEY)
        page.click("#key-form button")
        expect(page.locator("#model-line")).to_contain_text("KV", timeout=30_000)
        expect(page.locator("#s-temperature")).to_have_value("0.2")      # the model's recommended sampling

        # Chat: greedy and short, so the test is quick; the answer streams in, then the stats appear.
        page.fill("#s-temperature", "0")
        page.fill("#s-max_tokens", "24")
        page.fill("#chat-system", "You are a concise assistant.")
        page.fill("#chat-input", "What is the capital of France?")
        page.press("#chat-input", "Enter")
        answer = page.locator(".msg.assistant .body").last
        expect(answer).not_to_have_text("", timeout=60_000)
        meta = page.locator(".msg.assistant .meta[data-done]").last
        expect(meta).to_contain_text("TTFT", timeout=120_000)
        assert "completion" in meta.inner_text() and "tok/s" in meta.inner_text(), meta.inner_text()
        assert "Paris" in answer.inner_text()
        assert int(page.locator(".msg.assistant").last.get_attribute("data-chunks")) > 1   # it streamed
        if shots:
            page.screenshot(path=str(Path(shots) / "web-chat.png"))

        # Structured output: a refusal names the keyword; the example compiles, generates, validates.
        page.click("nav button[data-tab=structured]")
        page.fill("#so-source", UNSUPPORTED_SCHEMA)
        page.click("#so-compile")
        expect(page.locator("#so-compile-result")).to_contain_text("$dynamicRef", timeout=30_000)
        page.click("#so-example")
        page.click("#so-compile")
        expect(page.locator("#so-compile-result.ok")).to_contain_text("compiled", timeout=30_000)
        page.fill("#s-max_tokens", "128")
        page.click("#so-send")
        expect(page.locator("#so-validation")).to_contain_text("valid (checked by jsonschema", timeout=120_000)
        assert page.locator("#so-output").inner_text().startswith("{")
        expect(page.locator("#so-stats")).to_contain_text("tokens in", timeout=5_000)

        # Tool calls: the same form (requestForm in app.js) with the tools as its source; a required
        # call comes back as a card with the function's name and arguments that fit its parameters.
        page.click("nav button[data-tab=tools]")
        expect(page.locator("#tc-source")).to_have_value(re.compile('"name": "get_weather"'))
        page.select_option("#tc-option", "required")
        page.click("#tc-send")
        calls = page.locator("#tc-answer .call")
        expect(calls.first.locator("b")).to_have_text("get_weather", timeout=120_000)
        expect(page.locator("#tc-stats")).to_contain_text("finish: tool_calls")
        tools = json.loads(page.locator("#tc-source").input_value())
        for i in range(calls.count()):   # parallel calls are allowed: each one is a card
            assert calls.nth(i).locator("b").inner_text() == "get_weather"
            jsonschema.validate(json.loads(calls.nth(i).locator("pre").inner_text()), tools[0]["function"]["parameters"])

        # Engine view: cards, the KV bar and the radix tree (the chat left cached nodes), refreshing.
        page.click("nav button[data-tab=engine]")
        cards = page.locator("#engine-cards")
        expect(cards).to_contain_text("prefix-cache hit rate", timeout=30_000)
        expect(page.locator("#tree svg g.node").nth(1)).to_be_attached(timeout=30_000)   # root + at least one
        first = cards.get_attribute("data-updated")
        page.wait_for_function(f"document.getElementById('engine-cards').dataset.updated !== '{first}'",
                               timeout=30_000)
        if shots:
            page.screenshot(path=str(Path(shots) / "web-engine.png"))
        browser.close()
