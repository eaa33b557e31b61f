"""Where sgrun keeps what it builds or fetches once and reuses across processes: the default model,
C++ kernel builds, compiled graphs. One folder, `$SGRUN_CACHE` or the user cache folder; every
package may ask for it (it imports nothing of sgrun)."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs


def cache_dir() -> Path:
    root = os.environ.get("SGRUN_CACHE") or platformdirs.user_cache_dir("sgrun")
    return Path(root)
