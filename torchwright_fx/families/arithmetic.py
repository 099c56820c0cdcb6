"""Products, powers, reciprocals and division."""

from __future__ import annotations

import dataclasses
import operator
from typing import Any

import torch

from torchwright_fx.analysis.facts import (
    FactsCtx,
    NodeFacts,
    as_facts,
    const_values,
    divided,
    is_constant,
    scaled,
)
from torchwright_fx.base import numerics
from torchwright_fx.capture.registry import facts, lowering
from torchwright_fx.families.rounding import rounded, rounded_facts
from torchwright_fx.ir.graph import ALL_POSITIONS
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import (
    EXACT,
    INEXACT,
    ONCE,
    Interval,
    lattice_product,
)
from torchwright_fx.lower.context import LowerCtx
from torchwright_fx.lower.rules import (
    Columns,
    divided_stream,
    grid,
    pwl_stream,
    read_noise,
    scaled_stream,
    streams_of,
    user_errors,
)
from torchwright_fx.lower.stream import Stream, const_vector, is_const, to_stream
from torchwright_fx.ops import ffn


# -- products, powers, reciprocals ----------------------------------------------------------------
@lowering(operator.mul, torch.mul, methods=("mul", "__mul__", "__rmul__"))
def _mul(ctx: LowerCtx, a: Any, b: Any, *, step: float | None = None) -> Stream:
    w = ctx.out_width
    if is_const(b) or is_const(a):
        stream, k = (a, b) if is_const(b) else (b, a)
        return scaled_stream(to_stream(stream, w), const_vector(k, w))
    x, y = streams_of(ctx, a, b)
    counted = _counted_times_count(ctx, x, y) or _counted_times_count(ctx, y, x)
    return counted if counted is not None else product(ctx, x, y, step)


def _counted_times_count(ctx: LowerCtx, x: Stream, y: Stream) -> Stream | None:
    """x * y for x = c * mean + b, a mean over every position built from counts
    (``counts.quotient``: the mean less its first value is total / m), and y = position + 1 = m:
    the whole number c * total + b * m, exact at any length, instead of a product of two
    noisy values (a mean times its count, as a running sum is written)."""
    shared = ctx.prog.shared
    if x.width != 1 or len(x.cols[0].terms) != 1:
        return None
    ((sid, c),) = x.cols[0].terms.items()
    cm = shared.counted_means.get(sid)
    if cm is None or cm.at_empty is not None or cm.group != ALL_POSITIONS:
        return None
    if not any(p is not None and y.cols[0] == p + 1.0
               for p in (shared.position, shared.exact_position)):
        return None
    b = x.cols[0].const
    out = x.ranges[0] * y.ranges[0]
    out = dataclasses.replace(out, near_integral=True).with_noise(0.0)
    return Stream([cm.total * c + cm.rows() * b], [out])


def product(ctx: LowerCtx, x: Stream, y: Stream, step: float | None = None) -> Stream:
    """Elementwise x * y of two streams (SwiGLU: one saturated lane on small lattices, exact;
    else 2 lanes, within fp32 rounding; ReLU: a 0/1 gate, else the quarter-square tables over
    the declared ranges)."""
    cols = Columns(ctx, x.width)
    shifted: set[int] = set()
    with user_errors(ctx):
        for i in range(x.width):
            a, ra, b, rb = x.cols[i], x.ranges[i], y.cols[i], y.ranges[i]
            shift = ffn.saturating_shift(ra, rb) if ctx.prog.machine.gated_up else None
            if shift is not None and not (ra.is_bool or rb.is_bool):
                # SiLU(a + M) = a + M exactly once a + M >= SATURATION: one lane gives
                # (a + M) * b exactly on integers, and -M * b rides in the affine part.
                cols.bank.lane(i, a + shift, b)
                cols.affine[i] = cols.affine[i] + b * (-shift)
                cols.lanes[i] = ra.shift(shift) * rb
                shifted.add(i)
                continue
            if ctx.prog.machine.gated_up or ra.is_bool or rb.is_bool:
                ffn.product(cols.bank, i, a, ra, b, rb)
                cols.whole(i)
                continue
            grids = (grid(ctx, a, ra), grid(ctx, b, rb))
            for part_x, part_r, f, err in ffn.quarter_square_tables(a, ra, b, rb, step, grids):
                cols.pwl(i, part_x, part_r, f)
                cols.noise[i] += err
    ranges: list[Interval] = []
    for p, q, r, s in zip(x.cols, y.cols, x.ranges, y.ranges, strict=True):
        out = _square_range(r) if p == q else r * s
        if _mean_times_count(ctx, p, r, q) or _mean_times_count(ctx, q, s, p):
            out = dataclasses.replace(out, near_integral=True)
        if ctx.prog.machine.gated_up and not (r.is_bool or s.is_bool):
            out = out.with_noise(out.noise + ffn.product_rounding(r, s, len(ranges) in shifted))
        if ctx.prog.machine.gated_up or r.is_bool or s.is_bool:  # the lanes read p and q
            ep, eq = read_noise(ctx, p), read_noise(ctx, q)
            out = out.with_noise(out.noise + ep * s.magnitude + eq * r.magnitude + ep * eq)
        ranges.append(out)
    return cols.finish(ranges, x.is_bool and y.is_bool)


