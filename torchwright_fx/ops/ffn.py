"""FFN constructions (DESIGN §6), written once on top of ``Bank``.

Every non-linear op on one scalar is a piecewise-linear function of it, and every such
function is ``const + slope*x + sum_i w_i * relu(x - k_i)``: a ``Pwl``. ``emit`` writes one into
a bank column: one lane per knot inside x's range, the affine part kept *outside* the bank
(it rides in the readers' weights for free, exactly). The two machines differ only in the
hinge: exact on ReLU, ``SiLU(S*s*z)/(S*s)`` on SwiGLU (within HINGE_MAX_ERROR/(S*s) of relu,
exact once ``S*s*|z| >= SATURATION``; ``s`` is the hinge's sharpness).

Exactness rests on two facts:

- *Grids.* A value that is an affine form of integer-valued signals with rational
  coefficients lives on a lattice ``offset + n*spacing`` (``grid_of``). A step placed a
  quarter spacing from its lattice points (a ramp over the middle half of a gap) is exact at
  every lattice point on both machines, and tolerates input noise up to spacing/4.
- *Exact sums.* Lane values on a half-integer grid, summed with weights +-1, are exact in fp32
  while every partial sum stays below 2**23 (``EXACT_HALF_INTEGERS``). ``magnitude`` bounds
  the partial sums of a column (the sum of |lane| at the worst x); staircases over wide
  ranges are split into two stages to stay under it (DESIGN §6.2).

Functions taking ``(bank, out, ...)`` without returning an ``Emitted`` put the whole value in
the bank (lanes plus ``bank.const``): the older contract other modules rely on.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import itertools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

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
from torchwright_fx.ops.lanes import Bank
from torchwright_fx.ops.numerics import (
    EXACT_HALF_INTEGERS,
    EXACT_LATTICE_STEPS,
    GATE_GAP,
    HINGE_MAX_ERROR,
    INTEGER_RAMP_HI,
    INTEGER_RAMP_LO,
    KNOT_SPACING,
    LANE_ROUNDING,
    MAX_KNOTS,
    MAX_LANES,
    MAX_MEAN_DENOMINATORS,
    MAX_SHARPNESS,
    MIN_GRID_SPACING,
    NOISE_TOLERANCE,
    PRODUCT_NOISE,
    RAMP_WIDTH,
    REAL_STAIR_MAGNITUDE,
    SATURATION,
    SILU_MAX_SLOPE,
    SILU_PEAK,
    SILU_SCALE,
    SINGLE_STAGE_STEPS,
    TABLE_SEGMENTS,
)


class RangeError(ValueError):
    """A construction needs a finite value range that the program does not provide."""


def _need_finite(rng: Interval, what: str) -> None:
    if not rng.finite:
        raise RangeError(f"{what} needs a finite value range, got [{rng.lo}, {rng.hi}]; "
                         "declare one with tw.claim(v, lo, hi)")


need_finite = _need_finite


# -- grids ------------------------------------------------------------------------------------
__all__ = ["rational", "frac_gcd"]  # re-exported: the lattice arithmetic lives in ir/ranges.py


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


def _lane_terms(f: Pwl, rng: Interval) -> tuple[Pwl, list[tuple[Hinge, int]]]:
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
    _, lanes = _lane_terms(f, rng)
    return _magnitude(lanes, rng)


def lane_count(f: Pwl, rng: Interval) -> int:
    return sum(1 for h in f.hinges if rng.lo < h.knot < rng.hi)


def emit(bank: Bank, out: int, x: Lin, rng: Interval, f: Pwl) -> Emitted:
    """Write ``f(x)`` to column ``out``: lanes into the bank, the affine part returned.

    A hinge of sharpness s is the lane ``relu(s*(x - k))`` with down weight ``w/s``: for a ramp
    on a grid, s*(x - k) is a half-integer and w/s is the step's weight, so lane values and
    their sums are exact in fp32 (the SwiGLU gate S*s*(x - k) and up 1/S scale by powers of 2).
    """
    affine, lanes = _lane_terms(f, rng)
    for h, side in lanes:
        bank.hinge(out, (x - h.knot) * (side * h.sharpness), h.weight / h.sharpness)
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


def _corner_error(z_lo: np.ndarray, z_hi: np.ndarray) -> np.ndarray:
    """max |SiLU(z) - relu(z)| = |z| sigmoid(-|z|) over |z| in [z_lo, z_hi] (unimodal, peak
    at SILU_PEAK): the gate's distance from the kink, in units of the lane's scale."""
    z = np.clip(SILU_PEAK, z_lo, z_hi)
    with np.errstate(over="ignore"):
        return np.where(np.isfinite(z) & (z < 700), z / (1.0 + np.exp(np.minimum(z, 700))), 0.0)


Tables = Mapping[int, tuple[float, ...]]


def stored_total(weights: Mapping[int, Fraction], signal_range: Callable[[int], Interval],
                 tables: Tables) -> Fraction:
    """The largest sum of |w_s * stored_s| a dot product reading these columns adds at one
    position: a column by its signal's range, but the embedding's columns by their per-token
    tables (one token per position: of a vocabulary's indicators only one is nonzero)."""
    total = Fraction(0)
    embedded = {s: w for s, w in weights.items() if s in tables}
    for s, w in weights.items():
        if s not in tables:
            total += abs(w) * Fraction(signal_range(s).magnitude)
    if embedded:
        n_tokens = len(tables[next(iter(embedded))])
        total += max(sum((abs(w * Fraction(tables[s][t])) for s, w in embedded.items()),
                         Fraction(0)) for t in range(n_tokens))
    return total


def gate_rounding(x: Lin, signal_range: Callable[[int], Interval], tables: Tables) -> float:
    """In units of x: how far fp32 may move x inside a gate that is not exact. Its dot product
    adds the stored signals, which can be far larger than x (an MLP stores f(x) less an affine
    part its readers add back), and the constant, rounding each product and partial sum once."""
    if not all(math.isfinite(signal_range(s).magnitude) for s in x.terms):
        return math.inf
    weights = {s: Fraction(c) for s, c in x.terms.items()}
    total = abs(x.const) + float(stored_total(weights, signal_range, tables))
    return (len(x.terms) + 2) * 2.0 ** -24 * total


def read_rounding(x: Lin, signal_range: Callable[[int], Interval], tables: Tables) -> float:
    """How far fp32 may move x when a lane reads it (a where's value, a product's factor),
    beyond the columns' own noise. When every column is on a lattice, every weight and the
    constant are held by fp32 and every partial sum stays below 2**24 units of the lattice
    sums, each product and partial sum is within the columns' noise of a lattice point fp32
    holds, so it rounds by at most that much: (terms + 1) times the weighted noise (0 when
    noiseless), if that is below gate_rounding, the bound that holds in every case."""
    if x.is_const:
        return 0.0 if Fraction(float(np.float32(x.const))) == Fraction(x.const) else \
            2.0 ** -24 * abs(x.const)
    weights, unit, dust = {}, abs(Fraction(x.const)), 0.0
    exact = Fraction(float(np.float32(x.const))) == Fraction(x.const)
    for sid, c in x.terms.items():
        r = signal_range(sid)
        w = weights[sid] = Fraction(float(np.float32(c)))
        if r.lattice is None or w != Fraction(c):
            exact = False
            break
        unit = frac_gcd(frac_gcd(unit, abs(w) * r.lattice[0]), abs(w) * r.lattice[1])
        dust += abs(c) * r.noise
    if exact and (unit == 0 or abs(Fraction(x.const)) + stored_total(weights, signal_range, tables)
                  < unit * 2 ** 24) and dust < float(unit) / 4:
        if dust == 0:
            return 0.0
        return min((len(x.terms) + 1) * dust, gate_rounding(x, signal_range, tables))
    return gate_rounding(x, signal_range, tables)


def exact_lanes(f: Pwl, x: Lin, rng: Interval, signal_range: Callable[[int], Interval],
                tables: Tables) -> bool:
    """Whether every lane of f(x) is computed exactly in fp32 at the values x takes: every
    signal on a lattice, every gate S*s*(x - k) then on the half-integers (its fp32 weights
    times the lattices, plus its constant), and integer down weights w/s (a staircase's
    steps). Noise small enough that the gates still round to their exact values is allowed
    (pwl_noise counts it)."""
    lattices = [signal_range(sid).lattice for sid in x.terms]
    if any(lat is None for lat in lattices) or not rng.finite or rng.magnitude > 2.0 ** 22:
        return False
    half = Fraction(1, 2)
    for h in f.hinges:
        if not rng.lo < h.knot < rng.hi:
            continue
        k = SILU_SCALE * h.sharpness
        # A gate within 2**-20 of its exact value (a multiple of S/2 >= 64, or 0) still
        # rounds to it in fp32: only the noise itself remains (counted by pwl_noise).
        if sum(abs(c) * k * signal_range(sid).noise for sid, c in x.terms.items()) > 2.0 ** -20:
            return False
        if not (h.weight / h.sharpness).is_integer():
            return False
        const = Fraction(float(np.float32((x.const - h.knot) * k)))
        # the gate's partial sums are the stored signals times their weights, multiples of
        # one unit: they must stay below 2**24 of it, however small x itself is
        unit, weights = abs(const), {}
        for (sid, c), lat in zip(x.terms.items(), lattices, strict=True):
            assert lat is not None
            w = weights[sid] = abs(Fraction(float(np.float32(c * k))))
            unit = frac_gcd(frac_gcd(unit, w * lat[0]), w * lat[1])
        total = abs(const) + stored_total(weights, signal_range, tables)
        if unit > 0 and total >= unit * 2 ** 24:
            return False
        for c, lat in zip(x.terms.values(), lattices, strict=True):
            assert lat is not None
            w = Fraction(float(np.float32(c * k)))
            if (w * lat[0]) % half:
                return False
            const += w * lat[1]
        if const % half:
            return False
    return True


def pwl_noise(f: Pwl, rng: Interval, grid: Grid | Fractions | None, machine: str,
              exact: bool = False) -> float:
    """A bound on |compiled f(x') - f(x)| for every exact input x in rng and compiled input
    x' within rng.noise of it: the steepest segment the noise window can reach (around lattice
    points only, when x has a lattice), plus each SwiGLU corner's deviation from relu at the
    nearest inputs it can see, plus fp32 rounding of off-lattice lane sums. Float64 throughout:
    a bound, not an exact figure."""
    eps = rng.noise
    inside = [h for h in f.hinges if rng.lo < h.knot < rng.hi]
    swiglu = machine == "swiglu"
    lattice = grid if isinstance(grid, Grid) else None
    fractions = grid if isinstance(grid, Fractions) and len(f.hinges) <= 64 else None
    if not inside:  # affine: folded into the readers' weights
        return abs(f.slope + sum(h.weight for h in f.hinges if h.knot <= rng.lo)) * eps
    inside.sort(key=lambda h: h.knot)
    knots = np.array([h.knot for h in inside])
    weights = np.array([h.weight for h in inside])
    scales = SILU_SCALE * np.array([h.sharpness for h in inside])
    noise = 0.0
    if eps > 0:
        corner = float((SATURATION / scales).max()) if swiglu else 0.0
        reach = eps + corner
        start = f.slope + sum(h.weight for h in f.hinges if h.knot <= rng.lo)
        slopes = start + np.concatenate([[0.0], np.cumsum(weights)])  # on each segment
        a = np.concatenate([[rng.lo], knots]) - reach
        b = np.concatenate([knots, [rng.hi]]) + reach
        a, b = np.maximum(a, rng.lo), np.minimum(b, rng.hi)
        seen = a <= b
        for lo_ramp, hi_ramp in f.approximate:  # accepted as wrong inside: not bounded
            seen &= ~((np.concatenate([[rng.lo], knots]) >= lo_ramp - 1e-12)
                      & (np.concatenate([knots, [rng.hi]]) <= hi_ramp + 1e-12))
        if lattice is not None:
            sp, off = float(lattice.spacing), float(lattice.offset)
            first = off + np.ceil((a - off) / sp - 1e-9) * sp  # a lattice point in [a, b]?
            seen &= first <= b + 1e-9 * np.maximum(1.0, np.abs(b))
        elif fractions is not None:  # an attainable mean within reach of the segment?
            seen &= np.array([float(fractions.above(rational(lo) or Fraction(lo), False)) <= hi
                              for lo, hi in zip(a, b, strict=True)])
        steepest = float(np.abs(slopes[seen]).max(initial=0.0))
        noise += steepest * eps * (SILU_MAX_SLOPE if swiglu else 1.0)
    if swiglu:
        if fractions is not None:  # the attainable means nearest each knot
            d = np.array([min(h.knot - float(fractions.below(rational(h.knot) or Fraction(h.knot),
                                                             True)),
                              float(fractions.above(rational(h.knot) or Fraction(h.knot), True))
                              - h.knot) for h in inside])
            err = _corner_error(scales * np.maximum(d - eps, 0.0), scales * (d + eps))
        elif lattice is None:
            err = np.full(len(inside), HINGE_MAX_ERROR)
        else:
            sp, off = float(lattice.spacing), float(lattice.offset)
            below = off + np.floor((knots - off) / sp) * sp
            cands = np.stack([knots - below, knots - below + sp, below + sp - knots,
                              below + 2 * sp - knots])
            points = np.stack([below, below - sp, below + sp, below + 2 * sp])
            ok = (points >= rng.lo) & (points <= rng.hi) & ((cands > 1e-12 * sp) | (eps > 0))
            d = np.where(ok, cands, np.inf).min(axis=0)
            err = _corner_error(scales * np.maximum(d - eps, 0.0), scales * (d + eps))
        if f.approximate:  # an accepted ramp's corners belong to its approximation
            ends = np.array([e for ramp in f.approximate for e in ramp])
            err = np.where(np.isclose(knots[:, None], ends[None, :]).any(axis=1), 0.0, err)
        noise += float((np.abs(weights) * err / scales).sum())
    if not exact:  # lane values and their sums round in fp32
        noise += magnitude(f, rng) * LANE_ROUNDING
    return float(noise)


def hinge_error(f: Pwl, machine: str) -> float:
    """Worst deviation of the SwiGLU lanes from exact relu: corners never overlap when knots
    respect KNOT_SPACING, so at any x only the nearest corner errs."""
    if machine != "swiglu" or not f.hinges:
        return 0.0
    return max(abs(h.weight) * HINGE_MAX_ERROR / (SILU_SCALE * h.sharpness) for h in f.hinges)


# -- steps and staircases ---------------------------------------------------------------------
# Steps on a value with no lattice are ramps RAMP_WIDTH wide: exact outside the ramp, wrong
# inside it. They are refused unless the user compiles with exact=False, which records each.
_APPROXIMATIONS: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "approximations", default=None)


