"""The lowering table: each fx target (torch function, Tensor method, Python operator) mapped
to one rule ``rule(ctx, *args, **kwargs) -> Stream``. A rule builds the output's affine forms
(linear ops: no producer at all) or FFN banks (non-linear ops), and derives the output's value
ranges from its inputs' ranges. Intrinsics carry their own rule (``intrinsics.py``,
``numeric.py``). The constructions themselves are in ``ops/ffn/``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import operator
from collections.abc import Callable, Iterator, Sequence
from fractions import Fraction
from typing import Any

import torch
import torch.nn.functional as F

from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import (
    BOOL,
    EXACT,
    INEXACT,
    ONCE,
    Interval,
    lattice_product,
    lattice_scale,
    lattice_sum,
    read_float,
)
from torchwright_fx.lower.context import LowerCtx
from torchwright_fx.lower.stream import Stream, const_vector, is_const, to_stream
from torchwright_fx.ops import ffn, numerics
from torchwright_fx.ops.ffn import Grid, Pwl, Step
from torchwright_fx.ops.ties import refuse_ties, refuse_unheld_constant

Rule = Callable[..., Any]
FUNCTIONS: dict[Any, Rule] = {}
METHODS: dict[str, Rule] = {}
INF = math.inf


def rule(*functions: Any, methods: tuple[str, ...] = ()) -> Callable[[Rule], Rule]:
    def deco(fn: Rule) -> Rule:
        for f in functions:
            FUNCTIONS[f] = fn
        for m in methods:
            METHODS[m] = fn
        return fn

    return deco


def _streams(ctx: LowerCtx, *values: Any) -> list[Stream]:
    return [to_stream(v, ctx.out_width) for v in values]


@contextlib.contextmanager
def user_errors(ctx: LowerCtx) -> Iterator[None]:
    """Turn a construction's RangeError into a CompileError naming the user's line."""
    try:
        yield
    except ffn.RangeError as e:
        raise ctx.error(str(e)) from None


def grid(ctx: LowerCtx, x: Lin, rng: Interval) -> Grid | None:
    return ffn.grid_of(x, rng, lambda sid: ctx.prog.signals[sid].range)


def read_noise(ctx: LowerCtx, x: Lin) -> float:
    """How far fp32 may move x where a lane reads it (0 when the read is exact)."""
    return ffn.read_rounding(x, lambda sid: ctx.prog.signals[sid].range, ctx.prog.embed_tables)


def value_set(ctx: LowerCtx, x: Lin, rng: Interval) -> Grid | ffn.Fractions | None:
    """Where a step may put its ramp: x's lattice, else the fractions of a mean, else None."""
    return grid(ctx, x, rng) or ffn.fractions_of(x, lambda sid: ctx.prog.signals[sid].range)


class Columns:
    """One FFN bank being filled column by column. A column is either a ``Pwl`` of one value
    (its affine part kept outside the bank) or bank-complete (``whole``: lanes + constants).

    Noise: for a pwl column the rule's range carries only the function's own error (a table's
    interpolation error; 0 for exact ops), and ``finish`` adds what the emission costs: the
    input's noise through f's steepest reachable segment and the SwiGLU corners."""

    def __init__(self, ctx: LowerCtx, width: int):
        self.ctx, self.bank = ctx, ctx.bank(width)
        self.affine = [Lin() for _ in range(width)]
        self.lanes: list[Interval | None] = [Interval.point(0.0)] * width
        self.noise = [0.0] * width

    def pwl(self, i: int, x: Lin, rng: Interval, f: Pwl) -> None:
        e = ffn.emit(self.bank, i, x, rng, f)
        self.affine[i] = self.affine[i] + e.affine
        lanes = self.lanes[i]
        assert lanes is not None, "a column is either pwl or whole"
        self.lanes[i] = lanes + e.lanes
        signal_range = self.ctx.prog.signals.__getitem__
        stored, tables = (lambda sid: signal_range(sid).range), self.ctx.prog.embed_tables
        exact = ffn.exact_lanes(f, x, rng, stored, tables)
        if not exact:  # the gates' fp32 sums, as large as the stored signals, round x too
            rng = rng.with_noise(rng.noise + ffn.gate_rounding(x, stored, tables))
        self.noise[i] += ffn.pwl_noise(f, rng, value_set(self.ctx, x, rng), self.ctx.prog.machine,
                                       exact)

    def whole(self, i: int) -> None:
        self.lanes[i] = None

    def finish(self, ranges: Sequence[Interval], is_bool: bool = False) -> Stream:
        signal_ranges, column_ranges = [], []
        for i, (lanes, rng, affine) in enumerate(zip(self.lanes, ranges, self.affine,
                                                     strict=True)):
            if lanes is None:
                signal_ranges.append(rng)
                column_ranges.append(rng)
                continue
            rng = rng.with_noise(rng.noise + self.noise[i])
            # The signal holds f(x) minus the affine part: on the difference of the lattices.
            aff = ffn.lin_lattice(affine, lambda sid: self.ctx.prog.signals[sid].range)
            lat = lattice_sum(rng.lattice, lattice_scale(aff, -1.0))
            signal_ranges.append(Interval.of(lanes.lo, lanes.hi, lat, rng.noise))
            column_ranges.append(rng)
        cols = self.ctx.finish(self.bank, signal_ranges)
        cols = [c + a for c, a in zip(cols, self.affine, strict=True)]
        return Stream(cols, column_ranges, is_bool)


