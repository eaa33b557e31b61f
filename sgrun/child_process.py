"""What every process sgrun starts needs: a free loopback port to listen on, and (on Linux) the
promise to die with the process that started it."""

from __future__ import annotations

import contextlib
import socket
import sys


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def die_with_parent() -> None:
    """Ask the kernel to SIGTERM this process when its parent dies (Linux PR_SET_PDEATHSIG; a
    no-op elsewhere). Replicas and tensor-parallel ranks call it: uvicorn re-raises SIGTERM after
    its shutdown, so the parent's own clean-up may never run, and an orphan would keep its port,
    memory and (for a rank) the collective it blocks in."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal
        with contextlib.suppress(Exception):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)   # 1 = PR_SET_PDEATHSIG
