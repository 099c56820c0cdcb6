"""frac_prevs (tracr ``make_frac_prevs(tokens == "(")``): ``((a)\\n`` -> ``1,2,2,2``.

RASP: ``Aggregate(Select(indices, indices, LEQ), tokens == "(")``, numerical: at position i
the fraction of positions j <= i holding ``(``. Causal already: ``Select(indices, indices,
LEQ)`` is what a causal ``tw.select(x, x, "true")`` selects (j <= i), and the same aggregate
is computed at each input position.

Printing: the fraction at input element e is k / (e + 1), and the answer prints the
numerators k (element e read with ``tw.gather``), separated by ``,``: ``((a)`` has the
fractions 1/1, 2/2, 2/3, 2/4. The numerator is the mean times the position, whole by
construction (``tw.claim``).
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
VOCAB = tw.Vocab(c.DIGITS + c.SEP + ALPHABET + c.TRIGGER)
DEMOS = ["((a)\n", "a(bb)\n", "(((\n"]
EDGE_CASES = ["(\n", "a\n", "()\n", "((a)\n", "(" * 100 + "\n", ")" * 100 + "\n",
              "a" * 99 + "(\n", "(" + "a" * 99 + "\n", "()" * 50 + "\n"]


def fractions(s: str) -> list[int]:
    """The numerators: position i (1-based) holds k / i, k the number of ( in s[:i]."""
    return [s[:i + 1].count("(") for i in range(len(s))]


def oracle(prompt: str) -> str:
    return c.numbers(fractions(c.parse(prompt)))


def inputs(max_len: int = MAX_LEN) -> Iterator[str]:
    return c.all_prompts(ALPHABET, max_len, 4)


def random_input(rng: random.Random, n: int) -> str:
    return c.random_prompt(rng, ALPHABET, n)


def sample(rng: random.Random, max_len: int = MAX_LEN) -> str:
    return random_input(rng, rng.randint(1, max_len))


def make(max_len: int = MAX_LEN, **options: Any) -> tw.Compiled:
    def frac_prevs(x: torch.Tensor) -> torch.Tensor:
        lay = c.layout(x)
        bools = tw.is_token(x, "(")
        frac = tw.aggregate(tw.select(x, x, "true"), bools)  # k / i at position i
        i = torch.round(tw.position(x))
        k = tw.claim(frac * i, 0, max_len, integral=True)
        n = c.count_tokens(x, ALPHABET)  # the input's length
        return c.print_sequence(x, lay, n, 0, max_len, lambda e: c.value_at(k, e))

    # the longest answer: 1,2,...,max_len
    longest = len(c.numbers(range(1, max_len + 1)))
    options.setdefault("max_seq_len", max_len + 2 + longest)
    return tw.compile(frac_prevs, vocab=VOCAB, **options).with_domain(
        lambda: inputs(max_len), oracle)


program = make()