class NotExact(RangeError):
    """A step the compiler cannot prove exact (the user may accept it with exact=False)."""


@contextlib.contextmanager
def recording_approximations(log: list[str] | None) -> Iterator[None]:
    """Within: steps without a lattice are appended to ``log``; with ``log`` None, refused."""
    token = _APPROXIMATIONS.set(log)
    try:
        yield
    finally:
        _APPROXIMATIONS.reset(token)


def approximate(what: str) -> None:
    log = _APPROXIMATIONS.get()
    if log is None:
        raise NotExact(
            f"not exact: {what}, so the step is a ramp {RAMP_WIDTH} wide that is wrong for "
            "values inside it; make the value whole (scale it onto integers, round it first), "
            "declare its lattice with tw.claim(v, lo, hi, integral=True), or compile with "
            "exact=False to accept the ramp")
    log.append(f"{what}: a {RAMP_WIDTH}-wide ramp, wrong for values inside it")


@dataclass(frozen=True)
class Step:
    at: float
    strict: bool  # [x > at] if strict else [x >= at]
    weight: float = 1.0


def step_ramp(s: Step, grid: Grid | Fractions | None) -> tuple[float, float]:
    """The ramp (a, b) that realises a step: on a grid, over the middle half of the gap before
    the first passing lattice point (exact at every lattice point); on a fraction set, over the
    middle half of the gap between the attainable values either side of the threshold;
    off-grid, RAMP_WIDTH wide beside the threshold, on the side away from equality (``x > t``:
    [t, t + w], ``x >= t``: [t - w, t]), exact outside it and at t itself."""
    t = read_float(s.at)  # as the lattice reads its points
    if isinstance(grid, Fractions):
        lo, hi = grid.below(t, strict=not s.strict), grid.above(t, strict=s.strict)
        if (hi - lo) * Fraction(INTEGER_RAMP_LO) > grid.noise:
            return (float(lo + (hi - lo) * Fraction(INTEGER_RAMP_LO)),
                    float(lo + (hi - lo) * Fraction(INTEGER_RAMP_HI)))
        approximate(f"the attainable means either side of {s.at:g} are {float(hi - lo):.3g} "
                    f"apart, too close for the averaging noise {grid.noise:.3g}")
        return _real_ramp(s)  # the user accepted a plain real-valued ramp
    if grid is None:
        approximate(f"a step at {s.at:g} on a value with no lattice")
        return _real_ramp(s)
    p = grid.above(t) if s.strict else grid.at_or_above(t)
    sp = grid.spacing
    return float(p - sp + sp * Fraction(INTEGER_RAMP_LO)), float(p - sp + sp * Fraction(
        INTEGER_RAMP_HI))


