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

import math
from collections.abc import Callable
from fractions import Fraction

from torchwright_fx.base.numerics import (
    FP32_EXACT_INTEGERS,
    FP32_UNIT,
    SILU_SCALE,
    SNAP_LIMIT,
    SNAP_NOISE,
    SNAP_OFFSET,
)
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import Interval, fp32_exact
from torchwright_fx.ops.lanes import Bank


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


def integer_sum_error(x: Lin, signal_range: Callable[[int], Interval]) -> float | None:
    """How far fp32's dot product of ``x`` (its constant included) may fall from x's exact
    value when every product is a whole number (a coefficient times a signal on a lattice it
    maps onto the integers) and every partial sum stays below 2**24 in magnitude: then each product
    and partial sum is a whole number fp32 holds, and only the terms' own noise moves them (a
    rounding at most doubles a distance from the integers it sits near). None otherwise."""
    if not (float(x.const).is_integer() and fp32_exact(x.const)):
        return None
    reach, noise = abs(x.const), 0.0
    for sid, c in x.terms.items():
        r = signal_range(sid)
        k = Fraction(c)
        if not (fp32_exact(c) and r.finite and r.step is not None
                and (k * r.step).denominator == 1 and (k * r.offset).denominator == 1):
            return None  # a product off the integers
        reach += abs(c) * (r.magnitude + r.noise)
        noise += abs(c) * r.noise
    if reach >= FP32_EXACT_INTEGERS or noise * 2 ** len(x.terms) >= SNAP_NOISE:
        return None
    return noise * 2 ** len(x.terms)


def snap(bank: Bank, out: int, x: Lin) -> None:
    """Put the integer nearest ``x`` into output ``out`` of ``bank`` (``snap_error`` must have
    certified it below SNAP_NOISE)."""
    # the gate lands on SNAP_OFFSET + round(x.const) + (the integers the terms approximate),
    # that is SNAP_OFFSET + x
    bank.lane(out, Lin(dict(x.terms)) + (SNAP_OFFSET + round(x.const)), Lin.constant(1.0))
    bank.hinge(out, Lin.constant(1.0), -SNAP_OFFSET)  # exactly 1.0 times -SNAP_OFFSET


def copy_error(x: Lin, rng: Interval, signal_range: Callable[[int], Interval]) -> float | None:
    """How far ``copy`` of x may be from x's exact (whole) value: the terms' noise and the
    fp32 rounding of one dot product; None when x is not a whole number or too large. A form
    whose terms sit off the integers (a staircase stored around a half-integer constant) cannot
    be snapped in one dot product, whose partial sums could round at a half; its copy can."""
    if not (rng.integral and rng.finite and rng.magnitude < SNAP_LIMIT):
        return None
    reach = abs(x.const)
    for sid, c in x.terms.items():
        r = signal_range(sid)
        if not r.finite or not fp32_exact(c):
            return None
        reach += abs(c) * r.magnitude
    # x's own noise (its terms' errors, as the facts bound them together), then one dot
    # product of n products and a constant: at most (n + 1) roundings of the sum of their
    # magnitudes, plus the constant's fp32 weight. ReLU's gate also holds its shift
    # M <= 2 max|x| (counted for both machines), and the down sum (x + M) - M rounds once more.
    shift = 2 * rng.magnitude
    rounding = (len(x.terms) + 2) * FP32_UNIT * (reach + shift) + FP32_UNIT * (3 * rng.magnitude)
    return rng.noise + rounding


def copy(bank: Bank, out: int, x: Lin, rng: Interval) -> None:
    """x's value computed once into output ``out`` (``copy_error`` bounds it). SwiGLU: a lane
    SiLU(S) * x / S with SiLU(S) = S exactly; ReLU: relu(x + M) - M with x + M >= 0."""
    if bank.machine.gated_up:
        bank.lane(out, Lin.constant(SILU_SCALE), x * (1.0 / SILU_SCALE))
    else:
        shift = 2.0 ** math.ceil(math.log2(max(rng.magnitude, 1.0)))
        bank.lane(out, x + shift, Lin.constant(1.0))
        bank.hinge(out, Lin.constant(1.0), -shift)


def snapped_range(rng: Interval) -> Interval:
    """The facts of a snapped value: the same integers, no noise, no rounding."""
    return Interval(rng.lo, rng.hi, True)


__all__ = ["SNAP_NOISE", "copy", "copy_error", "snap", "snap_error", "snapped_range"]
