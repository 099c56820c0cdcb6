"""Ties: where the fp32 reference and the exact facts may decide a step differently.

The facts (``ir/ranges.py``) describe exact values: 53/100 * 100 is 53. The reference, the
user's function run eagerly in fp32, computes 52.999996 and decides ``>= 53`` false; the
compiled model, built on the facts, would say true. This happens only for a value the
reference reaches ``INEXACT``ly (rounded more than once, or through a constant fp32 does not
hold) and only when one of its attainable exact values sits exactly on a threshold of the
step: away from the thresholds the lattice spacing dwarfs fp32 rounding. A value rounded once
(a mean k/n, x / 10) cannot cross a threshold that fp32 holds, since rounding is monotone
and keeps representable numbers, but it can land *on* it: the mean 1/3 rounds to
fl(1/3) = 0.3333333432674408, so ``mean < fl(1/3)`` is false in the reference and true in
exact arithmetic. ``landing`` refuses a threshold with an attainable value other than itself
within one fp32 spacing of it; a ``PAIR`` (the sum of two ONCE values, as in
mean(a) - 2 * mean(b)) is safe at 0, whose side one rounding cannot change.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from torchwright_fx.base.errors import RangeError
from torchwright_fx.base.numerics import LANDING_SPACINGS, TIE_SCAN_LIMIT
from torchwright_fx.ir.ranges import EXACT, INEXACT, ONCE, PAIR, Interval, read_float
from torchwright_fx.ops.ffn import Fractions, Grid


def _attainable(t: Fraction, rng: Interval, values: Grid | Fractions | None) -> bool:
    if values is None:
        return False  # no exact value set: steps on it are ramps or refused elsewhere
    slack = Fraction(abs(rng.lo) + abs(rng.hi) + 1.0) * Fraction(1, 1 << 20)  # float ends
    if not Fraction(rng.lo) - slack <= t <= Fraction(rng.hi) + slack:
        return False
    if isinstance(values, Grid):
        return values.at_or_above(t) == t
    u = (t - values.offset) / values.scale  # attainable iff u = k/n with n <= max_den
    return u.denominator <= values.max_den


def tie(rng: Interval, values: Grid | Fractions | None,
        thresholds: list[Fraction] | tuple[Fraction, Fraction]) -> Fraction | None:
    """An exact value of ``rng`` that sits on a threshold while the reference reaches it
    inexactly, else None. ``thresholds`` is a list, or ``(first, period)`` for every
    ``first + n * period`` inside the range."""
    if rng.rounding < PAIR or values is None or not rng.finite:
        return None
    if isinstance(thresholds, tuple):
        first, period = thresholds
        lo = first + math.ceil((Fraction(rng.lo) - first) / period) * period
        count = math.floor((Fraction(rng.hi) - lo) / period) + 1
        if count > TIE_SCAN_LIMIT:
            return lo
        thresholds = [lo + i * period for i in range(max(count, 0))]
    found = [t for t in thresholds if _attainable(t, rng, values)
             and (t != 0 or rng.rounding == INEXACT)]  # a PAIR's zeros are exact
    return min(found, key=lambda t: (t == 0, abs(t))) if found else None  # 0: the least telling


def _neighbours(t: Fraction, values: Grid | Fractions) -> tuple[Fraction, Fraction]:
    """The attainable values nearest t strictly below and strictly above it."""
    if isinstance(values, Grid):
        below = values.at_or_below(t)
        return (below - values.spacing if below == t else below), values.above(t)
    return Fraction(values.below(t, True)), Fraction(values.above(t, True))


def _spacing(x: float) -> Fraction:
    return Fraction(float(np.spacing(np.abs(np.float32(x)))))


def _reach(t: Fraction, rng: Interval, scale: float | None) -> Fraction:
    """How far from t an exact value may be and still reach fp32's value of t in the
    reference: one fp32 spacing at t for a value rounded once (twice the rounding's reach,
    safe across a power of two); for more roundings, LANDING_SPACINGS spacings at the size of
    the operands (``scale``, else the value's range), which may exceed the value's own."""
    if rng.rounding == ONCE and scale is None:
        return _spacing(float(t))
    size = max(abs(float(t)), abs(rng.lo), abs(rng.hi), scale or 0.0)
    return LANDING_SPACINGS[min(rng.rounding, INEXACT)] * _spacing(size)


def _lands(t: Fraction, rng: Interval, values: Grid | Fractions, scale: float | None) -> bool:
    slack = Fraction(abs(rng.lo) + abs(rng.hi) + 1.0) * Fraction(1, 1 << 20)  # float ends
    lo, hi = Fraction(rng.lo) - slack, Fraction(rng.hi) + slack
    below, above = _neighbours(t, values)
    reach = _reach(t, rng, scale)
    return (lo <= below and t - below <= reach) or (above <= hi and above - t <= reach)


def _distance_bound(first: Fraction, period: Fraction, values: Grid | Fractions) -> Fraction:
    """A lower bound on |x - t| != 0 over attainable x and thresholds first + n * period: the
    differences are rationals whose denominator divides this lcm."""
    if isinstance(values, Grid):
        dens = [(values.offset - first).denominator, period.denominator,
                values.spacing.denominator]
        scale = 1
    else:
        dens = [(values.offset - first).denominator, period.denominator,
                values.scale.denominator]
        scale = values.max_den  # k/j with j <= max_den
    return Fraction(1, math.lcm(*dens) * scale)


def landing(rng: Interval, values: Grid | Fractions | None,
            thresholds: list[Fraction] | tuple[Fraction, Fraction],
            scale: float | None = None) -> Fraction | None:
    """A threshold that an attainable value other than itself may reach by the reference's
    fp32 rounding (a value not reached EXACTly), else None. ``scale``: the size of the
    operands the reference rounded (a comparison of two streams: the larger side's)."""
    if rng.rounding == EXACT or values is None or not rng.finite:
        return None
    if isinstance(values, Fractions) and values.scale == 0:
        return None
    if isinstance(thresholds, tuple):
        first, period = thresholds
        top = max(abs(rng.lo), abs(rng.hi), scale or 0.0) + 1.0
        if _distance_bound(first, period, values) > 2 * _reach(Fraction(top), rng, top):
            return None  # no attainable value comes within fp32's reach of any threshold
        lo = first + math.ceil((Fraction(rng.lo) - first) / period) * period
        count = math.floor((Fraction(rng.hi) - lo) / period) + 1
        if count > TIE_SCAN_LIMIT:
            return lo
        thresholds = [lo + i * period for i in range(max(count, 0))]
    for t in thresholds:
        if _lands(t, rng, values, scale):
            return t
    return None


def refuse_ties(rng: Interval, values: Grid | Fractions | None,
                thresholds: list[Fraction] | tuple[Fraction, Fraction], what: str,
                scale: float | None = None, shown_sign: int = 1) -> None:
    """Refuse a step whose threshold the reference may land on or tie at (``shown_sign``: -1
    when the caller compares the negated value, so the message shows the user's threshold)."""
    t = landing(rng, values, thresholds, scale)
    if t is not None:
        t = t * shown_sign
        raise RangeError(
            f"not exact: {what} has a threshold at {float(t)!r}, and the value can be within "
            "fp32's rounding of it without being it (a mean of 1/3 is 0.3333333432674408 in "
            "fp32): the reference, which rounds in fp32, may land on the threshold "
            "and decide differently from exact arithmetic; " + (
                "use a threshold halfway between the values the stream takes (a simple "
                "fraction such as 1/2 or 3/10), or compare whole numbers (a count instead of "
                "a mean)" if what in ("this comparison", "tw.equals") else
                "compute the value with whole numbers before the step (a count instead of a "
                "mean: tw.claim(tw.mean(v) * (tw.position(x) + 1), 0, max_seq_len, "
                "integral=True); n // 10, not torch.floor(n * 0.1))"))
    t = tie(rng, values, thresholds)
    if t is not None:
        t = t * shown_sign
        raise RangeError(
            f"not exact: {what} has a threshold at {float(t):g}, and the value can be exactly "
            f"{float(t):g} in exact arithmetic while the reference, computing in fp32 through "
            "more than one rounding (or a constant fp32 cannot hold, such as 0.1 or 1.3), "
            f"may land just below or above it (0.53 * 100 is 52.999996 in fp32); compute "
            "with whole numbers before the step (n * 13 // 10 instead of torch.floor(n * "
            "1.3)), scale before averaging (torch.floor(tw.mean(10 * v)) instead of "
            "torch.floor(10 * tw.mean(v)))" + (
                "" if what == "round" else ", or, if the value is whole in exact arithmetic "
                "(n / 7 * 7), round it first: torch.round(v)"))


def refuse_unheld_constant(t: float, rng: Interval, values: Grid | Fractions | None,
                           what: str) -> None:
    """A constant the step compares with that fp32 does not hold (``3 - 1e-9``): torch
    compares an fp32 stream with the constant rounded to fp32 (3.0), while the facts read the
    constant as itself; the two disagree exactly when the stream can take a value other than
    the constant that rounds to the same fp32 number. Refuse then."""
    exact, held = read_float(t), Fraction(float(np.float32(t)))
    if held == exact or values is None:
        return
    ulp = Fraction(float(np.spacing(np.float32(t))))
    lo, hi = min(exact, held - ulp), max(exact, held + ulp)
    if isinstance(values, Grid):
        near = values.at_or_above(lo)
        hit = near <= hi and (near != exact or values.at_or_above(near + values.spacing) <= hi)
    else:
        near = Fraction(values.above(lo, False))
        hit = near <= hi and (near != exact or Fraction(values.above(near, True)) <= hi)
    if hit and Fraction(rng.lo) <= hi and lo <= Fraction(rng.hi):
        raise RangeError(
            f"not exact: {what} compares with {t!r}, which fp32 does not hold: torch compares "
            f"the fp32 stream with {float(held)!r} instead, and the value can be "
            f"{float(near):g}, which the two readings put on different sides; write a "
            f"constant fp32 holds ({float(held)!r}, or a value halfway between the values "
            "the stream takes)")
