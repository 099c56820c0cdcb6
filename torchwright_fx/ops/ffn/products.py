"""Products, squares, powers and reciprocals; knots for smooth functions."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

import numpy as np

from torchwright_fx.base.errors import RangeError
from torchwright_fx.base.machines import MachineKind, current_precision
from torchwright_fx.base.numerics import (
    HINGE_MAX_ERROR,
    KNOT_SPACING,
    MAX_KNOTS,
    MAX_LANES,
    MAX_SHARPNESS,
    PRODUCT_NOISE,
    SATURATION,
    SILU_SCALE,
    TABLE_SEGMENTS,
)
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import (
    Interval,
    frac_gcd,
    rational,
)
from torchwright_fx.ops.ffn.elementwise import select
from torchwright_fx.ops.ffn.grids import Grid, need_finite
from torchwright_fx.ops.ffn.pwl import Hinge, Pwl, emit_into_bank
from torchwright_fx.ops.lanes import Bank


# -- products, squares and powers -------------------------------------------------------------
def table_knots(rng: Interval, grid: Grid | None, step: float | None,
                segments: int = TABLE_SEGMENTS) -> list[float]:
    """Knots of a piecewise-linear table over ``rng``: every lattice point when there are few
    enough (then the table is exact on the grid), else ``segments`` equal steps (or ``step``)."""
    need_finite(rng, "a piecewise-linear table")
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
    half = current_precision().half
    if bank.machine.gated_up and not (half and (ra.is_bool or rb.is_bool)):
        # (in half precision SiLU(1) b + SiLU(-1) (-b) rounds in every format: a 0/1 factor
        # gates instead, below, whose gates saturate)
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
    if len(grids[0]) * len(grids[1]) > max_pairs or len(grids[0]) * len(grids[1]) == 0:
        return bound  # (before the pairs are made: 2**32 of them at 65536 positions)
    a, b = np.meshgrid(*grids, indexing="ij")
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
        with np.errstate(invalid="ignore", over="ignore"):  # a non-finite f is refused below
            fa, fb = f(np.array([a, b]))
            err = np.abs(fa + (fb - fa) * (xs - a) / (b - a) - f(xs))
        if not np.all(np.isfinite(err)):
            raise RangeError(f"the function is not finite on [{a}, {b}]; keep the input where "
                             "it is finite: torch.clamp(v, min=..., max=...) first")
        if np.all(err <= tol(xs)):
            i += 1
            continue
        knots.insert(i + 1, (a + b) / 2)
        if len(knots) > max_knots:
            raise RangeError(f"interpolating to this tolerance over [{lo}, {hi}] needs more "
                             f"than {max_knots} knots; loosen the tolerance or narrow the range")
    return knots


def sharpness_for(knots: Sequence[float], f: Pwl, tol_at_knot: Callable[[float], float],
                  machine: MachineKind, what: str) -> float:
    """The smallest power-of-two sharpness at which SwiGLU corners neither overlap
    (KNOT_SPACING) nor err by more than ``tol_at_knot`` at any knot."""
    if not machine.smooth_hinge or len(knots) < 2:
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
    need_finite(rng, "1/x")
    if rng.lo <= 0 <= rng.hi:
        raise RangeError(f"1/x over [{rng.lo}, {rng.hi}] includes 0; make it one sign first "
                         "(torch.clamp(v, min=1), or a tw.lookup default of that sign), or, if "
                         "it is never 0 anywhere (<bos> included: a claim is checked there "
                         "too), declare it with tw.claim(v, lo, hi)")
    if grid is not None:
        if 2 <= grid.count(rng) <= TABLE_SEGMENTS + 1:
            return grid.points(rng)
    return auto_knots(lambda x: 1.0 / x, rng.lo, rng.hi, lambda x: rel_tol / 2 / np.abs(x))
