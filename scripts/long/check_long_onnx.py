"""Issue 37's acceptance program through ONNX (onnxruntime on CPU): the 131072 build exported
with as many cache slots as the prompt needs (the certificate covers every length up to
max_seq_len), one prefill of a long prompt, every position's argmax against the eager reference.

    python scripts/long/check_long_onnx.py --max-seq-len 131072 --tokens 16000

The prefill graph holds the attention scores of every head at once ([heads, T, T] floats): 3 GB
at 16,000 tokens, which bounds the prompt on a 24 GB machine.
"""

from __future__ import annotations

import sys
import time

import common

from torchwright_fx.backends.onnx import export_onnx
from torchwright_fx.backends.onnx_runner import OnnxRunner


def main() -> int:
    args = common.arguments(__doc__.splitlines()[0], 16000)
    program = common.program(args.max_seq_len)
    hf = program.save_pretrained(args.save / f"memory_lines_{args.max_seq_len}")
    ids, want = common.case(program, args.tokens, args.seed)
    out = export_onnx(hf, args.save / f"memory_lines_{args.max_seq_len}_onnx",
                      max_seq_len=len(ids) + 16)
    start = time.time()
    got = OnnxRunner(out).logits(ids).argmax(-1)
    return common.report({"runtime": "ONNX (onnxruntime, CPU)", "max_seq_len": args.max_seq_len,
                          "seed": args.seed, "seconds": round(time.time() - start, 1)},
                         got, want, args.json)


if __name__ == "__main__":
    sys.exit(main())
