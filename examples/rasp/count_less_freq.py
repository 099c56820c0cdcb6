"""count_less_freq (tracr ``make_count_less_freq(2)``): ``aaabbc\\n`` -> ``3``.

RASP: ``hist = SelectorWidth(Select(tokens, tokens, EQ))``, then
``SelectorWidth(Select(hist, hist, lambda k, q: k <= 2))``: how many positions hold a token
that occurs at most twice (the docstring says "fewer than n"; the code counts ``<= n``, and
so do we), the same number at every position.

Adapted: the second select cannot be written today. Its keys are ``hist``, a selector width,
and ``tw.select`` refuses keys that carry the position decoder's noise (examples/rasp/
FINDINGS.md, finding 1). So the count per token is taken at the trigger (one selector width
per letter: ``Select(tokens, tokens, k == b)``), and the second select's width is summed from
them: sum over b of hist_b * [hist_b <= 2], one table per letter. Printed once, in decimal.
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
N = 2
VOCAB = tw.Vocab(c.DIGITS + ALPHABET + c.TRIGGER)
DEMOS = ["aaabbc\n", "aacbbc\n", "abcd\n"]
EDGE_CASES = ["aaabbc\n", "aacbbc\n", "a\n", "aa\n", "aaa\n", "abcd\n", "aabbccdd\n",
              "aaabbbcccddd\n", "a" * 100 + "\n", "a" * 98 + "bc\n", "abcd" * 25 + "\n",
              "abcd" * 2 + "a" * 92 + "\n"]


def oracle(prompt: str) -> str:
    s = c.parse(prompt)
    return str(sum(1 for t in s if s.count(t) <= N))


def inputs(max_len: int = MAX_LEN) -> Iterator[str]:
    return c.all_prompts(ALPHABET, max_len, 5)


def random_input(rng: random.Random, n: int) -> str:
    # few distinct letters half the time, so that counts <= 2 and > 2 both occur at length 20+
    pool = ALPHABET if rng.random() < 0.5 else ALPHABET[0] * max(1, n - 3) + ALPHABET[1:]
    return "".join(rng.choice(pool) for _ in range(n)) + c.TRIGGER


def sample(rng: random.Random, max_len: int = MAX_LEN) -> str:
    return random_input(rng, rng.randint(1, max_len))


def make(max_len: int = MAX_LEN, **options: Any) -> tw.Compiled:
    def count_less_freq(x: torch.Tensor) -> torch.Tensor:
        lay = c.layout(x)
        total = torch.zeros_like(lay.step)
        for b in ALPHABET:
            code = float(tw.token(b))
            hist_b = tw.selector_width(tw.select(x, x, lambda k, q, code=code: k == code))
            total = total + tw.lookup(hist_b, {h: h for h in range(1, N + 1)}, default=0)
        return c.print_one(x, lay, total, 0, max_len)

    options.setdefault("max_seq_len", max_len + 2 + len(str(max_len)))
    return tw.compile(count_less_freq, vocab=VOCAB, **options).with_domain(
        lambda: inputs(max_len), oracle)


program = make()
