"""What fp32 does to a bank's lanes: exactness proofs and noise bounds."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from fractions import Fraction

import numpy as np

from torchwright_fx.base.machines import MachineKind
from torchwright_fx.base.numerics import (
    HINGE_MAX_ERROR,
    LANE_ROUNDING,
    SATURATION,
    SILU_MAX_SLOPE,
    SILU_PEAK,
    SILU_SCALE,
)
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import (
    Interval,
    frac_gcd,
    rational,
)
from torchwright_fx.ops.ffn.grids import Fractions, Grid
from torchwright_fx.ops.ffn.pwl import Pwl, magnitude


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
    weights = {sid: Fraction(float(np.float32(c))) for sid, c in x.terms.items()}
    held = Fraction(float(np.float32(x.const))) == Fraction(x.const) and all(
        signal_range(sid).lattice is not None and w == Fraction(x.terms[sid])
        for sid, w in weights.items())
    unit = _exact_sum_unit(Fraction(x.const), weights, signal_range, tables) if held else None
    dust = sum(abs(c) * signal_range(sid).noise for sid, c in x.terms.items())
    if unit is not None and dust < float(unit) / 4:
        if dust == 0:
            return 0.0
        return min((len(x.terms) + 1) * dust, gate_rounding(x, signal_range, tables))
    return gate_rounding(x, signal_range, tables)


def _exact_sum_unit(const: Fraction, weights: Mapping[int, Fraction],
                    signal_range: Callable[[int], Interval], tables: Tables) -> Fraction | None:
    """The unit every partial sum of ``const + sum w_s * stored_s`` is a multiple of (the gcd
    of the constant and the weights times the columns' lattices), when those sums stay below
    2**24 of it, so that fp32 adds them exactly; else None. Every column needs a lattice."""
    unit = abs(const)
    for sid, w in weights.items():
        lat = signal_range(sid).lattice
        assert lat is not None
        unit = frac_gcd(frac_gcd(unit, abs(w) * lat[0]), abs(w) * lat[1])
    if unit > 0 and abs(const) + stored_total(weights, signal_range, tables) >= unit * 2 ** 24:
        return None
    return unit


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
        weights = {sid: Fraction(float(np.float32(c * k))) for sid, c in x.terms.items()}
        if _exact_sum_unit(const, weights, signal_range, tables) is None:
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


def pwl_noise(f: Pwl, rng: Interval, grid: Grid | Fractions | None, machine: MachineKind,
              exact: bool = False) -> float:
    """A bound on |compiled f(x') - f(x)| for every exact input x in rng and compiled input
    x' within rng.noise of it: the steepest segment the noise window can reach (around lattice
    points only, when x has a lattice), plus each SwiGLU corner's deviation from relu at the
    nearest inputs it can see, plus fp32 rounding of off-lattice lane sums. Float64 throughout:
    a bound, not an exact figure."""
    eps = rng.noise
    inside = [h for h in f.hinges if rng.lo < h.knot < rng.hi]
    swiglu = machine.smooth_hinge
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


def hinge_error(f: Pwl, machine: MachineKind) -> float:
    """Worst deviation of the SwiGLU lanes from exact relu: corners never overlap when knots
    respect KNOT_SPACING, so at any x only the nearest corner errs."""
    if not machine.smooth_hinge or not f.hinges:
        return 0.0
    return max(abs(h.weight) * HINGE_MAX_ERROR / (SILU_SCALE * h.sharpness) for h in f.hinges)
