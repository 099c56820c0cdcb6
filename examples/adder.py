"""adder: ``123+456\\n`` -> ``579``. Schoolbook addition: digit pairs through a lookup table,
carries right to left.

Operands have 1..``n_digits`` digits each (default 3; leading zeros may be typed), and the
sum is printed without leading zeros: ``99+1`` -> ``100``, ``0+0`` -> ``0``, ``007+3`` ->
``10``, and a sum with one digit more than the operands keeps it: ``999+999`` -> ``1998``.

At the newline every digit sits a fixed distance back, except that where ``a`` ends depends
on ``len(b)``, known only at run time. It is one of 1..n, so the program reads the operands
under each hypothesis and keeps the one whose ``+`` is where it assumed (``align``). Then one
layer per place: ``pair + carry`` goes through the table, giving that place's digit and the
next carry. The answer's width (1..n+1 digits) is known one step after the carry into the
place it depends on (the sum reaches 10**w exactly when some pair at a place >= w, or the
carry into place w, is non-zero); one ``emit`` per width prints the digits, and only the one
whose width is right fires.
"""

# report() for the default build (n_digits=3), heuristic scheduler:
#   adder: 5 layers (critical-path bound 5), d_model=32 (peak live width 29), d_head=32,
#   11 heads/layer (23 used), 48 lanes/layer, 249,632 parameters, compiled in under 0.5s
# (the seed: 18 layers at d=512, 5.6M parameters, and it lost the top digit of sums >= 1000).
# Depth is n_digits + 2 (align, n carries, print): n_digits=1, 2, 4, 6, 8 give 3, 4, 6, 8, 10
# layers; nothing grows like 10**n, so long operands stay within fp32's exact range.
# d_head=32, the portable default (vLLM); no head moves more than 8 values, so d_head=8
# gives 80,672 parameters for transformers and llama.cpp alone.

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from typing import Any

import torch

import torchwright_fx as tw

N_DIGITS = 3
VOCAB = tw.Vocab("0123456789+\n")
DEMOS = ["123+456\n", "99+1\n", "999+999\n", "0+0\n"]
EDGE_CASES = [
    # the seed's own cases
    "12+34\n", "123+456\n", "100+200\n", "0+0\n", "99+1\n",
    # sums >= 1000 (the seed dropped their top digit), the longest inputs, zero padding
    "999+999\n", "999+1\n", "1+999\n", "500+500\n", "5+995\n", "001+999\n",
    "000+000\n", "007+3\n", "0+9\n", "9+9\n", "09+01\n", "10+90\n", "555+445\n",
]

