"""Instructions the int4 panel executes against the tile it replaces, counted under QEMU, for the
levels this machine cannot time (ARM) and, as the calibration, AVX2:

    python benchmarks/bench_panel_insns.py [--rows 6,8,16,64,256] [--levels avx2,neon_dotprod]

Why counts: no ARM machine is at hand, and qemu-user's time says nothing about an ARM core's. The
dynamic instruction count of one matmul is exact and repeatable, and on AVX2, where both can be
measured, the count ratio tracks the timed one (docs/cpu_kernels.md). It is not a speed: a real
core's ports, latencies and caches decide that, so these numbers are a prediction only.

How: `insn_count/panel_count.cpp` runs one int4 x int8 matmul single-threaded through the level's
int4_q8_tile (driven as matmul.cpp drives it) or its panel (matmul_panel.cpp), built with the
level's flags (aarch64 by Debian's cross compiler), under `qemu-<arch> -cpu max` with
`insn_count/insn_count_plugin.c` loaded; a setup-only run is subtracted. Prints, per SmolLM2 shape
and row count, instructions per 1,000 multiply-adds for each, and tile/panel.
Needs gcc, g++-aarch64-linux-gnu and qemu-user (`apt-get install -y g++-aarch64-linux-gnu qemu-user`).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from bench_options import machine_line

HERE = Path(__file__).resolve().parent
KERNELS = HERE.parent / "sgrun" / "kernels" / "cpu"
SHAPES = {"qkv 960x576": (960, 576), "o 576x576": (576, 576), "gate_up 3072x576": (3072, 576),
          "down 576x1536": (576, 1536)}
# level -> (compiler, march flag, qemu binary)
LEVELS = {"avx2": ("g++", "-march=x86-64-v3", "qemu-x86_64"),
          "neon": ("aarch64-linux-gnu-g++", "-march=armv8-a", "qemu-aarch64"),
          "neon_dotprod": ("aarch64-linux-gnu-g++", "-march=armv8.2-a+dotprod", "qemu-aarch64")}


def build(workdir: Path) -> Path:
    plugin = workdir / "libinsn_count.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-fvisibility=hidden", str(HERE / "insn_count" / "insn_count_plugin.c"),
                    "-o", str(plugin)], check=True)
    return plugin


def count(qemu: str, plugin: Path, binary: Path, *args: int) -> int | None:
    done = subprocess.run([qemu, "-cpu", "max", "-plugin", str(plugin), "-d", "plugin", str(binary), *map(str, args)],
                          capture_output=True, text=True, timeout=600)
    if done.returncode == 3:
        return None   # panel_count.cpp: the level has no panel
    if done.returncode != 0:
        raise SystemExit(f"{qemu} {binary.name} {' '.join(map(str, args))} failed ({done.returncode}): "
                         f"{(done.stdout + done.stderr)[-2000:]}")
    return int(re.search(r"insns (\d+)", done.stdout + done.stderr).group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default="6,8,16,64,256")
    ap.add_argument("--levels", default="avx2,neon,neon_dotprod")
    args = ap.parse_args()
    rows = [int(r) for r in args.rows.split(",")]
    print(machine_line(1))
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        plugin = build(workdir)
        for level in args.levels.split(","):
            compiler, march, qemu = LEVELS[level]
            missing = [t for t in (compiler, qemu) if shutil.which(t) is None]
            if missing:
                raise SystemExit(f"{missing} missing: apt-get install -y g++-aarch64-linux-gnu qemu-user")
            binary = workdir / f"panel_count_{level}"
            subprocess.run([compiler, "-O3", "-std=c++17", march, "-static", "-pthread", f"-I{KERNELS}",
                            str(HERE / "insn_count" / "panel_count.cpp"), "-o", str(binary)], check=True)
            print(f"\n{level} ({compiler} {march}, {qemu} -cpu max): instructions per 1,000 multiply-adds")
            print(f"{'shape':<18} {'rows':>5} {'tile':>8} {'panel':>8}  tile/panel")
            for name, (n, k) in SHAPES.items():
                for m in rows:
                    base = count(qemu, plugin, binary, 0, n, k, m)
                    tile = count(qemu, plugin, binary, 1, n, k, m)
                    panel = count(qemu, plugin, binary, 2, n, k, m)
                    macs = n * k * m / 1000
                    per_tile = (tile - base) / macs
                    if panel is None:
                        print(f"{name:<18} {m:>5} {per_tile:>8.1f} {'none':>8}")
                    else:
                        per_panel = (panel - base) / macs
                        print(f"{name:<18} {m:>5} {per_tile:>8.1f} {per_panel:>8.1f}  {per_tile / per_panel:.2f}")


if __name__ == "__main__":
    main()
