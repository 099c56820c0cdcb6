"""sort (tracr ``make_sort(tokens, tokens, max_seq_len, min_key=1)``): ``2413\\n`` -> ``1234``,
``2412\\n`` -> ``1224``.

RASP: keys made unique by position (``key + min_key * i / max_seq_len``: equal keys keep their
input order), then ``make_sort_unique``: ``target_pos = SelectorWidth(Select(keys, keys,
LT))`` and ``Aggregate(Select(target_pos, indices, EQ), vals)``. Keys and values are the
tokens, digits 1-4 with repeats (tracr's own test), so equal keys print the same token and
the order among them cannot be seen.

Adapted. The second select matches a selector width against indices, which ``tw.select``
cannot take today (examples/rasp/FINDINGS.md, finding 1), and the position-made-unique keys
are not finite sets of exact values either. The answer is printed one step at a time from
the token just printed, u (exact: a token), as in ``sort_unique`` plus ties:

- ``SelectorWidth(Select(tokens, u, EQ) & input)`` copies of u in the input, and
  ``SelectorWidth(Select(tokens, u, EQ) & answer)`` already printed: while fewer are printed,
  u again;
- else the smallest input token greater than u: ``Aggregate(Select(tokens, u, GT),
  [token <= v] for each v)`` is 0 exactly for the values v before it.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import torch

import torchwright_fx as tw
from examples.rasp import _common as c

MAX_LEN = 100
ALPHABET = "1234"
VOCAB = tw.Vocab(ALPHABET + c.TRIGGER)
DEMOS = ["2413\n", "2412\n", "4444\n"]
EDGE_CASES = ["1\n", "4\n", "21\n", "2413\n", "2412\n", "4321\n", "1111\n", "4" * 100 + "\n",
              "1" * 100 + "\n", "4321" * 25 + "\n", "4" * 99 + "1\n", "1" + "4" * 99 + "\n",
              "3" * 50 + "2" * 50 + "\n"]


def oracle(prompt: str) -> str:
    return "".join(sorted(c.parse(prompt)))


def inputs(max_len: int = MAX_LEN) -> Iterator[str]:
    return c.all_prompts(ALPHABET, max_len, 5)


def random_input(rng: random.Random, n: int) -> str:
    return c.random_prompt(rng, ALPHABET, n)


def sample(rng: random.Random, max_len: int = MAX_LEN) -> str:
    return random_input(rng, rng.randint(1, max_len))


def make(max_len: int = MAX_LEN, **options: Any) -> tw.Compiled:
    codes = [VOCAB[t] for t in ALPHABET]
    trigger = VOCAB[c.TRIGGER]

    def greater(k: float, q: float) -> bool:
        """key k is a value above the query q (the trigger: below every value)"""
        return k in codes and (q == trigger or (q in codes and k > q))

    def sort(x: torch.Tensor) -> torch.Tensor:
        lay = c.layout(x)
        n = c.length(lay)
        same = tw.select(x, x, "==")
        answer = tw.select(lay.after, lay.after, lambda k, q: k == 1)
        in_input = tw.selector_width(same & c.input_only(lay))
        printed = tw.selector_width(same & answer)  # the trigger's own: never in the input
        at_most = x[:, codes[0]:codes[-1] + 1] @ torch.triu(torch.ones(len(codes), len(codes)))
        seen = tw.aggregate(tw.select(x, x, greater), at_most)
        nxt = codes[0] + (seen[:, :-1] <= 0).float().sum(-1, keepdim=True)
        token = torch.where(printed - in_input < 0, tw.code(x), nxt)
        return c.print_tokens(lay, n, token)

    options.setdefault("max_seq_len", 2 * max_len + 2)
    return tw.compile(sort, vocab=VOCAB, **options).with_domain(lambda: inputs(max_len), oracle)


program = make()
