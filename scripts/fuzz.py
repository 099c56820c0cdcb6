"""Differential fuzzing of the compiler: random programs, compiled vs eager reference.

    python scripts/fuzz.py --programs 300 --seed 0 [--show-refusals] [--quiet]
    python scripts/fuzz.py --precision half --programs 500 --seed 0 [--quiet]

Program i is generated from the seed ``seed * 1_000_003 + i`` (``tests/fuzzgen.py``), so one
program is re-run with ``--programs 1 --seed S --first I``. Prints how many programs were
generated, refused with tw.CompileError, matched, mismatched, crashed (a compile or run
failure that is not a CompileError) or had no valid prompt (the reference itself raised); for
each mismatch or crash the program source, the prompts, reference vs compiled output.

``--precision half`` compiles with ``precision="half"`` from programs biased toward what half
supports (ops of the current token, ``tw.shift`` by small offsets, ``tw.emit``, ``tw.latch``,
``tw.position``, ``tw.steps_since``; max_seq_len 16..256, 512..4096 with ``--long``), and
runs every compiled program through transformers from
its saved directory in float32, float16 and bfloat16, eager and sdpa attention
(``fuzzgen.HF_CONFIGS``) besides the in-process runtime: a difference in any is a mismatch.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import re
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import fuzzgen  # noqa: E402


def case_seed(seed: int, i: int) -> int:
    return seed * 1_000_003 + i


# -- shrinking ----------------------------------------------------------------------------------
def _fails(prog: fuzzgen.Program, prompts: list[str], status: str) -> bool:
    try:
        return fuzzgen.check(prog, prompts).status == status
    except Exception:  # an exec error of a broken candidate (a removed definition)
        return False


def shrink(prog: fuzzgen.Program, prompts: list[str], status: str = "mismatch"
           ) -> tuple[fuzzgen.Program, list[str]]:
    """Greedy reduction of a failing case (``status``: mismatch or crash): one failing
    prompt, shortened; body lines dropped; the simplest options that still fail."""
    if status == "mismatch":
        bad = [p for p, _, _ in fuzzgen.check(prog, prompts).mismatches]
        prompts = bad[:1] or prompts
        p = prompts[0]
        for i in range(len(p) - 1, -1, -1):  # drop characters, last first
            if i < len(p) and _fails(prog, [p[:i] + p[i + 1:]], status):
                p = p[:i] + p[i + 1:]
        prompts = [p]
    head, *body, ret = prog.source.splitlines()
    changed = True
    while changed:
        changed = False
        for i in range(len(body) - 1, -1, -1):
            cand = _replace(prog, source="\n".join([head, *body[:i], *body[i + 1:], ret]) + "\n")
            if _fails(cand, prompts, status):
                prog, body, changed = cand, body[:i] + body[i + 1:], True
    for opts in ({"optimize": 0}, {"machine": "swiglu"}):
        cand = _replace(prog, **opts)
        if cand != prog and _fails(cand, prompts, status):
            prog = cand
    for n in fuzzgen.SEQ_LENS:
        need = max(len(p) for p in prompts) + 1
        if n < prog.max_seq_len and n > need:
            cand = _replace(prog, max_seq_len=n)
            if _fails(cand, prompts, status):
                prog = cand
                break
    return prog, prompts


def _replace(prog: fuzzgen.Program, **changes: Any) -> fuzzgen.Program:
    return dataclasses.replace(prog, **changes)


def refusal_key(message: str) -> str:
    """The refusal's reason with the line, the numbers and names blanked: one key per class."""
    lines = message.splitlines()
    text = " ".join(lines[1:2] or lines)
    text = re.sub(r"`[^`]*` \([^)]*\)", "`op`", text)
    return re.sub(r"-?\d+(\.\d+)?(e-?\d+)?", "#", text).strip()[:120]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--programs", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--first", type=int, default=0, help="index of the first program")
    ap.add_argument("--opt-rate", type=float, default=0.08, help="share of optimize=1")
    ap.add_argument("--show-refusals", action="store_true")
    ap.add_argument("--show-invalid", action="store_true")
    ap.add_argument("--quiet", action="store_true", help="counts only")
    ap.add_argument("--long", action="store_true",
                    help="max_seq_len from fuzzgen.LONG_SEQ_LENS (128..131072), not 8..32")
    ap.add_argument("--shrink", action="store_true", help="reduce each failing case")
    ap.add_argument("--precision", choices=("fp32", "half"), default="fp32",
                    help="half: precision='half' builds, checked through transformers in "
                         "float32, float16 and bfloat16")
    args = ap.parse_args(argv)
    half = args.precision == "half"
    if half:
        seq_lens = fuzzgen.HALF_LONG_SEQ_LENS if args.long else fuzzgen.HALF_SEQ_LENS
    else:
        seq_lens = fuzzgen.LONG_SEQ_LENS if args.long else fuzzgen.SEQ_LENS
    torch.set_num_threads(1)

    counts: collections.Counter[str] = collections.Counter()
    refusals: collections.Counter[str] = collections.Counter()
    invalid_why: collections.Counter[str] = collections.Counter()
    crashes: collections.Counter[str] = collections.Counter()
    classes: collections.Counter[str] = collections.Counter()
    start = time.perf_counter()
    for i in range(args.first, args.first + args.programs):
        prog, prompts = fuzzgen.random_case(case_seed(args.seed, i), args.opt_rate, seq_lens,
                                            args.precision)
        out = fuzzgen.check(prog, prompts)
        counts[out.status] += 1
        if not args.quiet:
            print(f"[{i}] {out.status} ({time.perf_counter() - start:.0f}s)", file=sys.stderr,
                  flush=True)
        counts["prompts invalid"] += len(out.invalid)
        for _, why in out.invalid:
            invalid_why[why.split(":")[0] + ": " + why.split(":", 1)[-1][:60].strip()] += 1
        if out.status == "refused":
            refusals[refusal_key(out.message)] += 1
            if args.show_refusals:
                print(f"-- program {i} refused --\n{prog.describe()}{out.message}\n")
        elif out.status in ("mismatch", "crash"):
            if out.status == "crash":
                crashes[out.message.strip().splitlines()[-1][:120]] += 1
            if args.shrink:
                prog, prompts = shrink(prog, prompts, out.status)
                out = fuzzgen.check(prog, prompts)
            if out.status == "mismatch":
                classes[out.known_class()] += 1
            if not args.quiet:
                again = " --precision half" * half + " --long" * (half and args.long)
                print(f"-- program {i} (--seed {args.seed} --first {i} --programs 1{again}) --")
                print(out.report())
                print(f"prompts: {prompts!r}\n", flush=True)
        elif out.status == "invalid" and args.show_invalid:
            print(f"-- program {i} invalid --\n{prog.describe()}{out.message}\n")
    elapsed = time.perf_counter() - start

    print(f"generated {args.programs}, refused {counts['refused']}, matched "
          f"{counts['matched']}, mismatched {counts['mismatch']}, crashed {counts['crash']}, "
          f"no valid prompt {counts['invalid']} ({counts['prompts invalid']} prompts skipped "
          f"as invalid input) in {elapsed:.0f}s")
    if half:
        print("precision half: each compiled program checked by the in-process runtime and by "
              "transformers in " + ", ".join(f"{str(dt).removeprefix('torch.')}/{impl}"
                                             for dt, impl in fuzzgen.HF_CONFIGS))
    if refusals:
        print("refusals (first line, count):")
        for msg, n in refusals.most_common(15):
            print(f"  {n:4d}  {msg}")
    if classes:
        print("mismatches by class (a guess from the program):")
        for msg, n in classes.most_common():
            print(f"  {n:4d}  {msg}")
    if crashes:
        print("crashes (last line, count):")
        for msg, n in crashes.most_common(15):
            print(f"  {n:4d}  {msg}")
    if invalid_why:
        print("invalid prompts (reference raised):")
        for msg, n in invalid_why.most_common(8):
            print(f"  {n:4d}  {msg}")
    return 1 if counts["mismatch"] or counts["crash"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
