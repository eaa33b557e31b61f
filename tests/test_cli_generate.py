"""`sgrun generate` samples the way the model recommends, `--temperature 0` is greedy, the
Python and HTTP APIs keep OpenAI's defaults, and the README's first command answers its own
question in bf16 and in float32."""

from __future__ import annotations

import argparse
import json
import re
import shlex
from pathlib import Path

import pytest

import sgrun
from sgrun.cli import build_parser, generate_sampling, main
from sgrun.models.generation_defaults import DEFAULT, MODEL_CARDS, recommended_sampling

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_first_command() -> list[str]:
    """The `sgrun generate ...` part of the README's first shell block."""
    block = re.search(r"```bash\n(.*?)```", README.read_text(), re.S).group(1)
    command = next(part for part in block.split("&&") if part.strip().startswith("sgrun generate"))
    return shlex.split(command)[1:]


def test_default_model_uses_its_model_card_sampling(model_path):
    rec = recommended_sampling(model_path)
    assert rec == MODEL_CARDS["smollm2"] and rec.temperature == 0.2 and rec.top_p == 0.9


def test_generation_config_wins_and_do_sample_false_is_greedy(tmp_path):
    (tmp_path / "generation_config.json").write_text(json.dumps({"temperature": 0.6, "top_p": 0.95, "top_k": 20}))
    rec = recommended_sampling(tmp_path)
    assert (rec.temperature, rec.top_p, rec.top_k, rec.source) == (0.6, 0.95, 20, "generation_config.json")
    (tmp_path / "generation_config.json").write_text(json.dumps({"do_sample": False, "temperature": 0.6}))
    assert recommended_sampling(tmp_path).temperature == 0.0


def test_unknown_model_gets_the_documented_default(tmp_path):
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": 2}))  # no sampling keys
    assert recommended_sampling(tmp_path) == DEFAULT
    assert (DEFAULT.temperature, DEFAULT.top_p, DEFAULT.repetition_penalty) == (0.7, 0.9, 1.05)


def test_flags_override_and_temperature_zero_is_greedy(model_path):
    engine = argparse.Namespace(model_path=str(model_path))
    args = build_parser().parse_args(["generate", "hi", "--temperature", "0"])
    params = sgrun.SamplingParams(**generate_sampling(args, engine))
    assert params.greedy and params.top_p == 0.9            # the rest still from the model card
    args = build_parser().parse_args(["generate", "hi", "--top-p", "0.5"])
    assert generate_sampling(args, engine)["top_p"] == 0.5 and generate_sampling(args, engine)["temperature"] == 0.2


def test_programs_keep_openai_defaults():
    p = sgrun.SamplingParams()
    assert (p.temperature, p.top_p, p.repetition_penalty) == (1.0, 1.0, 1.0)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_readme_first_command_answers_correctly(dtype, capsys):
    args = readme_first_command()
    assert args[0] == "generate" and "What is the capital of France?" in args
    with pytest.raises(SystemExit) as done:
        main(args + ["--dtype", dtype, "--num-threads", "2"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "Paris" in out, out
