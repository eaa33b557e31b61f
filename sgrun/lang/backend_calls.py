"""Module-level calls on a backend (SGLang's `sgl.flush_cache()`, `sgl.get_server_info()`)."""

from __future__ import annotations

from typing import Any

from sgrun.lang import backend as _backend
from sgrun.lang.backend import Backend


def flush_cache(backend: Backend | None = None) -> bool:
    """Drop the backend's cached prefixes (the default backend's when none is given).
    False when there is no backend, as in SGLang."""
    target = backend or _backend._default_backend
    if target is None:
        return False
    target.flush_cache()
    return True


def get_server_info(backend: Backend | None = None) -> dict[str, Any] | None:
    """What the backend runs: `/server_info` of a server, the engine's settings in process."""
    target = backend or _backend._default_backend
    return None if target is None else target.server_info()
