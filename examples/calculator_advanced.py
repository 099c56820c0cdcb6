"""calculator_advanced: the same I/O as ``calculator_simple`` (``12*34\\n`` -> ``408``,
N = 1..16 digits), at logarithmic depth.

The operation is written as a row of decimal columns, as in the simple calculator, but the
carries are not folded one column at a time:

- ``*``: carry-save (Wallace-style) reduction. A column holds the sum of up to N digit
  products (up to 81 N). Every round splits *every* column at once and moves the parts
  left, ``x_k <- x_k % 10 + x_{k-1} // 10`` (or, when those tables would be wide, by 100
  then by 10 in two layers: see ``carry_save``), until every column is at most 18: two
  rows of digits, carries of 0 or 1 (1296 -> 30 -> 12 for N = 16).
- ``+`` shares that row. ``-`` computes both ten's complement sums, ``A + (99..9 - B) + 1``
  and ``B + (99..9 - A) + 1``, each with its own short lookahead: the first's carry out of
  its top column is 1 exactly when A >= B (the sign), and then it holds A - B, otherwise
  the second holds B - A.
- Carry-lookahead as a prefix scan over (generate, propagate) pairs. The first level reads
  the columns of a window of up to WINDOW at once: the window generates a carry iff its
  value (plus the carry into it) is >= 10**len, and propagates iff its value is 99...9; one
  comparison each. Each further level combines up to FAN_IN adjacent groups with one
  comparison: with v_i = 2 (generate), 1 (propagate) or 0 (kill), lowest first, the group
  generates iff sum v_i 2**i >= 2**n. Both bounds keep every compared value an exact fp32
  integer with room to spare.

Depth: 2 layers read the operands (3 from N = 8), the products take 1, the reduction rounds
~log10(81 N) layers, the scan levels 1 + log_FAN_IN((2N-1)/WINDOW) (2 up to N = 16), 2 print:
6, 7, 8, 8, 8, 8, 9 layers for N = 1..7 and 10 for N = 8..16, against the simple
calculator's 5, 7, 9, 11, 13, 15, 17 and 36 at N = 16.

report() for N=3 (default); the seed's build was 36 (26 with CP-SAT) layers at d=1024, 160M
parameters:
  calculator_advanced: 8 layers (critical-path bound 8), d_model=80 (peak live width 77),
  d_head=32, 6 heads/layer (10 used), 161 lanes/layer, 804,720 parameters (99.8% zeros)
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
WINDOW = 3  # columns per first-level window: values up to 4 * 10**3 (see CALC_FINDINGS.md)
FAN_IN = 11  # groups per later level: scores up to 2**12 (3 * 11 = 33 >= 2N - 1 to N = 16)
DEMOS = ["12*34\n", "999*999\n", "1-5\n", "100-999\n", "999+1\n", "012*034\n"]
EDGE_CASES = _calc.edge_cases(N)


def inputs(n: int = N) -> Iterator[str]:
    return _calc.inputs(n)


def sample(rng: random.Random, n: int = N) -> str:
    return _calc.sample(rng, n)


def carry_save(cols: list[Any], bounds: list[int], keep: Any) -> list[Any]:
    """Columns (each at most ``bounds[k]``) -> the same number as columns of at most 18.

    A round splits every column at once and moves the parts left: ``x_k <- x_k % 10 +
    x_{k-1} // 10``, one table per column. While those tables would cost more than ~600
    lanes (one per ten of a column's range: N >= 7), a round takes two layers instead:
    ``q = x // 100``, then ``t = r // 10`` on the remainder ``r = x - 100 q`` (0..99), and
    ``x_k <- r_k - 10 t_k + t_{k-1} + q_{k-2}`` (at most 9 + 9 + bound/100): ~10x fewer
    lanes, and the same depth (1296 -> 30 -> 12 for N = 16, against 1296 -> 138 -> 22 -> 11).

    Beside its tables, a round copies its columns (``torch.where(keep, x, 0)``, 2 lanes each;
    ``keep`` is 1 wherever the columns are non-zero) and takes the remainders from the
    copies. A linear form is free but keeps every column it reads alive (the N**2 products
    until the last round), and its columns may hold large offsets that the lookahead, which
    multiplies its inputs by up to 10**3, would amplify past fp32's resolution (see
    CALC_FINDINGS.md). Each round's columns are claimed within their bounds: the compiler's
    own intervals, sums of the terms' extremes, would grow round by round."""
    while max(bounds) > 18:
        held = [torch.where(keep, c, 0.0) for c in cols]
        if sum(b // 10 for b in bounds) > 300:
            q = [tw.lookup(c, {v: v // 100 for v in range(b + 1)}) if b >= 100 else 0
                 for c, b in zip(cols, bounds, strict=True)]
            r = [h - 100 * qq for h, qq in zip(held, q, strict=True)]
            t = [tw.lookup(rr, {v: v // 10 for v in range(min(b, 99) + 1)}) if b >= 10 else 0
                 for rr, b in zip(r, bounds, strict=True)]
            cols = [r[k] - 10 * t[k] + (t[k - 1] if k else 0) + (q[k - 2] if k > 1 else 0)
                    for k in range(len(cols))]
            bounds = [min(b, 9) + (min(bounds[k - 1], 99) // 10 if k else 0)
                      + (bounds[k - 2] // 100 if k > 1 else 0) for k, b in enumerate(bounds)]
        else:
            rest = [tw.lookup(c, {v: v // 10 for v in range(b + 1)}) if b >= 10 else 0
                    for c, b in zip(cols, bounds, strict=True)]
            cols = [h - 10 * r + (rest[k - 1] if k else 0)
                    for k, (h, r) in enumerate(zip(held, rest, strict=True))]
            bounds = [min(b, 9) + (bounds[k - 1] // 10 if k else 0) for k, b in enumerate(bounds)]
        cols = [tw.claim(c, 0, b, integral=True) for c, b in zip(cols, bounds, strict=True)]
    return cols


def lookahead(cols: Sequence[Any], carry_in: Any, upper: Sequence[Any] | None = None,
              off: Any = 0, window: int = WINDOW, fan_in: int = FAN_IN
              ) -> tuple[list[Any], list[Any]]:
    """Carry-lookahead over columns of value <= 18: ``carry[k]`` into column k (k = 1..m-1;
    ``carry[0]`` is ``carry_in``) by a prefix scan, and ``lead[k]``: the result is >= 10**k.

    ``upper[k]`` is the plain sum of the columns at and above k (non-negative, > 0 iff one of
    them is): the result is >= 10**k iff that is > 0 or carry[k] is 1. ``off`` = 1 forces
    every lead to 0. Every lead is ready by the scan's last level. ``window`` and ``fan_in``:
    the first level's columns per window and the later levels' groups per comparison.
    """
    m = len(cols)
    levels, span = 1, window
    while span < m - 1:
        levels, span = levels + 1, span * fan_in
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
        lo = max(0, hi - window + 1)
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
            while len(parts) < fan_in and parts[-1][0] > 0:
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
    # In half precision every weight must stay below fp16's 65504 once multiplied by the
    # step's sharpness (128) and the norm's reader scale (16 for this program's residual:
    # docs/half-precision.md): a compared value's coefficients stay at most 16, so windows
    # of one column and 4 groups per level (one scan level more: 9 layers at N = 3).
    scan = dict(window=1, fan_in=4) if options.get("precision") == "half" else {}

    def calculator_advanced(x: torch.Tensor) -> torch.Tensor:
        ops = _calc.Operands(x, n)
        a, b = ops.a, ops.b
        is_sub = ops.is_op["-"]

        # '*': digit products, then carry-save rounds down to <= 18 per column.
        mul = [sum(a["*"][i] * b["*"][k - i] for i in range(n) if 0 <= k - i < n)
               for k in range(m)]
        mul = carry_save(mul, [81 * sum(1 for i in range(n) if 0 <= k - i < n)
                               for k in range(m)], ops.is_op["*"].bool())
        # '+' shares the row (the other operation's digits are zero).
        add = [a["+"][k] + b["+"][k] if k < n else 0 for k in range(m)]
        cols = [mul[k] + add[k] for k in range(m)]
        # The result is >= 10**k iff a column at or above k is non-zero or a carry reaches
        # column k: the lookahead decides it with carry[k]. (All 0 for '-'.)
        upper = [sum(cols[j] for j in range(k, m)) for k in range(m)]
        carry, lead = lookahead(cols, 0, upper, **scan)
        digits = [cols[k] + carry[k] - 10 * carry[k + 1] for k in range(m - 1)]
        digits.append(cols[m - 1] + carry[m - 1])  # the carry out of the top is dropped

        # '-': A + (99..9 - B) + 1 and B + (99..9 - A) + 1, each with its own short lookahead
        # (N columns, plus one for the carry out of the top: 1 iff A >= B).
        up = [9 * is_sub + a["-"][k] - b["-"][k] for k in range(n)] + [0]
        down = [9 * is_sub + b["-"][k] - a["-"][k] for k in range(n)] + [0]
        carry_up, _ = lookahead(up, is_sub, **scan)
        carry_down, _ = lookahead(down, is_sub, **scan)
        up_digits = [up[k] + carry_up[k] - 10 * carry_up[k + 1] for k in range(n)]
        down_digits = [down[k] + carry_down[k] - 10 * carry_down[k + 1] for k in range(n)]
        return _calc.print_result(x, ops, digits, [1 - is_sub] + lead[1:], up_digits,
                                  down_digits, carry_up[n])

    return tw.compile(calculator_advanced, vocab=VOCAB, **options).with_domain(
        lambda: inputs(n), oracle)


program = make()
