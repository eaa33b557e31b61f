"""What every handler of one server app shares: the engine, the names it answers to, metrics.

Clients only ever see served names: `--served-model-name` values, else the model's own name.
Requests may also use the aliases a user would type (the name without its quantisation suffix,
the model file's name), never a filesystem path."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sgrun.constrain.tool_calls import CallFormat, detect_format
from sgrun.constrain.compile_budget import DEFAULT_COMPILE_BUDGET_S
from sgrun.errors import SgrunError
from sgrun.server.errors import APIError, scrub
from sgrun.server.metrics import ServerMetrics

if TYPE_CHECKING:
    from sgrun.engine.engine import Engine
    from sgrun.models.tokenizer import Tokenizer


@dataclass
class ServerState:
    engine: Engine
    model_name: str                                        # the first served name: /v1/models lists it
    served_names: list[str] = field(default_factory=list)  # what errors and listings show
    accepted_names: set[str] = field(default_factory=set)  # served names and their aliases
    metrics: ServerMetrics = field(default_factory=ServerMetrics)
    started: int = field(default_factory=lambda: int(time.time()))
    tool_format: CallFormat | None = None            # None: detected from the chat template
    reasoning: tuple[str, str] | None = None         # --reasoning-parser's (open, close) tags
    constraint_budget_s: float = DEFAULT_COMPILE_BUDGET_S  # --constraint-budget: compile time per constraint
    strict_budget: bool = False      # --strict-budget: refuse what cannot fit max_tokens (requests may say)

    def __post_init__(self) -> None:
        if self.tool_format is None:
            template = getattr(self.engine.tokenizer, "chat_template", None)
            self.tool_format = detect_format(getattr(template, "source", None))

    @classmethod
    def for_engine(cls, engine: Engine, served_model_names: list[str] | None, metrics: ServerMetrics,
                   tool_format: CallFormat | None = None, reasoning: tuple[str, str] | None = None,
                   constraint_budget_s: float = DEFAULT_COMPILE_BUDGET_S,
                   strict_budget: bool = False) -> "ServerState":
        if not constraint_budget_s > 0:
            raise SgrunError(f"--constraint-budget must be a positive number of seconds, got {constraint_budget_s}")
        for name in served_model_names or []:
            if not name or os.path.isabs(name) or "\\" in name:
                raise SgrunError(f"--served-model-name {name!r}: give a name, not a file path")
        own = os.path.basename(str(engine.model_name).rstrip("/\\"))
        served = list(served_model_names or [own])
        aliases = {own, own.split(".")[0]}
        path = getattr(engine, "model_path", None)
        if path:
            base = os.path.basename(str(path).rstrip("/\\"))
            aliases |= {base, os.path.splitext(base)[0]}
        return cls(engine=engine, model_name=served[0], served_names=served, accepted_names=set(served) | aliases,
                   metrics=metrics, tool_format=tool_format, reasoning=reasoning,
                   constraint_budget_s=constraint_budget_s, strict_budget=strict_budget)

    @property
    def tokenizer(self) -> Tokenizer:
        return self.engine.tokenizer

    @property
    def max_context(self) -> int:
        return int(self.engine.max_context)

    def check_model(self, requested: str) -> None:
        """Requests name the model they want; anything we do not serve is a 404."""
        if requested not in self.accepted_names:
            shown = scrub(requested, limit=100)  # never echo a path, even the client's own
            raise APIError(404, f"The model '{shown}' does not exist; this server serves "
                                f"{', '.join(repr(n) for n in self.served_names)}", "not_found_error",
                           param="model", code="model_not_found")
