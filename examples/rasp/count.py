"""count (tracr ``make_count(tokens, "a")``): ``abcab\\n`` -> ``2``.

RASP: ``SelectorWidth(Select(tokens, tokens, lambda k, q: k == "a"))``, the count at every
position. Here the same selector width is taken at the trigger (its keys are every input
position, and only the input holds letters) and printed in decimal, once.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import torch

import torchwright_fx as tw
from examples.rasp import _common as c

MAX_LEN = 100
ALPHABET = "abc"
TOKEN = "a"
VOCAB = tw.Vocab(c.DIGITS + ALPHABET + c.TRIGGER)
DEMOS = ["abcab\n", "bbb\n", "aaaaaaaaaaaa\n"]
EDGE_CASES = ["a\n", "b\n", "ab\n", "bc\n", "a" * 9 + "\n", "a" * 10 + "\n", "a" * 100 + "\n",
              "b" * 100 + "\n", "bca" * 33 + "a\n", "\n"]


def oracle(prompt: str) -> str:
    return str(c.parse(prompt).count(TOKEN))


def inputs(max_len: int = MAX_LEN) -> Iterator[str]:
    return c.all_prompts(ALPHABET, max_len, 6, shortest=0)


def random_input(rng: random.Random, n: int) -> str:
    return c.random_prompt(rng, ALPHABET, n)


def sample(rng: random.Random, max_len: int = MAX_LEN) -> str:
    return random_input(rng, rng.randint(1, max_len))


def make(max_len: int = MAX_LEN, **options: Any) -> tw.Compiled:
    def count(x: torch.Tensor) -> torch.Tensor:
        lay = c.layout(x)
        a = float(tw.token(TOKEN))
        n = tw.selector_width(tw.select(x, x, lambda k, q: k == a))
        return c.print_one(x, lay, n, 0, max_len)

    options.setdefault("max_seq_len", max_len + 2 + len(str(max_len)))
    return tw.compile(count, vocab=VOCAB, **options).with_domain(lambda: inputs(max_len), oracle)


program = make()
