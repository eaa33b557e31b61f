"""The tests' server on a background thread of the test process: uvicorn on a loopback port,
stopped cleanly on exit."""

from __future__ import annotations

import threading
import time
from typing import Any

import uvicorn

from sgrun.child_process import free_port


class ServerThread:
    """`with ServerThread(app) as srv: httpx.get(srv.url + "/health")`"""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int | None = None, log_level: str = "warning"):
        self.host = host
        self.port = port or free_port(host)
        config = uvicorn.Config(app, host=host, port=self.port, log_level=log_level, lifespan="on",
                                timeout_graceful_shutdown=2)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="sgrun-uvicorn", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> "ServerThread":
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError("the server thread exited during start-up (port taken?)")
            if time.monotonic() > deadline:
                raise TimeoutError(f"server did not start within {timeout} s")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)

    def __enter__(self) -> "ServerThread":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
