"""Engine outputs -> the pieces OpenAI responses are made of: usage, and logprobs in the chat
and the completions shapes (shared by whole and streamed responses)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sgrun.engine.state.outputs import TokenLogprob
from sgrun.server.protocol import (ChatLogprobs, ChatTokenLogprob, CompletionLogprobs, PromptTokensDetails, TopLogprob,
                                   Usage)

if TYPE_CHECKING:
    from sgrun.models.tokenizer import Tokenizer


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> Usage:
    return Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                 total_tokens=prompt_tokens + completion_tokens,
                 prompt_tokens_details=PromptTokensDetails(cached_tokens=min(cached_tokens, prompt_tokens)))


def token_bytes(tokenizer: Tokenizer, token_id: int, text: str) -> list[int]:
    tb = tokenizer.token_bytes
    raw = tb[token_id] if 0 <= token_id < len(tb) and tb[token_id] else text.encode("utf-8")
    return list(raw)


def chat_logprobs(tokenizer: Tokenizer, items: list[TokenLogprob], top_n: int) -> ChatLogprobs:
    return ChatLogprobs(content=[
        ChatTokenLogprob(token=t.token, logprob=t.logprob, bytes=token_bytes(tokenizer, t.token_id, t.token),
                         top_logprobs=[TopLogprob(token=tok, logprob=lp, bytes=token_bytes(tokenizer, tid, tok))
                                       for tid, tok, lp in t.top[:top_n]])
        for t in items])


def completion_logprobs(items: list[TokenLogprob], top_n: int, start_offset: int) -> CompletionLogprobs:
    tokens, lps, tops, offsets = [], [], [], []
    offset = start_offset
    for t in items:
        tokens.append(t.token)
        lps.append(t.logprob)
        tops.append({tok: lp for _, tok, lp in t.top[:top_n]} if top_n else None)
        offsets.append(offset)
        offset += len(t.token)
    return CompletionLogprobs(tokens=tokens, token_logprobs=lps, top_logprobs=tops, text_offset=offsets)