def _real_ramp(s: Step) -> tuple[float, float]:
    return (s.at, s.at + RAMP_WIDTH) if s.strict else (s.at - RAMP_WIDTH, s.at)


def staircase(base: float, steps: Sequence[Step], grid: Grid | Fractions | None) -> Pwl:
    f = Pwl(const=float(base))
    width: float | None = None  # a fraction set's ramps differ in width: b - a each
    if grid is None:
        width = RAMP_WIDTH
    elif isinstance(grid, Grid):
        width = float(grid.spacing * Fraction(INTEGER_RAMP_HI - INTEGER_RAMP_LO))
    for s in steps:
        a, b = step_ramp(s, grid)
        f.ramp(a, b, s.weight, width)
        if not isinstance(grid, Grid) and math.isclose(b - a, RAMP_WIDTH):
            f.approximate.append((a, b))
    return f


def ramp(bank: Bank, out: int, x: Lin, a: float, b: float, weight: float = 1.0) -> None:
    """``weight * clamp((x - a) / (b - a), 0, 1)``."""
    w = b - a
    bank.hinge(out, (x - a) * (1.0 / w), weight)
    bank.hinge(out, (x - b) * (1.0 / w), -weight)


ROUNDERS: dict[str, Callable[[float], int]] = {
    "floor": math.floor, "ceil": math.ceil, "trunc": math.trunc,
    "round": lambda v: round(v),  # Python rounds half to even, as torch.round does
}


