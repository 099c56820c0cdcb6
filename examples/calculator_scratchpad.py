"""calculator_scratchpad: ``12*34\\n`` -> ``008010004000000000=408``: the schoolbook work,
then the answer.

The work-token format. With M = 2N columns and W = the digits of 90N (the largest column
total; W = 3 for N = 3, 4 for N = 12..16), the model first writes, for each column
k = 0..M-1 from the right, the column's *total* ``t_k = x_k + carry_k`` as W digits (most
significant first), then ``=``, then the answer as ``calculator_simple`` prints it (``-`` if
negative, no leading zeros). The total's last digit is the result's digit k, the rest is the
carry into column k+1 (dropped out of the top). The columns x_k:

- ``+``: ``a_k + b_k``. ``*``: ``sum_{i+j=k} a_i * b_j``.
- ``-``: both ten's complement sums, side by side. Columns 0..N-1 add A and the complement
  of B, ``9 + a_k - b_k`` with a carry of 1 into column 0 (``A + (10**N - 1 - B) + 1``);
  columns N..2N-1 add B and the complement of A, ``9 + b_j - a_j`` (j = k - N), with a
  carry of 1 into column N instead of column N-1's. Column N-1 carries 1 exactly when
  A >= B: then the answer is the first half's last digits, A - B; otherwise ``-`` and the
  second half's, B - A.

So ``12*34`` is ``008 010 004 000 000 000`` (spaces added here): 8; 10, write 0 carry 1;
3 + 1 = 4. ``100-999`` is ``001 000 001 019 019 018=-899``: 100 + 000 + 1 = 101 with no
carry out of column 2 (A < B), then 999 + 899 + 1 = 1899 (its carry out dropped).

Why the depth stays flat: the carry chain runs along the positions, not the layers. Every
position knows how far it is from the newline (``tw.steps_since``: one head and a decoder
of one lane per position, for every N). At the position that writes the first digit of
t_k, the model reads the carry from the W-1 tokens just written (fixed distances), picks x_k
from the columns latched at the newline (one product per column with a flag "this is column
k"), adds them and splits the total into its W digits; the next W-1 positions copy those
digits (one shift each). After the ``=`` the answer's length and sign come from latches over
the written totals (the last non-zero final digit, in the half that holds the result), and
each answer digit is fetched from its column's last token by ``tw.gather``. Nothing is
compared as a number wider than a column total.

report() for N=3 (default); the seed's build was 16 (10 with CP-SAT) layers at d=3072, 1.06B
parameters:
  calculator_scratchpad: 5 layers (critical-path bound 5), d_model=80 (peak live width 73),
  d_head=32, 8 heads/layer (21 used), 520 lanes/layer, 1,078,960 parameters (99.8% zeros)
5 layers for every N = 1..16 (the 511 lanes of the position decoder are most of them).
"""

from __future__ import annotations

import math
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


