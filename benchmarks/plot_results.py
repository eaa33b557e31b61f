"""Draw the results page's plots (docs/benchmarks.md) from the recorded numbers.

    python benchmarks/plot_results.py [--data benchmarks/data/results.json] [--out docs/plots]

The numbers live in benchmarks/data/results.json, one entry per plot, each with the date, the
commit, the machine line, the load and the command that printed them; this script only draws
them (matplotlib, the `plot` extra), so a figure on the page and its picture never disagree:
- ttft_vs_prompt_length.png: time to the first token against the prompt's length, sgrun beside
  its peer of the same run;
- throughput_vs_concurrency.png: `sgrun serve`'s output tokens per second and TTFT percentiles
  against the number of concurrent streams.
To add a point, run the entry's command and copy its printed figures into the file.
"""

from __future__ import annotations

import argparse
import json
import textwrap
from pathlib import Path
from typing import Any

from sgrun.bench_plot import pyplot_or_error

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "benchmarks" / "data" / "results.json"
OUT = ROOT / "docs" / "plots"


def caption(entry: dict[str, Any], width: int) -> str:
    """The small print under a plot: where and when its numbers were taken, wrapped to the figure."""
    return textwrap.fill(f"{entry['machine']}; {entry['date']} at {entry['commit']}, load {entry['load']}", width)


def plot_ttft(entry: dict[str, Any], path: Path) -> None:
    plt = pyplot_or_error()
    fig, ax = plt.subplots(figsize=(7, 4.4))
    lengths = entry["prompt_tokens"]
    for name, style in zip(entry["series"], ("-o", "--s", ":^")):
        ax.plot(lengths, entry["series"][name], style, label=name)
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths, [str(n) for n in lengths])
    ax.set_xlabel("prompt tokens")
    ax.set_ylabel("time to first token, s (median)")
    ax.set_title("TTFT against prompt length")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.text(0.01, 0.01, caption(entry, 105), fontsize=7)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_concurrency(entry: dict[str, Any], path: Path) -> None:
    plt = pyplot_or_error()
    conc = entry["concurrency"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.4))
    left.plot(conc, entry["output_tok_s"], "-o", label="output tok/s")
    left.set_xlabel("concurrent streams")
    left.set_ylabel("output tokens / s")
    left.set_title("throughput against concurrency")
    for name, style in (("ttft_p50_ms", "-o"), ("ttft_p99_ms", ":^")):
        right.plot(conc, [v / 1000 for v in entry[name]], style, label=name.replace("_ms", "").replace("_", " "))
    right.plot(conc, [v / 1000 for v in entry["tpot_p50_ms"]], "--s", label="tpot p50")
    right.set_xlabel("concurrent streams")
    right.set_ylabel("seconds")
    right.set_yscale("log")
    right.set_title("latency against concurrency")
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(conc, [str(c) for c in conc])
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.text(0.01, 0.01, caption(entry, 170), fontsize=7)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


PLOTS = {"ttft_vs_prompt_length": plot_ttft, "throughput_vs_concurrency": plot_concurrency}


def draw_all(data: Path = DATA, out: Path = OUT) -> list[Path]:
    results = json.loads(data.read_text())
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, draw in PLOTS.items():
        path = out / f"{name}.png"
        draw(results[name], path)
        written.append(path)
    return written


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    for path in draw_all(args.data, args.out):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
