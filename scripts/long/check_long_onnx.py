"""Issue 37's acceptance program through ONNX (onnxruntime on CPU): the 131072 build exported
with as many cache slots as the prompt needs (the certificate covers every length up to
max_seq_len), one prefill of a long prompt, every position's argmax against the eager reference.

    python scripts/long/check_long_onnx.py --max-seq-len 131072 --tokens 16000

The prefill graph holds the attention scores of every head at once ([heads, T, T] floats): 3 GB
at 16,000 tokens, which bounds the prompt on a 24 GB machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
import long_programs  # noqa: E402

import torchwright_fx as tw  # noqa: E402
from torchwright_fx.backends.onnx import export_onnx  # noqa: E402
from torchwright_fx.backends.onnx_runner import OnnxRunner  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-seq-len", type=int, default=131072)
    ap.add_argument("--tokens", type=int, default=16000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--save", type=Path, default=Path("build/long"))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    program = tw.compile(long_programs.memory_lines, vocab=long_programs.VOCAB,
                         max_seq_len=args.max_seq_len).compile()
    hf = program.save_pretrained(args.save / f"memory_lines_{args.max_seq_len}")
    ids = long_programs.VOCAB.encode(long_programs.stream(args.tokens - 1, args.seed))
    want = program.printed_ids(ids).numpy()
    out = export_onnx(hf, args.save / f"memory_lines_{args.max_seq_len}_onnx",
                      max_seq_len=len(ids) + 16)
    start = time.time()
    got = OnnxRunner(out).logits(ids).argmax(-1)
    seconds = time.time() - start
    wrong = (got != want).nonzero()[0].tolist()
    result = {"runtime": "ONNX (onnxruntime, CPU)", "max_seq_len": args.max_seq_len,
              "tokens": len(ids), "wrong": len(wrong), "first_wrong": wrong[:10],
              "seconds": round(seconds, 1)}
    print(json.dumps(result), flush=True)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    sys.exit(1 if wrong else 0)


if __name__ == "__main__":
    main()
