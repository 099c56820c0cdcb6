"""What every lowering rule shares: facts helpers, snapping, the Columns of one FFN bank. Rules
register with ``capture.registry.lowering`` in their family file (``families/``)."""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterator, Sequence
from fractions import Fraction
from typing import Any

import torch.fx

from torchwright_fx.base.errors import CompileError, op_name
from torchwright_fx.base.numerics import FP32_EXACT_INTEGERS, SNAP_NOISE
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import (
    EXACT,
    ONCE,
    Interval,
    lattice_scale,
    lattice_sum,
)
from torchwright_fx.lower.context import LowerCtx
from torchwright_fx.lower.stream import Stream, to_stream
from torchwright_fx.ops import ffn
from torchwright_fx.ops.ffn import Grid, Pwl

INF = math.inf


def streams_of(ctx: LowerCtx, *values: Any) -> list[Stream]:
    return [to_stream(v, ctx.out_width) for v in values]


@contextlib.contextmanager
def user_errors(ctx: LowerCtx) -> Iterator[None]:
    """Turn a construction's RangeError into a CompileError naming the user's line."""
    try:
        yield
    except ffn.RangeError as e:
        raise ctx.error(str(e) + (noise_origin(ctx, ctx.node) if e.noisy else "")) from None


def grid(ctx: LowerCtx, x: Lin, rng: Interval) -> Grid | None:
    return ffn.grid_of(x, rng, lambda sid: ctx.prog.signals[sid].range)


def snapped(ctx: LowerCtx, x: Lin, rng: Interval) -> tuple[Lin, Interval] | None:
    """``x``, noisy but on a lattice in exact arithmetic, rounded onto its lattice point bit
    for bit (ops/ffn/snap.py: one MLP sublayer, two lanes; two sublayers when x's terms sit off
    the integers and x is copied into one column first); None when it cannot be certified.
    The lattice's index ``(x - offset) / spacing`` is the integer that is snapped."""
    g = grid(ctx, x, rng)
    if g is None or not rng.finite:
        return None
    spacing, offset = float(g.spacing), float(g.offset)
    index = (x - offset) * (1.0 / spacing) if g.spacing != 1 else x - offset
    index_rng = Interval(float((Fraction(rng.lo) - g.offset) / g.spacing),
                         float((Fraction(rng.hi) - g.offset) / g.spacing), True,
                         noise=rng.noise / spacing)

    def signal_range(sid: int) -> Interval:
        return ctx.prog.signals[sid].range

    error = ffn.snap_error(index, index_rng, signal_range)
    if error is None or error > SNAP_NOISE:
        error = ffn.copy_error(index, index_rng, signal_range)
        if error is None or error > SNAP_NOISE:
            return None
        bank = ctx.bank(1)
        ffn.copy(bank, 0, index, index_rng)
        copied = index_rng.with_noise(error)
        (index,) = bank.finish(ctx.prog, [copied], f"{ctx.name}.copy", ctx.source)
        index_rng = copied
    bank = ctx.bank(1)
    ffn.snap(bank, 0, index)
    (col,) = bank.finish(ctx.prog, [ffn.snapped_range(index_rng)], f"{ctx.name}.exact",
                         ctx.source)
    exact = dataclasses.replace(rng, noise=0.0)
    return (col * spacing + offset if g.spacing != 1 or g.offset else col), exact


def reference_on_lattice(rng: Interval) -> bool:
    """Whether the fp32 reference holds the value exactly on its lattice (so a compiled value
    snapped onto that lattice is the reference's value): no rounding, or one rounding of a
    whole number fp32 holds exactly."""
    if rng.rounding == EXACT:
        return True
    return (rng.rounding == ONCE and rng.integral and rng.finite
            and rng.magnitude < FP32_EXACT_INTEGERS)


def exact_within(ctx: LowerCtx, x: Stream, tolerance: float,
                 reference_checked: bool = False) -> Stream:
    """``x`` with every column whose noise is over ``tolerance`` snapped onto its lattice
    (``snapped``: one MLP sublayer) where the reference holds it there; the other columns as
    they are (the caller refuses what is still too noisy). This is how a consumer that needs an
    exact value (a gate, a score, a step) gets one without asking the user for a no-op.
    ``reference_checked``: the caller refuses values the reference may hold off the lattice
    itself (the rounding ops' ties), so any noisy lattice value may be snapped."""
    cols, ranges = list(x.cols), list(x.ranges)
    for i, (c, r) in enumerate(zip(x.cols, x.ranges, strict=True)):
        if r.noise <= tolerance or not (reference_checked or reference_on_lattice(r)):
            continue  # (the reference may hold it off its lattice: (b + 2**24) - 2**24 is 0)
        exact = snapped(ctx, c, r)
        if exact is None:  # too noisy as a whole: snap its noisy parts before they are scaled
            exact = snapped_terms(ctx, c, r)
        if exact is not None:
            cols[i], ranges[i] = exact
    return Stream(cols, ranges, x.is_bool)


