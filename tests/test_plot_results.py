"""The results page's plots are drawn from recorded numbers that say where they came from:
`benchmarks/plot_results.py` draws every entry of `benchmarks/data/results.json` into real PNGs,
each entry names its date, commit, machine, load and command, and the page shows the pictures."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import plot_results  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_every_recorded_entry_says_where_it_came_from():
    results = json.loads(plot_results.DATA.read_text())
    assert set(results) == set(plot_results.PLOTS)
    for name, entry in results.items():
        for key in ("date", "commit", "machine", "load", "command"):
            assert entry.get(key), f"{name} lacks its {key}"


def test_the_plots_are_drawn_and_shown_on_the_results_page(tmp_path):
    pytest.importorskip("matplotlib")
    written = plot_results.draw_all(out=tmp_path)
    assert [p.name for p in written] == [f"{n}.png" for n in plot_results.PLOTS]
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    for path in written:
        assert path.read_bytes().startswith(PNG_MAGIC) and path.stat().st_size > 10_000
        assert f"(plots/{path.name})" in page and (ROOT / "docs" / "plots" / path.name).is_file()
