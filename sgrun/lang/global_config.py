"""`sgrun.global_config`: process-wide DSL settings, under SGLang's names."""

from __future__ import annotations

from typing import Any


class GlobalConfig:
    """verbosity: 2 prints each program's text when `run` finishes.
    skip_special_tokens_in_output: the default of gen's `skip_special_tokens`.
    enable_precache_with_tracing: `run_batch` prefills the programs' common prefix once.
    default_backend: the backend `run`/`run_batch` use (the same one `set_default_backend` sets).
    spaces_between_special_tokens_in_out and enable_parallel_encoding are accepted for SGLang
    programs; sgrun's decoding and fork joins do not depend on them."""

    def __init__(self) -> None:
        self.verbosity = 0
        self.skip_special_tokens_in_output = True
        self.spaces_between_special_tokens_in_out = True
        self.enable_precache_with_tracing = True
        self.enable_parallel_encoding = True

    @property
    def default_backend(self) -> Any:
        from sgrun.lang import backend
        return backend._default_backend

    @default_backend.setter
    def default_backend(self, value: Any) -> None:
        from sgrun.lang.backend import set_default_backend
        set_default_backend(value)


global_config = GlobalConfig()
