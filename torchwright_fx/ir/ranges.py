"""The facts of one column: value interval, lattice, fractions and noise.

Facts feed every exactness decision: where a step may put its ramp (between the points of the
value's lattice, where it is exact), how large a gating offset must be, the RMSNorm energy
certificate (docs/design-notes.md §5), and the proof that the output is a whole token code.

- ``lo``/``hi``: every exact value lies in [lo, hi].
- ``step``/``offset``: every exact value is ``offset + n * step`` for an integer n (``step`` 0:
  the single value ``offset``; None: no lattice is known, a real value). ``integral`` is true
  when that lattice lies in the integers. Passing ``integral=True`` without a step declares Z.
- ``max_den``/``den_group``: every exact value is k / n with 1 <= n <= max_den (a mean of
  integers, ``tw.mean``); means over the same positions share ``den_group``.
- ``near_integral``: whole in exact math, reached only to within rounding (mean x count).
- ``noise``: a bound on |compiled value - exact value| (fp32 averaging, the position decoder,
  approximate tables). Linear maps scale it, moves (attention copies) keep it, exact steps
  absorb it when it is below their margin (and refuse otherwise).
- ``rounding``: how the *reference* (the eager function, in fp32) reaches the exact value:
  ``EXACT`` (no rounding: integers, dyadic constants), ``ONCE`` (the exact value correctly
  rounded once: a mean k/n, x / 10), ``PAIR`` (a sum or difference of two such values: its
  sign and its zeros are still exact) or ``INEXACT`` (more roundings, or a constant fp32 does
  not hold, as in 0.53 * 100 = 52.999996 or n * 1.3). A step is decided alike by the
  reference and the compiled model except where a value that is not reached exactly enough
  can sit on its threshold (``ops/ties.py``): there the reference may fall on either side.

Every rule derives the facts of its output from those of its inputs (the op families in
``families/``); the rules here are the arithmetic they share (docs/design-notes.md §9).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from torchwright_fx.base.numerics import GRID_DENOMINATOR

# The rules below are pure functions of a few numbers that recur across a program (coefficients
# like 1, -10, 0.1; lattices like (1, 0)), and Fraction arithmetic is slow: a 10,000-node
# program spent most of its lowering in them. Each is memoized; a key is its arguments, which
# compare by exact value (0.5 == Fraction(1, 2)), and every result depends on nothing else.
_memo = functools.lru_cache(maxsize=1 << 16)


@_memo
def rational(c: float, max_denominator: int = 10 ** 6) -> Fraction | None:
    """``c`` as a small rational if it is one up to float rounding (0.1 -> 1/10), else None."""
    if not math.isfinite(c):
        return None
    f = Fraction(c).limit_denominator(max_denominator)
    return f if abs(float(f) - c) <= 1e-9 * max(1.0, abs(c)) else None


@_memo
def frac_gcd(a: Fraction, b: Fraction) -> Fraction:
    """The largest g with a and b both integer multiples of g (gcd(0, b) = |b|)."""
    a, b = abs(Fraction(a)), abs(Fraction(b))
    den = a.denominator * b.denominator // math.gcd(a.denominator, b.denominator)
    return Fraction(math.gcd(int(a * den), int(b * den)), den)


Lattice = tuple[Fraction, Fraction]  # (step >= 0, offset); step 0 is a single point

EXACT, ONCE, PAIR, INEXACT = 0, 1, 2, 3  # Interval.rounding: the reference's fp32 rounding


@_memo
def fp32_exact(c: float) -> bool:
    """``c`` is held exactly by fp32 and is the small rational the facts read it as."""
    q = rational(c, GRID_DENOMINATOR)
    return q is not None and Fraction(c) == q and float(np.float32(c)) == c


def _fp32_holds(lo: float, hi: float, step: Fraction | None, off: Fraction) -> bool:
    """Every value of a lattice over [lo, hi] is an fp32 number: a dyadic lattice whose
    largest value has at most 24 significant bits at the lattice's resolution. Values with no
    lattice (real-valued facts) are not judged here."""
    if step is None or step == 0 or not (math.isfinite(lo) and math.isfinite(hi)):
        return True
    den = math.lcm(step.denominator, off.denominator)
    if den & (den - 1):  # not a power of two: 1/3's lattice is never exact in fp32 anyway
        return True
    return max(abs(lo), abs(hi)) * den < 2.0 ** 24


def _sum_rounding(a: Interval, b: Interval) -> int:
    """The reference's rounding of a + b: exact sums of exact values stay exact (the facts'
    resolution checks keep them inside fp32's mantissa); adding 0 changes nothing."""
    if a.lo == a.hi == 0:
        return b.rounding
    if b.lo == b.hi == 0:
        return a.rounding
    if a.rounding == b.rounding == EXACT:
        return EXACT
    # fl(a) + fl(b) is 0 exactly when a + b is, and has its sign: one rounding keeps both
    return PAIR if max(a.rounding, b.rounding) <= ONCE else INEXACT


