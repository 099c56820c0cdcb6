"""Issue 37's acceptance program through llama.cpp (llama-cpp-python, F32 GGUF, flash attention
off and an f32 KV cache, as every fp32 build runs there): one batched decode of a long prompt,
every position's argmax against the eager reference.

    PYTHONPATH=. .runtimes/llama/venv/bin/python scripts/long/check_long_llama.py \\
        --max-seq-len 131072 --tokens 60000
"""

from __future__ import annotations

import sys
import time

import common
import numpy as np
from llama_cpp import Llama

from torchwright_fx.backends.gguf import save_gguf

GGML_TYPE_F32 = 0


def main() -> int:
    args = common.arguments(__doc__.splitlines()[0], 60000)
    program = common.program(args.max_seq_len)
    args.save.mkdir(parents=True, exist_ok=True)
    path = save_gguf(program.weights, program.vocab,
                     args.save / f"memory_lines_{args.max_seq_len}.gguf",
                     description=program.model_card(), name="memory_lines")
    ids, want = common.case(program, args.tokens, args.seed)
    llm = Llama(model_path=str(path), n_ctx=len(ids) + 64, n_threads=2, n_threads_batch=2,
                logits_all=True, verbose=False, flash_attn=False, type_k=GGML_TYPE_F32,
                type_v=GGML_TYPE_F32)
    start = time.time()
    llm.eval(ids)
    seconds = time.time() - start
    got = np.array(llm.scores[: len(ids)]).argmax(-1)
    return common.report({"runtime": "llama.cpp", "max_seq_len": args.max_seq_len,
                          "seed": args.seed, "seconds": round(seconds, 1),
                          "tokens_per_s": round(len(ids) / seconds, 1)}, got, want, args.json)


if __name__ == "__main__":
    sys.exit(main())
