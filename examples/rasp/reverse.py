"""reverse (tracr ``make_reverse(tokens)``): ``abcd\\n`` -> ``dcba``.

RASP: ``opp_idx = length - indices - 1``; ``Aggregate(Select(indices, opp_idx, EQ), tokens)``.
Here: ``length`` is the same selector width (over the input positions: the answer is made of
letters too, so the keys are the positions before the trigger), and at answer step k the
token of input element ``length - 1 - k`` is fetched.

Adapted: ``Select(indices, opp_idx, EQ)`` cannot be written with ``tw.select`` today, whose
keys and queries must be bit-exact (token codes and what is computed from them), and an index
decoded from positions is not (examples/rasp/FINDINGS.md, finding 1). The fetch is
``tw.gather``, the position-equality select that the compiler builds for decoded positions.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import torch

import torchwright_fx as tw
from examples.rasp import _common as c

MAX_LEN = 100
ALPHABET = "abcd"
VOCAB = tw.Vocab(ALPHABET + c.TRIGGER)
DEMOS = ["abcd\n", "aabbc\n", "d\n"]
EDGE_CASES = ["a\n", "ab\n", "abcd\n", "abcdabcdab\n", "a" * 100 + "\n",
              ("abcd" * 25) + "\n", "a" * 99 + "b\n", "b" + "a" * 99 + "\n"]


def oracle(prompt: str) -> str:
    return c.parse(prompt)[::-1]


def inputs(max_len: int = MAX_LEN) -> Iterator[str]:
    return c.all_prompts(ALPHABET, max_len, 5)


def random_input(rng: random.Random, n: int) -> str:
    return c.random_prompt(rng, ALPHABET, n)


def sample(rng: random.Random, max_len: int = MAX_LEN) -> str:
    return random_input(rng, rng.randint(1, max_len))


def make(max_len: int = MAX_LEN, **options: Any) -> tw.Compiled:
    def reverse(x: torch.Tensor) -> torch.Tensor:
        lay = c.layout(x)
        n = c.length(lay)
        opp = n - 1 - lay.step  # the input element printed at step k
        return c.print_tokens(lay, n, c.value_at(tw.code(x), opp))

    options.setdefault("max_seq_len", 2 * max_len + 2)
    return tw.compile(reverse, vocab=VOCAB, **options).with_domain(
        lambda: inputs(max_len), oracle)


program = make()
