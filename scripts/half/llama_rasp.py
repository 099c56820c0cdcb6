"""tracr's programs that half holds (tests/test_examples_half.RASP_HALF) through llama.cpp at
its default context parameters from an F16 GGUF: greedy answers on seeded inputs of every
length up to ``--max-len`` against the oracle. Run with the llama.cpp venv (``make
runtime-llama`` builds it): ``PYTHONPATH=. .runtimes/llama/venv/bin/python
scripts/half/llama_rasp.py``."""

from __future__ import annotations

import argparse
import importlib
import random
import sys
import tempfile
from pathlib import Path

import numpy as np
from llama_cpp import Llama

RASP_HALF = ("count", "count_less_freq", "detect_pattern", "hist", "length", "nary_sequencemap",
             "reverse", "shift_by", "sort_freq")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-len", type=int, default=10)
    parser.add_argument("--per-length", type=int, default=2)
    parser.add_argument("names", nargs="*", default=RASP_HALF, help="programs (default: all)")
    args = parser.parse_args(argv)
    wrong = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.names:
            module = importlib.import_module(f"examples.rasp.{name}")
            program = module.make(max_len=args.max_len, precision="half")
            path = program.save_gguf(Path(tmp) / f"{name}.gguf")
            m = program.weights
            llm = Llama(model_path=str(path), n_ctx=m.max_seq_len, n_threads=1,
                        logits_all=True, verbose=False)  # llama.cpp's default context
            rng = random.Random(args.max_len)
            prompts = list(dict.fromkeys(module.random_input(rng, n)
                                         for n in range(1, args.max_len + 1)
                                         for _ in range(args.per_length)))
            bad = 0
            for prompt in prompts:
                ids = program.vocab.encode(prompt)
                llm.reset()
                llm.eval(ids)
                seq = list(ids)
                while len(seq) < m.max_seq_len:
                    token = int(np.argmax(llm.scores[len(seq) - 1]))
                    if token == program.vocab.eos_id:
                        break
                    seq.append(token)
                    llm.eval([token])
                got = program.vocab.decode(seq[len(ids):])
                if got != module.oracle(prompt):
                    bad += 1
                    print(f"  {prompt!r}: llama.cpp {got!r}, oracle {module.oracle(prompt)!r}")
            print(f"{name}: {len(prompts) - bad}/{len(prompts)} right", flush=True)
            wrong += bad
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