def pwl_stream(ctx: LowerCtx, xs: Sequence[Lin], rngs: Sequence[Interval], fs: Sequence[Pwl],
               ranges: Sequence[Interval], is_bool: bool = False) -> Stream:
    """Column i = fs[i](xs[i]), in one bank."""
    cols = Columns(ctx, len(fs))
    for i, (x, r, f) in enumerate(zip(xs, rngs, fs, strict=True)):
        cols.pwl(i, x, r, f)
    return cols.finish(ranges, is_bool)


# -- linear ------------------------------------------------------------------------------------
@rule(operator.add, torch.add, methods=("add", "__add__", "__radd__"))
def _add(ctx: LowerCtx, a: Any, b: Any, *, alpha: float = 1.0) -> Stream:
    x, y = _streams(ctx, a, b)
    if x.is_bool and y.is_bool:
        raise ctx.error("adding two bool tensors is a logical or in torch",
                        "write a | b, or convert with .float() first")
    if alpha != 1.0:
        y = _scale(y, [float(alpha)] * y.width)
    return Stream([p + q for p, q in zip(x.cols, y.cols, strict=True)],
                  [r + s for r, s in zip(x.ranges, y.ranges, strict=True)])


@rule(operator.sub, torch.sub, methods=("sub", "__sub__"))
def _sub(ctx: LowerCtx, a: Any, b: Any, *, alpha: float = 1.0) -> Stream:
    return _add(ctx, a, _scale(to_stream(b, ctx.out_width), [-float(alpha)] * ctx.out_width))


@rule(torch.rsub, methods=("__rsub__",))
def _rsub(ctx: LowerCtx, a: Any, b: Any) -> Stream:
    return _sub(ctx, b, a)


@rule(operator.neg, torch.neg, methods=("neg", "__neg__"))
def _neg(ctx: LowerCtx, a: Any) -> Stream:
    return _scale(to_stream(a, ctx.out_width), [-1.0] * ctx.out_width)


@rule(operator.pos)
def _pos(ctx: LowerCtx, a: Any) -> Stream:
    return to_stream(a, ctx.out_width)


def _scale(x: Stream, ks: list[float]) -> Stream:
    return Stream([c * k for c, k in zip(x.cols, ks, strict=True)],
                  [r.scale(k) for r, k in zip(x.ranges, ks, strict=True)])


@rule(operator.getitem)
def _getitem(ctx: LowerCtx, v: Any, index: Any) -> Stream:
    if not isinstance(v, Stream):
        raise ctx.error("indexing a constant inside the program", "index it outside the function")
    idx = index if isinstance(index, tuple) else (index,)
    if idx and idx[0] is Ellipsis:
        idx = (slice(None), *idx[1:])
    if len(idx) != 2 or idx[0] != slice(None):
        raise ctx.error(f"index {index!r} selects positions",
                        "streams may only be indexed on the last dim (v[:, j], v[..., a:b]); "
                        "move between positions with tw.shift / tw.latch")
    cols = list(range(v.width))
    last = idx[1]
    if last is None:  # v[:, None] turns a [seq] stream into [seq, 1]: the same column
        return v
    picked = cols[last] if isinstance(last, slice) else (
        [cols[i] for i in last] if isinstance(last, (list, tuple)) else [cols[int(last)]])
    return Stream([v.cols[i] for i in picked], [v.ranges[i] for i in picked], v.is_bool)


@rule(torch.cat, torch.concat, torch.concatenate)
def _cat(ctx: LowerCtx, tensors: Any, dim: int = 0) -> Stream:
    if dim not in (-1, 1):
        raise ctx.error(f"torch.cat along dim {dim}", "concatenate along the last dim (dim=-1)")
    parts = [to_stream(t, 1) if not isinstance(t, Stream) else t for t in tensors]
    return Stream([c for p in parts for c in p.cols], [r for p in parts for r in p.ranges],
                  all(p.is_bool for p in parts))


@rule(torch.stack)
def _stack(ctx: LowerCtx, tensors: Any, dim: int = 0) -> Stream:
    """stack of [seq] (width-1) streams along the last dim is a concatenation of columns."""
    parts = [to_stream(t, 1) if not isinstance(t, Stream) else t for t in tensors]
    if dim not in (-1, 1) or any(p.width != 1 for p in parts):
        raise ctx.error(f"torch.stack along dim {dim} of streams of widths "
                        f"{[p.width for p in parts]}",
                        "stack [seq] streams (e.g. v[:, 0]) with dim=-1, or use torch.cat")
    return _cat(ctx, parts, -1)


def _weights(w: Any) -> torch.Tensor:
    if not isinstance(w, torch.Tensor):
        w = torch.tensor(w, dtype=torch.float64)
    return w.detach().to(torch.float64)


@rule(operator.matmul, torch.matmul, torch.mm, methods=("matmul", "__matmul__", "mm"))
def _matmul(ctx: LowerCtx, a: Any, b: Any) -> Stream:
    if not isinstance(a, Stream) or isinstance(b, Stream):
        raise ctx.error("matmul needs a stream on the left and constant weights on the right")
    weights = _weights(b)
    if weights.dim() == 1:
        weights = weights[:, None]
    return _apply_matrix(a, weights, None)


