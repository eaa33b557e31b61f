"""The engine's own check of a prompt (the server checks first, naming its fields; the engine
checks again for every other caller: the DSL, scripts, tests)."""

from __future__ import annotations

from sgrun.errors import InvalidRequestError
from sgrun.models.tokenizer import Tokenizer


def prompt_token_ids(tokenizer: Tokenizer, prompt: str | list[int], vocab_size: int, max_context: int) -> list[int]:
    """Token ids of a text or token-id prompt; InvalidRequestError (field "prompt") if it is not
    one, is empty, names an id outside the vocabulary, or leaves no room to generate."""
    if isinstance(prompt, str):
        ids = tokenizer.encode(prompt)
    elif isinstance(prompt, (list, tuple)) and all(isinstance(t, int) for t in prompt):
        ids = list(prompt)
        bad = [t for t in ids if not 0 <= t < vocab_size]
        if bad:
            raise InvalidRequestError(f"token id {bad[0]} is outside the vocabulary (0..{vocab_size - 1})",
                                      field="prompt")
    else:
        raise InvalidRequestError("prompt must be a string or a list of token ids", field="prompt")
    if not ids:
        raise InvalidRequestError("prompt is empty", field="prompt")
    if len(ids) >= max_context:
        raise InvalidRequestError(f"prompt has {len(ids)} tokens; the context holds {max_context}: "
                                  f"shorten the prompt", field="prompt")
    return ids