def rounding_steps(kind: str, lo: float, hi: float) -> tuple[int, list[Step]]:
    """``kind(x)`` for x in [lo, hi] as ``base + sum of unit steps``: floor steps up at each
    integer, ceil just after it, round (half to even) at half-integers, trunc toward zero."""
    base = ROUNDERS[kind](lo)
    count = math.floor(hi) - math.floor(lo) + 2
    if count > MAX_LANES * 64:
        raise RangeError(f"{kind} over [{lo}, {hi}] has {count} steps; narrow the range")
    steps: list[Step] = []
    for n in range(math.floor(lo) - 1, math.floor(hi) + 2):
        if kind == "floor":
            cand = Step(n, False)
        elif kind == "ceil":
            cand = Step(n, True)
        elif kind == "round":
            cand = Step(n + 0.5, n % 2 == 0)  # an even n keeps n + 0.5
        else:
            cand = Step(n, n < 0) if n != 0 else None  # type: ignore[assignment]
        if cand is None:
            continue
        if (lo <= cand.at < hi) if cand.strict else (lo < cand.at <= hi):
            steps.append(cand)
    return base, steps


def check_resolution(rng: Interval, grid: Grid | Fractions | None, what: str,
                     advice: str = "narrow the range with torch.clamp or tw.claim") -> None:
    """Raise when x's magnitude is too large for fp32 to resolve its lattice at a step's gate
    (``EXACT_LATTICE_STEPS``)."""
    if not isinstance(grid, Grid) or not rng.finite:
        return
    tolerance = float(grid.spacing * NOISE_TOLERANCE)
    if rng.noise > tolerance:
        raise RangeError(
            f"not exact: {what} on a lattice of spacing {grid.spacing} tolerates input noise "
            f"up to {tolerance:.3g}, but the compiled input may be off by {rng.noise:.3g} "
            "(noise of a tw.mean, tw.position, a product of large values, an approximate "
            "table, or fp32 rounding where a large multiple of a table's result is read, "
            "carried through arithmetic); round or compare the noisy part first, copy a table's "
            "result with torch.where(flag, v, 0) before scaling it up, or narrow its range "
            "with tw.claim")
    steps = rng.magnitude / float(grid.spacing)
    if steps > EXACT_LATTICE_STEPS:
        raise RangeError(f"{what} over [{rng.lo:.6g}, {rng.hi:.6g}] (lattice spacing "
                         f"{grid.spacing}) needs fp32 to resolve {steps:.3g} lattice steps, "
                         f"over the {EXACT_LATTICE_STEPS:.3g} it can; {advice}")