def _scale_rounding(r: Interval, k: float) -> int:
    if math.frexp(abs(k))[0] == 0.5:  # a power of two: exact in fp32
        return r.rounding
    return EXACT if r.rounding == EXACT and fp32_exact(k) else INEXACT


@_memo
def _norm(lat: Lattice) -> Lattice:
    step, off = lat
    return (step, off % step) if step > 0 else (step, off)


@_memo
def join(a: Lattice | None, b: Lattice | None) -> Lattice | None:
    """The finest lattice holding both (a union of values: where, min/max, clamp)."""
    if a is None or b is None:
        return None
    return _norm((frac_gcd(frac_gcd(a[0], b[0]), a[1] - b[1]), a[1]))


@_memo
def lattice_sum(a: Lattice | None, b: Lattice | None) -> Lattice | None:
    if a is None or b is None:
        return None
    return _norm((frac_gcd(a[0], b[0]), a[1] + b[1]))


@_memo
def lattice_scale(a: Lattice | None, k: float) -> Lattice | None:
    if a is None:
        return None
    if k == 0:
        return (Fraction(0), Fraction(0))
    if not math.isfinite(k):
        return None
    q = read_float(k)  # as thresholds read it (0.1 is 1/10, pi / 10 its binary value)
    return _norm((a[0] * abs(q), a[1] * q))


@_memo
def lattice_product(a: Lattice | None, b: Lattice | None) -> Lattice | None:
    """(o1 + n s1)(o2 + m s2) = o1 o2 + n s1 o2 + m s2 o1 + n m s1 s2."""
    if a is None or b is None:
        return None
    (s1, o1), (s2, o2) = a, b
    return _norm((frac_gcd(frac_gcd(s1 * o2, s2 * o1), s1 * s2), o1 * o2))


@_memo
def read_float(v: float) -> Fraction:
    """The exact value a float stands for, read the same way everywhere (lattices, table
    entries, thresholds): a value fp32 holds is itself; a double that is the correctly
    rounded double of a short rational (0.1, 1/41) is that rational; any other double
    (3 * 0.3183, pi / 10) is its own binary value."""
    if fp32_exact(v):
        return Fraction(float(v))
    q = rational(v, 10 ** 6)
    return q if q is not None and float(q) == float(v) else Fraction(float(v))


@_memo
def point_lattice(v: float) -> Lattice | None:
    return (Fraction(0), read_float(v)) if math.isfinite(v) else None


@_memo
def _check_meets(lo: float, hi: float, step: Fraction, off: Fraction) -> None:
    """A lattice and an interval that share no point are a bug in a facts rule (the value
    would be nowhere): fail loudly rather than size a construction on them. The ends are
    fp32/fp64 roundings of exact values, hence the relative slack."""
    slack = Fraction(abs(lo) + abs(hi) + 1.0) * Fraction(1, 1 << 20)
    first = off if step == 0 else off + math.ceil((Fraction(lo) - slack - off) / step) * step
    if not Fraction(lo) - slack <= first <= Fraction(hi) + slack:
        raise AssertionError(f"inconsistent facts: no point of the lattice {off} + {step}Z "
                             f"lies in [{lo}, {hi}]")


