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
import operator
import random
import re
from collections.abc import Iterable, Iterator, Sequence

import torch

import torchwright_fx as tw

VOCAB = tw.Vocab("0123456789+-*\n")
OPS = "+-*"
SEED_CASES = ["999+1\n", "999+999\n", "5-3\n", "100-100\n", "1-5\n", "100-999\n", "12*34\n",
              "13*39\n", "123*456\n", "100*100\n", "0*55\n", "999*999\n", "012*034\n"]

_PROMPT = re.compile(r"(\d+)([-+*])(\d+)\n")
# Comparisons on values up to ~10**N (A < B, |A - B| >= 10**k) must stay exact in fp32: the
# compiled ramps lose exactness around 4 * 10**6 (see the report's compiler notes).
MAX_N = 6


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
    """The prompt as read at the newline.

    ``a[op]`` and ``b[op]`` are the digits of A and B, least significant first, for the
    operator ``op``: all zero when the prompt has another operator. Splitting by operator
    costs a few lanes (one gated lane per digit, operator position and operator) and lets a
    calculator write each operation as if it were the only one, then add the results.
    ``is_op[op]`` is 1 when the prompt's operator is ``op``; ``negative`` is 1 when the
    operator is ``-`` and A < B.
    """

    def __init__(self, x: torch.Tensor, n: int):
        newline = tw.is_token(x, "\n")
        digit = tw.lookup(x, {str(d): d for d in range(10)})  # free: a per-token table
        ops = [tw.is_token(x, o) for o in OPS]
        # One head per distance: everything the newline needs is at most 2N+1 tokens back.
        # (The newline flag rides along: the printer reuses these heads.)
        back = [torch.cat([digit, *ops, newline], -1)]
        back += [tw.shift(back[0], s) for s in range(1, 2 * n + 2)]
        self.back = back
        self.n = n

        # The digit s places before the newline (0 if none), s = 0..2N+1, as one stream.
        ds = torch.cat([v[:, 0:1] for v in back], -1)

        def op_at(op: str, p: int) -> torch.Tensor:  # 1 if `op` is p places before the newline
            return back[p][:, 1 + OPS.index(op):2 + OPS.index(op)].bool()

        def spread(width: int) -> torch.Tensor:  # places `width` digits into N columns
            return torch.eye(width, n)

        # B has 1..N digits, so the operator sits p = 2..N+1 places before the newline. Then
        # B's digits are 1..p-1 places back and A's digit i is p+1+i places back (past the
        # start, the <bos> row reads as digit 0). Each digit is one gated lane per p.
        places = range(2, n + 2)
        self.a: dict[str, list[torch.Tensor]] = {}
        self.b: dict[str, list[torch.Tensor]] = {}
        for op in OPS:
            a = total(torch.where(op_at(op, p), ds[:, p + 1:p + 1 + n], 0.0) for p in places)
            b = total(torch.where(op_at(op, p), ds[:, 1:p] @ spread(p - 1), 0.0) for p in places)
            if op in "+*":
                # The answer never contains '+' or '*', so at every position at most one term
                # above is non-zero for those two: declaring their digits 0..9 keeps the
                # compiler's ranges (and so lookup sizes) tight. Not for '-': the answer's
                # sign is a second '-'.
                a, b = tw.claim(a, 0, 9, integral=True), tw.claim(b, 0, 9, integral=True)
            self.a[op] = [a[:, i:i + 1] for i in range(n)]
            self.b[op] = [b[:, j:j + 1] for j in range(n)]
        self.is_op = {op: torch.cat([op_at(op, p).float() for p in places], -1).sum(-1, True)
                      for op in OPS}

        # A < B for a subtraction, decided in the same layer as the digits: one comparison per
        # operator position p (B - A as read for that p), pushed below its threshold unless
        # the '-' is there.
        b_minus_a = torch.zeros(2 * n + 2, n)
        for col, p in enumerate(places):
            for j in range(p - 1):
                b_minus_a[j + 1, col] += 10 ** j
            for i in range(n):
                b_minus_a[p + 1 + i, col] -= 10 ** i
        minus_at = torch.cat([op_at("-", p).float() for p in places], -1)
        self.negative = ((ds @ b_minus_a - 10 ** n * (1 - minus_at)) >= 1).float().sum(-1, True)


def total(values: Iterable[torch.Tensor]) -> torch.Tensor:
    """The sum of a non-empty sequence of streams."""
    return functools.reduce(operator.add, values)


def number(digits: Sequence[torch.Tensor]) -> torch.Tensor:
    """The value of a digit list (least significant first): a free linear map."""
    return sum(dg * 10 ** k for k, dg in enumerate(digits))


def print_answer(x: torch.Tensor, operands: Operands, digits: Sequence[torch.Tensor],
                 lengths: dict[tuple[int, bool], torch.Tensor],
                 neg_digits: Sequence[torch.Tensor] | None = None) -> torch.Tensor:
    """The output code stream for the answer: the digits (numbers 0..9 at the newline, least
    significant first) without leading zeros, after a '-' if negative (then from
    ``neg_digits`` if given).

    ``lengths[(l, neg)]`` is a 0/1 stream at the newline, 1 exactly when the answer has l
    significant digits and that sign (one of them is 1). Each is one case of the answer; the
    answer's j-th token is, case by case, a fixed digit or '-'.

    Printing works like ``tw.emit`` with the case choice folded into its gate: the digits and
    the case flags are latched from the newline, and at the position j steps after it the
    output is ``<eos>`` plus, for each case, ``relu(code - <eos> - 20 * (2 - at_j - case))``:
    the token's code when both flags are 1 and exactly 0 otherwise. One lane per (case,
    token), all in the layer right after the digits are known.
    """
    newline = tw.is_token(x, "\n")
    cases = list(lengths)
    neg_digits = [] if neg_digits is None else list(neg_digits)
    held = tw.latch(torch.cat([*[lengths[c] for c in cases], *digits, *neg_digits], -1),
                    newline)
    flag = {c: held[:, i:i + 1] for i, c in enumerate(cases)}
    dig = [held[:, len(cases) + k:len(cases) + k + 1] for k in range(len(digits))]
    neg_dig = [held[:, len(cases) + len(dig) + k:len(cases) + len(dig) + k + 1]
               for k in range(len(neg_digits))] or dig
    back = operands.back
    eos, zero, minus = tw.token("<eos>"), tw.token("0"), tw.token("-")

    def at(j: int) -> torch.Tensor:  # 1 at the position j steps after the newline
        return back[j][:, 4:5]  # (answers have at most 2N + 1 tokens: within reach)

    out = torch.zeros_like(newline) + eos
    for (length, neg) in cases:
        text = (["-"] + [neg_dig[k] for k in reversed(range(length))] if neg
                else [dig[k] for k in reversed(range(length))])
        for j, tok in enumerate(text):
            code = minus - eos if isinstance(tok, str) else tok + (zero - eos)
            out = out + torch.relu(code - 20.0 * (2.0 - at(j) - flag[(length, neg)]))
    return out
