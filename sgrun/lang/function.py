"""`@sgrun.function`: a Python function `f(s, ...)` becomes a program with `run` / `run_batch`."""

from __future__ import annotations

import functools
import inspect
import os
import threading
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable, Iterator

from sgrun.lang.backend import Backend, get_default_backend
from sgrun.lang.chat_roles import ChatRoles
from sgrun.lang.global_config import global_config
from sgrun.lang.interpreter import ProgramExecutor, sampling_defaults
from sgrun.lang.prefix_tracer import constant_prefix
from sgrun.lang.program_error import _LANG_DIR, ProgramError
from sgrun.lang.state import ProgramState

_AUTO_MAX_THREADS = 64   # the engine's default max_running: more threads would only queue


class SgFunction:
    def __init__(self, body: Callable[..., Any], num_api_spec_tokens: int | None = None,
                 bind_arguments: dict[str, Any] | None = None):
        params = list(inspect.signature(body).parameters.values())
        if not params or params[0].kind not in (params[0].POSITIONAL_ONLY, params[0].POSITIONAL_OR_KEYWORD):
            raise TypeError(f"@sgrun.function {body.__name__!r} must take the program state as its first argument")
        self.body = body
        self.func = body                      # SGLang's attribute name
        self.name: str = body.__name__
        self.arg_names = [p.name for p in params[1:] if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        self._arg_names = set(self.arg_names)
        self._required = [p.name for p in params[1:] if p.default is p.empty
                          and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        self._takes_any_kwargs = any(p.kind == p.VAR_KEYWORD for p in params[1:])
        # Accepted for SGLang programs: API speculative execution batches several gens into one
        # call to chat-only APIs. sgrun's backends run every gen as its own request.
        self.num_api_spec_tokens = num_api_spec_tokens
        self.bind_arguments = dict(bind_arguments or {})
        functools.update_wrapper(self, body)

    def bind(self, **kwargs: Any) -> "SgFunction":
        """A copy of this program with some arguments fixed."""
        unknown = sorted(set(kwargs) - self._arg_names) if not self._takes_any_kwargs else []
        if unknown:
            raise TypeError(f"{self.name}.bind: unknown argument(s) {', '.join(unknown)}; "
                            f"the program takes {', '.join(self.arg_names) or 'none'}")
        return SgFunction(self.body, self.num_api_spec_tokens, {**self.bind_arguments, **kwargs})

    # --- calling: on a state (a nested program) or on its own (run) ------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """`f(s, ...)` inside another program appends f's calls to s; `f(...)` alone is `f.run(...)`."""
        if not args or not isinstance(args[0], ProgramState):
            return self.run(*args, **kwargs)
        state = args[0]
        state._enter_function(self.name)
        try:
            return self.body(state, *args[1:], **{**self.bind_arguments, **kwargs})
        finally:
            state._exit_function()

    # --- running ------------------------------------------------------------------------------
    def run(self, *args: Any, backend: Backend | None = None, stream: bool = False,
            use_thread: bool = True, **kwargs: Any) -> ProgramState:
        """Run the program. Keyword arguments the function does not take are default sampling
        parameters for its gen calls (e.g. `temperature=0, max_tokens=32`, SGLang's
        `max_new_tokens=32`). Raises ProgramError when the program fails; with `stream=True`
        returns at once (read `state.text_iter()`). `use_thread` is accepted for SGLang programs."""
        program_kwargs, sampling = self._split_kwargs({**self.bind_arguments, **kwargs})
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
        if global_config.verbosity >= 2:
            print(state.text())
        return state.raise_error()

    def run_batch(self, batch_kwargs: Iterable[dict[str, Any] | list[Any] | tuple[Any, ...]],
                  backend: Backend | None = None, num_threads: int | str = "auto", progress_bar: bool = False,
                  cache_prefix: bool | None = None, generator_style: bool = False,
                  **sampling_kwargs: Any) -> Any:
        """Run the program once per argument dict (or tuple of positional arguments), concurrently.
        Returns the states in order (with `generator_style`, a generator yielding them in order);
        a failing program's state carries its error (`state.error()`) and does not stop the others.

        With `cache_prefix` (default: global_config.enable_precache_with_tracing), the text every
        run starts with (found by running the body with placeholder arguments up to its first
        model call) is prefilled once beforehand."""
        batch = [{**self.bind_arguments, **self._as_kwargs(kw)} for kw in batch_kwargs]
        if cache_prefix is None:
            cache_prefix = global_config.enable_precache_with_tracing
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

        def states_in_order() -> Iterator[ProgramState]:
            with ThreadPoolExecutor(max_workers=num_threads, thread_name_prefix=f"sgrun-batch-{self.name}") as pool:
                futures = [pool.submit(run_one, kw) for kw in batch]
                if progress is not None:
                    for future in futures:
                        future.add_done_callback(lambda _f: progress.update(1))
                for future in futures:
                    yield future.result()
            if progress is not None:
                progress.close()

        return states_in_order() if generator_style else list(states_in_order())

    # --- internals ----------------------------------------------------------------------------
    def _as_kwargs(self, item: Any) -> dict[str, Any]:
        """A batch item: a dict of arguments, or SGLang's tuple of positional ones."""
        if isinstance(item, dict):
            return dict(item)
        if isinstance(item, (list, tuple)):
            if not len(self._required) <= len(item) <= len(self.arg_names):
                raise TypeError(f"{self.name}: a batch item of {len(item)} positional values does not fit "
                                f"the arguments ({', '.join(self.arg_names)})")
            return dict(zip(self.arg_names, item))
        raise TypeError(f"{self.name}: batch items must be dicts of arguments or tuples, got {type(item).__name__}")

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
        if not global_config.skip_special_tokens_in_output:
            sampling = {"skip_special_tokens": False, **sampling}
        return ProgramState(ProgramExecutor(backend, self.name, sampling, roles=roles, stream=stream))

    def _run_body(self, state: ProgramState, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Run the body to the end, then wait for its calls; every failure lands in state.error."""
        executor = state._executor
        try:
            state.ret_value = self.body(state, *args, **kwargs)
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


def function(body: Callable[..., Any] | None = None, *, num_api_spec_tokens: int | None = None) -> Any:
    """Decorator: turn `def program(s, ...)` into a runnable sgrun program. Also usable as
    `@function(num_api_spec_tokens=...)`, as in SGLang."""
    if body is None:
        return lambda inner: SgFunction(inner, num_api_spec_tokens)
    return SgFunction(body, num_api_spec_tokens)
