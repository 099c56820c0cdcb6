"""Steps, staircases, rounding plans and lookup tables."""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction

from torchwright_fx.base.errors import NotExact, RangeError
from torchwright_fx.base.machines import current_precision
from torchwright_fx.base.numerics import (
    EXACT_HALF_INTEGERS,
    EXACT_LATTICE_STEPS,
    INTEGER_RAMP_HI,
    INTEGER_RAMP_LO,
    MAX_LANES,
    NOISE_TOLERANCE,
    RAMP_WIDTH,
    REAL_STAIR_MAGNITUDE,
    SINGLE_STAGE_STEPS,
)
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import (
    Interval,
    frac_gcd,
    read_float,
)
from torchwright_fx.ops.ffn.grids import Fractions, Grid, need_finite
from torchwright_fx.ops.ffn.pwl import Pwl, lane_count, magnitude
from torchwright_fx.ops.lanes import Bank

# -- steps and staircases ---------------------------------------------------------------------
# Steps on a value with no lattice are ramps RAMP_WIDTH wide: exact outside the ramp, wrong
# inside it. They are refused unless the user compiles with exact=False, which records each.
_APPROXIMATIONS: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "approximations", default=None)


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
            "values inside it; step on whole numbers instead (compare a table's key, not its "
            "result: d < 4 rather than tw.reciprocal(d) > 0.3; declare a value that is whole, "
            "such as a mean times its count, with tw.claim(v, lo, hi, integral=True)), or "
            "compile with exact=False to accept the ramp")
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
                    f"apart, too close for the averaging noise {grid.noise:.3g} (the gap "
                    "shrinks and the noise grows with max_seq_len: lower it)")
        return _real_ramp(s)  # the user accepted a plain real-valued ramp
    if grid is None:
        approximate(f"a step at {s.at:g} on a value with no lattice")
        return _real_ramp(s)
    p = grid.above(t) if s.strict else grid.at_or_above(t)
    sp = grid.spacing
    if current_precision().half:
        # corners on the lattice points p - sp and p: every gate is SILU_SCALE times a whole
        # number of spacings, which fp16 and bf16 hold (a quarter spacing off, the gates
        # need two more significant bits than bf16 has); no input noise is tolerated, which
        # the half certificate replays (emit/certify_half.py)
        return float(p - sp), float(p)
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
        width = float(grid.spacing * (Fraction(1) if current_precision().half else
                                      Fraction(INTEGER_RAMP_HI - INTEGER_RAMP_LO)))
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


# What a comparison or rounding refused for fp32's resolution should do instead.
COMPARE_ADVICE = ("fp32 cannot resolve a step at this magnitude; compare smaller parts (a sum "
                  "digit by digit, a count instead of a weighted total), or narrow the range "
                  "with torch.clamp or tw.claim")


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
            f"up to {tolerance:.3g}, but the compiled input may be off by {rng.noise:.3g}, "
            "too far from the lattice to snap onto it; lower max_seq_len when the noise comes "
            "from tw.mean or tw.position (it grows with the length), average small whole "
            "numbers (hi - lo under 16) and scale the mean after (7 * tw.mean(d), not "
            "tw.mean(7 * d): from 2048 positions such a mean is counted exactly), or copy a "
            "table's result with torch.where(flag, v, 0) before scaling it up (fp32 rounds a "
            "large multiple of the table's column where it is read)", noisy=True)
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
    need_finite(key, "lookup")
    lo, hi = math.ceil(key.lo), math.floor(key.hi)
    check_resolution(key, Grid(Fraction(1), Fraction(0)), "lookup")
    return lookup_pwl(lo, hi, table, default)


def lookup_pwl(lo: int, hi: int, table: dict[int, float], default: float) -> Pwl:
    """The staircase of ``table.get(k, default)`` on the integers of [lo, hi]: a step where
    the value changes, which is only at a table key k or at k + 1, so its cost is the table's
    size, not the key range's."""
    prev = table.get(lo, default)
    steps = []
    for key in sorted({k for entry in table for k in (entry, entry + 1) if lo < k <= hi}):
        value = table.get(key, default)  # prev is the value at key - 1 (see the docstring)
        if value != prev:
            steps.append(Step(key, False, value - prev))
        prev = value
    return staircase(table.get(lo, default), steps, Grid(Fraction(1), Fraction(0)))
