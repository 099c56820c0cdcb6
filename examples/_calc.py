"""Shared by the calculator examples: the prompt format, the oracle and the prompt generators,
reading the operands at the newline, and printing the answer after it.

Prompts are ``A op B\\n`` with ``op`` one of ``+ - *`` and ``A``, ``B`` of 1..N digits each
(leading zeros allowed: ``012*034``). The answer is the exact integer result with no leading
zeros and a ``-`` when it is negative (``1-5`` -> ``-4``, ``0*55`` -> ``0``).

Everything here is computed *at the newline*: that is where the model predicts the first
answer token, and where every operand digit is at a fixed distance behind it once the
operator's position is known.
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
import random
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch

import torchwright_fx as tw

VOCAB = tw.Vocab("0123456789+-*\n")
OPS = "+-*"
SEED_CASES = ["999+1\n", "999+999\n", "5-3\n", "100-100\n", "1-5\n", "100-999\n", "12*34\n",
              "13*39\n", "123*456\n", "100*100\n", "0*55\n", "999*999\n", "012*034\n"]

_PROMPT = re.compile(r"(\d+)([-+*])(\d+)\n")
# The calculators work digit by digit (no compared value grows like 10**N), so the limit is one
# of size, not of fp32: 16 digits (answers of up to 32).
MAX_N = 16


def check_digits(n: int) -> None:
    if not 1 <= n <= MAX_N:
        raise ValueError(f"the calculators take operands of 1 to {MAX_N} digits, got n={n}")


# -- plain Python: the specification -------------------------------------------------------------
def oracle(prompt: str) -> str:
    m = _PROMPT.fullmatch(prompt)
    assert m, f"not a calculator prompt: {prompt!r}"
    a, op, b = int(m[1]), m[2], int(m[3])
    return str(a + b if op == "+" else a - b if op == "-" else a * b)


def edge_cases(n: int) -> list[str]:
    """The seed's cases that fit N digits, plus the longest and the extreme inputs."""
    big, one = "9" * n, "0" * (n - 1) + "1"
    cases = [c for c in SEED_CASES if all(len(t) <= n for t in re.split(r"[-+*\n]", c) if t)]
    cases += [f"{big}{op}{big}\n" for op in OPS]
    cases += [f"{'0' * n}{op}{'0' * n}\n" for op in OPS]
    cases += [f"{one}-{big}\n", f"{big}-{one}\n", f"0-{big}\n", f"{big}*{one}\n",
              f"{one}+{big}\n", "0+0\n", "0-0\n", "0*0\n", "9*9\n", "1-9\n"]
    if n > 1:  # borrows across every digit, both signs; equal and nearly equal operands
        ten = "1" + "0" * (n - 1)
        cases += [f"{ten}-1\n", f"1-{ten}\n", f"{ten}-{big[1:]}\n", f"{big[1:]}-{ten}\n",
                  f"{big}-{big}\n", f"{big[:-1]}8-{big}\n", f"{ten}*{ten}\n"]
    return list(dict.fromkeys(cases))


def _interesting(n: int) -> list[int]:
    vals = {0, 1, 2, 5, 9}
    for k in range(1, n):
        vals |= {10 ** k - 1, 10 ** k, 10 ** k + 1, 5 * 10 ** k, 10 ** (k + 1) - 10 ** k}
    vals |= {int("9" * n), int("9" * n) - 1, int("12345678901"[:n]), int("98765432109"[:n])}
    return sorted(v for v in vals if v < 10 ** n)


def inputs(n: int) -> Iterator[str]:
    """Every prompt when N = 1 (all 300); otherwise every pair of operands from a set of
    boundary values (0, 1, 9, 10**k - 1, 10**k, ...), each operand also zero-padded to N."""
    if n == 1:
        for op in OPS:
            for a, b in itertools.product(range(10), repeat=2):
                yield f"{a}{op}{b}\n"
        return
    vals = _interesting(n)
    for op in OPS:
        for a, b in itertools.product(vals, repeat=2):
            yield f"{a}{op}{b}\n"
    for op in OPS:
        for a, b in itertools.product(vals, repeat=2):
            yield f"{a:0{n}d}{op}{b:0{n}d}\n"


