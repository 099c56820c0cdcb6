"""Where a value can be: its lattice (Grid) or the fractions of a mean, from the facts."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

from torchwright_fx.base.errors import RangeError
from torchwright_fx.base.numerics import (
    EXACT_LATTICE_STEPS,
    MAX_MEAN_DENOMINATORS,
    MIN_GRID_SPACING,
)
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import (
    Interval,
    Lattice,
    frac_gcd,
    lattice_scale,
    lattice_sum,
    point_lattice,
    rational,
    read_float,
)


def need_finite(rng: Interval, what: str) -> None:
    if not rng.finite:
        raise RangeError(f"{what} needs a finite value range, got [{rng.lo}, {rng.hi}]; "
                         "declare one with tw.claim(v, lo, hi)")




# -- grids ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Grid:
    """x only takes values ``offset + n * spacing`` for integers n."""

    spacing: Fraction
    offset: Fraction  # in [0, spacing)

    @property
    def integral(self) -> bool:
        return self.spacing.denominator == 1 and self.offset.denominator == 1

    def at_or_above(self, t: Fraction) -> Fraction:
        return self.offset + math.ceil((t - self.offset) / self.spacing) * self.spacing

    def above(self, t: Fraction) -> Fraction:
        return self.offset + (math.floor((t - self.offset) / self.spacing) + 1) * self.spacing

    def at_or_below(self, t: Fraction) -> Fraction:
        return self.offset + math.floor((t - self.offset) / self.spacing) * self.spacing

    def points(self, rng: Interval) -> list[float]:
        """Every lattice point in ``rng`` (computed exactly, then rounded once)."""
        lo, hi = rational(rng.lo), rational(rng.hi)
        if lo is None or hi is None:
            raise RangeError(f"range [{rng.lo}, {rng.hi}] has no rational ends")
        first, last = self.at_or_above(lo), self.at_or_below(hi)
        n = round((last - first) / self.spacing)
        return [float(first + i * self.spacing) for i in range(max(n, -1) + 1)]

    def count(self, rng: Interval) -> int:
        """How many lattice points lie in ``rng``."""
        lo, hi = rational(rng.lo), rational(rng.hi)
        if lo is None or hi is None:
            return 0
        return max(0, round((self.at_or_below(hi) - self.at_or_above(lo)) / self.spacing) + 1)

    def shrink(self, rng: Interval) -> Interval:
        """The tightest interval with lattice-point ends inside ``rng``."""
        lo, hi = rational(rng.lo), rational(rng.hi)
        if lo is None or hi is None:
            return rng
        first = float(self.at_or_above(lo))
        return dataclasses.replace(rng, lo=first, hi=max(first, float(self.at_or_below(hi))))


def _resolvable(spacing: Fraction, rng: Interval) -> bool:
    if spacing <= 0:
        return False
    if spacing >= MIN_GRID_SPACING:
        return True
    return rng.finite and rng.magnitude <= EXACT_LATTICE_STEPS * spacing


def lin_lattice(x: Lin, signal_range: Callable[[int], Interval]) -> Lattice | None:
    """The lattice of an affine form, from its signals' lattices (None if one has none)."""
    lat = point_lattice(x.const)
    for sid, coef in x.terms.items():
        lat = lattice_sum(lat, lattice_scale(signal_range(sid).lattice, coef))
    return lat


def grid_of(x: Lin, rng: Interval, signal_range: Callable[[int], Interval]) -> Grid | None:
    """The lattice that ``x`` lives on: the column's own facts (``rng``), or the one its
    signals and rational coefficients generate, whichever is coarser; None for a real value
    (also when the lattice is finer than MIN_GRID_SPACING and too fine for fp32 to resolve
    over x's range: arbitrary float coefficients)."""
    best: Lattice | None = None
    own, derived = rng.lattice, lin_lattice(x, signal_range)
    if own is not None and derived is not None and own[0] > 0 and derived[0] > 0:
        unit = frac_gcd(own[0], derived[0])
        if (own[1] - derived[1]) % unit:  # both cannot hold: trust the facts' own lattice
            derived = None  # (a coefficient one ulp off its rational reads as another offset)
    for lat in (own, derived):
        if lat is not None and lat[0] == 0:  # a single value lies on any lattice through it
            lat = (Fraction(1), lat[1] % 1)
        if lat is None or lat[0] <= 0 or not _resolvable(lat[0], rng):
            continue
        if best is None or lat[0] > best[0]:
            best = lat
    return None if best is None else Grid(best[0], best[1] % best[0])


@dataclass(frozen=True)
class Fractions:
    """x only takes values ``offset + scale * k / n`` for integers k and 1 <= n <= max_den:
    an average of integers over at most max_den positions (``tw.mean``), mapped affinely. Not
    a lattice, but every threshold has a nearest attainable value on each side, and a ramp
    over the middle half of that gap is exact at every attainable value."""

    scale: Fraction  # nonzero
    offset: Fraction
    max_den: int
    noise: float  # the compiled value's error bound (``MEAN_NOISE`` of its magnitude)

    def _nearest(self, u: Fraction, up: bool, strict: bool) -> Fraction:
        """The smallest k/n >= u (> if strict) when ``up``, else the largest <= u (<)."""
        p, q = u.numerator, u.denominator
        best_k, best_n = 0, 0
        for n in range(1, self.max_den + 1):
            whole, rest = divmod(p * n, q)  # u * n = whole + rest / q
            if up:
                k = whole + 1 if strict or rest else whole
            else:
                k = whole - 1 if strict and not rest else whole
            if best_n == 0 or (k * best_n < best_k * n if up else k * best_n > best_k * n):
                best_k, best_n = k, n
        return Fraction(best_k, best_n)

    def above(self, t: Fraction, strict: bool) -> Fraction:
        """The smallest attainable x > t (strict) or >= t."""
        q = self._nearest((t - self.offset) / self.scale, self.scale > 0, strict)
        return self.offset + self.scale * q

    def below(self, t: Fraction, strict: bool) -> Fraction:
        """The largest attainable x < t (strict) or <= t."""
        q = self._nearest((t - self.offset) / self.scale, self.scale < 0, strict)
        return self.offset + self.scale * q


def fractions_of(x: Lin, signal_range: Callable[[int], Interval]) -> Fractions | None:
    """The fraction set of ``sum c_i * m_i + b`` for means m_i over the same positions (one
    denominator n at every position) with rational c_i and b, else None: the values are
    ``b + g * k / n`` with g the gcd of the c_i."""
    if not x.terms:
        return None
    ranges = [signal_range(sid) for sid in x.terms]
    coefs = [read_float(c) if math.isfinite(c) else None for c in x.terms.values()]
    b = read_float(x.const) if math.isfinite(x.const) else None
    if b is None or any(c is None or c == 0 for c in coefs) or \
            len({(r.max_den, r.den_group) for r in ranges}) != 1 or \
            not 0 < ranges[0].max_den <= MAX_MEAN_DENOMINATORS:
        return None
    g = Fraction(0)
    for c in coefs:
        assert c is not None
        g = frac_gcd(g, abs(c))
    noise = sum(abs(c) * r.noise for c, r in zip(x.terms.values(), ranges, strict=True))
    return Fractions(g, b, ranges[0].max_den, noise)
