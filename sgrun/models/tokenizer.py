"""Tokenizer: a Hugging Face `tokenizers` object built from GGUF metadata or tokenizer.json,
plus what the engine and the constraint compiler need (EOS ids, special ids, token bytes) and
chat-template rendering."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, decoders, models, pre_tokenizers
from tokenizers import Tokenizer as HFTokenizer

from sgrun.errors import ModelLoadError
from sgrun.models.chat_template import ChatTemplate

# GGUF token types (llama.cpp): 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte.
_CONTROL, _USER_DEFINED = 3, 4

# Pre-tokenizers llama.cpp names that split digits one by one before the GPT-2 byte-level regex.
_DIGIT_SPLIT_PRE = {"smollm", "starcoder", "refact"}


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable-unicode map used by byte-level BPE vocabularies."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


_UNICODE_TO_BYTE = {c: b for b, c in bytes_to_unicode().items()}


@dataclass
class Tokenizer:
    hf: HFTokenizer
    eos_token_ids: set[int]
    bos_token_id: int | None
    add_bos: bool
    chat_template: ChatTemplate | None
    special_tokens: dict[str, int] = field(default_factory=dict)
    vocab_size: int = 0  # width of the model's logits (>= len(vocab))

    # --- construction -------------------------------------------------------------------
    @classmethod
    def from_gguf_fields(cls, meta: dict[str, Any], vocab_size: int | None = None) -> "Tokenizer":
        kind = meta.get("tokenizer.ggml.model")
        tokens: list[str] = meta["tokenizer.ggml.tokens"]
        types: list[int] = meta.get("tokenizer.ggml.token_type") or [1] * len(tokens)
        if kind != "gpt2":
            raise ModelLoadError(
                f"GGUF tokenizer model {kind!r} is not supported yet (only byte-level BPE 'gpt2'); "
                f"use a model folder with tokenizer.json instead")
        vocab = {tok: i for i, tok in enumerate(tokens)}
        merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges", [])]
        hf = HFTokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
        byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        if meta.get("tokenizer.ggml.pre") in _DIGIT_SPLIT_PRE:
            hf.pre_tokenizer = pre_tokenizers.Sequence(
                [pre_tokenizers.Digits(individual_digits=True), byte_level])
        else:
            hf.pre_tokenizer = byte_level
        hf.decoder = decoders.ByteLevel()
        specials = [AddedToken(tokens[i], special=True, normalized=False)
                    for i, t in enumerate(types) if t in (_CONTROL, _USER_DEFINED)]
        hf.add_special_tokens(specials)
        eos = meta.get("tokenizer.ggml.eos_token_id")
        eos_ids = {int(eos)} if eos is not None else set()
        if (eot := meta.get("tokenizer.ggml.eot_token_id")) is not None:
            eos_ids.add(int(eot))
        bos = meta.get("tokenizer.ggml.bos_token_id")
        template = meta.get("tokenizer.chat_template")
        special = {tokens[i]: i for i, t in enumerate(types) if t in (_CONTROL, _USER_DEFINED)}
        return cls(
            hf=hf,
            eos_token_ids=eos_ids,
            bos_token_id=int(bos) if bos is not None else None,
            add_bos=bool(meta.get("tokenizer.ggml.add_bos_token", False)),
            chat_template=ChatTemplate(template, _tok_str(tokens, bos), _tok_str(tokens, eos)) if template else None,
            special_tokens=special,
            vocab_size=vocab_size or len(tokens),
        )

    @classmethod
    def from_folder(cls, folder: Path, vocab_size: int | None = None,
                    eos_from_config: list[int] | int | None = None) -> "Tokenizer":
        tj = folder / "tokenizer.json"
        if not tj.exists():
            raise ModelLoadError(f"{folder} has no tokenizer.json")
        hf = HFTokenizer.from_file(str(tj))
        cfg_path = folder / "tokenizer_config.json"
        cfg = json.loads(cfg_path.read_text()) if cfg_path.exists() else {}

        def tok_content(v: Any) -> str | None:
            return v.get("content") if isinstance(v, dict) else v

        bos_tok, eos_tok = tok_content(cfg.get("bos_token")), tok_content(cfg.get("eos_token"))
        eos_ids: set[int] = set()
        if eos_tok is not None and hf.token_to_id(eos_tok) is not None:
            eos_ids.add(hf.token_to_id(eos_tok))
        if eos_from_config is not None:
            eos_ids.update([eos_from_config] if isinstance(eos_from_config, int) else eos_from_config)
        gen_cfg = folder / "generation_config.json"
        if gen_cfg.exists():
            g = json.loads(gen_cfg.read_text()).get("eos_token_id")
            if g is not None:
                eos_ids.update([g] if isinstance(g, int) else g)
        template = cfg.get("chat_template")
        if isinstance(template, list):  # named templates: take "default"
            template = next((t["template"] for t in template if t.get("name") == "default"), template[0]["template"])
        if template is None and (folder / "chat_template.jinja").exists():
            template = (folder / "chat_template.jinja").read_text()
        special = {t.content: i for i, t in hf.get_added_tokens_decoder().items() if t.special}
        # tokenizer.json's post-processor decides BOS; encode() below never adds specials itself.
        add_bos = bool(cfg.get("add_bos_token", False))
        bos_id = hf.token_to_id(bos_tok) if bos_tok else None
        return cls(hf=hf, eos_token_ids=eos_ids, bos_token_id=bos_id, add_bos=add_bos and bos_id is not None,
                   chat_template=ChatTemplate(template, bos_tok, eos_tok) if template else None,
                   special_tokens=special, vocab_size=vocab_size or hf.get_vocab_size(with_added_tokens=True))

    # --- text <-> ids -------------------------------------------------------------------
    def encode(self, text: str, add_bos: bool | None = None) -> list[int]:
        """Encode text; special-token strings in it (e.g. from a chat template) map to their ids."""
        ids = self.hf.encode(text, add_special_tokens=False).ids
        if (self.add_bos if add_bos is None else add_bos) and self.bos_token_id is not None:
            if not ids or ids[0] != self.bos_token_id:
                ids = [self.bos_token_id] + ids
        return ids

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return self.hf.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def apply_chat_template(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True,
                            tools: list[dict] | None = None, tokenize: bool = False, **kwargs: Any):
        if self.chat_template is None:
            raise ModelLoadError("this model has no chat template; send plain prompts instead")
        text = self.chat_template.render(messages, add_generation_prompt=add_generation_prompt, tools=tools, **kwargs)
        return self.encode(text, add_bos=False) if tokenize else text

    # --- what constraints need ----------------------------------------------------------
    @cached_property
    def special_token_ids(self) -> set[int]:
        return set(self.special_tokens.values()) | set(self.eos_token_ids)

    @cached_property
    def token_bytes(self) -> list[bytes]:
        """The raw bytes each token id stands for (b"" for ids past the vocabulary, and for specials)."""
        out = [b""] * self.vocab_size
        for tok, i in self.hf.get_vocab(with_added_tokens=False).items():
            if i < self.vocab_size and i not in self.special_token_ids:
                out[i] = _token_str_to_bytes(tok, self.hf)
        return out

    @cached_property
    def fingerprint(self) -> str:
        h = hashlib.sha256()
        h.update(self.hf.to_str().encode())
        h.update(repr(sorted(self.eos_token_ids)).encode())
        return h.hexdigest()[:16]


def _tok_str(tokens: list[str], idx: Any) -> str | None:
    return tokens[int(idx)] if idx is not None and 0 <= int(idx) < len(tokens) else None


def _token_str_to_bytes(tok: str, hf: HFTokenizer) -> bytes:
    if all(c in _UNICODE_TO_BYTE for c in tok):
        return bytes(_UNICODE_TO_BYTE[c] for c in tok)
    # SentencePiece-style vocab: "▁" is a space, <0xAB> a raw byte.
    if tok.startswith("<0x") and tok.endswith(">") and len(tok) == 6:
        return bytes([int(tok[3:5], 16)])
    return tok.replace("\u2581", " ").encode("utf-8")
