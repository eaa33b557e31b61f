"""Run programs of tests/sglang_programs.py with SGLang's own client against a server:
`python tests/sglang_client_run.py URL [PROGRAM ...]`. Prints one JSON object, program -> "ok" or
the failure. A separate process because `import sglang` patches transformers and sets cache
environment variables, which must not leak into the rest of the test session."""

from __future__ import annotations

import json
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import sglang  # noqa: E402
import sglang_programs  # noqa: E402


def main() -> None:
    url, names = sys.argv[1], sys.argv[2:]
    backend = sglang.RuntimeEndpoint(url)
    results: dict[str, str] = {"_chat_template": backend.chat_template.name}
    for name in names:
        try:
            sglang_programs.PROGRAMS[name](sglang, backend)
            results[name] = "ok"
        except Exception:  # noqa: BLE001 - report every program's failure, then go on
            results[name] = traceback.format_exc(limit=6)
    print("RESULTS " + json.dumps(results), flush=True)
    os._exit(0)   # SGLang's executors keep non-daemon worker threads; do not wait for them


if __name__ == "__main__":
    main()
