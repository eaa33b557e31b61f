"""When the CPU decode forward is compiled, and where the compiled graphs are kept between processes.

torch.compile pays off over a long run (a compiled batch-1 step saves a few ms of per-op
overhead, docs/cpu_kernels.md) but costs seconds at start-up: importing inductor and tracing the
blocks take ~6 s of CPU on two cores even when every graph is in inductor's disk cache, and a
cold compile several times that. So:

- inductor's caches (FX graph cache, AOTAutograd cache, the built C++ of each graph) live under
  $SGRUN_CACHE/inductor unless $TORCHINDUCTOR_CACHE_DIR says otherwise, next to the built C++
  kernels and the built models (model_cache.py), so one folder holds everything a later start reuses;
- `compile=None` (the default, e.g. `sgrun serve`): where the C++ decode blocks serve the model
  (fused_decode.py: every layer linear on sgrun's tiles, the default int4 included) nothing is
  compiled: they beat the compiled graphs and need no warm-up. Elsewhere the engine starts eager
  and compiles in the background; the compiled graphs take over once ready, so a start never
  waits for them;
- `compile=True`: compiled before the engine starts (benchmarks, tests that need the graphs); the
  graphs serve the batches the C++ blocks do not (where the blocks serve the model: none);
- a one-shot run (`sgrun generate`) compiles only where it pays: where a previous process left a
  warm marker for this model and its measured warm compile time is less than the tokens asked
  for times the measured per-token saving (`one_shot_compile`). Otherwise it stays eager.

The marker ($SGRUN_CACHE/compile/<key>.json) is written after every compile: the seconds it
took and the eager and compiled batch-1 forward times measured right after it.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import torch

from sgrun.errors import InvalidRequestError

log = logging.getLogger("sgrun.engine")

COMPILE_ENV = "SGRUN_COMPILE"


def env_compile_default() -> bool | None:
    """$SGRUN_COMPILE as a default: 0/1 (or on/off, true/false), None when unset."""
    env = os.environ.get(COMPILE_ENV, "").strip().lower()
    if env not in ("", "0", "1", "true", "false", "on", "off"):
        raise InvalidRequestError(f"SGRUN_COMPILE must be 0 or 1; got {env!r}", field="compile")
    return None if env == "" else env in ("1", "true", "on")


def use_sgrun_inductor_cache() -> str:
    """Point inductor's on-disk caches at $SGRUN_CACHE/inductor (unless the user chose a folder)."""
    if not os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
        from sgrun.models.fetch import cache_dir
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache_dir() / "inductor")
    return os.environ["TORCHINDUCTOR_CACHE_DIR"]


def marker_path(model) -> Path:
    """Where the warm marker of this model's graphs lives (keyed like the built-model cache)."""
    import hashlib

    from sgrun.kernels.cpu.isa import cpu_features
    from sgrun.models.fetch import cache_dir
    from sgrun.models.model_cache import source_hash
    c = model.cfg
    parts = [c.name, str(c.hidden_size), str(c.num_layers), str(c.vocab_size), str(model.dtype), model.quantization,
             torch.__version__, " ".join(sorted(cpu_features())), os.environ.get("SGRUN_CPU_ISA", ""), source_hash(),
             use_sgrun_inductor_cache()]
    key = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:20]
    return cache_dir() / "compile" / f"{key}.json"


def read_marker(model) -> dict | None:
    try:
        return json.loads(marker_path(model).read_text())
    except (OSError, ValueError):
        return None


def _step_seconds(forward, model) -> float:
    """Best of 3 batch-1 forwards (attention stand-in: the saving is in the blocks around it)."""
    from sgrun.models.compiled_forward import _NoAttention
    ids, pos = torch.zeros(1, dtype=torch.long), torch.zeros(1, dtype=torch.long)
    best = float("inf")
    with torch.inference_mode():
        for _ in range(3):
            t = time.perf_counter()
            forward(ids, pos, _NoAttention(), pos)
            best = min(best, time.perf_counter() - t)
    return best


def write_marker(fwd, seconds: float) -> None:
    """Record a finished compile and what it saves per batch-1 token, for `one_shot_compile`."""
    model = fwd.model
    try:
        eager = _step_seconds(model.forward, model)
        compiled = _step_seconds(fwd.forward, model)
        path = marker_path(model)
        path.parent.mkdir(parents=True, exist_ok=True)
        previous = read_marker(model) or {}
        path.write_text(json.dumps({"warm_up_s": seconds, "first_warm_up_s": previous.get("first_warm_up_s", seconds),
                                    "eager_step_s": eager, "compiled_step_s": compiled, "written": time.time()}))
    except Exception as exc:  # noqa: BLE001 - the marker only informs later one-shot runs
        log.debug("compile marker not written: %s", exc)


def one_shot_compile(model, max_new_tokens: int) -> bool:
    """A one-shot run compiles only where a warm cache makes it pay: marker present, and its warm
    compile time below the tokens asked for times the measured per-token saving."""
    env = env_compile_default()
    if env is not None:
        return env
    marker = read_marker(model)
    if marker is None:
        return False
    saving = max_new_tokens * max(0.0, marker["eager_step_s"] - marker["compiled_step_s"])
    return saving > marker["warm_up_s"]


def start_compile(model, device: torch.device, compile: bool | None, tp: int, fused_serves: bool = False,
                  one_shot_tokens: int | None = None) -> tuple[object | None, float | None]:
    """(CompiledForward or None, the warm-up seconds when compiled now). compile=None: $SGRUN_COMPILE
    when set, else nothing where the C++ decode blocks serve the model (`fused_serves`: they are
    faster than the compiled graphs and need no warm-up, fused_decode.py), else compiled in the
    background where it can run (the CPU, one process, a C++ compiler present); True compiles
    now; False never. `one_shot_tokens` (sgrun generate) with compile=None: compiled now where a
    warm compile pays for that many tokens (`one_shot_compile`), else never; the engine is built
    with its forward, nothing is swapped into it later."""
    from sgrun.models.compiled_forward import compile_available, compiled_forward_for
    if not getattr(getattr(model, "cfg", None), "llama_shaped", True):
        return None, None   # the compiled blocks are Llama's; the family's others run eagerly (decoder.py)
    possible = device.type == "cpu" and tp == 1
    background = False
    if compile is None and one_shot_tokens is not None:
        if fused_serves or not possible:
            return None, None
        compile = one_shot_compile(model, one_shot_tokens)
    elif compile is None:
        env = env_compile_default()
        # The environment sets the default, so it never errors where compiling cannot run.
        background = env is None
        if env is None and fused_serves:
            return None, None
        compile = possible and env is not False and compile_available()
    if not compile:
        return None, None
    if not possible:
        raise InvalidRequestError("compile runs on the CPU with tp=1 (CUDA runs CUDA graphs instead)", field="compile")
    if not compile_available():
        raise InvalidRequestError("compile needs a C++ compiler (g++ or clang++) on PATH: install one or "
                                  "pass compile=False / --no-compile", field="compile")
    use_sgrun_inductor_cache()
    fwd = compiled_forward_for(model)
    if background and not fwd.ready:
        fwd.warm_up_in_background(lambda seconds: write_marker(fwd, seconds))
        return fwd, None
    already = fwd.ready
    seconds = fwd.warm_up()
    if not already:
        write_marker(fwd, seconds)
        log.info("compiled the decode forward in %.1f s (torch.compile, inductor C++)", seconds)
    return fwd, seconds
