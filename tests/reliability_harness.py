"""The reliability suite's harness: a real `sgrun serve` subprocess on a loopback port (its log
kept in a file), the checks every response must pass, and the engine-state probes read from
/metrics (the suite sees the server only as a client does)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from sgrun.child_process import free_port

# KV pages of 16 tokens; SmolLM2-135M's float16 or bf16 pages (kv_cache_dtype auto under float32) need
# 368,640 bytes per page, so 0.006 GB is 17 pages (272 tokens): five concurrent requests of ~60
# tokens do not fit and get preempted.
SMALL_POOL_GB = 0.006


@dataclass
class ServeProcess:
    proc: subprocess.Popen
    url: str
    log_path: Path

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def start_serve(log_dir: Path, *extra: str, timeout: float = 300.0) -> ServeProcess:
    port = free_port()
    log_path = log_dir / f"sgrun-serve-{port}.log"
    cmd = [sys.executable, "-m", "sgrun.cli", "serve", "--port", str(port), "--dtype", "float32",
           "--log-level", "warning", *extra]
    log = open(log_path, "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ))
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"sgrun serve exited during start-up:\n{log_path.read_text(errors='replace')}")
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return ServeProcess(proc, url, log_path)
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            raise TimeoutError("sgrun serve did not come up")
        time.sleep(0.3)


def metric(text: str, name: str, labels: str = "") -> float:
    """One sample of the Prometheus text `text` (0 when absent)."""
    pattern = re.escape(name) + (r"\{" + re.escape(labels) + r"\}" if labels else "") + r" (\S+)"
    m = re.search(r"^" + pattern + r"$", text, re.MULTILINE)
    return float(m.group(1)) if m else 0.0


def engine_state(url: str) -> dict[str, float]:
    text = httpx.get(url + "/metrics", timeout=30).text
    return {"running": metric(text, "sgrun_requests_running"), "waiting": metric(text, "sgrun_requests_waiting"),
            "pages_in_use": metric(text, "sgrun_kv_pages", 'state="in_use"'),
            "preemptions": metric(text, "sgrun_preemptions_total"),
            "errors_5xx": sum(float(v) for v in re.findall(r'^sgrun_errors_total\{status="5\d\d",[^}]*\} (\S+)$',
                                                             text, re.MULTILINE)),
            "client_disconnects": metric(text, "sgrun_aborted_requests_total", 'cause="client_disconnect"')}


def wait_idle(url: str, timeout: float = 60.0) -> dict[str, float]:
    """Wait until nothing runs or waits and no request holds a KV page; the final state."""
    deadline = time.monotonic() + timeout
    while True:
        state = engine_state(url)
        if state["running"] == 0 and state["waiting"] == 0 and state["pages_in_use"] == 0:
            return state
        if time.monotonic() > deadline:
            raise AssertionError(f"the engine did not go idle: {state}")
        time.sleep(0.1)


def check_error_object(resp: httpx.Response) -> dict:
    """A 4xx/5xx body is exactly an OpenAI error object, with no traceback or file path."""
    body = resp.json()
    assert set(body) == {"error"}, body
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}, err
    assert isinstance(err["message"], str) and err["message"], err
    assert "Traceback" not in err["message"] and "/sgrun/" not in err["message"] and "File \"" not in err["message"]
    return err
