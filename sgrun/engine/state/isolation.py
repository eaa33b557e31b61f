"""Isolation by construction: a stage of a step that fails because of one request fails that
request alone.

Every per-request stage of the engine step (the batched forward, then logit bias, penalties,
constraint masks and sampling, then append / stop / detokenize / jump-forward) runs through
`isolate`. It runs the stage over the whole batch first (the fast path). If the stage raises,
the batch is split in halves and each half runs on its own, down to single items: an item that
still fails alone is handed to `fail` with its exception; every other item gets exactly the
result it would have had in the full batch, because a stage's result for one item depends on
that item only (batched equals alone is an engine invariant, tested in test_engine_batching.py).
When the cause is not one request (every item fails alone too), every item is failed with it.

A stage run this way must be retryable: it may not change the items it is given before it
returns (the model runner's stages only read sequences; sampling noise is a function of each
request's seed and step, so a retry draws the same numbers). A stage that does change them
(postprocessing) runs one item at a time (`one_at_a_time=True`), so no retry ever repeats
half-done work.
"""

from __future__ import annotations

from typing import Callable, Sequence, TypeVar

from sgrun.errors import EngineFatalError

T = TypeVar("T")
R = TypeVar("R")


def isolate(items: Sequence[T], stage: Callable[[list[T]], Sequence[R]], fail: Callable[[T, Exception], None],
            *, one_at_a_time: bool = False) -> list[tuple[T, R]]:
    """(item, result) for every item the stage succeeded on, in order; `fail` got the others."""
    if one_at_a_time:
        done: list[tuple[T, R]] = []
        for item in items:
            done += isolate([item], stage, fail)
        return done
    if not items:
        return []
    batch = list(items)
    try:
        results = stage(batch)
    except EngineFatalError:
        raise                 # not any request's fault, and retrying cannot help: the engine stops
    except Exception as exc:  # noqa: BLE001 - the point: find whose input it was, fail only that
        if len(batch) == 1:
            fail(batch[0], exc)
            return []
        mid = len(batch) // 2
        return isolate(batch[:mid], stage, fail) + isolate(batch[mid:], stage, fail)
    return list(zip(batch, results))
