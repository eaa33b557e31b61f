"""--plot draws real PNGs: `sgrun bench serve --concurrency 1,2 --plot` against a live server,
and the prefix-cache plot from measured-shaped rows."""

from __future__ import annotations

import json

import pytest

from sgrun.bench_plot import plot_prefix_cache
from sgrun.cli import main
from sgrun.server.app import build_app
from server_thread import ServerThread

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_bench_serve_plot_over_concurrency_levels(shared_engine, tmp_path, capsys):
    out, js = tmp_path / "serve.png", tmp_path / "serve.json"
    with ServerThread(build_app(shared_engine)) as srv:
        with pytest.raises(SystemExit) as done:
            main(["bench", "serve", "--base-url", srv.url + "/v1", "--concurrency", "1,2", "--num-requests", "2",
                  "--max-tokens", "4", "--warmup", "0", "--plot", str(out), "--json", str(js)])
    assert done.value.code == 0, capsys.readouterr().out
    assert out.read_bytes().startswith(PNG_MAGIC) and out.stat().st_size > 10_000
    reports = json.loads(js.read_text())
    assert [r["concurrency"] for r in reports] == [1, 2] and all(r["completed"] == 2 for r in reports)
    assert all("ttft_p90_ms" in r and "tpot_p90_ms" in r for r in reports)


def test_bench_serve_rejects_bad_concurrency_list(capsys):
    with pytest.raises(SystemExit) as done:
        main(["bench", "serve", "--base-url", "http://127.0.0.1:9/v1", "--concurrency", "1,x"])
    assert done.value.code == 2 and "concurrency" in capsys.readouterr().err


def test_prefix_cache_plot(tmp_path):
    out = tmp_path / "prefix.png"
    plot_prefix_cache([{"prefix_tokens": n, "ttft_on_s": 0.02, "ttft_off_s": 0.02 + n * 1e-4} for n in (0, 512, 2048)],
                      str(out))
    assert out.read_bytes().startswith(PNG_MAGIC)
