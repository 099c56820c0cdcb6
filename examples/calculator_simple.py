"""calculator_simple: ``12*34\\n`` -> ``408``; ``+ - *`` on integers of up to N digits
(N = 1..16).

Schoolbook arithmetic, one column at a time, digit by digit: no value wider than a column
sum (at most 81 N) is ever formed. ``+`` and ``*`` are written as one row of decimal columns
x_0..x_{2N-1} (free linear maps of the operand digits, plus one exact product per digit pair
for ``*``), then a single fold runs right to left through one lookup table per column,
``carry, digit = divmod(x_k + carry, 10)``. Subtraction runs two short folds beside it, on
the ten's complements ``A + (10**N - 1 - B) + 1`` and ``B + (10**N - 1 - A) + 1`` (columns
``9 + a_k - b_k`` and ``9 + b_k - a_k``, a carry of 1 into the first): the first carries 1
out of its top column exactly when A >= B (that is the sign, no comparison of numbers),
and then its digits are A - B's; otherwise the second's are B - A's.

Depth: 2 layers read the operands (3 from N = 8, where they are read in two levels of
~sqrt(N) heads), the products take 1, 2N-1 run the fold (the leading-zero tests ride along
with it), 2 print: 2N + 3 layers up to N = 7, 2N + 4 from N = 8 (N = 2: 7, 6: 15, 10: 24,
16: 36).

report() for N=3 (default); the seed's build was 29 (22 with CP-SAT) layers at d=1024, 129M
parameters:
  calculator_simple: 9 layers (critical-path bound 9), d_model=64 (peak live width 54),
  d_head=32, 6 heads/layer (17 used), 58 lanes/layer, 545,984 parameters (99.6% zeros)
N = 16: 36 layers, d_model 256, 18.2M parameters.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import torch

import torchwright_fx as tw
from examples import _calc
from examples._calc import VOCAB, oracle

N = 3
DEMOS = ["12*34\n", "999*999\n", "1-5\n", "100-999\n", "999+1\n", "012*034\n"]
EDGE_CASES = _calc.edge_cases(N)


def inputs(n: int = N) -> Iterator[str]:
    return _calc.inputs(n)


def sample(rng: random.Random, n: int = N) -> str:
    return _calc.sample(rng, n)


def fold(cols: list[Any], carry_in: Any, bounds: list[int], keep: Any
         ) -> tuple[list[Any], list[Any]]:
    """Carries right to left, one lookup table per column: ``carry_{k+1} = (x_k + carry_k) //
    10`` (``bounds[k]`` bounds x_k); returns the carries into columns 0..M (the last one out
    of the top) and the digits. A digit is a gated copy (``keep``: 1 wherever the row is
    non-zero), made as soon as its carry out is known: the column and carries it is computed
    from can then leave the residual stream (d_model 256 instead of 512 at N = 16)."""
    carry, most = [carry_in], 1  # most: the largest carry into column k
    for k, col in enumerate(cols):
        top = bounds[k] + most  # bounds x_k + carry_k
        most = top // 10
        carry.append(tw.lookup(col + carry[k], {v: v // 10 for v in range(top + 1)}))
    digits = [tw.claim(cols[k] + carry[k] - 10 * carry[k + 1], 0, 9, integral=True)
              for k in range(len(cols))]
    digits = [torch.where(keep, d, 0.0) if k < len(cols) - 2 else d  # (the last two: no
              for k, d in enumerate(digits)]  # layer after the fold's end)
    return carry, digits


def make(n: int = N, **options: Any) -> tw.Compiled:
    _calc.check_digits(n)
    m = 2 * n  # columns: enough for the longest product (and for the sum's carry)
    pairs = [sum(1 for i in range(n) if 0 <= k - i < n) for k in range(m)]
    bounds = [max(18 if k < n else 0, 81 * pairs[k]) for k in range(m)]
    half = options.get("precision") == "half"

    def calculator_simple(x: torch.Tensor) -> torch.Tensor:
        ops = _calc.Operands(x, n)
        a, b = ops.a, ops.b
        is_sub = ops.is_op["-"]

        # '+' and '*' share one row of columns (the other operation's digits are zero).
        is_mul = ops.is_op["*"].bool()
        # The fold reads column k k layers after the first, so column k's products can wait:
        # they take B's digits from a chain of gated copies, one layer later each, and are
        # summed into one residual column (another gated copy) a layer after they are made.
        # At most one column's products are in the residual stream at a time, not N**2.
        b_late = [torch.cat(b["*"], -1)]
        cols = []
        for k in range(m):
            late = b_late[min(max(k - 2, 0), len(b_late) - 1)]
            if k >= 3 and k - 2 >= len(b_late) and k < m - 1:
                b_late.append(torch.where(is_mul, b_late[-1], 0.0))
                late = b_late[-1]
            add = a["+"][k] + b["+"][k] if k < n else torch.zeros_like(is_sub)
            mul = sum(a["*"][i] * late[:, k - i:k - i + 1] for i in range(n) if 0 <= k - i < n)
            cols.append(add + mul if k == 0 else torch.where(is_mul, mul, add))
        carry, digits = fold(cols, 0, bounds, (1 - is_sub).bool())
        digits[m - 1] = cols[m - 1] + carry[m - 1]  # nothing is carried out of the top

        # '-' runs two short folds beside it: A + (99..9 - B) + 1 and B + (99..9 - A) + 1, the
        # ten's complements of A - B and B - A. The first carries 1 out of its top column
        # exactly when A >= B: that is the sign, and then its digits are A - B's; otherwise
        # the second's are B - A's.
        up, up_digits = fold([9 * is_sub + a["-"][k] - b["-"][k] for k in range(n)], is_sub,
                             [18] * n, is_sub.bool())
        down, down_digits = fold([9 * is_sub + b["-"][k] - a["-"][k] for k in range(n)], is_sub,
                                 [18] * n, is_sub.bool())
        a_ge_b = up[n]  # 0 unless the operator is '-'

        # How many digits to print. For + and * (columns >= 0), the result is >= 10**k iff a
        # column at or above k is non-zero or column k-1 passes a carry on
        # (x_{k-1} + carry_{k-1} >= 10): one comparison, in the same layer as that carry.
        # (For '-' this row is zero: every such test is 0.)
        # In half precision the non-zero columns are counted, not summed: a sum of columns
        # reaches 81 N**2, beyond the ~511 a half step reads (its gate would overflow fp16).
        # The count costs one column per place, so fp32 builds keep the sum (d_model 64
        # instead of 128 at N = 3).
        above_terms = [(col >= 1).float() for col in cols] if half else cols
        lead = [1 - is_sub]
        for k in range(1, m):
            above = sum(above_terms[j] for j in range(k, m))
            lead.append(((10 * above + cols[k - 1] + carry[k - 1]) >= 10).float())
        return _calc.print_result(x, ops, digits, lead, up_digits, down_digits, a_ge_b)

    return tw.compile(calculator_simple, vocab=VOCAB, **options).with_domain(
        lambda: inputs(n), oracle)


program = make()
