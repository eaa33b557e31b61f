"""A build killed mid-way (out of memory, Ctrl-C) leaves torch's `lock` file behind, and torch's
loader then waits on it forever: every later start of the engine hung. The build helper holds its
own lock, which the kernel releases when its holder dies, and clears the stale file under it."""

from __future__ import annotations

import multiprocessing
import os
import time

from sgrun.kernels.cpu.build import _build_lock


def test_a_stale_torch_lock_is_removed_under_the_build_lock(tmp_path):
    (tmp_path / "lock").write_text("")
    with _build_lock(str(tmp_path)):
        assert not (tmp_path / "lock").exists()


def _hold_then_die(build_dir: str) -> None:
    with _build_lock(build_dir):
        (open(os.path.join(build_dir, "lock"), "w")).close()   # what torch leaves when killed mid-build
        os._exit(9)   # dies holding both locks, as an OOM kill would


def test_a_builder_that_dies_does_not_block_the_next(tmp_path):
    proc = multiprocessing.get_context("fork").Process(target=_hold_then_die, args=(str(tmp_path),))
    proc.start()
    proc.join(30)
    assert proc.exitcode == 9 and (tmp_path / "lock").exists()
    start = time.monotonic()
    with _build_lock(str(tmp_path)):
        assert not (tmp_path / "lock").exists()
    assert time.monotonic() - start < 5
