"""Every example runs on the default model (with short generations) and does what it says."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

import sgrun
from sgrun.server.app import build_app
from server_thread import ServerThread

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SHORT = "8"


@pytest.fixture(scope="module", autouse=True)
def short_generations():
    old = os.environ.get("SGRUN_EXAMPLE_MAX_TOKENS")
    os.environ["SGRUN_EXAMPLE_MAX_TOKENS"] = SHORT
    sys.path.insert(0, str(EXAMPLES))
    yield
    sys.path.remove(str(EXAMPLES))
    if old is None:
        del os.environ["SGRUN_EXAMPLE_MAX_TOKENS"]
    else:
        os.environ["SGRUN_EXAMPLE_MAX_TOKENS"] = old


@pytest.fixture(scope="module")
def runtime(shared_engine):
    return sgrun.Runtime(engine=shared_engine)


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_multi_turn_chat(runtime):
    state = load("multi_turn_chat").main(runtime)
    assert [m["role"] for m in state.messages()] == ["system"] + ["user", "assistant"] * 3
    assert all(c["cached_tokens"] > 0 for c in state.calls[1:])


def test_json_extraction(runtime):
    module = load("json_extraction")
    os.environ["SGRUN_EXAMPLE_MAX_TOKENS"] = "64"  # the JSON object needs room to close
    try:
        person = module.main(runtime)
    finally:
        os.environ["SGRUN_EXAMPLE_MAX_TOKENS"] = SHORT
    import jsonschema
    jsonschema.validate(person, module.PERSON_SCHEMA)


def test_routing(runtime):
    module = load("routing")
    states = module.main(runtime)
    assert all(s["route"] in module.ROUTES for s in states)
    math = [s for s in states if s["route"] == "math"]
    assert all(s["answer"].lstrip("-").isdigit() for s in math)


def test_agent_with_two_tools(runtime):
    result = load("agent_tools").main(runtime)
    assert result.tool_calls and result.tool_calls[0].name in ("multiply", "get_weather")
    assert result.tool_calls[0].error is None
    assert result.answer is not None


def test_fork_ideas(runtime):
    state = load("fork_ideas").main(runtime)
    assert len(state["ideas"]) == 3 and state["best"] in ("1", "2", "3")
    assert all(n > 0 for n in state["cached_tokens"])


def check_batch(runtime, capsys, count: int) -> None:
    states = load("batch_100").main(runtime, count=count)
    assert len(states) == count and all(s.error() is None for s in states)
    assert {s["sentiment"] for s in states} <= {"positive", "negative"}
    assert f"{count}/{count}" in capsys.readouterr().err   # the progress bar


def test_batch_small(runtime, capsys):
    check_batch(runtime, capsys, 24)


@pytest.mark.slow
def test_batch_of_100(runtime, capsys):
    check_batch(runtime, capsys, 100)


def test_remote_program(shared_engine, runtime):
    module = load("remote_program")
    with ServerThread(build_app(shared_engine)) as server:
        remote = module.main(url=server.url)
    local = module.plan_trip.run(city="Vienna", limit=int(SHORT), backend=runtime, temperature=0)
    assert remote.text() == local.text()


def test_an_example_runs_as_a_script():
    env = {**os.environ, "SGRUN_EXAMPLE_MAX_TOKENS": "4"}
    out = subprocess.run([sys.executable, str(EXAMPLES / "multi_turn_chat.py")], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "assistant:" in out.stdout


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(p.stem for p in EXAMPLES.glob("*.py") if not p.stem.startswith("_")))
def test_every_example_runs_as_a_script(name):
    env = {**os.environ, "SGRUN_EXAMPLE_MAX_TOKENS": "16"}
    out = subprocess.run([sys.executable, str(EXAMPLES / f"{name}.py")], env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
