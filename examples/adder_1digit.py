"""adder_1digit: ``7+8\\n`` -> ``15``. The smallest complete program."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import torch

import torchwright_fx as tw

VOCAB = tw.Vocab("0123456789+\n")
DEMOS = ["7+8\n", "0+0\n", "9+9\n", "3+4\n"]
EDGE_CASES = ["0+0\n", "9+9\n", "9+1\n", "1+9\n", "5+5\n", "0+9\n"]


def oracle(prompt: str) -> str:
    a, b = prompt.strip().split("+")
    return str(int(a) + int(b))


def inputs() -> Iterator[str]:
    for a in range(10):
        for b in range(10):
            yield f"{a}+{b}\n"


def sample(rng: random.Random) -> str:
    return f"{rng.randint(0, 9)}+{rng.randint(0, 9)}\n"


def make(**options: Any) -> tw.Compiled:
    def adder_1digit(x: torch.Tensor) -> torch.Tensor:
        newline = tw.is_token(x, "\n")
        digit = tw.lookup(x, {str(d): d for d in range(10)})  # per-token: free in the embedding
        # At the newline the operands sit 3 and 1 places back ("a+b\n").
        total = tw.latch(tw.shift(digit, 3) + tw.shift(digit, 1), newline)
        first = tw.lookup(total, {t: str(t)[0] for t in range(19)})
        second = tw.lookup(total, {t: str(t)[1] for t in range(10, 19)}, default="<eos>")
        return tw.emit(newline, [first, second])

    return tw.compile(adder_1digit, vocab=VOCAB, **options).with_domain(inputs, oracle)


program = make()
