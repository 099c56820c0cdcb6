"""The ``torchwright-fx`` command.

    torchwright-fx compile MODULE[:ATTR] -o DIR [--onnx DIR] [--gguf FILE] [--optimize N]
                           [--d-model D] [--d-head D] [--max-seq-len N] [--no-share-kv]
    torchwright-fx report  MODULE[:ATTR] [--optimize N] [--json]
    torchwright-fx run     MODULE[:ATTR] PROMPT [--reference]
    torchwright-fx verify  MODULE[:ATTR] [--samples N --seed S] [--backend hf|runtime|onnx]
    torchwright-fx inspect MODULE[:ATTR] [--plan FILE.svg|FILE.png]

MODULE[:ATTR] names a ``tw.Compiled`` object (ATTR defaults to ``program``), a plain function
(compiled with the module's ``VOCAB``), or a module with ``make(**options)`` returning one,
e.g. ``examples.binary_increment``. ``inspect`` prints the report and the plan layer by layer
(which fx node each head and MLP lane computes, the residual columns written and cancelled),
and with ``--plan`` draws it (``Compiled.plot_plan``).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import sys
import time
from typing import Any

from torchwright_fx.api import Compiled
from torchwright_fx.api import compile as compile_program
from torchwright_fx.base.errors import TorchwrightError, UsageError
from torchwright_fx.vocab import Vocab


def load_program(spec: str, options: dict[str, Any]) -> Compiled:
    module_name, _, attr = spec.partition(":")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` does: a module beside the user
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        raise UsageError(f"cannot import {module_name!r} ({e}); run from the directory that "
                         "holds it, or add that directory to PYTHONPATH") from None
    except SyntaxError as e:
        raise UsageError(f"cannot import {module_name!r}: {e}") from None
    if options and hasattr(module, "make") and not attr:
        return module.make(**options)  # type: ignore[no-any-return]
    name = attr or "program"
    if not hasattr(module, name):
        raise UsageError(f"module {module_name!r} has no {name!r}" + (
            "" if attr else ": name the program as MODULE:ATTR (a tw.Compiled or a function)"))
    obj = getattr(module, name)
    if isinstance(obj, Compiled):
        # the command line's options (--precision, --max-seq-len, ...) over the program's own
        return Compiled(obj.fn, obj.vocab, dataclasses.replace(obj.options, **options)) \
            if options else obj
    if callable(obj) and not isinstance(obj, type):
        vocab = getattr(module, "VOCAB", None)
        if not isinstance(vocab, Vocab):
            raise UsageError(f"{spec} is a function, and module {module_name!r} has no VOCAB = "
                             "tw.Vocab(...) to compile it with")
        return compile_program(obj, vocab=vocab, **options)  # type: ignore[no-any-return]
    raise UsageError(f"{spec} is a {type(obj).__name__}, not a tw.Compiled program")


def _options(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("optimize", "d_model", "d_head", "max_seq_len", "precision"):
        value = getattr(args, key, None)
        if value is not None:
            out[key] = value
    if getattr(args, "no_share_kv", False):
        out["share_kv"] = False
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="torchwright-fx", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("compile", "report", "run", "verify", "inspect"):
        p = sub.add_parser(name)
        p.add_argument("program", help="MODULE[:ATTR]")
        p.add_argument("--optimize", type=int)
        p.add_argument("--d-model", type=int)
        p.add_argument("--d-head", type=int)
        p.add_argument("--max-seq-len", type=int)
        p.add_argument("--precision", choices=["fp32", "half"],
                       help="the arithmetics to certify: fp32 (default) or half (fp32, fp16 "
                            "and bf16; an F16 GGUF)")
        p.add_argument("--no-share-kv", action="store_true",
                       help="a K and V block for every head (by default a layer's heads share "
                            "them where they fit: num_key_value_heads < num_attention_heads)")
        if name == "compile":
            p.add_argument("-o", "--output", required=True)
            p.add_argument("--onnx", help="also export ONNX (torch.onnx) into this directory")
            p.add_argument("--gguf", help="also write a GGUF file for llama.cpp")
        if name == "report":
            p.add_argument("--json", action="store_true")
        if name == "verify":
            p.add_argument("--samples", type=int, help="random sample size (default: all)")
            p.add_argument("--seed", type=int, default=0)
            p.add_argument("--backend", choices=["hf", "runtime", "onnx"], default="hf")
        if name == "inspect":
            p.add_argument("--plan", metavar="FILE",
                           help="also draw the plan into FILE (.svg or .png)")
        if name == "run":
            p.add_argument("prompt")
            p.add_argument("--reference", action="store_true", help="eager semantics, no weights")
    p = sub.add_parser("suite", help="write a circuit-discovery benchmark (from a checkout)")
    p.add_argument("out", help="the folder to write")
    p.add_argument("--n", type=int, default=20, help="how many programs (default 20)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-len", type=int, default=5, help="tracr programs' input length")
    p.add_argument("--pairs", type=int, default=32, help="prompt pairs per program (a "
                   "quarter of them insertions)")
    args = parser.parse_args(argv)
    try:
        if args.command == "suite":
            return _suite(args)
        return _run(args)
    except TorchwrightError as e:  # the user's mistake: one message, no traceback
        print(f"torchwright-fx {args.command}: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    except UsageError as e:
        print(f"torchwright-fx {args.command}: {e}", file=sys.stderr)
        return 2


def compile_and_write(program: Compiled, output: str, onnx: str | None = None,
                      gguf: str | None = None) -> None:
    """``compile``: build, report, write the Phi-3 directory (and ONNX, GGUF when asked)."""
    start = time.perf_counter()
    program.compile()
    program.report()
    out = program.save_pretrained(output)
    print(f"wrote {out} ({time.perf_counter() - start:.2f}s including the write)")
    if onnx:
        print(f"wrote {program.to_onnx(onnx, hf_dir=out)}")
    if gguf:
        print(f"wrote {program.save_gguf(gguf)}")


def _suite(args: argparse.Namespace) -> int:
    """``suite``: tracr's library and fuzzer programs with their ground truth and prompt pairs
    (examples/suite.py), which live in the repository, not the package."""
    try:
        from examples import suite
    except ImportError:
        raise UsageError("suite draws from examples/rasp and tests/fuzzgen.py: run it from a "
                         "torchwright_fx checkout (the folder holding examples/)") from None
    from pathlib import Path

    start = time.perf_counter()
    index = suite.write(Path(args.out), args.n, args.seed, args.max_len, args.pairs)
    print(f"wrote {len(index)} programs to {args.out} in {time.perf_counter() - start:.0f}s")
    return 0


def _run(args: argparse.Namespace) -> int:
    if getattr(args, "plan", None):
        from torchwright_fx.backends.plot import plan_format

        try:  # refused before the compile
            plan_format(args.plan)
        except ValueError as e:
            raise UsageError(f"--plan {e}") from None
    program = load_program(args.program, _options(args))

    if args.command == "compile":
        compile_and_write(program, args.output, args.onnx, args.gguf)
    elif args.command == "report":
        program.compile()
        if args.json:
            print(json.dumps(program.stats(), indent=2, default=str))
        else:
            program.report()
    elif args.command == "inspect":
        from torchwright_fx.backends.plot import plan_text

        program.compile()
        program.report()
        b = program.build
        print(plan_text(b.program, b.plan, b.placement, program.fn.__name__))
        if args.plan:
            try:
                print(f"wrote {program.plot_plan(args.plan)}")
            except OSError as e:  # a folder that does not exist, no permission
                raise UsageError(f"--plan {args.plan}: {e.strerror or e}") from None
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
