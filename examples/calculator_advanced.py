"""calculator_advanced: the same I/O as ``calculator_simple`` (``12*34\\n`` -> ``408``), at
logarithmic depth.

The operation is written as a row of decimal columns, as in the simple calculator, but the
carries are not folded one column at a time:

- ``*``: carry-save (Wallace-style) reduction. A column holds the sum of up to N digit
  products (up to 81 N). Every round splits *every* column at once into its last digit and
  the rest, and moves the rest one column left: ``x_k <- x_k % 10 + x_{k-1} // 10``. The
  bound shrinks about tenfold per round (243 -> 33 -> 12 for N = 3), so after ~log10(81 N)
  rounds every column is at most 18: two rows of digits, carries of 0 or 1.
- ``+``, and ``-`` as the ten's complement addition ``big + (99..9 - small) + 1``, start
  there (both ``A - B`` and ``B - A`` are computed; the sign picks one when printing).
- Carry-lookahead as a prefix scan over (generate, propagate) pairs. The first level reads
  the columns of a window of up to WINDOW at once: the window generates a carry iff its
  value (plus the carry into it) is >= 10**len, and propagates iff its value is 99...9; one
  comparison each. Each further level combines up to FAN_IN adjacent groups with one
  comparison: with v_i = 2 (generate), 1 (propagate) or 0 (kill), lowest first, the group
  generates iff sum v_i 2**i >= 2**n. Both bounds keep every compared value an exact fp32
  integer with room to spare.

Depth: 1 layer reads the operands, 1 forms the columns, the reduction rounds (~log10 81N: 1
for N = 1, 2 for N = 2..6), the scan levels (1 + log_FAN_IN of (2N-1)/WINDOW: 1 for N <= 3,
2 for N = 4..6), 1 prints: 5, 6, 6, 7, 7, 7 layers for N = 1..6, against the simple
calculator's 4, 6, 8, 10, 12, 14. N is at most 6 (fp32 keeps every compared value exact).

report() for N=3 (default); the seed's build was 36 (26 with CP-SAT) layers at d=1024, 160M
parameters:
  calculator_advanced: 6 layers (critical-path bound 6), d_model=128 (peak live width 90),
  d_head=32, 8 heads/layer (13 used), 216 lanes/layer, 1,290,112 parameters (99.5% zeros)
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from typing import Any

import torch

import torchwright_fx as tw
from examples import _calc
from examples._calc import VOCAB, oracle

N = 3
WINDOW = 5  # columns per first-level window: values up to 2 * 10**5
FAN_IN = 8  # groups per later level: scores up to 2**9
DEMOS = ["12*34\n", "999*999\n", "1-5\n", "100-999\n", "999+1\n", "012*034\n"]
EDGE_CASES = _calc.edge_cases(N)


def inputs(n: int = N) -> Iterator[str]:
    return _calc.inputs(n)


def sample(rng: random.Random, n: int = N) -> str:
    return _calc.sample(rng, n)


def carry_save(cols: list[Any], bounds: list[int]) -> list[Any]:
    """Columns (each at most ``bounds[k]``) -> the same number as columns of at most 18."""
    while max(bounds) > 18:
        new_bounds = [min(b, 9) + (bounds[k - 1] // 10 if k else 0) for k, b in enumerate(bounds)]
        last = max(new_bounds) <= 18
        rest = [tw.lookup(c, {v: v // 10 for v in range(b + 1)}) if b >= 10 else 0
                for c, b in zip(cols, bounds, strict=True)]
        if last:
            # The last round reads the digits from a table too (the inputs are small by now):
            # that also drops the SwiGLU products' fp32 noise (~1e-5), which the lookahead
            # would multiply by up to 10**4.
            digit = [tw.lookup(c, {v: v % 10 for v in range(b + 1)}) if b >= 10 else c
                     for c, b in zip(cols, bounds, strict=True)]
        else:
            digit = [c - 10 * r for c, r in zip(cols, rest, strict=True)]
        cols = [dg + (rest[k - 1] if k else 0) for k, dg in enumerate(digit)]
        bounds = new_bounds
    return cols


def lookahead(cols: Sequence[Any], carry_in: Any, upper: Sequence[Any] | None = None,
              off: Any = 0) -> tuple[list[Any], list[Any]]:
    """Carry-lookahead over columns of value <= 18: ``carry[k]`` into column k (k = 1..m-1;
    ``carry[0]`` is ``carry_in``) by a prefix scan, and ``lead[k]``: the result is >= 10**k.

    ``upper[k]`` is the plain sum of the columns at and above k (non-negative, > 0 iff one of
    them is): the result is >= 10**k iff that is > 0 or carry[k] is 1. ``off`` = 1 forces
    every lead to 0. Every lead is ready by the scan's last level.
    """
    m = len(cols)
    levels, span = 1, WINDOW
    while span < m - 1:
        levels, span = levels + 1, span * FAN_IN
    carry: dict[int, Any] = {0: carry_in}
    lead: dict[int, Any] = {}
    # With one level, a lead shares carry[k]'s inputs: the upper sum, scaled past the
    # threshold, is added in. With more, the upper sum is first made a 0/1 flag. A score is
    # below 2 * top, so subtracting 2 * top * off switches a lead off.
    nz = {k: upper[k] for k in range(1, m)} if upper is not None else {}
    if levels > 1:
        nz = {k: (v >= 1).float() for k, v in nz.items()}

    def finish(k: int, score: Any, top: int, level: int) -> None:
        carry[k] = (score >= top).float()
        if upper is not None and level == levels:
            lead[k] = (score + top * nz[k] - 2 * top * off >= top).float()

    # Level 1: the window of up to WINDOW columns ending at each column. One that reaches
    # column 0 (plus the carry in) gives the carry out of it directly.
    groups: dict[int, tuple[int, Any, Any]] = {}  # hi -> (lo, G, P) of the span lo..hi
    for hi in range(m - 1):
        lo = max(0, hi - WINDOW + 1)
        value = sum(cols[j] * 10 ** (j - lo) for j in range(lo, hi + 1))
        top = 10 ** (hi - lo + 1)
        if lo == 0:
            finish(hi + 1, value + carry_in, top, 1)
        else:
            groups[hi] = (lo, (value >= top).float(), (value == top - 1).float())
    # Later levels: each group combines with up to FAN_IN - 1 groups below it, stopping at one
    # that reaches column 0 (whose carry out is known).
    level = 1
    while groups:
        level += 1
        if upper is not None:
            for k in [k for k in carry if k and k not in lead]:  # carry settled earlier
                lead[k] = (carry[k] + nz[k] - 2 * off >= 1).float()
        known = dict(carry)  # carries from earlier levels only: this level runs in parallel
        nxt: dict[int, tuple[int, Any, Any]] = {}
        for hi, (lo, g, p) in groups.items():
            parts = [(lo, 2 * g + p, p)]
            while len(parts) < FAN_IN and parts[-1][0] > 0:
                below = parts[-1][0] - 1
                if below + 1 in known:
                    parts.append((0, 2 * known[below + 1], None))
                    break
                lo2, g2, p2 = groups[below]
                parts.append((lo2, 2 * g2 + p2, p2))
            parts.reverse()  # lowest first
            score = sum(v * 2 ** i for i, (_, v, _) in enumerate(parts))
            top = 2 ** len(parts)
            if parts[0][0] == 0:
                finish(hi + 1, score, top, level)
            else:
                nxt[hi] = (parts[0][0], (score >= top).float(),
                           (sum(pp for _, _, pp in parts) >= len(parts)).float())
        groups = nxt
    return [carry[k] for k in range(m)], [None] + [lead.get(k) for k in range(1, m)]


def make(n: int = N, **options: Any) -> tw.Compiled:
    _calc.check_digits(n)
    m = 2 * n

    def calculator_advanced(x: torch.Tensor) -> torch.Tensor:
        ops = _calc.Operands(x, n)
        a, b, neg = ops.a, ops.b, ops.negative
        is_sub = ops.is_op["-"]

        # '*': digit products, then carry-save rounds down to <= 18 per column.
        mul = [sum(a["*"][i] * b["*"][k - i] for i in range(n) if 0 <= k - i < n)
               for k in range(m)]
        mul = carry_save(mul, [81 * sum(1 for i in range(n) if 0 <= k - i < n)
                               for k in range(m)])
        # The other operations' rows are zero, so one row holds whichever the prompt asks for;
        # '-' here is A + (99..9 - B) + 1, the ten's complement of A - B.
        add = [a["+"][k] + b["+"][k] if k < n else 0 for k in range(m)]
        cols = [mul[k] + add[k] + (9 * is_sub + a["-"][k] - b["-"][k] if k < n else 0)
                for k in range(m)]
        # For + and *, the result is >= 10**k iff a column at or above k is non-zero or a
        # carry reaches column k: the lookahead decides it with carry[k]. Off for -.
        upper = [sum(mul[j] + add[j] for j in range(k, m)) for k in range(m)]
        carry, lead = lookahead(cols, is_sub, upper, is_sub)
        digits = [cols[k] + carry[k] - 10 * carry[k + 1] for k in range(m - 1)]
        digits.append(cols[m - 1] + carry[m - 1])  # the carry out of the top is dropped

        # B - A, for when A < B: its own short lookahead (n digits), no product with the sign.
        swapped = [9 * is_sub + b["-"][k] - a["-"][k] for k in range(n)] + [0]
        carry2, _ = lookahead(swapped, is_sub)
        neg_digits = [swapped[k] + carry2[k] - 10 * carry2[k + 1] for k in range(n)]

        # The lengths of |A - B| come from the operands (a linear map of the digits).
        # |A - B| < 10**n; the claim keeps the range that tight (the digit streams' own ranges
        # would allow more), so the width tests stay within fp32's exact range up to n = 6.
        top = 10 ** n - 1
        diff = tw.claim(_calc.number(a["-"]) - _calc.number(b["-"]), -top, top, integral=True)
        sub_lead = [is_sub] + [((diff >= 10 ** k).float() + (-diff >= 10 ** k).float())
                               for k in range(1, n)]
        lead = [1 - is_sub] + lead[1:]
        lengths: dict[tuple[int, bool], torch.Tensor] = {}
        for length in range(1, m + 1):
            is_len = lead[length - 1] - (lead[length] if length < m else 0)
            if length <= n:
                sub_len = sub_lead[length - 1] - (sub_lead[length] if length < n else 0)
                lengths[(length, True)] = neg * sub_len
                is_len = is_len + sub_len - lengths[(length, True)]
            lengths[(length, False)] = is_len
        return _calc.print_answer(x, ops, digits, lengths, neg_digits)

    return tw.compile(calculator_advanced, vocab=VOCAB, **options).with_domain(
        lambda: inputs(n), oracle)


program = make()
