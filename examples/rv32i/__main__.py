"""The rv32i command line.

    python -m examples.rv32i ref PROG.elf [--max-instructions N] [--check] [--trace FILE]
    python -m examples.rv32i run PROG.elf [--max-instructions N] [--backend runtime|hf|llama]
                                          [--verify] [--max-seq-len L] [--lookup N]
    python -m examples.rv32i qemu PROG.elf ...

``ref`` runs the program on the reference interpreter: stdout gets exactly what the program
writes, stderr the figures (instructions, exit status, time), and the command exits with the
program's exit status. ``--check`` runs unicorn beside it, instruction by instruction, and stops
at the first divergence. ``--trace FILE`` writes one line per executed instruction.

``run`` runs it on the compiled interpreter (``run.py``: today ``model.py``'s subset, which
refuses programs outside it): stdout gets the bytes of the model's OUT records, and the command
exits with its EXIT record's status; ``--verify`` has the model confirm the reference's trace
teacher-forced instead of decoding.

``qemu`` runs each program under ``qemu-riscv32`` (Debian's qemu-user) and on the reference,
and says whether the output and the exit status agree (``make rv32i-qemu``).

Exit statuses besides the program's own: 2 when the program is refused (not an RV32 ELF, an
instruction or access the machine refuses: the message names the pc), 3 when unicorn and the
reference diverge, 124 when ``--max-instructions`` ran out before the program exited.
"""

from __future__ import annotations

import argparse
import sys
import time

from examples.rv32i import elf, reference
from examples.rv32i.lookup import DRAFT


def _ref(args: argparse.Namespace) -> int:
    try:
        image = elf.load(args.program)
    except (OSError, elf.ElfError) as e:
        print(f"rv32i: {e}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    if args.check:
        from examples.rv32i import crosscheck
        try:
            r = crosscheck.crosscheck(image, args.max_instructions, extensions=args.extensions)
        except crosscheck.Divergence as d:
            print(f"rv32i: unicorn and the reference diverge at {d}", file=sys.stderr)
            return 3
        except reference.Fault as f:
            print(f"rv32i: refused: {f}", file=sys.stderr)
            return 2
        output, exit_code, steps = r.output, r.exit_code, r.steps
    else:
        m = reference.Machine(image, args.extensions)
        trace_file = open(args.trace, "w") if args.trace else None
        try:
            if trace_file is None:
                m.run(args.max_instructions)
            else:
                while m.exit_code is None and (args.max_instructions is None
                                               or m.steps < args.max_instructions):
                    trace_file.write(m.step().describe().rstrip() + "\n")
        except reference.Fault as f:
            sys.stdout.buffer.write(bytes(m.output))
            sys.stdout.flush()
            print(f"rv32i: refused after {m.steps} instructions: {f}", file=sys.stderr)
            return 2
        finally:
            if trace_file is not None:
                trace_file.close()
        output, exit_code, steps = bytes(m.output), m.exit_code, m.steps
    seconds = time.perf_counter() - start
    sys.stdout.buffer.write(output)
    sys.stdout.flush()
    checked = ", every instruction checked against unicorn" if args.check else ""
    if exit_code is None:
        print(f"rv32i: stopped after {steps} instructions (--max-instructions){checked}",
              file=sys.stderr)
        return 124
    print(f"rv32i: {steps} instructions, exit status {exit_code}, {seconds:.2f} s{checked}",
          file=sys.stderr)
    return exit_code


def _run(args: argparse.Namespace) -> int:
    from examples.rv32i import run
    return run.main(args.program, args.backend, args.max_instructions, args.verify,
                    args.max_seq_len, args.lookup)


def _qemu(args: argparse.Namespace) -> int:
    from examples.rv32i import crosscheck
    if not crosscheck.qemu_available():
        print("rv32i: qemu-riscv32 is not installed (apt-get install qemu-user)",
              file=sys.stderr)
        return 2
    bad = 0
    for path in args.programs:
        m = reference.run(elf.load(path))
        out, code = crosscheck.qemu_run(path)
        same = out == bytes(m.output) and code == m.exit_code
        bad += not same
        print(f"{path}: {'same' if same else 'DIFFERENT'}: qemu {len(out)} bytes, exit {code}; "
              f"reference {len(m.output)} bytes, exit {m.exit_code}, {m.steps} instructions")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.rv32i")
    sub = parser.add_subparsers(dest="command", required=True)
    ref = sub.add_parser("ref", help="run an ELF on the reference interpreter")
    ref.add_argument("program")
    ref.add_argument("--max-instructions", type=int, default=None)
    ref.add_argument("--check", action="store_true",
                     help="step unicorn beside it and stop at the first divergence")
    ref.add_argument("--trace", metavar="FILE", help="write every executed instruction")
    ref.add_argument("--extensions", choices=("i", "im"), default="i")
    ref.set_defaults(func=_ref)
    run = sub.add_parser("run", help="run an ELF on the compiled interpreter (model.py)")
    run.add_argument("program")
    run.add_argument("--max-instructions", type=int, default=None)
    run.add_argument("--backend", choices=("runtime", "hf", "llama"), default="runtime")
    run.add_argument("--max-seq-len", type=int, default=None,
                     help="build the interpreter for this length (default: model.program's)")
    run.add_argument("--lookup", type=int, default=DRAFT, metavar="N",
                     help="--backend llama: evaluate up to N guesses from the context with each "
                          "token and keep those the model confirms (lookup speculation; the "
                          "output is greedy decoding's either way; 0: a token a pass; "
                          "default: %(default)s, examples/rv32i/lookup.py's DRAFT)")
    run.add_argument("--verify", action="store_true",
                     help="the reference proposes the trace, the model confirms it "
                          "teacher-forced")
    run.set_defaults(func=_run)
    qemu = sub.add_parser("qemu", help="compare qemu-riscv32 with the reference")
    qemu.add_argument("programs", nargs="+")
    qemu.set_defaults(func=_qemu)
    args = parser.parse_args(argv)
    if getattr(args, "max_instructions", None) is not None and args.max_instructions < 0:
        parser.error("--max-instructions must be >= 0")
    if getattr(args, "lookup", 0) < 0:
        parser.error("--lookup must be >= 0")
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