def check_staircase(f: Pwl, rng: Interval, grid: Grid | Fractions | None, what: str,
                    advice: str = "narrow the range, or declare the input integer-valued with "
                                  "tw.claim(v, lo, hi, integral=True)") -> None:
    """Raise unless ``f`` fits the lane cap and fp32's exact (grid) or quiet (off-grid) range."""
    lanes = lane_count(f, rng)
    if lanes > MAX_LANES:
        raise RangeError(f"{what} over [{rng.lo}, {rng.hi}] needs {lanes} lanes "
                         f"(limit {MAX_LANES}); narrow the range with tw.claim(v, lo, hi)")
    mag = magnitude(f, rng)
    exact = isinstance(grid, Grid)
    limit = EXACT_HALF_INTEGERS if exact else REAL_STAIR_MAGNITUDE
    if mag > limit:
        kind = "partial sums" if exact else "fp32 noise"
        raise RangeError(
            f"{what} over [{rng.lo}, {rng.hi}] is too wide: its {kind} would leave fp32's "
            f"exact range (lane magnitude {mag:.3g} > {limit:.3g}); {advice}")


@dataclass(frozen=True)
class StairPlan:
    """A rounding op in one stage (block None) or two: q = floor((x - origin) / block)
    (coarse), then ``kind`` of the remainder r = x - block * q (fine)."""

    block: int | None
    origin: int = 0
    coarse_steps: int = 0


def plan_rounding(kind: str, rng: Interval, grid: Grid | None,
                  values: Grid | Fractions | None = None) -> StairPlan:
    """One stage or two for ``kind`` over rng; ``values`` is where the single stage may put
    its ramps (x's lattice, else a mean's fractions)."""
    base, steps = rounding_steps(kind, rng.lo, rng.hi)
    single = staircase(base, steps, grid if grid is not None else values)
    fits = magnitude(single, rng) <= (EXACT_HALF_INTEGERS if grid else REAL_STAIR_MAGNITUDE)
    if grid is None or kind == "trunc" or (len(steps) <= SINGLE_STAGE_STEPS and fits):
        check_staircase(single, rng, grid if grid is not None else values, kind)
        return StairPlan(None)
    origin = math.floor(rng.lo)
    best: tuple[int, int] | None = None
    for block in _block_sizes(len(steps), even=kind == "round"):
        cost = _two_stage_cost(kind, rng, grid, origin, block)
        if cost is not None and (best is None or cost < best[0]):
            best = (cost, block)
    if best is None:
        try:
            check_staircase(single, rng, grid, kind)
        except RangeError:
            raise RangeError(
                f"{kind} over [{rng.lo:.6g}, {rng.hi:.6g}] (lattice spacing {grid.spacing}): "
                f"neither one staircase of {len(steps)} steps nor two stages fit the "
                f"{MAX_LANES}-lane cap and fp32's exact range; narrow the range, or split the "
                "value into smaller parts (digits of a number: take them from its parts)"
            ) from None
        return StairPlan(None)
    block = best[1]
    return StairPlan(block, origin, len(coarse_steps(rng, origin, block)))


def _block_sizes(n_steps: int, even: bool) -> list[int]:
    root = max(2, math.isqrt(n_steps))
    sizes = {max(2, int(root * f)) for f in (0.25, 0.5, 1, 2, 4, 8, 16)}
    return sorted(b + (b % 2 if even else 0) for b in sizes)


def coarse_steps(rng: Interval, origin: int, block: int) -> list[Step]:
    first = 1
    last = math.floor((rng.hi - origin) / block)
    return [Step(origin + j * block, False) for j in range(first, last + 1)]


def remainder_grid(grid: Grid, block: int) -> Grid:
    """r = x - block * q lives on the lattice generated by x's spacing and the block."""
    sp = frac_gcd(grid.spacing, Fraction(block))
    return Grid(sp, grid.offset % sp)


def remainder_range(rng: Interval, origin: int, block: int, grid: Grid) -> Interval:
    """The range of r = x - block * floor((x - origin) / block), on r's own lattice."""
    g = remainder_grid(grid, block)
    hi = min(rng.hi, float(g.at_or_below(Fraction(origin + block) - g.spacing / 2)))
    # x's noise (the coarse stage's own is added by the caller); r's lattice is g
    return Interval.of(min(rng.lo, float(origin)), max(hi, float(origin)),
                       (g.spacing, g.offset), rng.noise)


def _two_stage_cost(kind: str, rng: Interval, grid: Grid, origin: int, block: int
                    ) -> int | None:
    coarse = staircase(0.0, coarse_steps(rng, origin, block), grid)
    r_rng = remainder_range(rng, origin, block, grid)
    base, steps = rounding_steps(kind, r_rng.lo, r_rng.hi)
    fine = staircase(base, steps, remainder_grid(grid, block))
    lanes = lane_count(coarse, rng) + lane_count(fine, r_rng)
    if lanes > MAX_LANES:
        return None
    if max(magnitude(coarse, rng), magnitude(fine, r_rng)) > EXACT_HALF_INTEGERS:
        return None
    return lanes


