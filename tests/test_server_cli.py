"""`sgrun serve` as a user runs it: a subprocess on a free loopback port, reached with the
official openai client, shut down with SIGINT. Shares nothing with the in-process tests. No
--dtype or --quantization: the configuration a user's `sgrun serve` gets."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx
import openai

from sgrun.child_process import free_port


def test_sgrun_serve_subprocess():
    port = free_port()
    cmd = [sys.executable, "-m", "sgrun.cli", "serve", "--port", str(port),
           "--api-key", "cli-key", "--max-running", "8", "--log-level", "warning"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=dict(os.environ))
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while True:
            assert proc.poll() is None, proc.stdout.read().decode(errors="replace")
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "sgrun serve did not come up"
            time.sleep(0.5)
        client = openai.OpenAI(base_url=url + "/v1", api_key="cli-key", max_retries=0, timeout=120)
        model = client.models.list().data[0].id
        assert "SmolLM2" in model
        r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hi"}],
                                           max_tokens=4, temperature=0)
        assert r.choices[0].message.content and r.usage.completion_tokens <= 4
        assert httpx.get(url + "/v1/models").status_code == 401
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, proc.stdout.read().decode(errors="replace")
