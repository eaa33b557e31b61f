"""Cross-check of the GGUF loader against llama.cpp's own converter: for each architecture of the
family, the tests' tiny random-weight model (tests/model_family.py) is saved as a folder, converted
to an F32 GGUF by llama.cpp's `convert_hf_to_gguf.py`, loaded by sgrun (dense float32, float32 KV
pages) and scored on a fixed prompt against transformers' float32 forward. Prints the largest
log-prob difference per architecture. (tests/test_model_family.py writes its GGUFs with the `gguf`
library following the converter's conventions, since CI has no llama.cpp checkout; this script is
the check that those conventions are the converter's.)

    python benchmarks/check_converter.py --convert LLAMA_CPP/convert_hf_to_gguf.py [--archs qwen3,gemma3]

The converter needs llama.cpp's gguf-py on PYTHONPATH when it is newer than the installed gguf.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]   # this checkout's sgrun and the tests' helpers

PROMPT = [1, 504, 3458, 314, 260, 1345, 28, 198, 42, 2821, 9025, 216, 33, 34]


def main() -> None:
    import torch

    import sgrun
    from model_family import ARCHS, reference_prompt_logprobs, save_folder, tiny_model
    from sgrun.models.fetch import default_model_path
    from sgrun.models.loader import load_tokenizer

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--convert", required=True, help="llama.cpp's convert_hf_to_gguf.py")
    p.add_argument("--archs", default=",".join(ARCHS))
    args = p.parse_args()
    tok = load_tokenizer(str(default_model_path()))
    work = Path(tempfile.mkdtemp(prefix="sgrun-convert-"))
    worst = 0.0
    for arch in args.archs.split(","):
        model = tiny_model(arch)
        folder = work / arch
        save_folder(model, folder, tok)
        # The converter picks the vocabulary reader by tokenizer_class (phi3: the GPT-2 one).
        (folder / "tokenizer_config.json").write_text(json.dumps({
            "tokenizer_class": "GPT2Tokenizer" if arch == "phi3" else "PreTrainedTokenizerFast",
            "bos_token": "<|im_start|>", "eos_token": "<|im_end|>"}))
        out = work / f"{arch}.gguf"
        r = subprocess.run([sys.executable, args.convert, str(folder), "--outtype", "f32", "--outfile", str(out)],
                           capture_output=True, text=True)
        if r.returncode:
            print(f"{arch:9s} convert_hf_to_gguf.py failed: {r.stderr.strip().splitlines()[-1]}")
            continue
        with sgrun.Engine(str(out), dtype="float32", quantization="none", kv_cache_dtype="float32",
                          max_pages=64, page_size=16) as engine:
            ours = torch.tensor(engine.score(PROMPT[:1], [PROMPT[1:]])[0])
        diff = float((ours - reference_prompt_logprobs(model, PROMPT)).abs().max())
        worst = max(worst, diff)
        print(f"{arch:9s} max |log-prob difference| to transformers: {diff:.2e}", flush=True)
    print(f"worst: {worst:.2e}")


if __name__ == "__main__":
    main()