# -- lookups ----------------------------------------------------------------------------------
def lookup_function(key: Interval, table: dict[int, float], default: float) -> Pwl:
    """``table.get(x, default)`` for an integer-valued key x, as a staircase (checked: a
    finite integer range fp32 resolves, noise within the step's tolerance)."""
    if not key.integral:
        raise RangeError("lookup needs an integer-valued key stream")
    _need_finite(key, "lookup")
    lo, hi = math.ceil(key.lo), math.floor(key.hi)
    if hi - lo > 4096:
        raise RangeError(f"lookup key range [{lo}, {hi}] is too wide (over 4096 entries)")
    check_resolution(key, Grid(Fraction(1), Fraction(0)), "lookup")
    return lookup_pwl(lo, hi, table, default)


def lookup_pwl(lo: int, hi: int, table: dict[int, float], default: float) -> Pwl:
    prev = table.get(lo, default)
    steps = []
    for key in range(lo + 1, hi + 1):
        value = table.get(key, default)
        if value != prev:
            steps.append(Step(key, False, value - prev))
        prev = value
    return staircase(table.get(lo, default), steps, Grid(Fraction(1), Fraction(0)))


# -- hinge-based elementwise ops ----------------------------------------------------------------
def relu(bank: Bank, out: int, x: Lin, rng: Interval, weight: float = 1.0) -> None:
    f = Pwl()
    f.hinge(0.0, weight)
    emit_into_bank(bank, out, x, rng, f)


def relu_pwl() -> Pwl:
    f = Pwl()
    f.hinge(0.0, 1.0)
    return f


def abs_pwl() -> Pwl:
    """|x| = 2 relu(x) - x: one lane (SwiGLU: x * tanh(S x / 2), within 2*0.2785/S)."""
    f = Pwl(slope=-1.0)
    f.hinge(0.0, 2.0)
    return f


def clamp_pwl(lo: float, hi: float) -> Pwl:
    """clamp(x, lo, hi) for constant bounds (either may be infinite)."""
    if math.isinf(lo):
        f = Pwl(slope=1.0)
        if not math.isinf(hi):
            f.hinge(hi, -1.0)
        return f
    f = Pwl(const=lo)
    f.hinge(lo, 1.0)
    if not math.isinf(hi):
        f.hinge(hi, -1.0)
    return f


def linear(bank: Bank, out: int, x: Lin, weight: float) -> None:
    """Pass ``weight * x`` through the bank: hinge(x) - hinge(-x) = x exactly in real
    arithmetic on both machines (SiLU(a) - SiLU(-a) = a)."""
    bank.hinge(out, x, weight)
    bank.hinge(out, -x, -weight)


def gated(bank: Bank, out: int, x: Lin, rng: Interval, off: Lin, weight: float = 1.0) -> None:
    """``weight * x`` where ``off`` is 0, and 0 where ``off`` >= 1 (off must be integer-valued
    and non-negative): ``relu(x - M*off) - relu(-x - M*off)`` with M = max|x| + GATE_GAP."""
    _need_finite(rng, "a gated value")
    m = rng.magnitude + GATE_GAP
    bank.hinge(out, x - off * m, weight)
    bank.hinge(out, -x - off * m, -weight)


def select(bank: Bank, out: int, cond: Lin, a: Lin, ra: Interval, b: Lin, rb: Interval) -> None:
    """``a`` where cond = 1 else ``b`` (cond a 0/1 stream)."""
    if bank.machine == "swiglu":
        # SiLU(S*(2c-1)) * a/S is a when c = 1 (sigmoid(S) rounds to 1) and 0 when c = 0.
        sign = cond * 2.0 - 1.0
        if not (a.is_const and a.const == 0.0):
            bank.lane(out, sign * SILU_SCALE, a * (1.0 / SILU_SCALE))
        if not (b.is_const and b.const == 0.0):
            bank.lane(out, -sign * SILU_SCALE, b * (1.0 / SILU_SCALE))
        return
    _need_finite(ra.hull(rb), "torch.where on the ReLU machine")
    _linear_or_const(bank, out, b)
    gated(bank, out, a - b, ra - rb, 1.0 - cond)


def _linear_or_const(bank: Bank, out: int, x: Lin) -> None:
    if x.is_const:
        bank.const(out, x.const)
    else:
        linear(bank, out, x, 1.0)


# -- products, squares and powers -------------------------------------------------------------
def table_knots(rng: Interval, grid: Grid | None, step: float | None,
                segments: int = TABLE_SEGMENTS) -> list[float]:
    """Knots of a piecewise-linear table over ``rng``: every lattice point when there are few
    enough (then the table is exact on the grid), else ``segments`` equal steps (or ``step``)."""
    _need_finite(rng, "a piecewise-linear table")
    lo, hi = rng.lo, rng.hi
    if hi <= lo:
        return [lo]
    if step is None and grid is not None:
        count = grid.count(rng)
        if count <= segments + 1:
            return grid.points(rng)
        step = float(grid.spacing * math.ceil((count - 1) / segments))
        lo = grid.shrink(rng).lo
    if step is None:
        step = (hi - lo) / segments
    if step <= 0:
        raise RangeError(f"table step must be positive, got {step}")
    n = math.ceil((hi - lo) / step - 1e-9)
    if n > MAX_LANES:
        raise RangeError(f"a table over [{lo}, {hi}] with step {step} needs {n} lanes "
                         f"(limit {MAX_LANES}); use a coarser step")
    return [lo + i * step for i in range(n + 1)]



