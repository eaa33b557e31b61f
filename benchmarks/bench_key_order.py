"""What key_order="any" costs in automaton size: `python benchmarks/bench_key_order.py`.

For an object of n integer properties (one required), the NFA states and build time of
schema_to_nfa under key_order="schema" and "any" side by side, n up to the budget (10
properties: 1,024 sets of properties used), and the refusal one past it. Build times are one
run each on whatever load the machine has (printed with the CPU line): compare the columns.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_options import cpu_line, uptime  # noqa: E402

from sgrun.constrain.json_schema import schema_to_nfa  # noqa: E402
from sgrun.errors import ConstraintError  # noqa: E402


def main() -> None:
    print("| n | schema: NFA states | ms | any: NFA states | ms |")
    print("|---:|---:|---:|---:|---:|")
    for n in (1, 2, 4, 6, 8, 10, 11):
        schema = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(n)}, "required": ["p0"]}
        row = [str(n)]
        for order in ("schema", "any"):
            t = time.perf_counter()
            try:
                nfa, _, _ = schema_to_nfa(schema, key_order=order)
                row += [f"{len(nfa.edges):,}", f"{(time.perf_counter() - t) * 1000:.1f}"]
            except ConstraintError as e:
                row += [f"refused: {str(e)[:60]}...", "-"]
        print("| " + " | ".join(row) + " |")
    print(f"{cpu_line()}; {uptime()}")


if __name__ == "__main__":
    main()
