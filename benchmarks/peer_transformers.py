"""transformers as a benchmark peer, in a process of its own, so it runs at its best.

Why a process: OpenMP's wait policy is read once per process, and the benchmarks set
`OMP_WAIT_POLICY=PASSIVE` for sgrun's sake (spinning OpenMP workers steal the two shared cores from
its thread team). Under PASSIVE, torch's OpenMP workers sleep between transformers' small decode
ops: its float32 decode read 10.7 / 12.2 tok/s against 21.6 / 24.0 under libgomp's default policy
(AMX Xeon, 7 December 2026), so every ratio against it was flattered. The child runs under libgomp's
default (its workers spin briefly, then sleep: nothing spins while the parent measures sgrun).

    peer = TransformersPeer(folder, ["bfloat16", "float32"], threads=2)
    peer.models["float32"].decode(prompt, 128)        # tok/s after the first token
    peer.models["float32"].generate([prompt], 16)     # (seconds, output tokens)
    peer.close()

The child speaks JSON lines on stdin / stdout (`python peer_transformers.py --serve ...`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


class PeerModel:
    """One dtype of the child's models, with bench_engine's hf_decode / hf_generate as methods."""

    def __init__(self, peer: "TransformersPeer", dtype: str):
        self.peer, self.dtype = peer, dtype

    def decode(self, prompt: list[int], n: int) -> float:
        return self.peer.call("decode", self.dtype, batch=[prompt], n=n)

    def generate(self, batch: list[list[int]], n: int) -> tuple[float, int]:
        secs, toks = self.peer.call("generate", self.dtype, batch=batch, n=n)
        return secs, toks


class TransformersPeer:
    def __init__(self, folder: str | Path, dtypes: list[str], threads: int):
        env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
        here = Path(__file__).parent
        self.proc = subprocess.Popen([sys.executable, str(here / "peer_transformers.py"), "--serve", str(folder),
                                      ",".join(dtypes), str(threads)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=env, cwd=str(here))
        ready = self.proc.stdout.readline()
        if not ready.startswith("READY"):
            raise RuntimeError(f"the transformers peer did not start: {ready!r}")
        self.models = {d: PeerModel(self, d) for d in dtypes}

    def call(self, op: str, dtype: str, **kw):
        self.proc.stdin.write(json.dumps({"op": op, "dtype": dtype, **kw}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the transformers peer exited")
        return json.loads(line)["v"]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)


def serve(folder: str, dtypes: str, threads: int) -> None:
    import torch
    import transformers

    from bench_engine import hf_decode, hf_generate
    torch.set_num_threads(threads)
    models = {d: transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, d)).eval()
              for d in dtypes.split(",")}
    print("READY", flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        m = models[req["dtype"]]
        if req["op"] == "decode":
            v = hf_decode(m, req["batch"][0], req["n"])
        else:
            v = list(hf_generate(m, req["batch"], req["n"]))
        print(json.dumps({"v": v}), flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--serve":
        serve(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        sys.exit(__doc__)