def power_pwl(knots: Sequence[float], n: int) -> Pwl:
    """The table of t**n, expanded from the knot nearest 0 (where |t**n| is smallest)."""
    f = Pwl.through(knots, [k ** n for k in knots], flat=False)
    f.anchor = min(knots, key=abs)
    return f


def reciprocal_pwl(knots: Sequence[float]) -> Pwl:
    """The table of 1/t, expanded from the end farthest from 0 (where |1/t| is smallest)."""
    f = Pwl.through(knots, [1.0 / k for k in knots], flat=False)
    f.anchor = max(knots, key=abs)
    return f


def power_table_error(knots: Sequence[float], n: int) -> float:
    """Largest |interpolant - x**n| between the knots (sampled densely)."""
    if len(knots) < 2:
        return 0.0
    f = power_pwl(knots, n)
    xs = np.linspace(knots[0], knots[-1], 64 * len(knots) + 1)
    return float(np.max(np.abs(f(xs) - xs ** n)))


def product(bank: Bank, out: int, a: Lin, ra: Interval, b: Lin, rb: Interval,
            step: float | None = None,
            grids: tuple[Grid | None, Grid | None] = (None, None)) -> None:
    """``a * b`` of two streams, all in the bank.

    SwiGLU: SiLU(a)*b + SiLU(-a)*(-b) = a*b*(sigmoid(a) + sigmoid(-a)) = a*b exactly.
    ReLU: with a 0/1 factor, an exact gate; otherwise the quarter-square identity
    a*b = ((a+b)**2 - (a-b)**2) / 4 with each square a table over its declared range
    (exact on lattice points; elsewhere within (step**2)/16).
    """
    if bank.machine == "swiglu":
        bank.lane(out, a, b)
        bank.lane(out, -a, -b)
        return
    if ra.is_bool:
        select(bank, out, a, b, rb, Lin(), Interval.point(0))
        return
    if rb.is_bool:
        select(bank, out, b, a, ra, Lin(), Interval.point(0))
        return
    for x, rng, f, _ in quarter_square_tables(a, ra, b, rb, step, grids):
        emit_into_bank(bank, out, x, rng, f, )


def saturating_shift(ra: Interval, rb: Interval) -> float | None:
    """M for the one-lane product SiLU(a + M) * b - M * b, exact when a and b are integers
    (up to tiny noise), a + M >= SATURATION, and every product stays an fp32 integer."""
    if not (ra.integral and rb.integral and ra.finite and rb.finite):
        return None
    if ra.noise > 2.0 ** -30 or rb.noise > 2.0 ** -30:
        return None
    shift = float(max(0, math.ceil(SATURATION - ra.lo)))
    if (ra.magnitude + shift) * rb.magnitude >= 2.0 ** 23:
        return None
    return shift


def product_rounding(ra: Interval, rb: Interval, shifted: bool = False,
                     max_pairs: int = 1 << 16) -> float:
    """fp32 error of the SwiGLU product (SiLU(a)*b + SiLU(-a)*(-b), or the shifted one-lane
    form): replayed with the runtime's ops over every pair of lattice points when there are
    few, else PRODUCT_NOISE of the largest |a*b| (two-lane form only)."""
    bound = PRODUCT_NOISE * ra.magnitude * rb.magnitude
    grids = []
    for r in (ra, rb):
        if r.lattice is None or r.step is None or r.step <= 0 or not r.finite or \
                r.noise > 2.0 ** -30:
            return bound
        g = Grid(r.step, r.offset % r.step)
        if g.count(r) > max_pairs:
            return bound
        grids.append(np.array(g.points(r), dtype=np.float32))
    a, b = np.meshgrid(*grids, indexing="ij")
    if a.size > max_pairs or a.size == 0:
        return bound
    import torch  # the runtime's own silu

    ta, tb = torch.from_numpy(a.ravel()), torch.from_numpy(b.ravel())
    silu = torch.nn.functional.silu
    if shifted:
        m = saturating_shift(ra, rb) or 0.0
        got = silu(ta + m) * tb - tb * m  # the lane, then the reader's affine part
    else:
        got = silu(ta) * tb + silu(-ta) * (-tb)
    exact = ta.double() * tb.double()
    return float((got.double() - exact).abs().max())


def table_error(knots: Sequence[float], grid: Grid | None, n: int) -> float:
    """The worst |table - t**n| at the values t can take: 0 when every lattice point in
    range is a knot, else the interpolation error between knots."""
    if len(knots) < 2:
        return 0.0
    if grid is not None:
        lo, hi = rational(knots[0]), rational(knots[-1])
        if lo is not None and hi is not None and grid.count(Interval(knots[0], knots[-1])) \
                <= len(knots):
            return 0.0
    return power_table_error(knots, n) * 1.01  # the dense sample, with a margin


