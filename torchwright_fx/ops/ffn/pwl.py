"""Piecewise-linear functions of one value (Pwl) and their lanes in a bank."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from torchwright_fx.base.machines import current_precision
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import (
    Interval,
    read_float,
)
from torchwright_fx.ops.lanes import Bank


# -- piecewise-linear functions of one value ----------------------------------------------------
@dataclass(frozen=True)
class Hinge:
    knot: float
    weight: float  # the term is weight * relu(x - knot)
    sharpness: float = 1.0  # SwiGLU only: the gate is S * sharpness * (x - knot)


@dataclass
class Pwl:
    """``const + slope * x + sum(h.weight * relu(x - h.knot))``.

    ``anchor`` is where the emitted lanes are expanded from: a knot below it becomes the lane
    ``relu(k - x)`` (its ``x - k`` part moves to the affine part), a knot above it ``relu(x - k)``,
    so every lane is zero at the anchor. None: the middle of x's range, which keeps each lane
    within half the range (staircases). A table anchors where |f| is smallest: for a convex
    f every lane is then non-negative and the sum never cancels.
    """

    const: float = 0.0
    slope: float = 0.0
    hinges: list[Hinge] = field(default_factory=list)
    anchor: float | None = None
    # Ramps accepted as approximations (exact=False): wrong inside, so no noise bound there.
    approximate: list[tuple[float, float]] = field(default_factory=list)

    def hinge(self, knot: float, weight: float, sharpness: float = 1.0) -> None:
        if weight != 0.0:
            self.hinges.append(Hinge(float(knot), float(weight), sharpness))

    def ramp(self, a: float, b: float, weight: float = 1.0, width: float | None = None) -> None:
        """Add ``weight * clamp((x - a) / (b - a), 0, 1)``; its corners as sharp as its width.
        Pass the exact ``width`` when b - a in floats is not (a grid's spacing / 2): the lane
        scale 1/width must be exact for the lanes to be."""
        sharp = 1.0 / (b - a if width is None else width)
        self.hinge(a, weight * sharp, sharp)
        self.hinge(b, -weight * sharp, sharp)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """Exact-math value (float64), for bounds and tests."""
        x = np.asarray(x, dtype=np.float64)
        out = self.const + self.slope * x
        for h in self.hinges:
            out = out + h.weight * np.maximum(x - h.knot, 0.0)
        return out

    @staticmethod
    def through(xs: Sequence[float], ys: Sequence[float], sharpness: float = 1.0,
                flat: bool = True) -> Pwl:
        """The linear interpolant through (xs, ys); constant beyond the ends if ``flat``,
        else continuing the end segments."""
        slopes = [(ys[i + 1] - ys[i]) / (xs[i + 1] - xs[i]) for i in range(len(xs) - 1)]
        if not slopes:
            return Pwl(const=float(ys[0]))
        if flat:
            f = Pwl(const=float(ys[0]))
            f.hinge(xs[0], slopes[0], sharpness)
        else:
            f = Pwl(const=float(ys[0] - slopes[0] * xs[0]), slope=slopes[0])
        for i in range(1, len(slopes)):
            f.hinge(xs[i], slopes[i] - slopes[i - 1], sharpness)
        if flat:
            f.hinge(xs[-1], -slopes[-1], sharpness)
        return f


@dataclass(frozen=True)
class Emitted:
    affine: Lin  # the exact affine part, added to the column outside the bank
    lanes: Interval  # the range of the lanes' sum over x's range
    magnitude: float  # the largest sum of |lane value| at any x: bounds fp32 partial sums


def lane_terms(f: Pwl, rng: Interval) -> tuple[Pwl, list[tuple[Hinge, int]]]:
    """Split f into its affine part and its lanes ``(hinge, side)``: side +1 is
    ``relu(x - k)``, side -1 is ``relu(k - x)`` with ``x - k`` moved to the affine part.
    Knots at or below x's range are affine, knots at or above it vanish."""
    affine = Pwl(f.const, f.slope)
    lanes: list[tuple[Hinge, int]] = []
    if f.anchor is not None:
        anchor = f.anchor
    else:
        anchor = (rng.lo + rng.hi) / 2 if rng.finite else -math.inf
    for h in f.hinges:
        if h.knot <= rng.lo:
            affine.const -= h.weight * h.knot
            affine.slope += h.weight
        elif h.knot < rng.hi:
            side = -1 if h.knot < anchor else 1
            if side < 0:
                affine.const -= h.weight * h.knot
                affine.slope += h.weight
            lanes.append((h, side))
    return affine, lanes


def _lane_matrix(lanes: list[tuple[Hinge, int]], xs: np.ndarray) -> np.ndarray:
    """Lane values ``[len(xs), len(lanes)]`` in exact math."""
    knots = np.array([h.knot for h, _ in lanes])
    weights = np.array([h.weight for h, _ in lanes])
    sides = np.array([side for _, side in lanes], dtype=np.float64)
    return weights * np.maximum(sides * (xs[:, None] - knots), 0.0)


def _magnitude(lanes: list[tuple[Hinge, int]], rng: Interval) -> float:
    """The largest sum of |lane| over x's range: each |lane| is convex, so at an end."""
    if not lanes:
        return 0.0
    if not rng.finite:
        return math.inf
    return float(np.abs(_lane_matrix(lanes, np.array([rng.lo, rng.hi]))).sum(1).max())


def _lanes_range(lanes: list[tuple[Hinge, int]], rng: Interval) -> Interval:
    if not lanes:
        return Interval.point(0.0)
    if not rng.finite:  # interval arithmetic, lane by lane
        lo = hi = 0.0
        for h, side in lanes:
            ends = [max(side * (rng.lo - h.knot), 0.0), max(side * (rng.hi - h.knot), 0.0)]
            vals = [h.weight * e for e in ends]
            lo, hi = lo + min(vals), hi + max(vals)
        return Interval(lo, hi)
    # The lane sum is piecewise linear in x: its extremes sit at the ends or at a knot.
    points = np.array([rng.lo, rng.hi, *[h.knot for h, _ in lanes]])
    sums = np.concatenate([_lane_matrix(lanes, points[i:i + 256]).sum(1)
                           for i in range(0, len(points), 256)])  # bounded memory
    return Interval(float(sums.min()), float(sums.max()))


def magnitude(f: Pwl, rng: Interval) -> float:
    """The partial-sum bound ``emit`` would report, without building lanes."""
    _, lanes = lane_terms(f, rng)
    return _magnitude(lanes, rng)


def lane_count(f: Pwl, rng: Interval) -> int:
    return sum(1 for h in f.hinges if rng.lo < h.knot < rng.hi)


def _half_sharpness(h: Hinge, rng: Interval) -> float:
    """Half precision: the hinge's sharpness raised (by powers of two) until its SwiGLU gate
    S * s * (x - knot) is at least S in magnitude at every lattice point of x but the knot,
    where SiLU is exactly relu in every format (SiLU(-128) is 0 in fp32: exp overflows)."""
    if rng.step is None or rng.step == 0:
        return h.sharpness
    k = read_float(h.knot)  # as the lattice reads it (a knot 8.999999999999998 is on 9)
    n = (k - rng.offset) / rng.step
    if abs(n - round(n)) * rng.step < Fraction(1, 2 ** 20) * rng.step:
        n = Fraction(round(n))
        k = rng.offset + rng.step * n
    below = rng.offset + rng.step * math.floor(n)
    gaps = [g for g in (k - below, below + rng.step - k) if g > 0]
    if below == k:
        gaps = [rng.step]
    need = 1.0 / float(min(gaps))
    if h.sharpness >= need:
        return h.sharpness
    # doubled, not rounded up to a power of two: s * (x - k) keeps its lattice (s = 10 on a
    # lattice of tenths gives whole numbers; 16 would not)
    return h.sharpness * 2.0 ** math.ceil(math.log2(need / h.sharpness))


def emit(bank: Bank, out: int, x: Lin, rng: Interval, f: Pwl) -> Emitted:
    """Write ``f(x)`` to column ``out``: lanes into the bank, the affine part returned.

    A hinge of sharpness s is the lane ``relu(s*(x - k))`` with down weight ``w/s``: for a ramp
    on a grid, s*(x - k) is a half-integer and w/s is the step's weight, so lane values and
    their sums are exact in fp32 (the SwiGLU gate S*s*(x - k) and up 1/S scale by powers of 2).
    """
    affine, lanes = lane_terms(f, rng)
    half = current_precision().half and bank.machine.smooth_hinge
    for h, side in lanes:
        sharp = _half_sharpness(h, rng) if half else h.sharpness
        bank.hinge(out, (x - h.knot) * (side * sharp), h.weight / sharp)
    return Emitted(x * affine.slope + affine.const, _lanes_range(lanes, rng),
                   _magnitude(lanes, rng))


def emit_into_bank(bank: Bank, out: int, x: Lin, rng: Interval, f: Pwl) -> Emitted:
    """Like ``emit``, but the affine part goes into the bank too (a constant, plus two lanes
    for a linear term) for callers that expect the whole value from ``bank.finish``."""
    e = emit(bank, out, x, rng, f)
    bank.const(out, e.affine.const)
    terms = Lin(e.affine.terms)
    if terms.terms:
        linear(bank, out, terms, 1.0)
    return e

def linear(bank: Bank, out: int, x: Lin, weight: float) -> None:
    """Pass ``weight * x`` through the bank: hinge(x) - hinge(-x) = x exactly in real
    arithmetic on both machines (SiLU(a) - SiLU(-a) = a)."""
    bank.hinge(out, x, weight)
    bank.hinge(out, -x, -weight)
