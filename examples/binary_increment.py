"""binary_increment: ``1011\\n`` -> ``1100``.

Reads up to ``max_bits`` bits ending at the newline, adds one, and prints the result without
leading zeros (``1111`` -> ``10000``, ``0011`` -> ``100``).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from typing import Any

import torch

import torchwright_fx as tw

MAX_BITS = 8
VOCAB = tw.Vocab("01\n")
DEMOS = ["1011\n", "1111\n", "0\n", "0011\n"]
EDGE_CASES = ["0\n", "1\n", "10\n", "11\n", "100\n", "101\n", "110\n", "111\n", "1011\n",
              "1111\n", "0000\n", "0011\n", "11111111\n", "00000000\n", "10000000\n",
              "01111111\n"]


def oracle(prompt: str) -> str:
    return bin(int(prompt.strip(), 2) + 1)[2:]


def inputs(max_bits: int = MAX_BITS) -> Iterator[str]:
    for n in range(1, max_bits + 1):
        for bits in itertools.product("01", repeat=n):
            yield "".join(bits) + "\n"


def sample(rng: random.Random, max_bits: int = MAX_BITS) -> str:
    return "".join(rng.choice("01") for _ in range(rng.randint(1, max_bits))) + "\n"


def make(max_bits: int = MAX_BITS, **options: Any) -> tw.Compiled:
    def digit_table(j: int) -> dict[int, str]:
        """result -> its j-th binary digit from the left (no table entry: past the end)."""
        table = {}
        for r in range(1, 2 ** max_bits + 1):
            text = bin(r)[2:]
            if j < len(text):
                table[r] = text[j]
        return table

    def binary_increment(x: torch.Tensor) -> torch.Tensor:
        newline = tw.is_token(x, "\n")
        one = tw.is_token(x, "1")
        # At the newline, the bit k places back is worth 2**(k-1); a shift past the start reads
        # the <bos> row, where `one` is 0, so shorter inputs need no special case.
        value = sum(tw.shift(one, k) * 2 ** (k - 1) for k in range(1, max_bits + 1))
        result = tw.latch(value + 1, newline)  # held at every position after the newline
        digits = [tw.lookup(result, digit_table(j), default="<eos>")
                  for j in range(max_bits + 1)]
        return tw.emit(newline, digits)

    return tw.compile(binary_increment, vocab=VOCAB, **options).with_domain(inputs, oracle)


program = make()