def quarter_square_tables(a: Lin, ra: Interval, b: Lin, rb: Interval, step: float | None,
                          grids: tuple[Grid | None, Grid | None]
                          ) -> list[tuple[Lin, Interval, Pwl, float]]:
    """(x, range, table, error) whose sum is a*b = (a+b)**2/4 - (a-b)**2/4 (the ReLU
    product); ``error`` bounds the table's deviation at the values x can take."""
    if not (ra.finite and rb.finite):
        raise RangeError("a product of two streams on the ReLU machine is a table over the "
                         f"factors' ranges, got [{ra.lo}, {ra.hi}] and [{rb.lo}, {rb.hi}]; "
                         "declare both with tw.claim(v, lo, hi)")
    out = []
    for x, rng, g, w in ((a + b, ra + rb, _sum_grid(*grids, 1), 0.25),
                         (a - b, ra - rb, _sum_grid(*grids, -1), -0.25)):
        if x.is_const:
            out.append((x, rng, Pwl(const=w * x.const ** 2), 0.0))
            continue
        knots = table_knots(rng, g, step)
        f = power_pwl(knots, 2)
        out.append((x, rng, Pwl(f.const * w, f.slope * w,
                                [Hinge(h.knot, h.weight * w) for h in f.hinges], f.anchor),
                    abs(w) * table_error(knots, g, 2)))
    return out


def _sum_grid(ga: Grid | None, gb: Grid | None, sign: int) -> Grid | None:
    if ga is None or gb is None:
        return None
    sp = frac_gcd(ga.spacing, gb.spacing)
    off = ga.offset + gb.offset if sign > 0 else ga.offset - gb.offset
    return Grid(sp, off % sp)


# -- logic ------------------------------------------------------------------------------------
def logical_and(bank: Bank, out: int, a: Lin, b: Lin) -> None:
    bank.hinge(out, a + b - 1.0)


def logical_or(bank: Bank, out: int, a: Lin, b: Lin) -> None:
    # a + b - and(a, b); the linear part passes through exactly
    linear(bank, out, a + b, 1.0)
    bank.hinge(out, a + b - 1.0, -1.0)


def at_least(k: int) -> Pwl:
    """[count >= k] for an integer count: relu(count - k + 1) - relu(count - k), exact."""
    f = Pwl()
    f.hinge(k - 1, 1.0)
    f.hinge(k, -1.0)
    return f


# -- knots for smooth functions ---------------------------------------------------------------
def auto_knots(f: Callable[[np.ndarray], np.ndarray], lo: float, hi: float,
               tol: Callable[[np.ndarray], np.ndarray], kinks: Sequence[float] = (),
               max_knots: int = MAX_KNOTS) -> list[float]:
    """Knots on [lo, hi] whose linear interpolant of ``f`` is within ``tol(x)`` everywhere
    (kinks are always knots). Each segment is split at its worst point until a dense sample
    (64 points) of the interpolation error fits; curvature alone would need f''."""
    fixed = sorted({lo, hi, *[k for k in kinks if lo < k < hi]})
    knots = list(fixed)
    i = 0
    while i < len(knots) - 1:
        a, b = knots[i], knots[i + 1]
        xs = np.linspace(a, b, 65)[1:-1]
        fa, fb = f(np.array([a, b]))
        err = np.abs(fa + (fb - fa) * (xs - a) / (b - a) - f(xs))
        if not np.all(np.isfinite(err)):
            raise RangeError(f"the function is not finite on [{a}, {b}]")
        if np.all(err <= tol(xs)):
            i += 1
            continue
        knots.insert(i + 1, (a + b) / 2)
        if len(knots) > max_knots:
            raise RangeError(f"interpolating to this tolerance over [{lo}, {hi}] needs more "
                             f"than {max_knots} knots; loosen the tolerance or narrow the range")
    return knots


def sharpness_for(knots: Sequence[float], f: Pwl, tol_at_knot: Callable[[float], float],
                  machine: str, what: str) -> float:
    """The smallest power-of-two sharpness at which SwiGLU corners neither overlap
    (KNOT_SPACING) nor err by more than ``tol_at_knot`` at any knot."""
    if machine != "swiglu" or len(knots) < 2:
        return 1.0
    gap = min(b - a for a, b in itertools.pairwise(knots))
    need = KNOT_SPACING / (SILU_SCALE * gap)
    for h in f.hinges:
        need = max(need, abs(h.weight) * HINGE_MAX_ERROR / (SILU_SCALE * tol_at_knot(h.knot)))
    sharp = 2.0 ** max(0, math.ceil(math.log2(need))) if need > 1 else 1.0
    if sharp > MAX_SHARPNESS:
        raise RangeError(f"{what}: knots {gap:.3g} apart need hinge sharpness {sharp:g} "
                         f"(limit {MAX_SHARPNESS:g}); loosen the tolerance or narrow the range")
    return sharp


def with_sharpness(f: Pwl, sharpness: float) -> Pwl:
    return Pwl(f.const, f.slope, [Hinge(h.knot, h.weight, sharpness) for h in f.hinges],
               f.anchor)


def reciprocal_knots(rng: Interval, grid: Grid | None, rel_tol: float) -> list[float]:
    """Knots for 1/x on a range of one sign: every lattice point when few enough (exact on
    the grid), else knots whose interpolation error is within rel_tol/2 of |1/x|."""
    _need_finite(rng, "1/x")
    if rng.lo <= 0 <= rng.hi:
        raise RangeError(f"1/x over [{rng.lo}, {rng.hi}] includes 0; declare a range of one "
                         "sign with tw.claim(v, lo, hi)")
    if grid is not None:
        if 2 <= grid.count(rng) <= TABLE_SEGMENTS + 1:
            return grid.points(rng)
    return auto_knots(lambda x: 1.0 / x, rng.lo, rng.hi, lambda x: rel_tol / 2 / np.abs(x))
