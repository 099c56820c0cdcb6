"""length (tracr ``make_length``): ``abcab\\n`` -> ``5``.

RASP: ``SelectorWidth(Select(tokens, tokens, TRUE))``, the length at every position. Here the
same selector width is taken at the trigger, over the input positions only (``select`` with
``"true"`` would also count the trigger and, later, the printed digits), and printed in
decimal. tracr's program gives the length at every position; ours prints it once.
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
VOCAB = tw.Vocab(c.DIGITS + ALPHABET + c.TRIGGER)
DEMOS = ["abcab\n", "a\n", "dddddddddd\n"]
EDGE_CASES = ["a\n", "ab\n", "abcd\n", "a" * 9 + "\n", "b" * 10 + "\n", "c" * 99 + "\n",
              "abcd" * 25 + "\n", "\n"]


def oracle(prompt: str) -> str:
    return str(len(c.parse(prompt)))


def inputs(max_len: int = MAX_LEN) -> Iterator[str]:
    return c.all_prompts(ALPHABET, max_len, 5, shortest=0)


def random_input(rng: random.Random, n: int) -> str:
    return c.random_prompt(rng, ALPHABET, n)


def sample(rng: random.Random, max_len: int = MAX_LEN) -> str:
    return random_input(rng, rng.randint(1, max_len))


def make(max_len: int = MAX_LEN, **options: Any) -> tw.Compiled:
    def length(x: torch.Tensor) -> torch.Tensor:
        lay = c.layout(x)
        # The input tokens are letters; the answer's digits are not: a key test on the token
        # alone counts the input (a TRUE select would count the trigger and the digits).
        n = c.count_tokens(x, ALPHABET)
        return c.print_one(x, lay, n, 0, max_len)

    options.setdefault("max_seq_len", max_len + 2 + len(str(max_len)))
    return tw.compile(length, vocab=VOCAB, **options).with_domain(
        lambda: inputs(max_len), oracle)


program = make()
