"""Decode attention that reads the KV pages in place: a C++ kernel (paged_decode.cpp) built with
torch's extension mechanism (torch.utils.cpp_extension.load_inline) on first use, cached on disk.

`paged_decode` attends each decoding row's query heads over its context through its page
table. One work item is (row, kv head, chunk of that head's query heads): it walks the context
in blocks of 16 tokens, converts each block's K and V to float32 once and uses them for every
query head of the GQA group, with an online softmax (exp in vectorizable arithmetic), so
nothing is gathered, padded or masked. It returns float32 outputs and log-sum-exps.
`cascade_prefix` attends one shared prefix for the stacked queries of every row that shares
it (one K/V read for all of them) and merges that into paged_decode's results by log-sum-exp.
Work items are spread with at::parallel_for (torch's OpenMP pool: torch.set_num_threads
governs it); small problems run on the calling thread.

Where the build fails (no compiler, no headers, a broken toolchain) `load_kernel` returns None
and says so once in the log; the caller then uses the gather path (attention_torch.py).
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from sgrun.models.cpp_build import CppKernel

# Tests set this to simulate a machine where the build fails.
FORCE_BUILD_FAILURE_ENV = "SGRUN_CPP_ATTENTION_FAIL"

KERNEL = CppKernel("paged_decode", Path(__file__).with_name("paged_decode.cpp"), ["paged_decode", "cascade_prefix"],
                   what="C++ paged decode attention",
                   fallback="decode attention gathers pages with the torch path instead",
                   fail_env=FORCE_BUILD_FAILURE_ENV)


def load_kernel() -> ModuleType | None:
    """The compiled module (`paged_decode`, `cascade_prefix`), built on first use; None (logged
    once) where it cannot be built."""
    return KERNEL.load()


def reset_for_tests() -> None:
    KERNEL.reset_for_tests()
