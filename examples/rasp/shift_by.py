"""shift_by (tracr ``shift_by(1, tokens)``): ``abcd\\n`` -> ``_abc``.

RASP: ``Aggregate(Select(indices, indices, lambda k, q: q == k + 1), tokens, default=None)``:
each position holds the token one place back, the first holds ``None``. Causal already; the
answer prints the shifted sequence, one token per input element (``_`` for ``None``), read
at each step with ``tw.gather``.

Adapted: ``Select(indices, indices, q == k + 1)`` is a select on decoded indices, which
``tw.select`` cannot take today (examples/rasp/FINDINGS.md, finding 1); a fixed offset back
is ``tw.shift``, whose ``<bos>`` row stands for RASP's ``None``.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import torch

import torchwright_fx as tw
from examples.rasp import _common as c

MAX_LEN = 100
OFFSET = 1
ALPHABET = "abcd"
NONE = "_"
VOCAB = tw.Vocab(NONE + ALPHABET + c.TRIGGER)
DEMOS = ["abcd\n", "aab\n", "d\n"]
EDGE_CASES = ["a\n", "ab\n", "abcd\n", "a" * 100 + "\n", "abcd" * 25 + "\n",
              "d" + "a" * 99 + "\n"]


def oracle(prompt: str, offset: int = OFFSET) -> str:
    s = c.parse(prompt)
    return (NONE * offset + s)[:len(s)]


def inputs(max_len: int = MAX_LEN) -> Iterator[str]:
    return c.all_prompts(ALPHABET, max_len, 5)


def random_input(rng: random.Random, n: int) -> str:
    return c.random_prompt(rng, ALPHABET, n)


def sample(rng: random.Random, max_len: int = MAX_LEN) -> str:
    return random_input(rng, rng.randint(1, max_len))


def make(max_len: int = MAX_LEN, offset: int = OFFSET, **options: Any) -> tw.Compiled:
    def shift_by(x: torch.Tensor) -> torch.Tensor:
        lay = c.layout(x)
        shifted = tw.shift(tw.code(x), offset)  # <bos> where i - offset < 1: RASP's None
        none = float(tw.token(NONE))
        shifted = torch.where(shifted == float(tw.token("<bos>")), none, shifted)
        n = c.length(lay)
        return c.print_tokens(lay, n, c.value_at(shifted, lay.step))

    options.setdefault("max_seq_len", 2 * max_len + 2)
    return tw.compile(shift_by, vocab=VOCAB, **options).with_domain(
        lambda: inputs(max_len), lambda p: oracle(p, offset))


program = make()