@dataclass(frozen=True)
class Interval:
    lo: float
    hi: float
    integral: bool = False
    max_den: int = 0
    den_group: int = 0
    step: Fraction | None = None
    offset: Fraction = Fraction(0)
    noise: float = 0.0
    # A whole number in exact math that both the reference (fp32) and the compiled model only
    # reach to within rounding (a mean times its count): no lattice for steps in general, but
    # torch.round of it is exact in both (``families/rounding.py: rounded``).
    near_integral: bool = False
    rounding: int = EXACT  # EXACT | ONCE | INEXACT: how the fp32 reference reaches the value

    def __post_init__(self) -> None:
        if self.lo > self.hi:
            raise ValueError(f"empty interval [{self.lo}, {self.hi}]")
        step, off = self.step, Fraction(self.offset)
        if step is None and self.integral:
            step, off = Fraction(1), Fraction(0)
        if step is None and self.lo == self.hi:
            point = point_lattice(self.lo)
            if point is not None:
                step, off = point
        if step is not None:
            step, off = _norm((Fraction(step), off))
        integral = step is not None and step.denominator == 1 and off.denominator == 1
        if step is not None and math.isfinite(self.lo) and math.isfinite(self.hi):
            _check_meets(self.lo, self.hi, step, off)
        object.__setattr__(self, "step", step)
        object.__setattr__(self, "offset", off)
        object.__setattr__(self, "integral", integral)
        if self.rounding == EXACT and not _fp32_holds(self.lo, self.hi, step, off):
            # an exact value fp32 cannot hold (2**24 + 1) is what the reference rounds: once,
            # at the op that formed it (its operands were held, or would have been caught here)
            object.__setattr__(self, "rounding", ONCE)

    @staticmethod
    def point(v: float) -> Interval:
        """A constant. One fp32 does not hold (0.01) is the rational rounded ONCE."""
        return Interval(float(v), float(v), rounding=EXACT if fp32_exact(v) else ONCE)

    @staticmethod
    def of(lo: float, hi: float, lattice: Lattice | None, noise: float = 0.0,
           rounding: int = EXACT) -> Interval:
        step, off = lattice if lattice is not None else (None, Fraction(0))
        return Interval(lo, hi, step=step, offset=off, noise=noise, rounding=rounding)

    @staticmethod
    def of_values(values: list[float] | tuple[float, ...]) -> Interval:
        """The facts of a finite set of table entries: their lattice, reading each entry as
        the short decimal it was written as (0.1 is 1/10, as thresholds are read), else as its
        exact binary value (a fine lattice is later treated as real-valued)."""
        lat: Lattice | None = (Fraction(0), read_float(values[0]))
        for v in values[1:]:
            lat = join(lat, (Fraction(0), read_float(v)))
        # entries fp32 does not hold (0.1) are the decimals the user wrote, rounded once
        rounding = EXACT if all(fp32_exact(v) for v in values) else ONCE
        return Interval.of(min(values), max(values), lat, rounding=rounding)

    def derived(self) -> int:
        """The reference's rounding of a value computed from this one by an op that is not
        exact on rounded inputs (a square, a power, a remainder): only exact stays exact."""
        return EXACT if self.rounding == EXACT else INEXACT

    @property
    def lattice(self) -> Lattice | None:
        return None if self.step is None else (self.step, self.offset)

    @property
    def finite(self) -> bool:
        return math.isfinite(self.lo) and math.isfinite(self.hi)

    @property
    def magnitude(self) -> float:
        return max(abs(self.lo), abs(self.hi))

    @property
    def is_bool(self) -> bool:
        return self.integral and self.lo >= 0 and self.hi <= 1

    def with_noise(self, noise: float) -> Interval:
        return dataclasses.replace(self, noise=noise)

    def exact(self) -> Interval:
        """The same facts without noise (after a step that absorbed it)."""
        return Interval(self.lo, self.hi, max_den=self.max_den, den_group=self.den_group,
                        step=self.step, offset=self.offset, rounding=self.rounding)

    def with_rounding(self, rounding: int) -> Interval:
        return dataclasses.replace(self, rounding=rounding)

    def __add__(self, o: Interval) -> Interval:
        return Interval.of(self.lo + o.lo, self.hi + o.hi, lattice_sum(self.lattice, o.lattice),
                           self.noise + o.noise, _sum_rounding(self, o))

    def __neg__(self) -> Interval:
        return self.scale(-1.0)

    def __sub__(self, o: Interval) -> Interval:
        return self + (-o)

    def scale(self, k: float) -> Interval:
        a, b = self.lo * k, self.hi * k
        if k == 0:
            return Interval.point(0.0)
        return Interval.of(min(a, b), max(a, b), lattice_scale(self.lattice, k),
                           self.noise * abs(k), _scale_rounding(self, k))

    def divided(self, k: float) -> Interval:
        """x / k: the reference divides once, correctly rounded (unlike x * (1 / k)): an
        exact x gives a value rounded ONCE; an x rounded once, one whose zeros are exact."""
        out = self.scale(1.0 / k)
        if fp32_exact(k) and out.rounding != EXACT and self.rounding <= ONCE:
            return out.with_rounding(ONCE if self.rounding == EXACT else PAIR)
        return out

    def shift(self, c: float) -> Interval:
        out = Interval.of(self.lo + c, self.hi + c,
                          lattice_sum(self.lattice, point_lattice(c)), self.noise,
                          _sum_rounding(self, Interval.point(c)) if fp32_exact(c) else INEXACT)
        if self.max_den and float(c).is_integer():  # k/n + c is (k + c n)/n
            out = dataclasses.replace(out, max_den=self.max_den, den_group=self.den_group)
        return out

    def __mul__(self, o: Interval) -> Interval:
        products = [self.lo * o.lo, self.lo * o.hi, self.hi * o.lo, self.hi * o.hi]
        products = [0.0 if math.isnan(p) else p for p in products]
        noise = self.magnitude * o.noise + o.magnitude * self.noise + self.noise * o.noise
        if self.is_bool or o.is_bool:  # v * 0 or v * 1: exact
            rounding = max(self.rounding, o.rounding)
        else:
            rounding = EXACT if self.rounding == o.rounding == EXACT else INEXACT
        return Interval.of(min(products), max(products),
                           lattice_product(self.lattice, o.lattice), noise, rounding)

    def hull(self, o: Interval) -> Interval:
        return Interval.of(min(self.lo, o.lo), max(self.hi, o.hi),
                           join(self.lattice, o.lattice), max(self.noise, o.noise),
                           max(self.rounding, o.rounding))

    def clamp(self, lo: float, hi: float) -> Interval:
        """clamp(x, lo, hi): x's lattice, joined with each bound that can be reached."""
        lat = self.lattice
        if self.lo < lo:
            lat = join(lat, point_lattice(lo))
        if self.hi > hi:
            lat = join(lat, point_lattice(hi))
        bounds_exact = all(not math.isfinite(b) or fp32_exact(b) for b in (lo, hi))
        return Interval.of(min(max(self.lo, lo), hi), max(min(self.hi, hi), lo), lat,
                           self.noise, self.rounding if bounds_exact else INEXACT)

    def absolute(self) -> Interval:
        """|x|: +-(o + n s) lies on the lattice of step gcd(s, 2o) through o."""
        lo = 0.0 if self.lo <= 0 <= self.hi else min(abs(self.lo), abs(self.hi))
        lat = self.lattice
        if lat is not None and self.lo < 0 < self.hi:
            lat = join(lat, lattice_scale(lat, -1.0))
        elif lat is not None and self.hi <= 0:
            lat = lattice_scale(lat, -1.0)
        return Interval.of(lo, self.magnitude, lat, self.noise, self.rounding)

    def extremum(self, o: Interval, sign: float) -> Interval:
        """max (sign 1) or min (sign -1) of two values: one of them, so the joined lattice."""
        pick = max if sign > 0 else min
        return Interval.of(pick(self.lo, o.lo), pick(self.hi, o.hi), join(self.lattice, o.lattice),
                           max(self.noise, o.noise), max(self.rounding, o.rounding))


BOOL = Interval(0.0, 1.0, True)


def within_token_values(r: Interval, form: Any, tokens: Sequence[Any]) -> Interval:
    """``r`` bounded by the values of ``form`` (a ``Lin``) over the vocabulary when it is an
    affine form of ``tokens``, the one-hot token stream's forms (one term each): exactly one of
    them is 1 at each position, so those values are the column's only ones (``x @ M``, a sum of
    indicators). Lowering and the analysis both apply it to every node."""
    index = {next(iter(t.terms)): i for i, t in enumerate(tokens)}
    if not form.terms or not all(s in index for s in form.terms):
        return r
    values = [form.const] * len(index)
    for s, k in form.terms.items():
        values[index[s]] += k
    lo, hi = max(r.lo, min(values)), min(r.hi, max(values))
    if (lo, hi) == (r.lo, r.hi) or lo > hi:
        return r
    return dataclasses.replace(r, lo=lo, hi=hi)
