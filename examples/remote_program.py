"""The same program against a running `sgrun serve` (native /generate and /score endpoints).

    sgrun serve --port 30000 --dtype float32 &
    python examples/remote_program.py --url http://127.0.0.1:30000

Without --url the example starts a server on a background thread of this process (same HTTP
protocol) so it runs on its own."""

from __future__ import annotations

import argparse
import contextlib
from typing import Iterator

import sgrun
from _common import max_tokens


@sgrun.function
def plan_trip(s, city: str, limit: int):
    s += sgrun.system("You are a travel assistant.")
    s += sgrun.user(f"I am visiting {city}. Should I go to a museum or a park first?")
    s += sgrun.assistant("I suggest a " + sgrun.select("place", choices=["museum", "park"]) + " first.")
    s += sgrun.user("Why?")
    s += sgrun.assistant(sgrun.gen("why", max_tokens=limit))


@contextlib.contextmanager
def local_server() -> Iterator[str]:
    """`sgrun serve`'s app on a background thread of this process (uvicorn on a free loopback port)."""
    import threading
    import time

    import uvicorn

    from sgrun.child_process import free_port
    from sgrun.server.app import build_app

    engine = sgrun.Engine(dtype="float32")
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(build_app(engine), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started and thread.is_alive():
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        engine.close()


def main(url: str | None = None, api_key: str | None = None) -> sgrun.ProgramState:
    with contextlib.ExitStack() as stack:
        if url is None:
            url = stack.enter_context(local_server())
        backend = sgrun.RuntimeEndpoint(url, api_key=api_key)
        stack.callback(backend.close)
        state = plan_trip.run(city="Vienna", limit=max_tokens(32), backend=backend, temperature=0)
        print(f"server {url}: {state['place']} first. Why: {state['why'].strip()}")
        for call in state.calls:
            print(f"  {call['kind']} {call['name']}: {call['prompt_tokens']} prompt tokens")
        return state


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=None, help="a running `sgrun serve`, e.g. http://127.0.0.1:30000")
    parser.add_argument("--api-key", default=None)
    args = parser.parse_args()
    main(args.url, args.api_key)
