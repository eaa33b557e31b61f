"""Our GGUF tokenizer against transformers' own GGUF conversion, token for token."""

from __future__ import annotations

import pytest

TEXTS = [
    "Hello world! The quick brown fox jumps over the lazy dog.",
    "Ça va? Crème brûlée, naïve café, Ångström, straße.",
    "中文测试：你好，世界。日本語のテキスト。한국어",
    "Emoji 😀🎉👍🏽 and flags 🇫🇷 mixed in",
    "def f(x):\n    return x ** 2  # comment\n\n\nclass A:\n\tpass\n",
    "runs    of     spaces\n\n\n\nand\t\ttabs   \n  ",
    "Numbers 1234567890 3.14159 -42 1e10 0x1F",
    '{"key": "value", "list": [1, 2, 3], "nested": {"a": null}}',
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "   leading spaces and trailing   ",
]


@pytest.fixture(scope="module")
def reference(model_path):
    import transformers
    return transformers.AutoTokenizer.from_pretrained(str(model_path.parent), gguf_file=model_path.name)


@pytest.mark.parametrize("text", TEXTS)
def test_encoding_matches_transformers_gguf_conversion(tokenizer, reference, text):
    ours = tokenizer.encode(text)
    theirs = reference.encode(text, add_special_tokens=False)
    assert ours == theirs
    assert tokenizer.decode(ours) == text


def test_special_tokens_and_eos(tokenizer):
    assert tokenizer.encode("<|im_end|>") == [2]
    assert 2 in tokenizer.eos_token_ids
    assert tokenizer.token_bytes[2] == b""          # specials are never plain text
    assert tokenizer.token_bytes[tokenizer.encode(" the")[0]] == b" the"


def test_chat_template_renders_generation_prompt(tokenizer):
    text = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=True)
    assert text.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    ids = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=True)
    assert ids[0] == 1 and ids[-1] != 2
