"""`@sgrun.function`: a Python function `f(s, ...)` becomes a program with `run` / `run_batch`."""

from __future__ import annotations

import functools
import inspect
import os
import threading
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable

from sgrun.lang.backend import Backend, get_default_backend
from sgrun.lang.chat_roles import ChatRoles
from sgrun.lang.interpreter import ProgramExecutor, sampling_defaults
from sgrun.lang.prefix_tracer import constant_prefix
from sgrun.lang.program_error import _LANG_DIR, ProgramError
from sgrun.lang.state import ProgramState

_AUTO_MAX_THREADS = 64   # the engine's default max_running: more threads would only queue


class SgFunction:
    def __init__(self, body: Callable[..., Any]):
        params = list(inspect.signature(body).parameters.values())
        if not params or params[0].kind not in (params[0].POSITIONAL_ONLY, params[0].POSITIONAL_OR_KEYWORD):
            raise TypeError(f"@sgrun.function {body.__name__!r} must take the program state as its first argument")
        self.body = body
        self.name: str = body.__name__
        self._arg_names = {p.name for p in params[1:]}
        self._takes_any_kwargs = any(p.kind == p.VAR_KEYWORD for p in params[1:])
        functools.update_wrapper(self, body)

    # --- calling another program on the same state --------------------------------------------
    def __call__(self, state: ProgramState, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(state, ProgramState):
            raise TypeError(f"{self.name}(...) runs on a program state: call it as {self.name}(s, ...) "
                            f"inside another program, or use {self.name}.run(...)")
        state._enter_function(self.name)
        try:
            return self.body(state, *args, **kwargs)
        finally:
            state._exit_function()

    # --- running ------------------------------------------------------------------------------
    def run(self, *args: Any, backend: Backend | None = None, stream: bool = False,
            **kwargs: Any) -> ProgramState:
        """Run the program. Keyword arguments the function does not take are default sampling
        parameters for its gen calls (e.g. `temperature=0, max_tokens=32`). Raises ProgramError
        when the program fails; with `stream=True` returns at once (read `state.text_iter()`)."""
        program_kwargs, sampling = self._split_kwargs(kwargs)
        state = self._new_state(backend or get_default_backend(), sampling, stream)
        if stream:
            executor = state._executor
            ready = threading.Event()

            def body_thread() -> None:
                executor.set_body_thread(threading.get_ident())
                ready.set()
                self._run_body(state, args, program_kwargs)

            threading.Thread(target=body_thread, name=f"sgrun-body-{self.name}", daemon=True).start()
            ready.wait()
            return state
        self._run_body(state, args, program_kwargs)
        return state.raise_error()

    def run_batch(self, batch_kwargs: Iterable[dict[str, Any]], backend: Backend | None = None,
                  num_threads: int | str = "auto", progress_bar: bool = False,
                  cache_prefix: bool = True, **sampling_kwargs: Any) -> list[ProgramState]:
        """Run the program once per argument dict, concurrently. Returns the states in order; a
        failing program's state carries its error (`state.error`) and does not stop the others.

        With `cache_prefix`, the text every run starts with (found by running the body with
        placeholder arguments up to its first model call) is prefilled once beforehand."""
        batch = [dict(kw) for kw in batch_kwargs]
        backend = backend or get_default_backend()
        sampling = sampling_defaults(sampling_kwargs)
        if num_threads == "auto":
            num_threads = max(1, min(len(batch), _AUTO_MAX_THREADS))
        if not isinstance(num_threads, int) or num_threads < 1:
            raise ValueError(f"num_threads must be 'auto' or an integer >= 1, got {num_threads!r}")
        if not batch:
            return []
        roles = ChatRoles(backend.chat_template)
        if cache_prefix and len(batch) > 1:
            prefix = constant_prefix(self.body, roles, self.name)
            if prefix:
                backend.cache_prefix(prefix)

        def run_one(kwargs: dict[str, Any]) -> ProgramState:
            state = self._new_state(backend, sampling, stream=False, roles=roles)
            try:
                program_kwargs, own_sampling = self._split_kwargs(kwargs)
            except TypeError as exc:
                state._executor.fail(ProgramError(self.name, "its arguments", exc))
                return state
            state._executor.default_params.update(own_sampling)
            self._run_body(state, (), program_kwargs)
            return state

        progress = None
        if progress_bar:
            from tqdm.auto import tqdm
            progress = tqdm(total=len(batch), desc=self.name)
        with ThreadPoolExecutor(max_workers=num_threads, thread_name_prefix=f"sgrun-batch-{self.name}") as pool:
            futures = [pool.submit(run_one, kw) for kw in batch]
            if progress is not None:
                for future in futures:
                    future.add_done_callback(lambda _f: progress.update(1))
            states = [f.result() for f in futures]
        if progress is not None:
            progress.close()
        return states

    # --- internals ----------------------------------------------------------------------------
    def _split_kwargs(self, kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        program = {k: v for k, v in kwargs.items() if k in self._arg_names}
        rest = {k: v for k, v in kwargs.items() if k not in self._arg_names}
        if self._takes_any_kwargs:
            return {**program, **rest}, {}
        try:
            return program, sampling_defaults(rest)
        except TypeError as exc:
            raise TypeError(f"{self.name}: {exc}") from None

    def _new_state(self, backend: Backend, sampling: dict[str, Any], stream: bool,
                   roles: ChatRoles | None = None) -> ProgramState:
        return ProgramState(ProgramExecutor(backend, self.name, sampling, roles=roles, stream=stream))

    def _run_body(self, state: ProgramState, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Run the body to the end, then wait for its calls; every failure lands in state.error."""
        executor = state._executor
        try:
            self.body(state, *args, **kwargs)
        except ProgramError as exc:
            executor.fail(exc)
        except Exception as exc:  # noqa: BLE001 - user code failed: report it as the program's error
            executor.fail(ProgramError(self.name, "the program body", exc, _user_frame(exc)))
        finally:
            executor.set_body_thread(None)
        executor.wait()


def _user_frame(exc: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if os.path.dirname(os.path.abspath(f.filename)) != _LANG_DIR]
    return f"{os.path.relpath(frames[-1].filename)}:{frames[-1].lineno}" if frames else ""


def function(body: Callable[..., Any]) -> SgFunction:
    """Decorator: turn `def program(s, ...)` into a runnable sgrun program."""
    return SgFunction(body)
