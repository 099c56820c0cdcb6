"""range_printer: ``(2,5),(7,9),(0,3)\\n`` -> ``2 3 4 7 8 0 1 2``: a two-level loop.

Token format. The prompt is 1 to 3 items ``(lo,hi)`` joined by ``,`` and ended by ``\\n``;
``lo`` and ``hi`` are single digits. The answer is every value of ``range(lo, hi)`` of each
item in turn, one digit per value, separated by single spaces, then ``<eos>``. As in
Python, an item with ``lo >= hi`` is empty and prints nothing (``(5,2),(1,3)`` -> ``1 2``);
when every item is empty the answer is empty.

The loop. Value number m of the answer (counting from 0) belongs to the item i whose run of
values covers it, ``start_i <= m < start_i + len_i``, with ``len_i = max(hi_i - lo_i, 0)`` and
``start_i`` the lengths of the items before it; it is ``lo_i + (m - start_i)``. The outer
loop (which item) is two comparisons per item, the inner one (which value) is that
subtraction. The items are read at the newline, from the end (item -1 ends 1 place back,
item -2 7 places back, ...); m is counted from the newline: the distance to it, halved
(``tw.steps_since``, which builds the position once: 127 lanes at max_seq_len 128).

Depth: 1 layer reads the items (and decodes the position), 1 compares m with the starts,
1 prints.

report() (the seed could not compile this example):
  range_printer: 5 layers (critical-path bound 5), d_model=48 (peak live width 41), d_head=32,
  9 heads/layer (11 used), 130 lanes/layer, 410,256 parameters (99.7% zeros)
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from typing import Any

import torch

import torchwright_fx as tw

MAX_ITEMS = 3
VOCAB = tw.Vocab("0123456789(),\n ")
DEMOS = ["(2,5),(7,9),(0,3)\n", "(0,9)\n", "(5,2),(1,3)\n", "(3,4),(3,4),(3,4)\n"]
EDGE_CASES = ["(2,5),(7,9),(0,3)\n", "(0,9),(0,9),(0,9)\n", "(5,5)\n", "(9,0)\n", "(3,4)\n",
              "(0,9)\n", "(8,9)\n", "(2,5),(5,7)\n", "(0,1),(0,1),(0,1)\n", "(5,2),(1,3)\n",
              "(1,3),(5,2)\n", "(1,3),(5,2),(6,8)\n", "(9,9),(9,9),(9,9)\n", "(4,4),(0,2)\n",
              "(0,0),(0,0),(7,9)\n", "(0,9),(9,0)\n"]


def oracle(prompt: str) -> str:
    assert prompt.endswith("\n"), prompt
    items = [tuple(int(c) for c in item.strip("()").split(",")) for item in
             prompt[:-1].split("),(")]
    return " ".join(str(v) for lo, hi in items for v in range(lo, hi))


def _prompt(items: list[tuple[int, int]]) -> str:
    return ",".join(f"({lo},{hi})" for lo, hi in items) + "\n"


def inputs() -> Iterator[str]:
    """Every single item (100), then pairs and triples of a spread of items."""
    singles = [(lo, hi) for lo in range(10) for hi in range(10)]
    for item in singles:
        yield _prompt([item])
    spread = [(0, 9), (2, 5), (7, 9), (0, 3), (5, 5), (9, 0), (3, 4), (8, 9), (4, 2), (0, 1)]
    for k in (2, 3):
        for items in itertools.product(spread, repeat=k):
            yield _prompt(list(items))


def sample(rng: random.Random) -> str:
    items = []
    for _ in range(rng.randint(1, MAX_ITEMS)):
        lo, hi = rng.randint(0, 9), rng.randint(0, 9)
        if rng.random() < 0.8:  # mostly non-empty ranges
            lo, hi = min(lo, hi), max(lo, hi)
        items.append((lo, hi))
    return _prompt(items)


def make(**options: Any) -> tw.Compiled:
    options.setdefault("max_seq_len", 128)  # longest: 19 prompt tokens + 54 answer tokens

    def range_printer(x: torch.Tensor) -> torch.Tensor:
        newline = tw.is_token(x, "\n")
        digit = tw.lookup(x, {str(d): d for d in range(10)})
        is_digit = tw.is_token(x, list("0123456789"))
        comma = tw.is_token(x, ",")
        # Items counted from the end: item -1-r has lo 6r+4 and hi 6r+2 places back, and
        # exists iff the token 6r places back is the ',' before it (r > 0).
        lo, length, exists = [], [], []
        for r in range(MAX_ITEMS):
            lo.append(tw.shift(digit, 6 * r + 4))
            hi = tw.shift(digit, 6 * r + 2)
            exists.append(1.0 if r == 0 else tw.shift(comma, 6 * r))
            # max(hi - lo, 0), and 0 for a missing item (hi - lo >= -9 > -10).
            length.append(torch.relu(hi - lo[r] - 10 * (1 - exists[r])))
        # Printed first to last: r = MAX_ITEMS-1 .. 0. start_r = lengths of the items before.
        start = [sum(length[r + 1:], torch.zeros_like(newline)) for r in range(MAX_ITEMS)]
        total = sum(length, torch.zeros_like(newline))
        held = tw.latch(torch.cat([*lo, *start, *length, total], -1), newline)
        lo_h = [held[:, r:r + 1] for r in range(MAX_ITEMS)]
        start_h = [held[:, MAX_ITEMS + r:MAX_ITEMS + r + 1] for r in range(MAX_ITEMS)]
        len_h = [held[:, 2 * MAX_ITEMS + r:2 * MAX_ITEMS + r + 1] for r in range(MAX_ITEMS)]
        total_h = held[:, 3 * MAX_ITEMS:]

        # Values printed so far: the answer alternates value, space, value, ... so after the
        # newline it is half the distance to it, rounded up at a value. Compared doubled.
        twice_m = tw.steps_since(newline) + is_digit
        done = (twice_m >= 2 * total_h).float()
        half_m = torch.div(twice_m, 2, rounding_mode="floor")
        eos, space, zero = VOCAB["<eos>"], VOCAB[" "], VOCAB["0"]
        out = torch.zeros_like(newline) + eos
        # After a value: a space, unless that was the last value.
        out = out + torch.where(is_digit.bool() & ~done.bool(), float(space - eos), 0.0)
        # After the newline or a space: value m, from the item whose run covers m.
        for r in range(MAX_ITEMS):
            begun = twice_m >= 2 * start_h[r]
            ended = twice_m >= 2 * (start_h[r] + len_h[r])
            # twice_m is even while item r prints (after the newline or a space)
            value = lo_h[r] + half_m - start_h[r]
            printing = ~is_digit.bool() & begun & ~ended
            out = out + tw.claim(torch.where(printing, value + (zero - eos), 0.0),
                                 0, len(VOCAB) - 1, integral=True)
        return out

    return tw.compile(range_printer, vocab=VOCAB, **options).with_domain(inputs, oracle)


program = make()
