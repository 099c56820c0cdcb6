"""nary_sequencemap (tracr ``make_nary_sequencemap(lambda x, y, z: x + y - z, tokens, tokens,
indices)``): ``312\\n`` -> ``6,1,2``.

RASP: two SequenceMaps build the tuple (token, token, index) at each position and a Map
applies ``f``: 2 * token - index, with RASP's indices from 0. No select: a map per position,
here an affine function of the token's value and the (rounded) position, computed at each
input position. The answer prints the values, one per input element (read with
``tw.gather``), signed, separated by ``,``. tracr encodes the tuples categorically (its
docstring warns of the size); here the map is affine, so it is free.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import torch

import torchwright_fx as tw
from examples.rasp import _common as c

MAX_LEN = 100
ALPHABET = "123"
VOCAB = tw.Vocab("-" + c.DIGITS + c.SEP + c.TRIGGER)  # the input's 1, 2, 3 are digits too
DEMOS = ["312\n", "1\n", "3333333333\n"]
EDGE_CASES = ["1\n", "3\n", "12\n", "312\n", "3" * 10 + "\n", "1" * 10 + "\n",
              "1" * 100 + "\n", "3" * 100 + "\n", "123" * 33 + "1\n"]


def f(x: int, y: int, z: int) -> int:
    return x + y - z


def values(s: str) -> list[int]:
    return [f(int(t), int(t), i) for i, t in enumerate(s)]


def oracle(prompt: str) -> str:
    return c.numbers(values(c.parse(prompt)))


def inputs(max_len: int = MAX_LEN) -> Iterator[str]:
    return c.all_prompts(ALPHABET, max_len, 6)


def random_input(rng: random.Random, n: int) -> str:
    return c.random_prompt(rng, ALPHABET, n)


def sample(rng: random.Random, max_len: int = MAX_LEN) -> str:
    return random_input(rng, rng.randint(1, max_len))


def make(max_len: int = MAX_LEN, **options: Any) -> tw.Compiled:
    lo, hi = f(1, 1, max_len - 1), f(3, 3, 0)

    def nary_sequencemap(x: torch.Tensor) -> torch.Tensor:
        lay = c.layout(x)
        token = tw.lookup(x, {t: int(t) for t in ALPHABET})
        index = torch.round(tw.position(x)) - 1  # RASP's indices count from 0
        value = f(token, token, index)
        n = c.length(lay)
        return c.print_sequence(x, lay, n, lo, hi, lambda e: c.value_at(value, e))

    longest = len(c.numbers(values("1" * max_len)))
    options.setdefault("max_seq_len", max_len + 2 + longest)
    return tw.compile(nary_sequencemap, vocab=VOCAB, **options).with_domain(
        lambda: inputs(max_len), oracle)


program = make()