def snapped_terms(ctx: LowerCtx, x: Lin, rng: Interval) -> tuple[Lin, Interval] | None:
    """``x`` with each noisy signal it reads snapped onto that signal's own lattice first (where
    the reference holds it there): ``100 * count - 53 * (position + 1)`` carries 100 times the
    count's noise, too much to snap the difference, but the count itself snaps. Every term must
    be the whole column of a node lowering certified (its facts are then the term's own, noise
    included), so that the noise left is the unsnapped terms' share; None when that is not so,
    when nothing could be snapped, or when it would not leave less noise."""
    columns: dict[int, tuple[Lin, Interval]] = {}
    for rec in ctx.prog.nodes.values():  # a column several nodes share: the most known of it
        for col, iv in zip(rec.columns, rec.intervals, strict=True):
            if len(col.terms) == 1 and next(iter(col.terms.values())) == 1.0:
                sid, old = next(iter(col.terms)), columns.get(next(iter(col.terms)))
                if old is None or (iv.lattice is not None, -iv.rounding, -iv.noise) > \
                        (old[1].lattice is not None, -old[1].rounding, -old[1].noise):
                    columns[sid] = (col, iv)
    if not all(sid in columns for sid in x.terms):
        return None
    out, left, done = Lin.constant(x.const), 0.0, False
    for sid, k in x.terms.items():
        col, iv = columns[sid]  # the term s_sid is col - col.const
        exact = snapped(ctx, col, iv) if iv.noise > 0 and reference_on_lattice(iv) else None
        if exact is None:
            out, left = out + Lin.of(sid) * k, left + abs(k) * iv.noise
        else:
            out, done = out + (exact[0] - col.const) * k, True
    return (out, rng.with_noise(left)) if done and left < rng.noise else None


def on_exact_inputs(ctx: LowerCtx, x: Stream, compute: Callable[[Stream], Stream],
                    noise_limit: float | None = None, reference_checked: bool = False
                    ) -> Stream:
    """``compute(x)``, unless it is refused (or, with ``noise_limit``, leaves a column noisier
    than that) while a noisy input sits on a lattice the reference holds: then those inputs
    are snapped onto their lattices first (``snapped``) and ``compute`` runs on exact values.
    A refusal that snapping cannot help is raised as it was."""
    try:
        out: Stream | None = compute(x)
        error: CompileError | None = None
    except CompileError as e:
        out, error = None, e
    if out is not None and (noise_limit is None or
                            all(r.noise <= noise_limit for r in out.ranges)):
        return out
    exact = exact_within(ctx, x, 0.0, reference_checked)
    if exact.cols == x.cols:  # nothing could be snapped
        if out is None:
            assert error is not None
            raise error
        return out
    return compute(exact)


def noise_origin(ctx: LowerCtx, arg: int | str | torch.fx.Node, limit: int = 3) -> str:
    """Where the noise of the node's argument ``arg`` (an index, a keyword, or an fx node)
    comes from: the ops upstream that added noise (their own noise over their inputs'),
    largest first, with the user's line: appended to a refusal so that it names the origin."""
    if isinstance(arg, torch.fx.Node):
        start: Any = arg  # the node being lowered has no record yet: its inputs are walked
    elif isinstance(arg, int):
        start = ctx.node.args[arg] if arg < len(ctx.node.args) else None
    else:
        start = ctx.node.kwargs.get(arg)
    if not isinstance(start, torch.fx.Node):
        return ""
    records = ctx.prog.nodes

    def noise(n: torch.fx.Node) -> float:
        rec = records.get(n.name)
        return max((r.noise for r in rec.intervals), default=0.0) if rec else 0.0

    seen: set[torch.fx.Node] = set()
    stack, added = [start], []
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        inputs = n.all_input_nodes
        own = noise(n) - max((noise(i) for i in inputs), default=0.0)
        if own > 0 and n.name in records:
            added.append((own, n))
        stack.extend(inputs)
    if not added:
        return ""
    added.sort(key=lambda t: -t[0])
    parts = [f"{op_name(n)} at {records[n.name].source.split(': ', 1)[0]} (+{own:.3g})"
             for own, n in added[:limit]]
    return "; the noise comes from " + ", ".join(parts)


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


def scaled_stream(x: Stream, ks: list[float]) -> Stream:
    return Stream([c * k for c, k in zip(x.cols, ks, strict=True)],
                  [r.scale(k) for r, k in zip(x.ranges, ks, strict=True)])


def divided_stream(x: Stream, ks: list[float]) -> Stream:
    """x / k for constants k (``Interval.divided``: one correctly rounded division)."""
    return Stream([c.divided(k) for c, k in zip(x.cols, ks, strict=True)],
                  [r.divided(k) for r, k in zip(x.ranges, ks, strict=True)], x.is_bool)


def last_dim_only(ctx: LowerCtx, dim: Any, what: str) -> None:
    if dim not in (-1, 1, (-1,), (1,), [-1], [1]):
        raise ctx.error(f"{what} over positions (or all dims)", (
            "a running sum over positions is tw.mean(v) * (tw.position(x) + 1); "
            if what == "sum" else "") + f"over the last dim: v.{what}(-1)")
