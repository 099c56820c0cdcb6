"""calculator_simple: ``12*34\\n`` -> ``408``; ``+ - *`` on integers of up to N digits.

Schoolbook arithmetic, one column at a time. Every operation is first written as a row of
decimal columns x_0..x_{2N-1} (free linear maps of the operand digits, plus one exact
product per digit pair for ``*``), then a single fold runs right to left through one lookup
table, ``carry, digit = divmod(x_k + carry, 10)``. Subtraction is an addition too: the
smaller operand's ten's complement is added to the larger one (columns ``9 + big - small``,
a carry of 1 into the first column), and the carry out of the top is dropped.

Depth: 1 layer reads the operands, 1 forms the columns, 2N-1 run the fold, 1 prints
(its leading-zero test rides along with the fold). N = 1..6 (fp32 keeps every compared
value an exact integer); N = 2: 6 layers, N = 4: 10, N = 6: 14.

report() for N=3 (default); the seed's build was 29 (22 with CP-SAT) layers at d=1024, 129M
parameters:
  calculator_simple: 8 layers (critical-path bound 8), d_model=128 (peak live width 77),
  d_head=32, 8 heads/layer (11 used), 68 lanes/layer, 1,264,000 parameters (99.4% zeros)
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


def make(n: int = N, **options: Any) -> tw.Compiled:
    _calc.check_digits(n)
    m = 2 * n  # columns: enough for the longest product (and for the sum's carry)

    def calculator_simple(x: torch.Tensor) -> torch.Tensor:
        ops = _calc.Operands(x, n)
        a, b, neg = ops.a, ops.b, ops.negative
        is_sub = ops.is_op["-"]

        # The columns of each operation; the operand digits of the other two are zero, so
        # adding the three rows gives the row of the prompt's operation.
        sign = 1 - 2 * neg  # subtract the smaller from the larger
        cols = []
        for k in range(m):
            add = a["+"][k] + b["+"][k] if k < n else 0
            sub = 9 * is_sub + (sign * (a["-"][k] - b["-"][k]) if k < n else 0)
            mul = sum(a["*"][i] * b["*"][k - i] for i in range(n) if 0 <= k - i < n)
            cols.append(add + sub + mul)

        # The fold: carry_{k+1} = (x_k + carry_k) // 10, one lookup table per column.
        top = 100 * n + 20  # above any x_k + carry_k
        div10 = {v: v // 10 for v in range(top + 1)}
        carry = [is_sub]  # the ten's complement's +1
        for k in range(m - 1):
            carry.append(tw.lookup(cols[k] + carry[k], div10))
        digits = [cols[k] + carry[k] - 10 * carry[k + 1] for k in range(m - 1)]
        digits.append(cols[m - 1] + carry[m - 1])  # the carry out of the top is dropped

        # How many digits to print. For + and * (columns >= 0), the result is >= 10**k iff a
        # column at or above k is non-zero or column k-1 passes a carry on
        # (x_{k-1} + carry_{k-1} >= 10): one comparison, in the same layer as that carry.
        # Switched off for -, whose columns are the complement's.
        gate = 10 * (top + 1) * (m + 1)
        lead = [1 - is_sub]
        for k in range(1, m):
            above = sum(cols[j] for j in range(k, m))
            lead.append(((10 * above + cols[k - 1] + carry[k - 1] - gate * is_sub) >= 10).float())
        # For -, |A - B| is a linear map of the digits: its lengths are known from the start.
        # |A - B| < 10**n; the claim keeps the range that tight (the digit streams' own ranges
        # would allow more), so the width tests stay within fp32's exact range up to n = 6.
        top = 10 ** n - 1
        diff = tw.claim(_calc.number(a["-"]) - _calc.number(b["-"]), -top, top, integral=True)
        sub_lead = [is_sub] + [((diff >= 10 ** k).float() + (-diff >= 10 ** k).float())
                               for k in range(1, n)]
        lengths: dict[tuple[int, bool], torch.Tensor] = {}
        for length in range(1, m + 1):
            is_len = lead[length - 1] - (lead[length] if length < m else 0)
            if length <= n:
                sub_len = sub_lead[length - 1] - (sub_lead[length] if length < n else 0)
                lengths[(length, True)] = neg * sub_len
                is_len = is_len + sub_len - lengths[(length, True)]
            lengths[(length, False)] = is_len
        return _calc.print_answer(x, ops, digits, lengths)

    return tw.compile(calculator_simple, vocab=VOCAB, **options).with_domain(
        lambda: inputs(n), oracle)


program = make()