def _mean_times_count(ctx: LowerCtx, m: Lin, rm: Interval, count: Lin) -> bool:
    """m is a mean of whole numbers over every position (tw.mean without where) and count is
    the number of positions it averages, position + 1: their product is a whole number."""
    pos = ctx.prog.shared.position
    return (rm.max_den > 0 and rm.den_group == -1 and pos is not None
            and len(m.terms) == 1 and m.const == 0 and count == pos + 1.0)


def _square_range(r: Interval) -> Interval:
    lo = 0.0 if r.lo <= 0 <= r.hi else min(r.lo * r.lo, r.hi * r.hi)
    return Interval.of(lo, max(r.lo * r.lo, r.hi * r.hi), lattice_product(r.lattice, r.lattice),
                       2 * r.magnitude * r.noise + r.noise * r.noise, r.derived())


def power(ctx: LowerCtx, x: Stream, n: int, step: float | None = None) -> Stream:
    """x ** n for a constant integer n >= 0: SwiGLU multiplies exactly (repeated squaring);
    ReLU reads a table of t ** n over x's declared range (exact on lattice points)."""
    if n == 0:
        return Stream.const([1.0] * x.width)
    if n == 1:
        return x
    if ctx.prog.machine.gated_up:
        half = power(ctx, x, n // 2)
        sq = product(ctx, half, half)
        return product(ctx, sq, x) if n % 2 else sq
    fs, ranges = [], []
    with user_errors(ctx):
        for c, r in zip(x.cols, x.ranges, strict=True):
            ffn.need_finite(r, f"x ** {n} on the ReLU machine")
            knots = ffn.table_knots(r, grid(ctx, c, r), step)
            fs.append(ffn.power_pwl(knots, n))
            out = _power_range(r, n)
            ranges.append(out.with_noise(ffn.table_error(knots, grid(ctx, c, r), n)))
    cols = Columns(ctx, x.width)
    for i, (c, r, f) in enumerate(zip(x.cols, x.ranges, fs, strict=True)):
        cols.pwl(i, c, r, f)
        cols.noise[i] += ranges[i].noise
    return cols.finish(ranges)


def _power_range(r: Interval, n: int) -> Interval:
    lat = r.lattice
    for _ in range(n - 1):
        lat = lattice_product(lat, r.lattice)
    noise = n * r.magnitude ** (n - 1) * r.noise * 2  # first order, doubled for the rest
    if n % 2 == 0:
        return Interval.of(_square_range(r).lo ** (n // 2) if r.lo * r.hi > 0 else 0.0,
                           r.magnitude ** n, lat, noise, r.derived())
    return Interval.of(r.lo ** n, r.hi ** n, lat, noise, r.derived())


@lowering(torch.square, methods=("square",))
def _square(ctx: LowerCtx, a: Any, *, step: float | None = None) -> Stream:
    return power(ctx, to_stream(a, ctx.out_width), 2, step)


@lowering(operator.pow, torch.pow, methods=("pow", "__pow__"))
def _pow(ctx: LowerCtx, a: Any, n: Any) -> Stream:
    if not isinstance(a, Stream) or isinstance(n, Stream) or not float(n).is_integer() \
            or n < 0:
        raise ctx.error(f"a power with exponent {n!r}",
                        "only stream ** (constant integer >= 0) compiles; a function of one "
                        "value is a table: of a whole number, tw.lookup(v, {k: k ** p for k in "
                        "range(lo, hi + 1)}) (exact); of a real value, tw.piecewise(lambda t: "
                        "t ** p, v, breakpoints) (approximate)")
    return power(ctx, to_stream(a, ctx.out_width), int(n))


@lowering(torch.reciprocal, methods=("reciprocal",))
def _reciprocal_rule(ctx: LowerCtx, a: Any) -> Stream:
    return reciprocal(ctx, to_stream(a, ctx.out_width))


def reciprocal(ctx: LowerCtx, x: Stream, rel_tol: float = numerics.RECIPROCAL_REL_TOL) -> Stream:
    """1/x over a declared range of one sign: a piecewise-linear table, exact on lattice
    points when there are few, else within rel_tol relative (half interpolation, half
    SwiGLU corner rounding)."""
    fs, ranges = [], []
    with user_errors(ctx):
        for c, r in zip(x.cols, x.ranges, strict=True):
            knots = ffn.reciprocal_knots(r, grid(ctx, c, r), rel_tol)
            f = ffn.reciprocal_pwl(knots)
            sharp = ffn.sharpness_for(knots, f, lambda k: rel_tol / 2 / abs(k),
                                      ctx.prog.machine, "1/x")
            fs.append(ffn.with_sharpness(f, sharp))
            lo, hi = sorted((1.0 / r.lo, 1.0 / r.hi))
            slack = rel_tol * max(abs(lo), abs(hi)) if ctx.prog.machine.smooth_hinge else 0.0
            exact_on_grid = not ctx.prog.machine.smooth_hinge and grid(ctx, c, r) is not None and \
                len(knots) >= grid(ctx, c, r).count(r)  # type: ignore[union-attr]
            err = 0.0 if exact_on_grid else rel_tol * max(abs(lo), abs(hi))
            # the reference's 1/x is rounded once (fp32 holds 1/3 only approximately)
            ranges.append(Interval(lo - slack, hi + slack, noise=err,
                                   rounding=ONCE if r.rounding == EXACT else INEXACT))
    return pwl_stream(ctx, x.cols, x.ranges, fs, ranges)


@lowering(operator.truediv, torch.div, torch.true_divide, methods=(
    "div", "__truediv__", "true_divide"))
def _div(ctx: LowerCtx, a: Any, b: Any, *, rounding_mode: str | None = None) -> Stream:
    w = ctx.out_width
    if is_const(b):
        quotient = divided_stream(to_stream(a, w), const_vector(b, w))
    elif is_const(a):  # c / x
        quotient = scaled_stream(reciprocal(ctx, to_stream(b, w)), const_vector(a, w))
    else:
        x, y = streams_of(ctx, a, b)
        quotient = product(ctx, x, reciprocal(ctx, y))
    if rounding_mode is None:
        return quotient
    if rounding_mode not in ("floor", "trunc"):
        raise ctx.error(f"rounding_mode={rounding_mode!r}")
    return rounded(ctx, quotient, rounding_mode)


@lowering(operator.floordiv, torch.floor_divide, methods=("__floordiv__", "floor_divide"))
def _floordiv(ctx: LowerCtx, a: Any, b: Any) -> Stream:
    return _div(ctx, a, b, rounding_mode="floor")


# -- facts ---------------------------------------------------------------------------------------
def product_facts(ctx: FactsCtx, x: NodeFacts, y: NodeFacts) -> NodeFacts:
    """x * y of two streams (``product``): a square where both are the same value; a mean of
    whole numbers times its count (position + 1) is whole up to rounding."""
    ranges = []
    for i, (r, s) in enumerate(zip(x.ranges, y.ranges, strict=True)):
        p, q = x.form(i), y.form(i)
        out = _square_range(r) if p is not None and p == q else r * s
        if _counts_mean(ctx, p, r, q) or _counts_mean(ctx, q, s, p):
            out = dataclasses.replace(out, near_integral=True)
        ranges.append(out)
    return NodeFacts(ranges, x.is_bool and y.is_bool, ctx.fresh(ranges))


def _counts_mean(ctx: FactsCtx, m: Lin | None, rm: Interval, count: Lin | None) -> bool:
    """``_mean_times_count`` on forms: m a mean over every position, count = position + 1."""
    pos = ctx.analysis.shared.get("position")
    return (rm.max_den > 0 and rm.den_group == -1 and pos is not None and m is not None
            and len(m.terms) == 1 and m.const == 0 and count == pos + 1.0)


@facts(operator.mul, torch.mul, methods=("mul", "__mul__", "__rmul__"))
def _mul_facts(ctx: FactsCtx, a: Any, b: Any, *, step: float | None = None) -> NodeFacts:
    w = ctx.out_width
    if is_constant(b) or is_constant(a):
        stream, k = (a, b) if is_constant(b) else (b, a)
        return scaled(as_facts(stream, w), const_values(k, w))
    return product_facts(ctx, as_facts(a, w), as_facts(b, w))


def power_facts(ctx: FactsCtx, x: NodeFacts, n: int) -> NodeFacts:
    """x ** n by repeated squaring (``power`` on SwiGLU; the ReLU machine's table ranges,
    ``_power_range``, lie inside these)."""
    if n == 0:
        return NodeFacts.const([1.0] * x.width)
    if n == 1:
        return x
    half = power_facts(ctx, x, n // 2)
    sq = product_facts(ctx, half, half)
    return product_facts(ctx, sq, x) if n % 2 else sq


@facts(torch.square, methods=("square",))
def _square_facts(ctx: FactsCtx, a: Any, *, step: float | None = None) -> NodeFacts:
    return power_facts(ctx, as_facts(a, ctx.out_width), 2)


@facts(operator.pow, torch.pow, methods=("pow", "__pow__"))
def _pow_facts(ctx: FactsCtx, a: Any, n: Any) -> NodeFacts:
    if not isinstance(a, NodeFacts) or isinstance(n, NodeFacts) or not float(n).is_integer() \
            or n < 0:
        raise ctx.error(f"a power with exponent {n!r}")
    return power_facts(ctx, as_facts(a, ctx.out_width), int(n))


def reciprocal_facts(ctx: FactsCtx, x: NodeFacts,
                     rel_tol: float = numerics.RECIPROCAL_REL_TOL) -> NodeFacts:
    """1/x over a range of one sign (``reciprocal``), widened by rel_tol of its magnitude as
    the SwiGLU machine's facts are; the reference rounds an exact x's reciprocal once."""
    ranges = []
    for r in x.ranges:
        if not r.finite or r.lo <= 0 <= r.hi:
            raise ctx.error(f"1/x over [{r.lo}, {r.hi}]: not of one sign")
        lo, hi = sorted((1.0 / r.lo, 1.0 / r.hi))
        slack = rel_tol * max(abs(lo), abs(hi))
        ranges.append(Interval(lo - slack, hi + slack,
                               rounding=ONCE if r.rounding == EXACT else INEXACT))
    return NodeFacts(ranges)


@facts(torch.reciprocal, methods=("reciprocal",))
def _reciprocal_facts(ctx: FactsCtx, a: Any) -> NodeFacts:
    return reciprocal_facts(ctx, as_facts(a, ctx.out_width))


@facts(operator.truediv, torch.div, torch.true_divide, methods=(
    "div", "__truediv__", "true_divide"))
def _div_facts(ctx: FactsCtx, a: Any, b: Any, *, rounding_mode: str | None = None) -> NodeFacts:
    w = ctx.out_width
    if is_constant(b):
        quotient = divided(as_facts(a, w), const_values(b, w))
    elif is_constant(a):
        quotient = scaled(reciprocal_facts(ctx, as_facts(b, w)), const_values(a, w))
    else:
        recip = reciprocal_facts(ctx, as_facts(b, w))
        quotient = product_facts(ctx, as_facts(a, w),
                                 NodeFacts(recip.ranges, False, ctx.fresh(recip.ranges)))
    if rounding_mode is None:
        return quotient
    if rounding_mode not in ("floor", "trunc"):
        raise ctx.error(f"rounding_mode={rounding_mode!r}")
    return rounded_facts(ctx, quotient, rounding_mode)


@facts(operator.floordiv, torch.floor_divide, methods=("__floordiv__", "floor_divide"))
def _floordiv_facts(ctx: FactsCtx, a: Any, b: Any) -> NodeFacts:
    return _div_facts(ctx, a, b, rounding_mode="floor")
