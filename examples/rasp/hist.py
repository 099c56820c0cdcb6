"""hist (tracr ``make_hist``): ``abac\\n`` -> ``2,1,2,1``.

RASP: ``SelectorWidth(Select(tokens, tokens, EQ))``: at each position, how many positions of
the whole input hold its token. A causal position sees only the tokens before it, so the
widths are taken after the trigger instead: at answer element e (e separators printed so
far), the query is the token of input element e (fetched by ``tw.gather``), and the width of
``Select(tokens, that token, EQ)`` counts it over the whole input (the printed digits and
commas never equal a letter). The counts are printed in decimal, separated by ``,``.
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
VOCAB = tw.Vocab(c.DIGITS + c.SEP + ALPHABET + c.TRIGGER)
DEMOS = ["abac\n", "aaaa\n", "abcd\n"]
EDGE_CASES = ["a\n", "ab\n", "abac\n", "abcd\n", "a" * 9 + "\n", "a" * 10 + "\n",
              "a" * 10 + "b\n", "a" * 100 + "\n", "a" * 99 + "b\n", "abcd" * 25 + "\n",
              "b" + "a" * 98 + "c\n"]


def oracle(prompt: str) -> str:
    s = c.parse(prompt)
    return c.numbers([s.count(t) for t in s])


def inputs(max_len: int = MAX_LEN) -> Iterator[str]:
    return c.all_prompts(ALPHABET, max_len, 5)


def random_input(rng: random.Random, n: int) -> str:
    return c.random_prompt(rng, ALPHABET, n)


def sample(rng: random.Random, max_len: int = MAX_LEN) -> str:
    return random_input(rng, rng.randint(1, max_len))


def make(max_len: int = MAX_LEN, **options: Any) -> tw.Compiled:
    def hist(x: torch.Tensor) -> torch.Tensor:
        lay = c.layout(x)
        n = c.count_tokens(x, ALPHABET)  # the input's length

        def element(e: torch.Tensor) -> torch.Tensor:
            token = c.value_at(tw.code(x), e)
            return tw.selector_width(tw.select(x, token, "=="))

        return c.print_sequence(x, lay, n, 0, max_len, element)

    # the longest answer: max_len copies of max_len and the commas between them
    options.setdefault("max_seq_len", max_len + 2 + max_len * (len(str(max_len)) + 1) - 1)
    return tw.compile(hist, vocab=VOCAB, **options).with_domain(lambda: inputs(max_len), oracle)


program = make()
