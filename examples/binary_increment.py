"""binary_increment: ``1011\\n`` -> ``1100``.

Reads up to ``max_bits`` bits ending at the newline (default 8; any number works, the model
stays 2 layers deep), adds one, and prints the result without leading zeros (``1111`` ->
``10000``, ``0011`` -> ``100``).

Adding one is a carry chain that needs no chain: bit k flips exactly when every bit below it
is 1, a count. The result's width is another count. Both are latched at the newline, and
i steps later the model prints bit width-1-i, then ``<eos>``.
"""

# report() for the default build (max_bits=8, max_seq_len=512), heuristic scheduler:
#   binary_increment: 2 layers (critical-path bound 2), d_model=48 (peak live width 45),
#   d_head=32, 9 heads/layer, 559 lanes/layer, 282,384 parameters (99.2% zeros)
# (the seed: 20/16 layers at d=512, 21.1M parameters). Most lanes are the position inverse
# behind steps_since (one per position): at max_seq_len=64 it is 111 lanes, 117,440 params.
# 12, 16 and 24 bits: still 2 layers (d 64, 128, 128).

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
    def binary_increment(x: torch.Tensor) -> torch.Tensor:
        newline = tw.is_token(x, "\n")
        one = tw.is_token(x, "1")
        # At the newline, bit k of the input (k = 0: the last one typed) is k+1 places back; a
        # shift past the start reads the <bos> row, where `one` is 0, so shorter inputs and
        # leading zeros need no special case.
        bits = [tw.shift(one, k + 1) for k in range(max_bits)]
        zero = torch.zeros_like(one)
        below = [sum(bits[:k], zero) for k in range(max_bits + 1)]  # ones below bit k
        above = [sum(bits[k:], zero) for k in range(max_bits + 1)]  # ones at or above bit k
        # Adding one flips bit k exactly when every bit below it is 1 (the carry reaches it):
        # with z = below + (k+1) * bit, the new bit is 1 iff k <= z <= 2k. The bit above the
        # top is the carry out of it: every bit is 1.
        new_bits = [tw.lookup(below[k] + (k + 1) * bits[k], dict.fromkeys(range(k, 2 * k + 1), 1),
                              default=0) for k in range(max_bits)]
        new_bits.append((below[max_bits] >= max_bits).float())
        # The result has at least w+1 bits exactly when a bit at or above w is set, or every bit
        # below w is (the carry lands there): one count per w, compared once.
        width = 1 + sum(((max_bits + 1) * above[w] + below[w] >= w).float()
                        for w in range(1, max_bits + 1))
        held = tw.latch(torch.cat([*new_bits, width, newline.float()], dim=-1), newline)
        width, unseen = held[:, -2:-1], 1 - held[:, -1:]  # unseen: no newline yet (<bos>)
        # i steps after the newline print bit width-1-i, then <eos> from i = width on (and
        # before any newline: an empty prompt prints nothing). Each bit test is one comparison:
        # d - k + big * (1 - bit_k) + 2 * big * unseen is 0 exactly when d = k, bit k is 1 and
        # a newline has been read.
        big = max_bits + 2
        i = tw.steps_since(newline)
        d = width - 1 - i
        ones = sum(((d - k + big * (1 - held[:, k:k + 1]) + 2 * big * unseen) == 0).float()
                   for k in range(max_bits + 1))
        done = (i - width + (big + 1) * unseen >= 0).float()
        return tw.token("0") + ones + (tw.token("<eos>") - tw.token("0")) * done

    return tw.compile(binary_increment, vocab=VOCAB, **options).with_domain(
        lambda: inputs(max_bits), oracle)


program = make()
