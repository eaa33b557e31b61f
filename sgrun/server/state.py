"""What every handler of one server app shares: the engine, names it answers to, metrics."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from sgrun.server.errors import APIError
from sgrun.server.metrics import ServerMetrics


@dataclass
class ServerState:
    engine: Any
    model_name: str
    served_names: set[str] = field(default_factory=set)
    metrics: ServerMetrics = field(default_factory=ServerMetrics)
    started: int = field(default_factory=lambda: int(time.time()))

    @property
    def tokenizer(self) -> Any:
        return self.engine.tokenizer

    @property
    def max_context(self) -> int:
        return int(self.engine.max_context)

    def check_model(self, requested: str) -> None:
        """Requests name the model they want; anything we do not serve is a 404."""
        if requested not in self.served_names:
            raise APIError(404, f"The model '{requested}' does not exist; this server serves "
                                f"{sorted(self.served_names)!r}", "not_found_error", param="model",
                           code="model_not_found")
