"""calculator_scratchpad: ``12*34\\n`` -> ``008010004000000000=408``: the schoolbook work,
then the answer.

The work-token format. With M = 2N columns and W = the digits of 90N (the largest column
total; W = 3 for N = 3), the model first writes, for each column k = 0..M-1 from the right,
the column's *total* ``t_k = x_k + carry_k`` as W digits (most significant first), then
``=``, then the answer as ``calculator_simple`` prints it (``-`` if negative, no leading
zeros). The total's last digit is the answer's digit k, the rest is the carry into column
k+1. The columns x_k are those of the simple calculator:

- ``+``: ``a_k + b_k``. ``*``: ``sum_{i+j=k} a_i * b_j``.
- ``-``: the larger operand plus the ten's complement of the smaller: ``9 + big_k - small_k``
  for k < N, 0 above, and a carry of 1 into column 0. A carry of 1 out of a column means "no
  borrow"; column N shows the complement's overflow, 1.

So ``12*34`` is ``008 010 004 000 000 000`` (spaces added here): 8; 10, write 0 carry 1;
3 + 1 = 4. ``100-999`` is ``019 019 018 001 000 000=-899`` (999 + 899 + 1 = 1899).

Why the depth stays flat: every token is computed from a few tokens already in the context
at fixed distances (the previous column's carry, this column's carry digits) and the column
sums x_k, which are read once at the newline and latched. The carry chain runs along the
positions, not the layers: 3 layers for every N (read, multiply, write), and the answer
after the ``=`` copies the last digit of each total, 2 layers from the tokens.

report() for N=3 (default); the seed's build was 16 (10 with CP-SAT) layers at d=3072, 1.06B
parameters:
  calculator_scratchpad: 3 layers (critical-path bound 3), d_model=256 (peak live width 160),
  d_head=32, 25 heads/layer (28 used), 298 lanes/layer, 3,155,200 parameters (99.9% zeros)
N = 1, 2, 4, 6: 3 layers each (d_model 64, 128, 256, 512).
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from typing import Any

import torch

import torchwright_fx as tw
from examples import _calc

N = 3
VOCAB = tw.Vocab("0123456789+-*\n=")
DEMOS = ["12*34\n", "999*999\n", "1-5\n", "100-999\n", "999+1\n", "012*034\n"]


def width(n: int) -> int:
    """Digits per column total: totals are at most 81n + 9n (carries stay <= 9n)."""
    return len(str(90 * n))


def columns(prompt: str, n: int) -> tuple[list[int], int]:
    """The columns x_0..x_{2n-1} and the carry into column 0, as the model computes them."""
    m = re.fullmatch(r"(\d+)([-+*])(\d+)\n", prompt)
    assert m, f"not a calculator prompt: {prompt!r}"
    a, op, b = int(m[1]), m[2], int(m[3])
    da = [a // 10 ** k % 10 for k in range(n)]
    db = [b // 10 ** k % 10 for k in range(n)]
    if op == "+":
        return [da[k] + db[k] if k < n else 0 for k in range(2 * n)], 0
    if op == "-":
        big, small = (da, db) if a >= b else (db, da)
        return [9 + big[k] - small[k] if k < n else 0 for k in range(2 * n)], 1
    return [sum(da[i] * db[k - i] for i in range(n) if 0 <= k - i < n)
            for k in range(2 * n)], 0


def oracle_n(prompt: str, n: int) -> str:
    cols, carry = columns(prompt, n)
    work = ""
    for x in cols:
        total = x + carry
        work += f"{total:0{width(n)}d}"
        carry = total // 10
    return work + "=" + _calc.oracle(prompt)


def oracle(prompt: str) -> str:
    return oracle_n(prompt, N)


EDGE_CASES = _calc.edge_cases(N)


def inputs(n: int = N) -> Iterator[str]:
    return _calc.inputs(n)


def sample(rng: random.Random, n: int = N) -> str:
    return _calc.sample(rng, n)


class Terms:
    """Many linear values of the same few streams, built as rows of constant matrices so
    that the program (and its eager reference, run once per generated token) stays small:
    ``value = digits @ Wd + held @ Wh + const``, with ``digits[:, s]`` the digit s places
    back and ``held`` the values latched from the newline."""

    def __init__(self, n_shifts: int, n_held: int):
        self.wd: list[list[float]] = []
        self.wh: list[list[float]] = []
        self.const: list[float] = []
        self.n_shifts, self.n_held = n_shifts, n_held

    def add(self, digits: dict[int, float], held: dict[int, float], const: float = 0.0) -> None:
        self.wd.append([digits.get(s, 0.0) for s in range(self.n_shifts)])
        self.wh.append([held.get(j, 0.0) for j in range(self.n_held)])
        self.const.append(const)

    def __call__(self, digits: torch.Tensor, held: torch.Tensor) -> torch.Tensor:
        if not hasattr(self, "tensors"):
            self.tensors = (torch.tensor(self.wd).T, torch.tensor(self.wh).T,
                            torch.tensor(self.const))
        wd, wh, const = self.tensors
        return digits @ wd + held @ wh + const


def make(n: int = N, **options: Any) -> tw.Compiled:
    _calc.check_digits(n)
    m, w = 2 * n, width(n)
    top = 90 * n  # largest column total
    eos, zero = VOCAB["<eos>"], VOCAB["0"]
    eq = m * w + 1  # the '=' is eq places after the newline
    reach = eq + m + 1  # the farthest any token looks back
    gate = 2 * (top + 10 ** (w - 1))  # above any key or code below

    def carry_digits(p: int, k: int) -> dict[int, float]:
        """The carry into column k, read at the position p steps after the newline: the
        total t_{k-1} but its last digit, the tokens at newline + 1 + W(k-1) + e."""
        return {p - (1 + w * (k - 1) + e): 10.0 ** (w - 2 - e) for e in range(w - 1)}

    # The work: the token at newline + 1 + p (p = W*k + d) is digit d of the total
    # t_k = x_k + carry_k, predicted p steps after the newline. held = [x_0..x_{M-1}, carry_in].
    keys, tables = Terms(reach, m + 1), []
    units, unit_at = Terms(reach, m + 1), []
    for k in range(m):
        carry_in = {m: 1.0} if k == 0 else {}
        for d in range(w - 1):  # the carry digits of t_k: a table on x_k + carry_k
            p = w * k + d
            keys.add({} if k == 0 else carry_digits(p, k), {k: 1.0, **carry_in}, -gate)
            tables.append((p, {v: v // 10 ** (w - 1 - d) % 10 for v in range(10 ** (w - 1 - d),
                                                                           top + 1)}))
        # its last digit: x_k + carry_k - 10 * carry_{k+1}, the carry digits just written.
        p = w * k + w - 1
        digits = {} if k == 0 else carry_digits(p, k)
        for s, c in carry_digits(p, k + 1).items():
            digits[s] = digits.get(s, 0.0) - 10 * c
        units.add(digits, {k: 1.0, **carry_in}, zero - eos)
        unit_at.append(p)

    # The answer after the '=': cases (length, negative) -> its tokens. Answer digit k is the
    # last digit of t_k, at newline + W(k+1). held2 = [case flags..., negative].
    cases = [(length, neg) for length in range(1, m + 1) for neg in (False, True)
             if not (neg and length > n)]
    answer, answer_at = Terms(reach, len(cases) + 1), []
    for c, (length, neg) in enumerate(cases):
        # code - 30 * (3 - at_i - case - s), s = negative or 1 - negative: the code where all
        # three flags are 1, at most code - 30 < 0 elsewhere.
        flags = {c: 30.0, len(cases): 30.0 if neg else -30.0}
        base = -90.0 if neg else -60.0
        for i in range(length + neg):
            if neg and i == 0:
                answer.add({}, flags, VOCAB["-"] - eos + base)
            else:
                k = length - 1 - (i - neg)
                answer.add({eq + i - w * (k + 1): 1.0}, flags, zero - eos + base)
            answer_at.append(eq + i)

    def calculator_scratchpad(x: torch.Tensor) -> torch.Tensor:
        ops = _calc.Operands(x, n)
        a, b, neg = ops.a, ops.b, ops.negative
        is_sub = ops.is_op["-"]
        newline = tw.is_token(x, "\n")
        # Farther back than the operands, only the digit and the newline flag are needed.
        near = [v[:, [0, 4]] for v in ops.back]
        back = near + [tw.shift(near[0], s) for s in range(len(near), reach)]
        digits = torch.cat([v[:, 0:1] for v in back], -1)  # the digit s places back
        at = torch.cat([v[:, 1:2] for v in back], -1)  # 1 at the position s after the newline

        # The columns, at the newline (as in calculator_simple), held for the whole answer.
        sign = 1 - 2 * neg
        cols = []
        for k in range(m):
            add = a["+"][k] + b["+"][k] if k < n else 0
            sub = 9 * is_sub + sign * (a["-"][k] - b["-"][k]) if k < n else 0
            mul = sum(a["*"][i] * b["*"][k - i] for i in range(n) if 0 <= k - i < n)
            cols.append(torch.zeros_like(newline) + add + sub + mul)
        held = tw.latch(torch.cat([*cols, is_sub], -1), newline)

        out = torch.zeros_like(newline) + eos
        # Each work token is switched on only at its own position: elsewhere its table's key
        # is pushed below 0 (no entry: it reads 0) and its relu's argument below the kink.
        key = keys(digits, held) + gate * at[:, [p for p, _ in tables]]
        for j, (p, table) in enumerate(tables):
            out = out + tw.lookup(key[:, j:j + 1], table) + at[:, p:p + 1] * (zero - eos)
        out = out + torch.relu(units(digits, held) - gate * (1 - at[:, unit_at])).sum(-1, True)
        out = out + at[:, m * w:m * w + 1] * (VOCAB["="] - eos)

        # The answer's length, read at the '=' from the last digits of the totals (for -,
        # column N holds the complement's overflow 1, not a digit of |A - B|).
        last = digits[:, [eq - w * (k + 1) for k in range(m)]]
        is_minus_op = tw.latch(tw.is_token(x, "-"), tw.is_token(x, list("+-*")))
        above = last @ torch.tensor([[1.0 if j >= k else 0.0 for k in range(1, m)]
                                     for j in range(m)])
        lead = (above - is_minus_op >= 1).float()  # the answer is >= 10**k, k = 1..M-1
        # length l: lead[l-1] - lead[l] (lead[0] = 1, lead[M] = 0)
        diff = torch.tensor([[(1.0 if k == length - 1 else 0.0) - (1.0 if k == length else 0.0)
                              for length in range(1, m + 1)] for k in range(1, m)])
        is_len = lead @ diff + torch.tensor([1.0] + [0.0] * (m - 1))
        case_of = torch.tensor([[1.0 if c[0] == length else 0.0 for c in cases]
                                for length in range(1, m + 1)])
        held2 = torch.cat([tw.latch(is_len @ case_of, tw.is_token(x, "=")),
                           tw.latch(neg, newline)], -1)
        terms = answer(digits, held2) + 30 * at[:, answer_at]
        out = out + torch.relu(terms).sum(-1, True)
        return out

    return tw.compile(calculator_scratchpad, vocab=VOCAB, **options).with_domain(
        lambda: inputs(n), lambda p: oracle_n(p, n))


program = make()
