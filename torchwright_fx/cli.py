"""The ``torchwright-fx`` command.

    torchwright-fx compile MODULE[:ATTR] -o DIR [--onnx DIR] [--gguf FILE] [--optimize N]
                           [--d-model D] [--d-head D] [--max-seq-len N]
    torchwright-fx report  MODULE[:ATTR] [--optimize N] [--json]
    torchwright-fx run     MODULE[:ATTR] PROMPT [--reference]
    torchwright-fx verify  MODULE[:ATTR] [--samples N --seed S] [--backend hf|runtime]

MODULE[:ATTR] names a ``tw.Compiled`` object (ATTR defaults to ``program``), or a module with
``make(**options)`` returning one, e.g. ``examples.binary_increment``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from typing import Any

from torchwright_fx.api import Compiled
from torchwright_fx.capture.errors import TorchwrightError


def load_program(spec: str, options: dict[str, Any]) -> Compiled:
    module_name, _, attr = spec.partition(":")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` does: a module beside the user
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        raise SystemExit(f"torchwright-fx: cannot import {module_name!r} ({e}); run from the "
                         "directory that holds it, or add that directory to PYTHONPATH") from None
    if options and hasattr(module, "make") and not attr:
        return module.make(**options)  # type: ignore[no-any-return]
    obj = getattr(module, attr or "program")
    if not isinstance(obj, Compiled):
        raise SystemExit(f"{spec} is a {type(obj).__name__}, not a tw.Compiled program")
    return obj


def _options(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("optimize", "d_model", "d_head", "max_seq_len"):
        value = getattr(args, key, None)
        if value is not None:
            out[key] = value
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="torchwright-fx", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("compile", "report", "run", "verify"):
        p = sub.add_parser(name)
        p.add_argument("program", help="MODULE[:ATTR]")
        p.add_argument("--optimize", type=int)
        p.add_argument("--d-model", type=int)
        p.add_argument("--d-head", type=int)
        p.add_argument("--max-seq-len", type=int)
        if name == "compile":
            p.add_argument("-o", "--output", required=True)
            p.add_argument("--onnx", help="also export ONNX (torch.onnx) into this directory")
            p.add_argument("--gguf", help="also write a GGUF file for llama.cpp")
        if name == "report":
            p.add_argument("--json", action="store_true")
        if name == "verify":
            p.add_argument("--samples", type=int, help="random sample size (default: all)")
            p.add_argument("--seed", type=int, default=0)
            p.add_argument("--backend", choices=["hf", "runtime"], default="hf")
        if name == "run":
            p.add_argument("prompt")
            p.add_argument("--reference", action="store_true", help="eager semantics, no weights")
    args = parser.parse_args(argv)
    try:
        return _run(args)
    except TorchwrightError as e:  # the user's mistake: one message, no traceback
        print(f"torchwright-fx {args.command}: {type(e).__name__}: {e}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    program = load_program(args.program, _options(args))

    if args.command == "compile":
        program.compile()
        program.report()
        out = program.save_pretrained(args.output)
        print(f"wrote {out}")
        if args.onnx:
            print(f"wrote {program.to_onnx(args.onnx, hf_dir=out)}")
        if args.gguf:
            print(f"wrote {program.save_gguf(args.gguf)}")
    elif args.command == "report":
        program.compile()
        if args.json:
            print(json.dumps(program.stats(), indent=2, default=str))
        else:
            program.report()
    elif args.command == "verify":
        from torchwright_fx.verify.verify import verify

        report = verify(program, samples=args.samples, seed=args.seed, backend=args.backend)
        print(report)
        return 0 if report.ok else 1
    else:
        prompt = args.prompt.encode().decode("unicode_escape")
        print(program.reference(prompt) if args.reference else program.generate(prompt))
    return 0


if __name__ == "__main__":
    sys.exit(main())
