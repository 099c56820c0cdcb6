"""Issue 37's acceptance program, compiled at a long max_seq_len and checked teacher-forced in one
forward pass through transformers (every position's argmax against the eager reference).

    python scripts/long/check_long.py --max-seq-len 131072 --tokens 60000 [--save DIR]

The program: shift, latch, select_latest keyed by a computed address, a whole-context counted
mean compared with a threshold, gather and steps_since (tests/long_programs.py: memory_lines).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
import long_programs  # noqa: E402

import torchwright_fx as tw  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-seq-len", type=int, default=131072)
    ap.add_argument("--tokens", type=int, default=60000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--save", type=Path, default=Path("build/long"))
    ap.add_argument("--attn", default="sdpa")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    t0 = time.time()
    program = tw.compile(long_programs.memory_lines, vocab=long_programs.VOCAB,
                         max_seq_len=args.max_seq_len).compile()
    compile_s = time.time() - t0
    print(program.report(), flush=True)
    out = program.save_pretrained(args.save / f"memory_lines_{args.max_seq_len}")
    ids = long_programs.VOCAB.encode(long_programs.stream(args.tokens - 1, args.seed))
    t0 = time.time()
    want = program.printed_ids(ids)
    reference_s = time.time() - t0
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32,
                                                 attn_implementation=args.attn)
    t0 = time.time()
    with torch.no_grad():
        got = model(torch.tensor([ids])).logits[0].argmax(-1)
    forward_s = time.time() - t0
    wrong = torch.nonzero(got != want).flatten().tolist()
    result = {"max_seq_len": args.max_seq_len, "tokens": len(ids), "seed": args.seed,
              "attn": args.attn, "wrong": len(wrong), "first_wrong": wrong[:10],
              "compile_s": round(compile_s, 1), "reference_s": round(reference_s, 1),
              "forward_s": round(forward_s, 1), "stats": {k: program.stats()[k] for k in
                                                          ("layers", "parameters")}}
    print(json.dumps(result), flush=True)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    sys.exit(1 if wrong else 0)


if __name__ == "__main__":
    main()
