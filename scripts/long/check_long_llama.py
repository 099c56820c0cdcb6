"""Issue 37's acceptance program through llama.cpp (llama-cpp-python, F32 GGUF, flash attention
off and an f32 KV cache, as every fp32 build runs there): one batched decode of a long prompt,
every position's argmax against the eager reference.

    PYTHONPATH=. .runtimes/llama/venv/bin/python scripts/long/check_long_llama.py \
        --max-seq-len 131072 --tokens 60000
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from llama_cpp import Llama

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
import long_programs  # noqa: E402

import torchwright_fx as tw  # noqa: E402
from torchwright_fx.backends.gguf import save_gguf  # noqa: E402

GGML_TYPE_F32 = 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-seq-len", type=int, default=131072)
    ap.add_argument("--tokens", type=int, default=60000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--save", type=Path, default=Path("build/long"))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    program = tw.compile(long_programs.memory_lines, vocab=long_programs.VOCAB,
                         max_seq_len=args.max_seq_len).compile()
    args.save.mkdir(parents=True, exist_ok=True)
    path = save_gguf(program.weights, program.vocab,
                     args.save / f"memory_lines_{args.max_seq_len}.gguf",
                     description=program.model_card(), name="memory_lines")
    ids = long_programs.VOCAB.encode(long_programs.stream(args.tokens - 1, args.seed))
    want = program.printed_ids(ids).numpy()
    llm = Llama(model_path=str(path), n_ctx=len(ids) + 64, n_threads=args.threads,
                n_threads_batch=args.threads, logits_all=True, verbose=False,
                flash_attn=False, type_k=GGML_TYPE_F32, type_v=GGML_TYPE_F32)
    start = time.time()
    llm.eval(ids)
    seconds = time.time() - start
    got = np.array(llm.scores[: len(ids)]).argmax(-1)
    wrong = np.nonzero(got != want)[0].tolist()
    result = {"runtime": "llama.cpp", "max_seq_len": args.max_seq_len, "tokens": len(ids),
              "seed": args.seed, "wrong": len(wrong), "first_wrong": wrong[:10],
              "seconds": round(seconds, 1), "tokens_per_s": round(len(ids) / seconds, 1)}
    print(json.dumps(result), flush=True)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    sys.exit(1 if wrong else 0)


if __name__ == "__main__":
    main()
