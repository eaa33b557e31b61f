"""Pictures of benchmark results (matplotlib, the optional `plot` extra: pip install 'sgrun[plot]').

- `plot_serve`: `sgrun bench serve --concurrency 1,4,16 --plot out.png` — output-token and
  request throughput against concurrency, and TTFT / TPOT percentiles against concurrency;
- `plot_prefix_cache`: `benchmarks/bench_prefix_cache.py --plot out.png` — TTFT against the
  length of the cached prefix, cache on and off.
"""

from __future__ import annotations

from typing import Any

from sgrun.errors import SgrunError

_PERCENTILES = (("p50", "-o"), ("p90", "--s"), ("p99", ":^"))


def pyplot_or_error():
    try:
        import matplotlib
    except ImportError as exc:
        raise SgrunError("--plot needs matplotlib: pip install 'sgrun[plot]' (or pip install matplotlib)") from exc
    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt
    return plt


def plot_serve(reports: list[dict[str, Any]], path: str) -> None:
    """One report per concurrency level (the dicts `sgrun bench serve` prints and writes)."""
    plt = pyplot_or_error()
    reports = sorted(reports, key=lambda r: r["concurrency"])
    conc = [r["concurrency"] for r in reports]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    ax = axes[0]
    ax.plot(conc, [r["output_token_throughput"] for r in reports], "-o", label="output tok/s")
    ax.set_ylabel("output tokens / s")
    ax2 = ax.twinx()
    ax2.plot(conc, [r["request_throughput"] for r in reports], "--s", color="tab:orange", label="requests/s")
    ax2.set_ylabel("requests / s")
    ax.set_title("throughput vs concurrency")
    ax.legend(handles=ax.get_lines() + ax2.get_lines(), loc="upper left")
    for ax, metric, unit in ((axes[1], "ttft", "ms"), (axes[2], "tpot", "ms")):
        for p, style in _PERCENTILES:
            key = f"{metric}_{p}_ms"
            if all(key in r for r in reports):
                ax.plot(conc, [r[key] for r in reports], style, label=p)
        ax.set_title(f"{metric.upper()} percentiles vs concurrency")
        ax.set_ylabel(unit)
        ax.legend()
    for ax in axes:
        ax.set_xlabel("concurrency")
        ax.set_xscale("log", base=2)
        ax.set_xticks(conc, [str(c) for c in conc])
        ax.grid(alpha=0.3)
    r0 = reports[0]
    fig.suptitle(f"sgrun bench serve: {r0['workload']} workload, {r0['num_requests']} requests per level, "
                 f"model {r0['model']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_prefix_cache(rows: list[dict[str, Any]], path: str) -> None:
    """rows: {"prefix_tokens", "ttft_on_s", "ttft_off_s"} per cached-prefix length."""
    plt = pyplot_or_error()
    rows = sorted(rows, key=lambda r: r["prefix_tokens"])
    x = [r["prefix_tokens"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.plot(x, [1e3 * r["ttft_off_s"] for r in rows], "--s", label="prefix cache off")
    ax.plot(x, [1e3 * r["ttft_on_s"] for r in rows], "-o", label="prefix cache on (prefix cached)")
    ax.set_xlabel("cached prefix length (tokens)")
    ax.set_ylabel("TTFT (ms)")
    ax.set_title("TTFT vs cached prefix length")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