def _operand(rng: random.Random, n: int) -> str:
    """A number of 1..N significant digits (uniform in length), zero-padded a quarter of the
    time to a random width up to N."""
    digits = rng.randint(1, n)
    v = rng.randint(0, 9) if digits == 1 else rng.randint(10 ** (digits - 1), 10 ** digits - 1)
    text = str(v)
    if rng.random() < 0.25:
        text = text.zfill(rng.randint(len(text), n))
    return text


def sample(rng: random.Random, n: int) -> str:
    return f"{_operand(rng, n)}{rng.choice(OPS)}{_operand(rng, n)}\n"


# -- the program side -----------------------------------------------------------------------------
class Operands:
    """The prompt as read at the newline, digit by digit (no number above 9 is formed).

    ``a[op]`` and ``b[op]`` are the digits of A and B, least significant first, for the
    operator ``op``: zero when the prompt has another operator, except ``a["*"]``, which is A
    whatever the operator (products with ``b["*"]`` are zero all the same, and are ready a
    layer earlier). Splitting by operator lets a calculator write each operation as if it
    were the only one, then add the results. ``is_op[op]`` is 1 when the prompt's operator
    is ``op``.

    How they are read: the digit (and an operator flag) i + 1 places back, for i < N, serves
    both operands (``places_back``). At the operator it reads A's digit i (past the start,
    the ``<bos>`` row reads as digit 0), which the newline latches; at the newline it reads
    B's digit j, kept (by one hinge per digit and operator) when no operator lies between.
    For N <= 7, B is ready after 1 layer and A after the second layer's attention; from
    N = 8, one layer later (``two_level`` chooses). ``back[i]`` is [digit, operator flag]
    i + 1 places back.
    """

    def __init__(self, x: torch.Tensor, n: int, two_level: bool | None = None):
        self.n = n
        self.newline = tw.is_token(x, "\n")
        self.digit = digit = tw.lookup(x, {str(d): d for d in range(10)})  # free: a token table
        flags = torch.cat([tw.is_token(x, o) for o in OPS], -1)
        any_op = tw.is_token(x, list(OPS))
        # The latest operator's flags: the prompt's operator at the newline and during the
        # answer (until the answer prints its own '-').
        latest = tw.latch(flags, any_op)
        self.is_op = {op: latest[:, i:i + 1] for i, op in enumerate(OPS)}

        self.back = back = places_back(torch.cat([digit, any_op], -1), n, two_level=two_level)
        a = tw.latch(torch.cat([v[:, 0:1] for v in back], -1), any_op)
        seen = itertools.accumulate(v[:, 1:2] for v in back)  # operators 1..j+1 places back
        self.a: dict[str, list[torch.Tensor]] = {"*": [a[:, i:i + 1] for i in range(n)]}
        self.b: dict[str, list[torch.Tensor]] = {op: [] for op in OPS}
        for j, op_seen in enumerate(seen):
            for op in OPS:
                self.b[op].append(torch.relu(back[j][:, 0:1] - 10 * op_seen
                                             - 10 * (1 - self.is_op[op])))
        for op in "+-":
            self.a[op] = [torch.relu(v - 10 * (1 - self.is_op[op])) for v in self.a["*"]]
        self._after: list[torch.Tensor] = []

    def after_newline(self, j: int) -> torch.Tensor:
        """1 at the position j steps after the newline (and 0 at the others). Built by doubling:
        a vector of the newline flag at distances 0..2**b - 1 is itself shifted by 2**b, so
        distances up to 2**b cost b heads (one per layer, in the layers the calculators have
        anyway) instead of one head per distance."""
        while len(self._after) <= j:
            if not self._after:
                self._after = [self.newline]
            else:
                block = torch.cat(self._after, -1)
                moved = tw.shift(block, len(self._after))
                self._after += [moved[:, i:i + 1] for i in range(len(self._after))]
        return self._after[j]