# The digit-pair table: the sum of two digits plus the incoming carry (0..19) -> this
# place's digit and the carry into the next place.
SUM_DIGIT = {s: s % 10 for s in range(20)}
CARRY = {s: s // 10 for s in range(20)}


def oracle(prompt: str) -> str:
    a, b = prompt.strip().split("+")
    return str(int(a) + int(b))


def inputs(n_digits: int = N_DIGITS) -> Iterator[str]:
    """A representative enumeration (the whole domain is about 1.2M prompts at n=3): every
    pair of widths, operands around every carry pattern, minimal and zero-padded."""
    top = 10 ** n_digits
    special = {0, 1, 5, 9, 10, 11, 50, 99, 100, 101, 499, 500, 501, 998, 999}
    values = sorted({*range(0, top, top // 25 + 1), *(v for v in special if v < top)})
    for a, b in itertools.product(values, repeat=2):
        yield f"{a}+{b}\n"
    for a, b in itertools.product(values[::4], repeat=2):
        yield f"{a:0{n_digits}d}+{b}\n"
        yield f"{a}+{b:0{n_digits}d}\n"


def sample(rng: random.Random, n_digits: int = N_DIGITS) -> str:
    def operand() -> str:
        return "".join(rng.choice("0123456789") for _ in range(rng.randint(1, n_digits)))

    return f"{operand()}+{operand()}\n"


def make(n_digits: int = N_DIGITS, **options: Any) -> tw.Compiled:
    lengths = range(1, n_digits + 1)

    def adder(x: torch.Tensor) -> torch.Tensor:
        newline = tw.is_token(x, "\n")
        digit = tw.lookup(x, {str(d): d for d in range(10)})  # 0 on '+' and <bos>
        # One head per distance moves (digit, is '+') to the newline; `back[k]` is k places
        # back. Reading past the start gives the <bos> row: digit 0, so short `a` pads itself.
        token = torch.cat([digit, tw.is_token(x, "+").float()], dim=-1)
        back = {k: tw.shift(token, k) for k in range(1, 2 * n_digits + 2)}

        def digit_back(k: int) -> torch.Tensor:
            return back[k][:, 0:1]

        # align: if len(b) = L, b's place j is j+1 back, the '+' L+1 back, a's place j L+2+j
        # back. Exactly one hypothesis has its '+' in place, so summing the selected pairs
        # gives the aligned pair; b's places beyond L are 0.
        pairs = []
        for j in range(n_digits):
            pair: Any = 0  # a stream once the first term is added
            for L in lengths:
                plus_in_place = back[L + 1][:, 1:2].bool()
                b_j = digit_back(j + 1) if j < L else 0
                pair = pair + torch.where(plus_in_place, digit_back(L + 2 + j) + b_j, 0)
            pairs.append(tw.claim(pair, 0, 18, integral=True))  # one hypothesis holds

        # ripple: right to left, one place per layer. carries[j] is the carry into place j.
        digits: list[Any] = []
        carries: list[Any] = [0]
        for pair in pairs[:-1]:
            digits.append(tw.lookup(pair + carries[-1], SUM_DIGIT))
            carries.append(tw.lookup(pair + carries[-1], CARRY))
        digits.append(tw.lookup(pairs[-1] + carries[-1], SUM_DIGIT))
        # The carry out of the top place is the answer's extra digit and, by itself, says the
        # sum has n+1 digits; its key is moved off the table away from the newline, so it is
        # 0 there and serves as that width's trigger with no comparison (no extra layer).
        off_table = len(CARRY) * (1 - newline.float())
        carries.append(tw.lookup(pairs[-1] + carries[-1] + off_table, CARRY, default=0))
        digits.append(carries[-1])
        held = tw.latch(torch.cat([tw.token("0") + d for d in digits], dim=-1), newline)

        # print: the answer has w digits when the sum reaches 10**(w-1) but not 10**w. Every
        # pair is a non-negative integer, so the sum reaches 10**w exactly when a pair at a
        # place >= w, or the carry into place w, is non-zero: a small count, known as soon as
        # that carry is (comparing the sum itself would need 10**n-sized values, which fp32
        # cannot compare exactly for long operands). `off` keeps the tests at the newline.
        off = (18 * n_digits + 2) * (1 - newline.float())
        reaches = [newline.float()]  # every sum reaches 10**0 = 1 digit
        for w in range(1, n_digits):
            count = sum(pairs[w:], carries[w])
            reaches.append((count - off >= 1).float())
        reaches.append(carries[n_digits])  # reaches 10**n: the top carry, 0 off the newline
        reaches.append(torch.zeros_like(newline))  # the sum stays below 10**(n+1)
        out: Any = 0
        for w in range(1, n_digits + 2):
            # reaches[w-1] - reaches[w] is 0 or 1: the tests are nested.
            width_is_w = tw.claim(reaches[w - 1] - reaches[w], 0, 1, integral=True)
            items = [held[:, j:j + 1] for j in reversed(range(w))] + ["<eos>"]
            out = out + tw.emit(width_is_w, items, default=0)  # 0 where it is not printing
        return out

    return tw.compile(adder, vocab=VOCAB, **options).with_domain(
        lambda: inputs(n_digits), oracle)


program = make()
