"""Snapping a near-integer to the exact integer: one MLP sublayer, two lanes.

A value that is a whole number in exact arithmetic but reaches the residual only to within a
small error (the decoded position, ``tw.steps_since``, a selector width: attention averages
read through a reciprocal) is made bit-exact by fp32 rounding itself. The gate of one lane is
``t + K``, where t is x without its constant c and ``K = SNAP_OFFSET + round(c)``, a whole
number near 1.5 * 2**23: there fp32's spacing is exactly 1, so the gate's dot product lands
on ``SNAP_OFFSET + n`` for the integer n that x approximates, whatever the order of its
sums, as long as x's terms stray from integers by less than 1/2 in all (``snap_error``).
Both machines pass it unchanged (SiLU(z) = z * sigmoid(z) with sigmoid(z) = 1.0 in fp32 for
z this large; ReLU(z) = z), and a constant lane subtracts SNAP_OFFSET: both products are
exact and so is their difference (Sterbenz), so the column holds n bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import Interval, fp32_exact
from torchwright_fx.ops.lanes import Bank
from torchwright_fx.ops.numerics import FP32_UNIT, SNAP_LIMIT, SNAP_NOISE, SNAP_OFFSET


def snap_error(x: Lin, rng: Interval, signal_range: Callable[[int], Interval]) -> float | None:
    """A bound on how far the fp32 terms of ``x`` (with its constant) stray from integers that
    sum to x's exact value, or None when x cannot be snapped: not a whole number in exact
    arithmetic, a term off every integer lattice, or values too large for the fp32 grid."""
    if not (rng.integral and rng.finite and rng.magnitude < SNAP_LIMIT):
        return None
    total: float = abs(x.const - round(x.const))
    reach: float = abs(round(x.const))  # the most any partial sum of the terms can reach
    for sid, c in x.terms.items():
        r = signal_range(sid)
        if r.step is None or not r.finite:
            return None
        coefficient = Fraction(c)
        if not fp32_exact(c) or (coefficient * r.step).denominator != 1:
            return None  # the term moves by a fraction of an integer
        shift = coefficient * r.offset  # the term's distance from the integers, fixed
        total += abs(float(shift - round(shift))) + abs(c) * r.noise
        reach += abs(c) * r.magnitude
    if reach >= SNAP_LIMIT:
        return None
    # fp32 rounding of every product and of the partial sums that do not hold K yet
    return total + (len(x.terms) + 1) * FP32_UNIT * reach


def snap(bank: Bank, out: int, x: Lin) -> None:
    """Put the integer nearest ``x`` into output ``out`` of ``bank`` (``snap_error`` must have
    certified it below SNAP_NOISE)."""
    # the gate lands on SNAP_OFFSET + round(x.const) + (the integers the terms approximate),
    # that is SNAP_OFFSET + x
    bank.lane(out, Lin(dict(x.terms)) + (SNAP_OFFSET + round(x.const)), Lin.constant(1.0))
    bank.hinge(out, Lin.constant(1.0), -SNAP_OFFSET)  # exactly 1.0 times -SNAP_OFFSET


def snapped_range(rng: Interval) -> Interval:
    """The facts of a snapped value: the same integers, no noise, no rounding."""
    return Interval(rng.lo, rng.hi, True)


__all__ = ["SNAP_NOISE", "snap", "snap_error", "snapped_range"]
