"""sort_digits_v1: ``9583\\n`` -> ``3589``: the digits of the prompt in ascending order, one
per step, then ``<eos>``.

1..``max_len`` digits (default 10: ``9876543210`` -> ``0123456789``). Repeated digits are
kept, each printed as many times as it was typed: ``3311`` -> ``1133``, ``0000`` -> ``0000``.

A counting sort, decided afresh at every step. At the newline, for every digit v, count
C_v = how many typed digits are <= v, and hold the counts. At the step after k digits have
been printed the next digit is the smallest v with C_v > k, that is, the number of v with
C_v <= k; once C_9 (the length) <= k every digit has been printed and the answer is
``<eos>``. The counts are selector widths: C_v counts the keys whose digit is <= v. (They
were the mean of [digit <= v] over <bos> and the digits times n + 1, one head and 2 layers in
fp32; a mean is a fraction that fp16 and bf16 do not hold, counts compile in both.)
"""

# report() for the default build (max_len=10, max_seq_len 22), heuristic scheduler:
#   sort_digits_v1: 3 layers (critical-path bound 3), d_model=48 (peak live width 47),
#   d_head=32, 12 heads/layer (24 used), 210 lanes/layer, 313,584 parameters, compiled in 0.2s
#   precision="half": 8 layers, d_model=1024, 137 heads (each count: an averaging head and a
#   search of comparisons, ops/count_half.py), 72.3M parameters (all but 0.05% zeros)
# (the seed: 26 layers at d=512, 12.7M parameters, and it never stopped).

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from typing import Any

import torch

import torchwright_fx as tw

MAX_LEN = 10
DIGITS = "0123456789"
VOCAB = tw.Vocab(DIGITS + "\n")
DEMOS = ["9583\n", "9876543210\n", "3311\n", "7\n"]
EDGE_CASES = [
    # the seed's own cases
    "9583\n", "1\n", "5432\n", "9876543210\n",
    # repeated digits, already sorted, single digits, the longest inputs
    "3311\n", "0000\n", "9999999999\n", "0000000000\n", "0123456789\n", "1111100000\n",
    "0\n", "9\n", "90\n", "09\n", "5555555550\n", "1212121212\n", "9090909090\n",
]


def oracle(prompt: str) -> str:
    return "".join(sorted(prompt.strip()))


def inputs(max_len: int = MAX_LEN) -> Iterator[str]:
    """Every string of 1..3 digits, then, for each longer length, runs and patterns (the whole
    domain has about 11 billion prompts)."""
    for n in range(1, min(3, max_len) + 1):
        for digits in itertools.product(DIGITS, repeat=n):
            yield "".join(digits) + "\n"
    for n in range(4, max_len + 1):
        for d in DIGITS:
            yield d * n + "\n"
        yield DIGITS[:n] + "\n"
        yield DIGITS[:n][::-1] + "\n"
        yield DIGITS[::-1][:n] + "\n"
        for a, b in itertools.combinations("0259", 2):
            yield (a + b) * (n // 2) + a * (n % 2) + "\n"
            yield b * (n - 1) + a + "\n"


def sample(rng: random.Random, max_len: int = MAX_LEN) -> str:
    n = rng.randint(1, max_len)
    pool = DIGITS if rng.random() < 0.5 else rng.sample(DIGITS, rng.randint(1, 3))  # repeats
    return "".join(rng.choice(pool) for _ in range(n)) + "\n"


def make(max_len: int = MAX_LEN, **options: Any) -> tw.Compiled:

    def sort_digits_v1(x: torch.Tensor) -> torch.Tensor:
        newline = tw.is_token(x, "\n")
        # C_v = how many typed digits are <= v: a count of the keys whose digit is <= v (a
        # non-digit reads 10, never counted)
        digit = tw.lookup(x, {d: i for i, d in enumerate(DIGITS)}, default=10)
        at_most = torch.cat([tw.selector_width(tw.select(digit, digit,
                                                         lambda k, q, v=v: k <= v))
                             for v in range(10)], dim=-1)

        # The shifts of `newline` say how far back it is: k = steps since the newline.
        back = [tw.shift(newline.float(), j) for j in range(1, max_len + 2)]
        printed = sum(j * b for j, b in enumerate(back, 1))

        # The counts at the newline, held for the steps that follow.
        counts = tw.claim(tw.latch(at_most, newline), 0, max_len, integral=True)
        # [C_v <= k]
        done = (counts - printed <= 0.5).float()
        eos, zero = tw.token("<eos>"), tw.token("0")
        # The next digit is the number of v with C_v <= k (v < 9); when C_9 <= k too, <eos>.
        return zero + done[:, :9].sum(-1, keepdim=True) + (eos - zero - 9) * done[:, 9:10]

    # <bos>, the digits, the newline and the sorted digits: the longest stream there is
    options.setdefault("max_seq_len", 2 * max_len + 2)
    return tw.compile(sort_digits_v1, vocab=VOCAB, **options).with_domain(
        lambda: inputs(max_len), oracle)


program = make()