def places_back(v: torch.Tensor, n: int, w: int = 2, two_level: bool | None = None
                ) -> list[torch.Tensor]:
    """``v`` (``w`` columns) 1, 2, ..., n places back. Up to 7 places, one head each, in one
    layer. From 8, in two layers: 1..b places back (b heads, b ~ sqrt(n)), then that block
    b, 2b, ... places further back (one head each): 7 heads instead of 16 at n = 16. Every
    layer of the model has as many heads as its busiest one, so this saves ~(n - 2 sqrt(n))
    heads in each.
    ``two_level`` forces one way or the other."""
    if not (n >= 8 if two_level is None else two_level):
        return [tw.shift(v, 1 + i) for i in range(n)]
    b = math.isqrt(n - 1) + 1  # b * b >= n
    block = torch.cat([tw.shift(v, 1 + r) for r in range(b)], -1)
    blocks = [block] + [tw.shift(block, b * q) for q in range(1, -(-n // b))]
    return [blocks[i // b][:, (i % b) * w:(i % b + 1) * w] for i in range(n)]


def total(values: Iterable[torch.Tensor]) -> torch.Tensor:
    """The sum of a non-empty sequence of streams."""
    return functools.reduce(operator.add, values)


def print_answer(x: torch.Tensor, operands: Operands, digits: Sequence[torch.Tensor],
                 lengths: dict[tuple[int, bool], torch.Tensor],
                 neg_digits: Sequence[torch.Tensor] | None = None) -> torch.Tensor:
    """The output code stream for the answer: the digits (numbers 0..9 at the newline, least
    significant first) without leading zeros, after a '-' if negative (then from
    ``neg_digits`` if given).

    ``lengths[(l, neg)]`` is a 0/1 stream at the newline, 1 exactly when the answer has l
    significant digits and that sign (one of them is 1). The newline holds ``last``, the
    index of the answer's last token (``l - 1``, plus 1 for the '-'), the sign and the
    digits; the digits above the top one are 0, so the '-' can be written as the digit just
    above it (a flag per place adds ``'-' - '0'`` to that place's code).

    At the position j steps after the newline the answer's token j is the place
    ``k = last - j`` (counted from the units): 2 layers after the latch, whatever N. The
    first takes one comparison per place, ``last - j == k`` (j is a linear map of the
    flags "j steps after the newline", so 0 outside the answer, where a large offset
    switches every comparison off), and picks the sign's digits; the second multiplies
    each place's flag by its code. The output is ``<eos>`` plus the sum: ``<eos>`` past the
    answer. (A table of one term per (length, token), as before, would be one layer but
    ~2.5 N**2 residual columns, d_model 1024 at N = 16.)
    """
    newline = tw.is_token(x, "\n")
    cases = list(lengths)
    neg_digits = list(digits) if neg_digits is None else list(neg_digits)
    m, m_neg = len(digits), len(neg_digits)
    most = max(length - 1 + neg for length, neg in cases)  # the largest `last`
    last = total((length - 1 + neg) * lengths[(length, neg)] for length, neg in cases)
    negative = total(lengths[c] for c in cases if c[1])
    sign_at = [lengths.get((k, True), torch.zeros_like(newline)) for k in range(1, m_neg + 1)]
    # The digits are 0..9 at every position (each a column sum less ten times its carry);
    # claimed before the latch, which copies only what fp16 and bf16 hold in a half build
    # (the compiler's own intervals, sums of their terms' extremes, reach 379).
    digits = [tw.claim(d, 0, 9, integral=True) for d in digits]
    neg_digits = [tw.claim(d, 0, 9, integral=True) for d in neg_digits]
    held = tw.latch(torch.cat([last, negative, *sign_at, *digits, *neg_digits], -1), newline)
    # What the newline (or <bos>) holds, claimed: the compiler's own intervals for the
    # digits (sums of their terms' extremes) grow with N, and so would the output's.
    last = tw.claim(held[:, 0:1], 0, most, integral=True)
    flags = tw.claim(held[:, 1:2 + m_neg], 0, 1, integral=True)
    negative, sign_at = flags[:, 0:1], [flags[:, 1 + k:2 + k] for k in range(m_neg)]
    dig = tw.claim(held[:, 2 + m_neg:], 0, 9, integral=True)
    pos_dig = [dig[:, k:k + 1] for k in range(m)]
    neg_dig = [dig[:, m + k:m + k + 1] for k in range(m_neg)]
    eos, zero, minus = tw.token("<eos>"), tw.token("0"), tw.token("-")

    at = [operands.after_newline(j) for j in range(most + 1)]
    j_now = sum(j * a for j, a in enumerate(at))  # j at the answer's positions, else 0
    inside = sum(at)  # 1 at the answer's positions
    place = last - j_now + (2 * most + 2) * (1 - inside)  # k, or > most outside the answer
    out = torch.zeros_like(newline) + eos
    for k in range(max(m, m_neg + 1)):
        code = pos_dig[k] if k < m else torch.zeros_like(newline)
        if k < m_neg:  # the sign's digits: one product per place, beside the comparisons
            code = code + negative * (neg_dig[k] - code)
        if 1 <= k <= m_neg:
            code = code + (minus - zero) * sign_at[k - 1]
        out = out + (place == k).float() * (code + (zero - eos))
    return out


def print_result(x: torch.Tensor, operands: Operands, digits: Sequence[Any],
                 lead: Sequence[Any], up_digits: Sequence[Any], down_digits: Sequence[Any],
                 a_ge_b: Any) -> torch.Tensor:
    """The answer of a calculator that computed, at the newline:

    - ``digits``: the 2N digits of the '+' or '*' result (all 0 for '-'), and ``lead[k]``:
      1 when that result is >= 10**k (``lead[0]`` is 1 unless the operator is '-');
    - for '-', the digits of ``A + (10**N - 1 - B) + 1`` (``up_digits``) and of
      ``B + (10**N - 1 - A) + 1`` (``down_digits``), the ten's complements of A - B and
      B - A, and ``a_ge_b``, the carry out of the first's top column: 1 exactly when A >= B
      (0 for the other operators). Then A - B's digits are ``up_digits``, else B - A's are
      ``down_digits``.

    For '-', |A - B| >= 10**k iff a digit at or above k of the one that holds it is non-zero:
    one comparison of a sum of at most 9N digits, switched off by the sign.
    """
    n, m = len(up_digits), len(digits)
    is_sub = operands.is_op["-"]
    off = 9 * n + 1
    pos_lead = [a_ge_b] + [(sum(up_digits[k:]) - off * (1 - a_ge_b) >= 1).float()
                           for k in range(1, n)]
    neg_lead = [is_sub - a_ge_b] + [(sum(down_digits[k:]) - off * a_ge_b >= 1).float()
                                    for k in range(1, n)]
    lengths: dict[tuple[int, bool], torch.Tensor] = {}
    for length in range(1, m + 1):
        is_len = lead[length - 1] - (lead[length] if length < m else 0)
        if length <= n:
            is_len = is_len + pos_lead[length - 1] - (pos_lead[length] if length < n else 0)
            lengths[(length, True)] = neg_lead[length - 1] - (
                neg_lead[length] if length < n else 0)
        lengths[(length, False)] = is_len
    answer = [digits[k] + (up_digits[k] if k < n else 0) for k in range(m)]
    return print_answer(x, operands, answer, lengths, down_digits)