def columns(prompt: str, n: int) -> tuple[list[int], dict[int, int]]:
    """The columns x_0..x_{2n-1}, and the carries that replace the previous column's (column
    0's, and for '-' column n's), as the model computes them."""
    m = re.fullmatch(r"(\d+)([-+*])(\d+)\n", prompt)
    assert m, f"not a calculator prompt: {prompt!r}"
    a, op, b = int(m[1]), m[2], int(m[3])
    da = [a // 10 ** k % 10 for k in range(n)]
    db = [b // 10 ** k % 10 for k in range(n)]
    if op == "+":
        return [da[k] + db[k] if k < n else 0 for k in range(2 * n)], {0: 0}
    if op == "-":
        return ([9 + da[k] - db[k] for k in range(n)] + [9 + db[k] - da[k] for k in range(n)],
                {0: 1, n: 1})
    return [sum(da[i] * db[k - i] for i in range(n) if 0 <= k - i < n)
            for k in range(2 * n)], {0: 0}


def oracle_n(prompt: str, n: int) -> str:
    cols, start = columns(prompt, n)
    work, carry = "", 0
    for k, x in enumerate(cols):
        total = x + start.get(k, carry)
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


def spaced(flag: torch.Tensor, gap: int, count: int) -> list[torch.Tensor]:
    """``flag`` gap * k places back, k = 0..count-1: exact 0/1 streams, in two attention
    layers (gap * r places back for r < b, then those b columns b * gap * q further back,
    b ~ sqrt(count)): ~2 sqrt(count) heads instead of one per distance."""
    b = math.isqrt(count - 1) + 1
    block = torch.cat([flag] + [tw.shift(flag, gap * r) for r in range(1, b)], -1)
    blocks = [block] + [tw.shift(block, gap * b * q) for q in range(1, -(-count // b))]
    return [blocks[k // b][:, k % b:k % b + 1] for k in range(count)]


def make(n: int = N, **options: Any) -> tw.Compiled:
    _calc.check_digits(n)
    m, w = 2 * n, width(n)
    top = 90 * n  # the largest column total
    eos, zero, minus = VOCAB["<eos>"], VOCAB["0"], VOCAB["-"]
    off = 2 * m + 4  # switches a comparison on the answer's places off
    half = options.get("precision") == "half"

    def calculator_scratchpad(x: torch.Tensor) -> torch.Tensor:
        # One head per place for the operands (not two levels of them): the depth stays the
        # same for every N.
        ops = _calc.Operands(x, n, two_level=False)
        a, b, is_sub = ops.a, ops.b, ops.is_op["-"]
        newline = ops.newline

        # The columns, at the newline (see the module docstring), held for the whole answer.
        cols = []
        for k in range(m):
            add = a["+"][k] + b["+"][k] if k < n else 0
            j = k if k < n else k - n
            sub = 9 * is_sub + ((a["-"][j] - b["-"][j]) if k < n else (b["-"][j] - a["-"][j]))
            mul = sum(a["*"][i] * b["*"][k - i] for i in range(n) if 0 <= k - i < n)
            # one operator's terms at a time (the others are 0): claimed, for the latch,
            # which copies only what fp16 and bf16 hold in a half build
            most = max(18, 81 * sum(1 for i in range(n) if 0 <= k - i < n))
            cols.append(tw.claim(add + sub + mul, 0, most, integral=True))
        held = tw.latch(torch.cat(cols, -1), newline)

        # start[k]: 1 where t_k's first digit is written, W k steps after the newline (k = M:
        # where the '=' is). Shifts of the newline flag: exact, as the products and gates
        # below need (a table of the decoded position would be off by ~1e-3).
        start = spaced(newline, w, m + 1)

        # The work. At start[k] the model writes t_k's first digit: t_k = x_k + carry, the
        # carry read from the W-1 tokens just written (t_{k-1} but its last digit), or the one
        # the format starts the chain with (column 0; column N for '-').
        read = sum(10 ** (e - 1) * ops.back[e - 1][:, 0:1] for e in range(1, w))
        fresh = tw.claim(start[0] + ((start[n] + is_sub) >= 2).float(), 0, 1, integral=True)
        carry = torch.where(fresh.bool(), is_sub, read)
        column = sum(start[k] * held[:, k:k + 1] for k in range(m))
        total = tw.claim(column + carry, 0, top, integral=True)
        # Its digits, most significant first: one staircase per power of ten, each of the
        # total itself (a remainder of a remainder would be a layer more).
        tens = [total] + [torch.floor(total / 10 ** e) for e in range(1, w)]
        digits = [tw.claim(tens[w - 1 - d] - 10 * (tens[w - d] if d else 0), 0, 9,
                           integral=True) for d in range(w)]
        first = _calc.total(start[:m])
        out = torch.zeros_like(newline) + eos
        out = out + torch.relu(digits[0] + (zero - eos) - 20 * (1 - first))
        for d in range(1, w):  # the next W-1 positions copy the total's other digits
            moved = tw.shift(torch.cat([first, digits[d]], -1), d)
            out = out + torch.relu(moved[:, 1:2] + (zero - eos) - 20 * (1 - moved[:, 0:1]))
        out = out + start[m] * (VOCAB["="] - eos)

        # The answer. At start[k + 1] the token is t_k's last digit, r_k. The top non-zero one
        # (latched where it is written; <bos>, index 0, if none): among all 2N for + and *,
        # among the first or the second half for '-'.
        nonzero = tw.is_token(x, list("123456789"))

        def top_nonzero(ks: range) -> torch.Tensor:
            there = _calc.total(start[k + 1] for k in ks)
            index = _calc.total((k - ks.start) * start[k + 1] for k in ks)
            if half:  # one place starts at a time
                index = tw.claim(index, 0, len(ks) - 1, integral=True)
            return tw.latch(index, ((there + nonzero) >= 2).float())

        top_all, top_low, top_high = top_nonzero(range(m)), top_nonzero(range(n)), \
            top_nonzero(range(n, m))
        # Column N-1's carry out: for '-', 1 iff A >= B (for the others, any carry).
        a_ge_b = tw.latch(read, start[n])
        below = (is_sub - a_ge_b >= 1).float()  # '-', A < B
        cases = [(below, top_high),
                 (is_sub - below, top_low),  # '-', A >= B (a_ge_b is 0 or 1 for '-')
                 (1 - is_sub, top_all)]  # '+', '*'
        if half:  # each case is a flag (the compiler's ranges of the differences reach 8)
            cases = [(tw.claim(case, 0, 1, integral=True), top) for case, top in cases]
        negative = cases[0][0]
        # The answer's token j is predicted j steps after the '='.
        is_eq = tw.is_token(x, "=")
        step = tw.steps_since(is_eq)  # j (within ~2e-3)
        if half:  # the answer is at most m + 1 tokens; from m + 1 on every test below is off
            step = torch.clamp(step, max=m + 1)  # alike, and the address stays in 256 values
        outside = off * (1 - tw.latch(is_eq, is_eq))  # before the '=': every place off
        # Token j: '-' (j = 0 if negative), else digit i = j - negative from the top, r_k
        # with k = top - i (+ N if negative), while i <= top: one comparison per case, each
        # switched off unless its case holds; the digit is fetched from r_k's position.
        sign = (negative - step - outside >= 1).float()
        digit_on = sum((top - step + negative - off * (1 - case) - outside >= 0).float()
                       for case, top in cases) - sign
        top_digit = sum(case * top for case, top in cases)
        if half:  # one case holds, and its top index is at most m - 1
            top_digit = tw.claim(top_digit, 0, m - 1, integral=True)
        where = tw.latch(tw.position(x), newline) + w * (top_digit - step + negative + 1
                                                         + n * negative)
        code = tw.gather(tw.lookup(x, {str(d): zero - eos + d for d in range(10)}), where)
        out = out + torch.relu(code - 20 * (1 - digit_on)) + sign * (minus - eos)
        if half:  # a token code: the places' and the answer's terms are exclusive
            out = tw.claim(out, 0, len(VOCAB) - 1, integral=True)
        return out

    return tw.compile(calculator_scratchpad, vocab=VOCAB, **options).with_domain(
        lambda: inputs(n), lambda p: oracle_n(p, n))


program = make()
