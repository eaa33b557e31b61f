"""The matmul tiles and the attention kernels' vector paths of every ISA, including levels this
machine cannot run: torch-free drivers (tests/kernel_driver/matmul_driver.cpp,
attention_driver.cpp, the latter with the few torch names from tests/kernel_driver/torch_shim)
are compiled per level and check the code against a float64 reference and bitwise invariances
(a matmul row alone = batched; a decode head alone = in a pass; prefill rows whole = chunked,
causal and under sliding windows).
aarch64 (neon, neon_dotprod) is cross-compiled with Debian's g++-aarch64-linux-gnu and run under qemu-aarch64 (package
qemu-user); on an aarch64 host the native compiler runs it directly. A missing cross compiler or
emulator fails the test with the apt-get line that installs it (.ci/run installs both)."""

from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KERNELS = ROOT / "sgrun" / "kernels" / "cpu"
DRIVER = ROOT / "tests" / "kernel_driver" / "matmul_driver.cpp"
ATTENTION_DRIVER = ROOT / "tests" / "kernel_driver" / "attention_driver.cpp"
TORCH_SHIM = ROOT / "tests" / "kernel_driver" / "torch_shim"
NATIVE_ARM = platform.machine().lower() in ("aarch64", "arm64")
APT = "apt-get install -y g++-aarch64-linux-gnu qemu-user"

# level -> (compiler, -march flag, what runs the binary)
TARGETS = {
    "neon": ("g++" if NATIVE_ARM else "aarch64-linux-gnu-g++", "-march=armv8-a", [] if NATIVE_ARM else ["qemu-aarch64", "-cpu", "max"]),
    "neon_dotprod": ("g++" if NATIVE_ARM else "aarch64-linux-gnu-g++", "-march=armv8.2-a+dotprod",
                     [] if NATIVE_ARM else ["qemu-aarch64", "-cpu", "max"]),
}
if not NATIVE_ARM:
    TARGETS["avx2"] = ("g++", "-march=x86-64-v3", [])
# The levels with the int4 panel: AVX2's, and NEON's where SDOT is (without it the panel counted
# too few instructions fewer than the tile to keep; matmul_neon.cpp).
PANEL_LEVELS = ("avx2", "neon_dotprod")


@pytest.mark.parametrize("level", list(TARGETS))
def test_matmul_tiles_at_every_isa(level, tmp_path):
    compiler, march, runner = TARGETS[level]
    for tool in [compiler] + runner[:1]:
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is missing: the {level} tiles cannot be tested; install it with `{APT}`")
    binary = tmp_path / f"driver_{level}"
    build = subprocess.run([compiler, "-O2", "-std=c++17", march, "-static", "-pthread", f"-I{KERNELS}", str(DRIVER), "-o",
                            str(binary)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-3000:]
    run = subprocess.run(runner + [str(binary)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip().endswith("ALL OK"), run.stdout + run.stderr
    assert run.stdout.startswith(f"tiles: {level}\n"), run.stdout   # the level's own tiles ran, not another's
    # the int4 panel (matmul_panel.cpp) exists exactly where it should, and gave the tile's bits
    assert ("ok   int4 panel n=80 k=576" in run.stdout) == (level in PANEL_LEVELS), run.stdout
    assert "ok   quantize float rows" in run.stdout, run.stdout


# The attention paths have no dotprod-specific code: neon's build is neon_dotprod's.
ATTENTION_PATH = {"avx2": "avx2", "neon": "neon"}


@pytest.mark.parametrize("level", [lv for lv in TARGETS if lv in ATTENTION_PATH])
def test_attention_paths_at_every_isa(level, tmp_path):
    compiler, march, runner = TARGETS[level]
    for tool in [compiler] + runner[:1]:
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is missing: the {level} attention paths cannot be tested; install it with `{APT}`")
    binary = tmp_path / f"attention_{level}"
    build = subprocess.run([compiler, "-O2", "-std=c++17", march, "-static", f"-DSGRUN_ISA={level}", f"-I{KERNELS}",
                            f"-I{TORCH_SHIM}", str(ATTENTION_DRIVER), "-o", str(binary)],
                           capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-3000:]
    run = subprocess.run(runner + [str(binary)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip().endswith("ALL OK"), run.stdout + run.stderr
    name = ATTENTION_PATH[level]   # the level's own paths ran, not another's
    assert run.stdout.startswith(f"attention: decode {name}, prefill {name}\n"), run.stdout
    # float16 pools (a float32 model's fp16 KV cache) were checked too, decode and prefill
    assert "ok   decode float16 D=128" in run.stdout and "ok   prefill float16 pool D=128" in run.stdout, run.stdout
    # and sliding windows (Gemma 3's local layers) on the prefill path, against float64 and chunked = whole
    for window in (3, 40, 100, 500):
        for line in (f"ok   prefill float32 D=64 window={window} vs float64", f"ok   prefill bf16 D=16 window={window} chunked"):
            assert line in run.stdout, (line, run.stdout)


def test_the_torch_facing_modules_compile_for_every_arm_level(tmp_path):
    """The drivers above run the tiles and attention paths, but not the code around them that
    needs torch (the matmul module's decode blocks, its thread team and idle worker, the ops'
    drivers; the paged-decode and prefill-attention modules' ops). Each module, as build.py joins
    it, goes through the compiler's front end for each ARM level with its build flags
    (`-fsyntax-only`: templates are instantiated, no code is generated), so a change that breaks
    the ARM build fails here rather than on a user's first start. The six compiles run two at a time."""
    from concurrent.futures import ThreadPoolExecutor

    from torch.utils.cpp_extension import include_paths

    from sgrun.kernels.cpu import isa, matmul, paged_decode, prefill_attention
    compiler = "g++" if NATIVE_ARM else "aarch64-linux-gnu-g++"
    if shutil.which(compiler) is None:
        pytest.fail(f"{compiler} is missing: the ARM builds cannot be checked; install it with `{APT}`")
    python_include = __import__("sysconfig").get_paths()["include"]
    includes = [f"-isystem{p}" for p in (*include_paths(), python_include)]
    jobs = []
    for module in (matmul, paged_decode, prefill_attention):
        source = tmp_path / f"{module.KERNEL.name}.cpp"
        source.write_text(module.KERNEL.source_text())
        for level in (isa.level_named("neon", "aarch64"), isa.level_named("neon_dotprod", "aarch64")):
            flags = [f for f in module.KERNEL.build_flags(level) if f != "-fopenmp"]
            jobs.append((f"{module.KERNEL.name} at {level.name}",
                         [compiler, "-fsyntax-only", *flags, "-DTORCH_EXTENSION_NAME=check", "-DTORCH_API_INCLUDE_EXTENSION_H",
                          *includes, str(source)]))

    def compile_one(job):
        name, cmd = job
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        return name, done.returncode, done.stderr[-3000:]

    with ThreadPoolExecutor(max_workers=2) as pool:
        failed = [(name, err) for name, rc, err in pool.map(compile_one, jobs) if rc != 0]
    assert not failed, failed
