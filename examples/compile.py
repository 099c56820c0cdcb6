"""``python -m examples.compile <name> [-o DIR] [--optimize N]``: compile an example to a
Phi-3 directory, print its report and a few demo generations checked against its oracle.
The same as ``torchwright-fx compile examples.<name> -o DIR`` (``torchwright_fx/cli.py``, which
does the writing) plus the demos and a default output directory."""

from __future__ import annotations

import argparse
import importlib
import sys

from examples import NAMES
from torchwright_fx.base.errors import TorchwrightError
from torchwright_fx.cli import compile_and_write


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.compile", description=__doc__)
    parser.add_argument("name", choices=NAMES)
    parser.add_argument("-o", "--output", help="directory to write (default: build/<name>_hf)")
    parser.add_argument("--optimize", type=int, default=0, help="0: heuristic, 1-3: CP-SAT")
    parser.add_argument("--d-model", type=int, default=None)
    parser.add_argument("--d-head", type=int, default=None)
    parser.add_argument("--max-seq-len", type=int, default=None)
    parser.add_argument("--onnx", help="also export ONNX (torch.onnx) into this directory")
    parser.add_argument("--gguf", help="also write a GGUF file for llama.cpp")
    parser.add_argument("--precision", choices=["fp32", "half"], default="fp32",
                        help="the arithmetics to certify: fp32, or half (fp32, fp16 and bf16; "
                             "the GGUF is then F16)")
    args = parser.parse_args(argv)

    module = importlib.import_module(f"examples.{args.name}")
    options = {"optimize": args.optimize}
    if args.precision != "fp32":
        options["precision"] = args.precision
    if args.d_model:
        options["d_model"] = args.d_model
    if args.max_seq_len:
        options["max_seq_len"] = args.max_seq_len
    if args.d_head:
        options["d_head"] = args.d_head
    program = module.make(**options)
    try:
        compile_and_write(program, args.output or f"build/{args.name}_hf", args.onnx, args.gguf)
    except TorchwrightError as e:  # a refused program: its message, no traceback (as the CLI)
        print(f"python -m examples.compile: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    for prompt in module.DEMOS:
        got, want = program.generate(prompt), module.oracle(prompt)
        mark = "ok" if got == want else f"WRONG (want {want!r})"
        print(f"  {prompt!r} -> {got!r} {mark}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
