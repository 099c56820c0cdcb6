"""The half selection, argmax and count programs of tests/select_half_programs.py through
llama.cpp at its default context parameters (flash attention auto, f16 KV cache) from an F16
GGUF: the top token at every position of the test's streams, batched and token by token,
against the reference. Run with the llama.cpp venv (``make runtime-llama`` builds it):
``PYTHONPATH=. .runtimes/llama/venv/bin/python scripts/half/llama_selection.py``."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
from llama_cpp import Llama

import torchwright_fx as tw
from tests.select_half_programs import (
    ARGMAX_PROGRAMS,
    COUNT_LENGTH,
    COUNT_PROGRAMS,
    PROGRAMS,
    V,
    streams,
)


def main() -> int:
    wrong = 0
    with tempfile.TemporaryDirectory() as tmp:
        cases = [(fn, 128) for fn in PROGRAMS + ARGMAX_PROGRAMS] + \
            [(fn, COUNT_LENGTH) for fn in COUNT_PROGRAMS]
        for fn, n in cases:
            compiled = tw.compile(fn, vocab=V, precision="half", max_seq_len=n).compile()
            path = Path(tmp) / f"{fn.__name__}.gguf"
            compiled.save_gguf(path)
            llm = Llama(model_path=str(path), n_ctx=n, logits_all=True, verbose=False)
            bad = total = 0
            for s in streams(fn.__name__, n):
                want = compiled.traced.run(s).round().long().tolist()
                llm.reset()
                llm.eval(s)
                batched = np.array(llm.scores[: len(s)]).argmax(-1).tolist()
                llm.reset()
                for t in s:  # token by token through the KV cache
                    llm.eval([t])
                stepwise = np.array(llm.scores[: len(s)]).argmax(-1).tolist()
                for got in (batched, stepwise):
                    bad += sum(a != b for a, b in zip(got[1:], want[1:], strict=True))
                    total += len(s) - 1
            print(f"{fn.__name__}: {total - bad}/{total} positions right")
            wrong += bad
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
