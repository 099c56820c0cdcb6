"""pair_balance (tracr ``make_pair_balance(tokens, "(", ")")``): ``a()b(c))\\n`` ->
``0,1,0,0,1,1,0,-1``.

RASP: ``frac_prevs(tokens == "(") - frac_prevs(tokens == ")")`` (two numerical aggregates and
a LinearSequenceMap): at position i, (opens - closes) / i over j <= i. Causal already; the
two aggregates are computed at each input position.

Printing: as ``frac_prevs``, the numerators (opens - closes at element e, the fraction's
denominator being e + 1), read with ``tw.gather``, signed, separated by ``,``.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import torch

import torchwright_fx as tw
from examples.rasp import _common as c

MAX_LEN = 100
ALPHABET = "abc()"
# the printed tokens first: low codes, close together, give the printing table its margin
VOCAB = tw.Vocab("-" + c.DIGITS + c.SEP + ALPHABET + c.TRIGGER)
DEMOS = ["a()b(c))\n", "(()\n", "))((\n"]
EDGE_CASES = ["(\n", ")\n", "a\n", "()\n", ")(\n", "a()b(c))\n", "(" * 100 + "\n",
              ")" * 100 + "\n", "()" * 50 + "\n", ")" * 50 + "(" * 50 + "\n",
              "a" * 99 + ")\n"]


def balances(s: str) -> list[int]:
    """The numerators: position i (1-based) holds (opens - closes in s[:i]) / i."""
    return [s[:i + 1].count("(") - s[:i + 1].count(")") for i in range(len(s))]


def oracle(prompt: str) -> str:
    return c.numbers(balances(c.parse(prompt)))


def inputs(max_len: int = MAX_LEN) -> Iterator[str]:
    return c.all_prompts(ALPHABET, max_len, 4)


def random_input(rng: random.Random, n: int) -> str:
    pool = ALPHABET if rng.random() < 0.5 else "()"
    return c.random_prompt(rng, pool, n)


def sample(rng: random.Random, max_len: int = MAX_LEN) -> str:
    return random_input(rng, rng.randint(1, max_len))


def make(max_len: int = MAX_LEN, **options: Any) -> tw.Compiled:
    def pair_balance(x: torch.Tensor) -> torch.Tensor:
        lay = c.layout(x)
        prevs = tw.select(x, x, "true")  # j <= i: RASP's Select(indices, indices, LEQ)
        opens = tw.aggregate(prevs, tw.is_token(x, "("))
        closes = tw.aggregate(prevs, tw.is_token(x, ")"))
        # The numerator: the mean times the position is whole (claimed, and checked in the
        # reference); rounded, so that the printing table sees it within 2**-20 or so.
        i = torch.round(tw.position(x))
        balance = torch.round(tw.claim((opens - closes) * i, -max_len, max_len, integral=True))
        n = c.count_tokens(x, ALPHABET)  # the input's length
        return c.print_sequence(x, lay, n, -max_len, max_len,
                                lambda e: c.value_at(balance, e))

    longest = len(c.numbers(range(-1, -max_len - 1, -1)))  # -1,-2,...,-max_len
    options.setdefault("max_seq_len", max_len + 2 + longest)
    return tw.compile(pair_balance, vocab=VOCAB, **options).with_domain(
        lambda: inputs(max_len), oracle)


program = make()
