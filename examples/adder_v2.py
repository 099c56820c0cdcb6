"""adder_v2: ``123+456\\n`` -> ``579``, the same I/O as ``adder``, computed as arithmetic:
digits -> one number, one add, number -> digits.

Operands have 1..``n_digits`` digits (default 3, leading zeros may be typed); the sum is
printed without leading zeros (``99+1`` -> ``100``, ``0+0`` -> ``0``, ``999+999`` -> ``1998``).

Where ``adder`` ripples a carry through one layer per place, this version reads each operand
as a number (a linear function of its digits: free), adds them (free), and takes the digits
of the sum with ``floor`` staircases in a single layer, so its depth does not grow with the
operand length (until a staircase gets long enough to need two stages: n_digits >= 4).
Operands of up to 5 digits: beyond that the sum's digits, floor(sum / 10**k), are lattices of
more points than fp32 staircases resolve (the compiler refuses them); ``adder`` has no limit.
"""

# report() for the default build (n_digits=3), heuristic scheduler:
#   adder_v2: 3 layers (critical-path bound 3), d_model=32 (peak live width 28), d_head=32,
#   12 heads/layer (21 used), 410 lanes/layer, 266,720 parameters, compiled in 0.2-2s
# Most lanes are the staircase floor(total / 10) (199 steps): fewer layers than `adder`
# (5 layers, 44 lanes/layer), more lanes. n_digits=4: 4 layers (a two-stage floor).

from __future__ import annotations

from typing import Any

import torch

import torchwright_fx as tw
from examples.adder import DEMOS, EDGE_CASES, N_DIGITS, VOCAB, inputs, oracle, sample

__all__ = ["DEMOS", "EDGE_CASES", "VOCAB", "inputs", "make", "oracle", "program", "sample"]


MAX_DIGITS = 5  # the sum, one number, must stay within what fp32 staircases resolve


def make(n_digits: int = N_DIGITS, **options: Any) -> tw.Compiled:
    if not 1 <= n_digits <= MAX_DIGITS:
        raise ValueError(f"adder_v2 takes 1..{MAX_DIGITS} digits per operand (its sum is one "
                         f"fp32 number, cut into digits by floor staircases); got {n_digits}: "
                         "use examples.adder, which works digit by digit, for longer operands")
    top = 2 * 10 ** n_digits - 2  # the largest sum

    def adder_v2(x: torch.Tensor) -> torch.Tensor:
        newline = tw.is_token(x, "\n")
        digit = tw.lookup(x, {str(d): d for d in range(10)})  # 0 on '+' and <bos>
        token = torch.cat([digit, tw.is_token(x, "+").float()], dim=-1)
        back = {k: tw.shift(token, k) for k in range(1, 2 * n_digits + 2)}  # k places back

        def number(first: int, count: int) -> torch.Tensor:
            """The number whose units digit is `first` places back, `count` digits long."""
            return tw.digits_to_number([back[first + j][:, 0:1] for j in reversed(range(count))])

        # digits -> one number, one add. If len(b) = L, b is the L digits before the newline,
        # the '+' is L+1 back and a ends L+2 back (reading past the start gives <bos>, digit
        # 0, so a short `a` needs no case). Exactly one L has its '+' in place.
        total: Any = 0
        for L in range(1, n_digits + 1):
            plus_in_place = back[L + 1][:, 1:2].bool()
            total = total + torch.where(plus_in_place, number(L + 2, n_digits) + number(1, L), 0)
        total = tw.claim(total, 0, top, integral=True)  # one hypothesis holds

        # number -> digits (floor staircases, one layer), most significant first, as codes.
        places = tw.number_to_digits(total, n_digits + 1)  # [seq, n_digits + 1]
        held = tw.latch(tw.token("0") + places, newline)

        # The answer has w digits when 10**(w-1) <= total < 10**w (w = 1: total < 10).
        # `at_newline` is the total there and far below 0 elsewhere, so the width tests, and
        # the triggers built from them, fire at the newline only; one emit per width.
        at_newline = total - 10 ** (n_digits + 1) * (1 - newline.float())
        reaches = [(at_newline >= (10 ** w if w else 0)).float() for w in range(n_digits + 2)]
        out: Any = 0
        for w in range(1, n_digits + 2):
            width_is_w = tw.claim(reaches[w - 1] - reaches[w], 0, 1, integral=True)  # nested
            items = [held[:, j:j + 1] for j in range(n_digits + 1 - w, n_digits + 1)]
            out = out + tw.emit(width_is_w, [*items, "<eos>"], default=0)  # 0: not printing
        return out

    return tw.compile(adder_v2, vocab=VOCAB, **options).with_domain(
        lambda: inputs(n_digits), oracle)


program = make()
