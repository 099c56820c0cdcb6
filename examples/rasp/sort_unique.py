"""sort_unique (tracr ``make_sort_unique(tokens, tokens)``): ``dbca\\n`` -> ``abcd``.

RASP: ``target_pos = SelectorWidth(Select(keys, keys, LT))`` (how many keys are smaller: the
sorted position), then ``Aggregate(Select(target_pos, indices, EQ), vals)``: position p takes
the value whose target position is p. Keys must be unique; here keys and values are the
tokens, distinct lowercase letters, so inputs are at most 26 long.

Adapted. The second select matches a selector width against indices, both decoded from
positions, which ``tw.select`` cannot take today (examples/rasp/FINDINGS.md, finding 1). The
answer is printed one step at a time, and the step's token is exact: the letter just printed
(the trigger at step 0). So the next letter is the smallest input letter greater than the one
just printed: ``Aggregate(Select(tokens, last printed, GT), [token <= v] for each letter v)``
is 0 exactly for the letters v before the next one, which is printed. The printed letters are
never selected (they are not greater than the last one), so no input-only factor is needed.

Length 100 cannot be reached: 26 letters give at most 26 unique keys (a tw.Vocab holds single
characters, and ``>`` over n keys takes n - 1 of the head's classes: 27 at d_head 32).
"""

from __future__ import annotations

import itertools
import random
import string
from collections.abc import Iterator
from typing import Any

import torch

import torchwright_fx as tw
from examples.rasp import _common as c

ALPHABET = string.ascii_lowercase
MAX_LEN = len(ALPHABET)
VOCAB = tw.Vocab(ALPHABET + c.TRIGGER)
DEMOS = ["dbca\n", "zyx\n", "q\n"]
EDGE_CASES = ["a\n", "z\n", "ab\n", "ba\n", "dbca\n", ALPHABET + "\n", ALPHABET[::-1] + "\n",
              "azbycxdwevfugthsirjqkplomn\n", "mnolpkqjrishtgufvewdxcybza\n"]


def oracle(prompt: str) -> str:
    return "".join(sorted(c.parse(prompt)))


def inputs(max_len: int = MAX_LEN) -> Iterator[str]:
    for n in range(1, min(max_len, 3) + 1):
        for t in itertools.permutations("abcdz", n):
            yield "".join(t) + c.TRIGGER


def random_input(rng: random.Random, n: int) -> str:
    return "".join(rng.sample(ALPHABET, n)) + c.TRIGGER


def sample(rng: random.Random, max_len: int = MAX_LEN) -> str:
    return random_input(rng, rng.randint(1, max_len))


def make(max_len: int = MAX_LEN, **options: Any) -> tw.Compiled:
    codes = [VOCAB[t] for t in ALPHABET]
    trigger = VOCAB[c.TRIGGER]

    def after(k: float, q: float) -> bool:
        """key k is a letter that comes after the query q (the trigger: before every letter)"""
        return k in codes and (q == trigger or (q in codes and k > q))

    def sort_unique(x: torch.Tensor) -> torch.Tensor:
        lay = c.layout(x)
        n = c.length(lay)
        # column v: the fraction of the selected letters that are <= v (one mean each, so
        # "> 0" is exact): 0 up to the first letter after the one just printed
        at_most = x[:, codes[0]:codes[-1] + 1] @ torch.triu(torch.ones(len(codes), len(codes)))
        seen = tw.aggregate(tw.select(x, x, after), at_most)
        # the next letter: a + the number of letters v before it (nothing selected <= v)
        nxt = codes[0] + (seen[:, :-1] <= 0).float().sum(-1, keepdim=True)
        return c.print_tokens(lay, n, nxt)

    options.setdefault("max_seq_len", 2 * max_len + 2)
    return tw.compile(sort_unique, vocab=VOCAB, **options).with_domain(
        lambda: inputs(max_len), oracle)


program = make()
