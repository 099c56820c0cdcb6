"""Value intervals per column, with an integrality flag.

Ranges feed three decisions: where a comparison may put its ramp (an integer-valued input
allows the ramp to sit between integers, so it is exact), how large a gating offset must be,
and the RMSNorm energy certificate (DESIGN §5).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Interval:
    lo: float
    hi: float
    integral: bool = False
    # > 0: every value is k / n for an integer k and 1 <= n <= max_den (an average of integers
    # over at most max_den positions: tw.mean). Arithmetic drops it; comparisons use it.
    max_den: int = 0
    # Means over the same positions (the same `where`) share a denominator at every position:
    # integer combinations of them are again k/n. 0: no group.
    den_group: int = 0

    def __post_init__(self) -> None:
        if self.lo > self.hi:
            raise ValueError(f"empty interval [{self.lo}, {self.hi}]")

    @staticmethod
    def point(v: float) -> Interval:
        return Interval(float(v), float(v), float(v).is_integer())

    @property
    def finite(self) -> bool:
        return math.isfinite(self.lo) and math.isfinite(self.hi)

    @property
    def magnitude(self) -> float:
        return max(abs(self.lo), abs(self.hi))

    @property
    def is_bool(self) -> bool:
        return self.integral and self.lo >= 0 and self.hi <= 1

    def __add__(self, o: Interval) -> Interval:
        return Interval(self.lo + o.lo, self.hi + o.hi, self.integral and o.integral)

    def __neg__(self) -> Interval:
        return Interval(-self.hi, -self.lo, self.integral)

    def __sub__(self, o: Interval) -> Interval:
        return self + (-o)

    def scale(self, k: float) -> Interval:
        a, b = self.lo * k, self.hi * k
        integral = self.integral and float(k).is_integer()
        return Interval(min(a, b), max(a, b), integral or (a == b == 0))

    def shift(self, c: float) -> Interval:
        return Interval(self.lo + c, self.hi + c, self.integral and float(c).is_integer())

    def __mul__(self, o: Interval) -> Interval:
        products = [self.lo * o.lo, self.lo * o.hi, self.hi * o.lo, self.hi * o.hi]
        products = [0.0 if math.isnan(p) else p for p in products]
        return Interval(min(products), max(products), self.integral and o.integral)

    def hull(self, o: Interval) -> Interval:
        return Interval(min(self.lo, o.lo), max(self.hi, o.hi), self.integral and o.integral)

    def clamp(self, lo: float, hi: float) -> Interval:
        return Interval(min(max(self.lo, lo), hi), max(min(self.hi, hi), lo), self.integral)


BOOL = Interval(0.0, 1.0, True)