@rule(F.linear)
def _linear(ctx: LowerCtx, x: Any, weight: Any, bias: Any = None) -> Stream:
    if not isinstance(x, Stream) or isinstance(weight, Stream) or isinstance(bias, Stream):
        raise ctx.error("F.linear needs constant weight and bias")
    b = None if bias is None else _weights(bias).reshape(-1)
    return _apply_matrix(x, _weights(weight).T, b)


def _apply_matrix(x: Stream, w: torch.Tensor, bias: torch.Tensor | None) -> Stream:
    cols, ranges = [], []
    for j in range(w.shape[1]):
        lin = Lin.constant(0.0 if bias is None else float(bias[j]))
        rng = Interval.point(0.0 if bias is None else float(bias[j]))
        for i in range(w.shape[0]):
            k = float(w[i, j])
            if k != 0.0:
                lin = lin + x.cols[i] * k
                rng = rng + x.ranges[i].scale(k)
        cols.append(lin)
        ranges.append(rng)
    return Stream(cols, ranges)


def _last_dim(ctx: LowerCtx, dim: Any, what: str) -> None:
    if dim not in (-1, 1, (-1,), (1,), [-1], [1]):
        raise ctx.error(f"{what} over positions (or all dims)", f"{what} over the last dim: "
                        f"v.{what}(-1)")


@rule(torch.sum, methods=("sum",))
def _sum(ctx: LowerCtx, v: Any, dim: Any = None, keepdim: bool = False, **_: Any) -> Stream:
    _last_dim(ctx, dim, "sum")
    x = v if isinstance(v, Stream) else to_stream(v, 1)
    total = Lin()
    rng = Interval.point(0.0)
    for c, r in zip(x.cols, x.ranges, strict=True):
        total, rng = total + c, rng + r
    return Stream([total], [rng])


# -- identity-like --------------------------------------------------------------------------------
@rule(methods=("float", "contiguous", "clone", "detach", "to", "type", "double"))
def _same(ctx: LowerCtx, v: Any, *_: Any, **__: Any) -> Stream:
    x = to_stream(v, ctx.out_width)
    return Stream(x.cols, x.ranges, False)


@rule(methods=("bool",))
def _to_bool(ctx: LowerCtx, v: Any) -> Stream:
    x = to_stream(v, ctx.out_width)
    if all(r.is_bool for r in x.ranges):
        return x.as_bool()
    return _compare(ctx, x, 0.0, "ne")


@rule(torch.squeeze, torch.unsqueeze, torch.reshape, methods=(
    "squeeze", "unsqueeze", "view", "reshape", "flatten"))
def _reshape(ctx: LowerCtx, v: Any, *_: Any, **__: Any) -> Stream:
    x = to_stream(v, ctx.out_width)
    if x.width != ctx.out_width:
        raise ctx.error("a reshape that changes the width of a stream")
    return x


@rule(torch.ones_like, torch.zeros_like, torch.full_like)
def _const_like(ctx: LowerCtx, v: Any, *args: Any, **kwargs: Any) -> Stream:
    row = ctx.node.meta["tw_bos"].reshape(-1)  # a constant stream: any row will do
    return Stream.const([float(r) for r in row], ctx.node.meta["tw_dtype"] == torch.bool)


# -- products, powers, reciprocals ----------------------------------------------------------------
@rule(operator.mul, torch.mul, methods=("mul", "__mul__", "__rmul__"))
def _mul(ctx: LowerCtx, a: Any, b: Any, *, step: float | None = None) -> Stream:
    w = ctx.out_width
    if is_const(b) or is_const(a):
        stream, k = (a, b) if is_const(b) else (b, a)
        return _scale(to_stream(stream, w), const_vector(k, w))
    x, y = _streams(ctx, a, b)
    return product(ctx, x, y, step)


def product(ctx: LowerCtx, x: Stream, y: Stream, step: float | None = None) -> Stream:
    """Elementwise x * y of two streams (SwiGLU: one saturated lane on small lattices, exact;
    else 2 lanes, within fp32 rounding; ReLU: a 0/1 gate, else the quarter-square tables over
    the declared ranges)."""
    cols = Columns(ctx, x.width)
    shifted: set[int] = set()
    with user_errors(ctx):
        for i in range(x.width):
            a, ra, b, rb = x.cols[i], x.ranges[i], y.cols[i], y.ranges[i]
            shift = ffn.saturating_shift(ra, rb) if ctx.prog.machine == "swiglu" else None
            if shift is not None and not (ra.is_bool or rb.is_bool):
                # SiLU(a + M) = a + M exactly once a + M >= SATURATION: one lane gives
                # (a + M) * b exactly on integers, and -M * b rides in the affine part.
                cols.bank.lane(i, a + shift, b)
                cols.affine[i] = cols.affine[i] + b * (-shift)
                cols.lanes[i] = ra.shift(shift) * rb
                shifted.add(i)
                continue
            if ctx.prog.machine == "swiglu" or ra.is_bool or rb.is_bool:
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
        if ctx.prog.machine == "swiglu" and not (r.is_bool or s.is_bool):
            out = out.with_noise(out.noise + ffn.product_rounding(r, s, len(ranges) in shifted))
        if ctx.prog.machine == "swiglu" or r.is_bool or s.is_bool:  # the lanes read p and q
            ep, eq = read_noise(ctx, p), read_noise(ctx, q)
            out = out.with_noise(out.noise + ep * s.magnitude + eq * r.magnitude + ep * eq)
        ranges.append(out)
    return cols.finish(ranges, x.is_bool and y.is_bool)


