"""Issue 37's acceptance program, compiled at a long max_seq_len and checked teacher-forced in one
forward pass through transformers (every position's argmax against the eager reference).

    python scripts/long/check_long.py --max-seq-len 131072 --tokens 60000 [--save DIR]

The program: shift, latch, select_latest keyed by a computed address, a whole-context counted
mean compared with a threshold, gather and steps_since (tests/long_programs.py: memory_lines).
"""

from __future__ import annotations

import sys
import time

import common
import torch


def main() -> int:
    args = common.arguments(__doc__.splitlines()[0], 60000)
    start = time.time()
    program = common.program(args.max_seq_len)
    compile_s = time.time() - start
    print(program.report(), flush=True)
    out = program.save_pretrained(args.save / f"memory_lines_{args.max_seq_len}")
    start = time.time()
    ids, want = common.case(program, args.tokens, args.seed)
    reference_s = time.time() - start
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32,
                                                 attn_implementation="sdpa")
    start = time.time()
    with torch.no_grad():
        got = model(torch.tensor([ids])).logits[0].argmax(-1)
    stats = program.stats()
    return common.report({"runtime": "transformers (fp32, sdpa)",
                          "max_seq_len": args.max_seq_len, "seed": args.seed,
                          "compile_s": round(compile_s, 1), "reference_s": round(reference_s, 1),
                          "forward_s": round(time.time() - start, 1),
                          "layers": stats["layers"], "parameters": stats["parameters"]},
                         got.tolist(), want, args.json)


if __name__ == "__main__":
    sys.exit(main())