def _mean_times_count(ctx: LowerCtx, m: Lin, rm: Interval, count: Lin) -> bool:
    """m is a mean of whole numbers over every position (tw.mean without where) and count is
    the number of positions it averages, position + 1: their product is a whole number."""
    pos = ctx.prog.memo.get("position")
    return (rm.max_den > 0 and rm.den_group == -1 and isinstance(pos, Lin)
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
    if ctx.prog.machine == "swiglu":
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


@rule(torch.square, methods=("square",))
def _square(ctx: LowerCtx, a: Any, *, step: float | None = None) -> Stream:
    return power(ctx, to_stream(a, ctx.out_width), 2, step)


@rule(operator.pow, torch.pow, methods=("pow", "__pow__"))
def _pow(ctx: LowerCtx, a: Any, n: Any) -> Stream:
    if not isinstance(a, Stream) or isinstance(n, Stream) or not float(n).is_integer() \
            or n < 0:
        raise ctx.error(f"a power with exponent {n!r}",
                        "only stream ** (constant integer >= 0) compiles; use tw.piecewise for "
                        "other functions of one value")
    return power(ctx, to_stream(a, ctx.out_width), int(n))


@rule(torch.reciprocal, methods=("reciprocal",))
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
            slack = rel_tol * max(abs(lo), abs(hi)) if ctx.prog.machine == "swiglu" else 0.0
            exact_on_grid = ctx.prog.machine == "relu" and grid(ctx, c, r) is not None and \
                len(knots) >= grid(ctx, c, r).count(r)  # type: ignore[union-attr]
            err = 0.0 if exact_on_grid else rel_tol * max(abs(lo), abs(hi))
            ranges.append(Interval(lo - slack, hi + slack, noise=err))
    return pwl_stream(ctx, x.cols, x.ranges, fs, ranges)


@rule(operator.truediv, torch.div, torch.true_divide, methods=(
    "div", "__truediv__", "true_divide"))
def _div(ctx: LowerCtx, a: Any, b: Any, *, rounding_mode: str | None = None) -> Stream:
    w = ctx.out_width
    if is_const(b):
        quotient = _divided(to_stream(a, w), const_vector(b, w))
    elif is_const(a):  # c / x
        quotient = _scale(reciprocal(ctx, to_stream(b, w)), const_vector(a, w))
    else:
        x, y = _streams(ctx, a, b)
        quotient = product(ctx, x, reciprocal(ctx, y))
    if rounding_mode is None:
        return quotient
    if rounding_mode not in ("floor", "trunc"):
        raise ctx.error(f"rounding_mode={rounding_mode!r}")
    return rounded(ctx, quotient, rounding_mode)


def _divided(x: Stream, ks: list[float]) -> Stream:
    """x / k for constants k (``Interval.divided``: one correctly rounded division)."""
    return Stream([c.divided(k) for c, k in zip(x.cols, ks, strict=True)],
                  [r.divided(k) for r, k in zip(x.ranges, ks, strict=True)], x.is_bool)


# -- rounding -------------------------------------------------------------------------------------
def _round_range(kind: str, r: Interval) -> Interval:
    f = ffn.ROUNDERS[kind]
    lo = float(f(r.lo)) if math.isfinite(r.lo) else r.lo
    hi = float(f(r.hi)) if math.isfinite(r.hi) else r.hi
    return Interval(lo, hi, True)


def rounded(ctx: LowerCtx, x: Stream, kind: str) -> Stream:
    """floor / ceil / round (half to even) / trunc of every column: a staircase on x's grid
    (exact at lattice points) or off-grid (exact outside RAMP_WIDTH of each threshold), split
    into coarse and fine stages when one stage would leave fp32's exact range."""
    first = Columns(ctx, x.width)
    plans: list[ffn.StairPlan | None] = []
    ranges: list[Interval] = []
    direct: dict[int, Lin] = {}  # columns that need no lanes
    with user_errors(ctx):
        for i, (c, r) in enumerate(zip(x.cols, x.ranges, strict=True)):
            g = grid(ctx, c, r)
            if g is None and r.near_integral and kind == "round":
                # Whole up to rounding: torch.round of it is that whole number in the
                # reference, and the compiled value stays it, noise and all (checked below).
                r = dataclasses.replace(r, step=Fraction(1), offset=Fraction(0))
                g = Grid(Fraction(1), Fraction(0))
                ffn.check_resolution(r, g, "round of a mean times its count")
            if g is not None and g.integral and kind != "round":
                # whole in exact math, but a value the reference reaches inexactly can be
                # 30.999998 there (31 / 7 * 7): floor, ceil and trunc then differ
                refuse_ties(r, g, (Fraction(0), Fraction(1)), kind)
            if (g is not None and g.integral) or r.lo == r.hi:
                plans.append(None)  # already an integer, or a constant
                direct[i] = c if r.lo != r.hi else Lin.constant(_round_range(kind, r).lo)
                ranges.append(_round_range(kind, r).with_noise(r.noise if r.lo != r.hi else 0))
                continue
            ffn.need_finite(r, f"{kind}")
            tight = g.shrink(r) if g is not None else r
            ffn.check_resolution(tight, g, kind)
            at = Fraction(1, 2) if kind == "round" else Fraction(0)  # thresholds at + Z
            refuse_ties(tight, value_set(ctx, c, tight), (at, Fraction(1)), kind)
            plan = ffn.plan_rounding(kind, tight, g, value_set(ctx, c, tight))
            plans.append(plan)
            if plan.block is None:
                base, steps = ffn.rounding_steps(kind, tight.lo, tight.hi)
                first.pwl(i, c, tight, ffn.staircase(base, steps, value_set(ctx, c, tight)))
                ranges.append(_round_range(kind, r))
            else:
                coarse = ffn.coarse_steps(tight, plan.origin, plan.block)
                first.pwl(i, c, tight, ffn.staircase(0.0, coarse, g))
                ranges.append(Interval(0, len(coarse), True))
    stage1 = first.finish(ranges)
    out_cols = [direct.get(i, s) for i, s in enumerate(stage1.cols)]
    if not any(p is not None and p.block is not None for p in plans):
        return Stream(out_cols, [_round_range(kind, r).with_noise(s.noise)
                                 for r, s in zip(x.ranges, stage1.ranges, strict=True)])
    return _fine_stage(ctx, x, kind, plans, stage1, out_cols)


def _fine_stage(ctx: LowerCtx, x: Stream, kind: str, plans: list[ffn.StairPlan | None],
                stage1: Stream, out_cols: list[Lin]) -> Stream:
    """Second stage of a split staircase: kind(x) = block*q + kind(x - block*q)."""
    second = Columns(ctx, x.width)
    fine_ranges = []
    with user_errors(ctx):
        for i, plan in enumerate(plans):
            if plan is None or plan.block is None:
                fine_ranges.append(Interval.point(0.0))
                continue
            c, r, q = x.cols[i], x.ranges[i], stage1.cols[i]
            g = grid(ctx, c, r)
            assert g is not None
            r_rng = ffn.remainder_range(g.shrink(r), plan.origin, plan.block, g)
            r_rng = r_rng.with_noise(r_rng.noise + plan.block * stage1.ranges[i].noise)
            rem = c - q * float(plan.block)
            base, steps = ffn.rounding_steps(kind, r_rng.lo, r_rng.hi)
            f = ffn.staircase(base, steps, grid(ctx, rem, r_rng))
            ffn.check_staircase(f, r_rng, g, kind)
            second.pwl(i, rem, r_rng, f)
            fine_ranges.append(_round_range(kind, r_rng))
    stage2 = second.finish(fine_ranges)
    noise = [s.noise for s in stage1.ranges]
    for i, plan in enumerate(plans):
        if plan is not None and plan.block is not None:
            out_cols[i] = stage1.cols[i] * float(plan.block) + stage2.cols[i]
            noise[i] = stage1.ranges[i].noise * plan.block + stage2.ranges[i].noise
    return Stream(out_cols, [_round_range(kind, r).with_noise(e)
                             for r, e in zip(x.ranges, noise, strict=True)])


def _rounding_rule(kind: str) -> Rule:
    def lower(ctx: LowerCtx, a: Any, *_: Any, decimals: int = 0, **__: Any) -> Stream:
        x = to_stream(a, ctx.out_width)
        if decimals:
            k = 10.0 ** decimals  # torch.round(x, decimals=d) is round(x * 10**d) / 10**d
            return _scale(rounded(ctx, _scale(x, [k] * x.width), kind), [1 / k] * x.width)
        return rounded(ctx, x, kind)

    return lower


rule(torch.floor, methods=("floor",))(_rounding_rule("floor"))
rule(torch.ceil, methods=("ceil",))(_rounding_rule("ceil"))
rule(torch.round, methods=("round",))(_rounding_rule("round"))
rule(torch.trunc, torch.fix, methods=("trunc", "fix", "int", "long"))(_rounding_rule("trunc"))


@rule(torch.frac, methods=("frac",))
def _frac(ctx: LowerCtx, a: Any) -> Stream:
    x = to_stream(a, ctx.out_width)
    t = rounded(ctx, x, "trunc")
    return Stream([c - d for c, d in zip(x.cols, t.cols, strict=True)],
                  [Interval.of(max(r.lo, -1.0) if r.lo < 0 else 0.0,
                               min(r.hi, 1.0) if r.hi > 0 else 0.0,
                               lattice_sum(r.lattice, (Fraction(1), Fraction(0))),
                               r.noise + q.noise, r.derived())
                   for r, q in zip(x.ranges, t.ranges, strict=True)])


@rule(operator.floordiv, torch.floor_divide, methods=("__floordiv__", "floor_divide"))
def _floordiv(ctx: LowerCtx, a: Any, b: Any) -> Stream:
    return _div(ctx, a, b, rounding_mode="floor")


def _modulus(ctx: LowerCtx, a: Any, m: Any, kind: str) -> Stream:
    """x - m * kind(x / m) for a constant m: torch.remainder (floor) and torch.fmod (trunc)."""
    if not isinstance(a, Stream) or isinstance(m, Stream):
        raise ctx.error("% / remainder / fmod need a stream and a constant modulus")
    x = to_stream(a, ctx.out_width)
    ms = const_vector(m, x.width)
    if any(k == 0 for k in ms):
        raise ctx.error("modulus 0")
    quotient = rounded(ctx, _divided(x, ms), kind)
    cols = [c - q * k for c, q, k in zip(x.cols, quotient.cols, ms, strict=True)]
    ranges = [_mod_range(ctx, c, r, k, kind).with_noise(r.noise + abs(k) * q.noise)
              .with_rounding(r.derived() if Interval.point(k).rounding == EXACT else INEXACT)
              for c, r, k, q in zip(x.cols, x.ranges, ms, quotient.ranges, strict=True)]
    return Stream(cols, ranges)


def _mod_range(ctx: LowerCtx, x: Lin, r: Interval, m: float, kind: str) -> Interval:
    """x - m*q with q an integer: x's lattice joined with m's multiples. On a lattice the
    residues are the points of (s, offset) in [0, |m|) or (-|m|, 0], s = gcd(spacing, |m|)."""
    g = grid(ctx, x, r)
    mq = ffn.rational(m)
    lat = None if mq is None else lattice_sum(r.lattice, (abs(mq), Fraction(0)))
    if kind == "floor" and 0 <= r.lo and r.hi < m:
        return r  # already reduced
    pos: tuple[float, float] = (0.0, abs(m))  # the sides' bounds with no lattice
    neg: tuple[float, float] = (-abs(m), 0.0)
    if g is not None and mq is not None:
        res = ffn.Grid(ffn.frac_gcd(g.spacing, abs(mq)), Fraction(0))
        res = ffn.Grid(res.spacing, g.offset % res.spacing)
        pos = (float(res.at_or_above(Fraction(0))), float(res.at_or_above(abs(mq)) - res.spacing))
        neg = (float(res.above(-abs(mq))), float(res.at_or_below(Fraction(0))))
    if kind == "trunc":  # the sign of x
        sides = ([pos] if r.hi > 0 else []) + ([neg] if r.lo < 0 else [])
        sides = sides or [(0.0, 0.0)]
        return Interval.of(min(s[0] for s in sides), max(s[1] for s in sides), lat)
    lo, hi = pos if m > 0 else neg
    return Interval.of(lo, hi, lat)


@rule(operator.mod, torch.remainder, methods=("__mod__", "remainder"))
def _remainder(ctx: LowerCtx, a: Any, m: Any) -> Stream:
    return _modulus(ctx, a, m, "floor")


@rule(torch.fmod, methods=("fmod",))
def _fmod(ctx: LowerCtx, a: Any, m: Any) -> Stream:
    return _modulus(ctx, a, m, "trunc")


@rule(torch.sign, methods=("sign",))
def _sign(ctx: LowerCtx, a: Any) -> Stream:
    x = to_stream(a, ctx.out_width)
    fs, ranges = [], []
    for c, r in zip(x.cols, x.ranges, strict=True):
        steps = [s for s in (Step(0.0, False), Step(0.0, True))
                 if ((r.lo <= 0 < r.hi) if s.strict else (r.lo < 0 <= r.hi))]
        base = -1.0 if r.lo < 0 else (0.0 if r.lo == 0 else 1.0)
        values = value_set(ctx, c, r)
        with user_errors(ctx):
            refuse_ties(r, values, [Fraction(0)], "sign")
            ffn.check_resolution(r, values, "sign", COMPARE_ADVICE)
        fs.append(ffn.staircase(base, steps, values))
        ranges.append(Interval(base, base + len(steps), True))
    return pwl_stream(ctx, x.cols, x.ranges, fs, ranges)


# -- comparisons and logic ------------------------------------------------------------------------
def _compare(ctx: LowerCtx, a: Any, b: Any, op: str) -> Stream:
    w = ctx.out_width
    if op in ("lt", "le"):
        a, b, op = b, a, {"lt": "gt", "le": "ge"}[op]
    if is_const(b):
        x, ts = to_stream(a, w), const_vector(b, w)
    elif is_const(a):
        x, ts = _scale(to_stream(b, w), [-1.0] * w), [-t for t in const_vector(a, w)]
    else:
        y = to_stream(b, w)
        x = _add(ctx, a, _scale(y, [-1.0] * w))
        # the reference compares a with b, never forms a - b: rounding is monotone, so only
        # a side reached INEXACTly can disagree with the exact comparison
        x = Stream(x.cols, [d.with_rounding(EXACT if max(p.rounding, q.rounding) <= ONCE
                                            else INEXACT)
                            for d, p, q in zip(x.ranges, to_stream(a, w).ranges, y.ranges,
                                               strict=True)])
        ts = [0.0] * w
    fs = []
    with user_errors(ctx):
        for c, r, t in zip(x.cols, x.ranges, ts, strict=True):
            values = value_set(ctx, c, r)
            refuse_ties(r, values, [read_float(t)], "this comparison")
            refuse_unheld_constant(t, r, values, "this comparison")
            fs.append(_compare_pwl(op, t, values))
            ffn.check_resolution(r, values, "comparison", COMPARE_ADVICE)
            ffn.check_staircase(fs[-1], r, values, "comparison", COMPARE_ADVICE)
    return pwl_stream(ctx, x.cols, x.ranges, fs, [BOOL] * w, is_bool=True)


COMPARE_ADVICE = ("fp32 cannot resolve a step at this magnitude; compare smaller parts (a sum "
                  "digit by digit, a count instead of a weighted total), or narrow the range "
                  "with torch.clamp or tw.claim")


def _compare_pwl(op: str, t: float, g: Grid | ffn.Fractions | None) -> Pwl:
    """[x > t], [x >= t], [x == t] or [x != t] as a staircase (== needs a grid or a mean's
    fractions: exact)."""
    if op in ("gt", "ge"):
        return ffn.staircase(0.0, [Step(t, op == "gt")], g)
    if g is None:
        raise ffn.RangeError("== and != need an integer-valued (or grid-valued) stream; "
                             "compare with a tolerance, or declare it with "
                             "tw.claim(v, lo, hi, integral=True)")
    sign = 1.0 if op == "eq" else -1.0
    return ffn.staircase(0.0 if op == "eq" else 1.0,
                         [Step(t, False, sign), Step(t, True, -sign)], g)


def _comparison(op: str) -> Rule:
    def lower(ctx: LowerCtx, a: Any, b: Any) -> Stream:
        return _compare(ctx, a, b, op)

    return lower


for _op in ("gt", "ge", "lt", "le", "eq", "ne"):
    rule(getattr(operator, _op), getattr(torch, _op),
         methods=(_op, f"__{_op}__"))(_comparison(_op))
rule(torch.greater, methods=("greater",))(_comparison("gt"))
rule(torch.greater_equal, methods=("greater_equal",))(_comparison("ge"))
rule(torch.less, methods=("less",))(_comparison("lt"))
rule(torch.less_equal, methods=("less_equal",))(_comparison("le"))
rule(torch.not_equal, methods=("not_equal",))(_comparison("ne"))


def _bools(ctx: LowerCtx, *values: Any) -> list[Stream]:
    out = _streams(ctx, *values)
    for s in out:
        if not all(r.is_bool for r in s.ranges):
            raise ctx.error("logical ops need 0/1 streams",
                            "build conditions from comparisons and tw.is_token")
    return out


def _count_pwl(op: str, n: int) -> Pwl:
    """A function of the count of true inputs among n: and = [count >= n], or = [count >= 1],
    xor = count mod 2 (two inputs): each exact on integer counts."""
    if op == "and":
        return ffn.at_least(n)
    if op == "or":
        return ffn.at_least(1)
    f = Pwl(slope=1.0)  # a + b - 2 relu(a + b - 1)
    f.hinge(1.0, -2.0)
    return f


def _logic(op: str) -> Rule:
    def lower(ctx: LowerCtx, a: Any, b: Any) -> Stream:
        x, y = _bools(ctx, a, b)
        counts = [p + q for p, q in zip(x.cols, y.cols, strict=True)]
        return pwl_stream(ctx, counts, [r + s for r, s in zip(x.ranges, y.ranges, strict=True)],
                          [_count_pwl(op, 2)] * x.width, [BOOL] * x.width, is_bool=True)

    return lower


rule(operator.and_, torch.logical_and, torch.bitwise_and,
     methods=("__and__", "__rand__", "logical_and", "bitwise_and"))(_logic("and"))
rule(operator.or_, torch.logical_or, torch.bitwise_or,
     methods=("__or__", "__ror__", "logical_or", "bitwise_or"))(_logic("or"))
rule(operator.xor, torch.logical_xor, torch.bitwise_xor,
     methods=("__xor__", "__rxor__", "logical_xor", "bitwise_xor"))(_logic("xor"))


@rule(operator.invert, torch.logical_not, torch.bitwise_not,
      methods=("__invert__", "logical_not", "bitwise_not"))
def _not(ctx: LowerCtx, a: Any) -> Stream:
    (x,) = _bools(ctx, a)
    return Stream([1.0 - c for c in x.cols], [BOOL] * x.width, True)


def _reduce_logic(op: str) -> Rule:
    def lower(ctx: LowerCtx, v: Any, dim: Any = None, keepdim: bool = False) -> Stream:
        _last_dim(ctx, dim, "all" if op == "and" else "any")
        x = v if isinstance(v, Stream) else to_stream(v, 1)
        if not all(r.is_bool for r in x.ranges):
            raise ctx.error("all / any need 0/1 streams")
        count = sum(x.cols, Lin())
        total = sum(x.ranges[1:], x.ranges[0])
        return pwl_stream(ctx, [count], [total],
                          [_count_pwl(op, x.width)], [BOOL], is_bool=True)

    return lower


rule(torch.all, methods=("all",))(_reduce_logic("and"))
rule(torch.any, methods=("any",))(_reduce_logic("or"))


@rule(torch.where)
def _where(ctx: LowerCtx, cond: Any, a: Any, b: Any) -> Stream:
    w = ctx.out_width
    (c,) = _bools(ctx, cond)
    c = c.broadcast(w)
    x, y = _streams(ctx, a, b)
    cols = Columns(ctx, w)
    with user_errors(ctx):
        for i in range(w):
            ffn.select(cols.bank, i, c.cols[i], x.cols[i], x.ranges[i], y.cols[i], y.ranges[i])
            cols.whole(i)
    ranges = []
    for r, s, cr, a, b in zip(x.ranges, y.ranges, c.ranges, x.cols, y.cols, strict=True):
        out = r.hull(s)
        gate = 2.0 * out.magnitude if ctx.prog.machine == "swiglu" else \
            (r - s).magnitude + ffn.GATE_GAP
        read = max(read_noise(ctx, a), read_noise(ctx, b))
        ranges.append(out.with_noise(out.noise + gate * cr.noise + read))
    return cols.finish(ranges, x.is_bool and y.is_bool)


# -- piecewise-linear -----------------------------------------------------------------------------
@rule(torch.relu, F.relu, methods=("relu",))
def _relu(ctx: LowerCtx, a: Any, inplace: bool = False) -> Stream:
    x = to_stream(a, ctx.out_width)
    ranges = [r.clamp(0.0, INF).with_noise(0.0) for r in x.ranges]
    return pwl_stream(ctx, x.cols, x.ranges, [ffn.relu_pwl()] * x.width, ranges)


@rule(torch.abs, operator.abs, methods=("abs", "__abs__"))
def _abs(ctx: LowerCtx, a: Any) -> Stream:
    x = to_stream(a, ctx.out_width)
    ranges = [r.absolute().with_noise(0.0) for r in x.ranges]
    return pwl_stream(ctx, x.cols, x.ranges, [ffn.abs_pwl()] * x.width, ranges)


@rule(torch.clamp, torch.clip, methods=("clamp", "clip"))
def _clamp(ctx: LowerCtx, a: Any, min: Any = None, max: Any = None) -> Stream:
    x = to_stream(a, ctx.out_width)
    if isinstance(min, Stream) or isinstance(max, Stream):  # two stages of max / min
        lower = x if min is None else _extremum(ctx, x, min, 1.0)
        return lower if max is None else _extremum(ctx, lower, max, -1.0)
    w = x.width
    los = [-INF] * w if min is None else const_vector(min, w)
    his = [INF] * w if max is None else const_vector(max, w)
    fs = [ffn.clamp_pwl(lo, hi) for lo, hi in zip(los, his, strict=True)]
    ranges = [r.clamp(lo, hi).with_noise(0.0) for r, lo, hi in zip(x.ranges, los, his, strict=True)]
    return pwl_stream(ctx, x.cols, x.ranges, fs, ranges)


def _extremum(ctx: LowerCtx, a: Any, b: Any, sign: float) -> Stream:
    # max(a, b) = b + relu(a - b); min(a, b) = b - relu(b - a)
    x, y = _streams(ctx, a, b)
    diffs = [(p - q) * sign for p, q in zip(x.cols, y.cols, strict=True)]
    drs = [(r - s).scale(sign) for r, s in zip(x.ranges, y.ranges, strict=True)]
    f = Pwl()
    f.hinge(0.0, sign)
    part_ranges = [d.clamp(0.0, INF).scale(sign).with_noise(0.0) for d in drs]
    parts = pwl_stream(ctx, diffs, drs, [f] * x.width, part_ranges)
    ranges = [r.extremum(s, sign).with_noise(s.noise + p.noise)
              for r, s, p in zip(x.ranges, y.ranges, parts.ranges, strict=True)]
    return Stream([c + p for c, p in zip(y.cols, parts.cols, strict=True)], ranges)


@rule(torch.maximum, torch.fmax, methods=("maximum", "fmax"))
def _maximum(ctx: LowerCtx, a: Any, b: Any) -> Stream:
    return _extremum(ctx, a, b, 1.0)


@rule(torch.minimum, torch.fmin, methods=("minimum", "fmin"))
def _minimum(ctx: LowerCtx, a: Any, b: Any) -> Stream:
    return _extremum(ctx, a, b, -1.0)


def _max_or_reduction(sign: float) -> Rule:
    """torch.max(a, b) is elementwise; torch.max(a) and torch.max(a, dim) reduce."""
    def lower(ctx: LowerCtx, a: Any, b: Any = None, *rest: Any, **kwargs: Any) -> Stream:
        if b is None or isinstance(b, int) or rest or kwargs:
            name = "max" if sign > 0 else "min"
            dim = b if isinstance(b, int) else kwargs.get("dim")
            if dim in (0, -2) or dim is None:
                raise ctx.error(f"torch.{name} over positions (dim=0) would read the whole "
                                "sequence, future included",
                                f"use tw.arg{name}(score, v) for the value at the best position "
                                f"so far, or torch.{name}imum(a, b) of two streams")
            raise ctx.error(f"torch.{name} as a reduction over the last dim",
                            f"use torch.{name}imum(a, b) of two streams, or tw.arg{name} "
                            "over positions")
        return _extremum(ctx, a, b, sign)

    return lower


rule(torch.max, methods=("max",))(_max_or_reduction(1.0))
rule(torch.min, methods=("min",))(_max_or_reduction(-1.0))
