"""Means of whole numbers from exact counts: ``tw.mean`` at long lengths.

An attention head that averages v over m positions rounds its sum once per position, so its
error grows as m * 2**-24 of max |v| (``numerics.mean_noise``) while the attainable means k/m
crowd to 1/(2m) around 1/2: from 2048 positions (``numerics.counts_mean``) no comparison of
such a mean is exact. A count has no such sum. A head whose selected keys tie with ``<bos>``
and whose value is the ``<bos>`` indicator outputs fl(1/(c+1)) (one nonzero term, exp(0) = 1
for every tied key, the rest flushed to 0), which the position decoder turns into c and a snap
makes exact.

So a mean of v taking the whole values p_0 < ... < p_L is rebuilt as
``p_0 + sum_t (p_t - p_{t-1}) * K_t / m``, K_t the number of averaged rows with v >= p_t (one
count each) and m the number of averaged rows: ``i + 1`` without ``where``, whose reciprocal is
the position head's own output, else a count whose reciprocal is taken by
``ops.position.reciprocal`` (relative error under 1e-6). The sum of whole numbers is exact in
fp32, so the mean's only error is the relative error of 1/m and of one product: about 1e-6 of
its range at any length, against 5e-4 for the head's average at 16384.
"""

from __future__ import annotations

from collections.abc import Callable

from torchwright_fx.base import numerics
from torchwright_fx.base.numerics import (
    COUNTED_MEAN_PRODUCT,
    COUNTED_MEAN_VALUES,
    FP32_UNIT,
    HEAD_RECIPROCAL_ERROR,
    WIDTH_GAIN,
)
from torchwright_fx.families import selection
from torchwright_fx.ir.graph import CountedMean
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import EXACT, INEXACT, ONCE, Interval
from torchwright_fx.lower import rules
from torchwright_fx.lower.context import LowerCtx
from torchwright_fx.lower.stream import Stream
from torchwright_fx.ops import attention, ffn
from torchwright_fx.ops import position as decoder


def applies(ctx: LowerCtx, v: Stream) -> bool:
    """Whether tw.mean(v, ...) is built from counts: SwiGLU (its products are exact up to
    rounding), where numerics.counts_mean holds, every column whole-valued, and fewer than
    COUNTED_MEAN_VALUES value steps in all (one count head and a lean decoder each)."""
    n = ctx.geom.max_seq_len
    # the reference sums whole numbers exactly while every partial sum stays below 2**24
    return (ctx.prog.machine.gated_up and numerics.counts_mean(n)
            and all(r.integral and r.finite and r.rounding <= ONCE
                    and r.magnitude * n < 1 / FP32_UNIT for r in v.ranges)
            and sum(r.hi - r.lo for r in v.ranges) < COUNTED_MEAN_VALUES)


def count(ctx: LowerCtx, key: Lin, at_bos: float, label: str) -> tuple[Lin, Lin]:
    """(c, y): c the number of rows 0..i whose ``key`` is 1, exact (``key`` an exact 0/1 column,
    ``at_bos`` its value at ``<bos>``), and y = fl(1/(c' + 1)) the head's output, c' the count
    over rows 1..i (c' = c when ``at_bos`` is 0, else c - 1)."""
    geom, prog = ctx.geom, ctx.prog
    bos = ctx.bos_indicator()
    q = [Lin() for _ in range(geom.d_head)]
    k = [Lin() for _ in range(geom.d_head)]
    q[geom.rotary] = Lin.constant(WIDTH_GAIN)
    k[geom.rotary] = key + bos * (1.0 - at_bos)  # <bos> ties with the counted rows
    (inverse,) = attention.heads(prog, geom, q, k, [bos], [Interval(0.0, 1.0)],
                                  f"{ctx.name}.{label}", ctx.source)
    return exact_count(ctx, inverse, label) + at_bos, inverse


def exact_count(ctx: LowerCtx, inverse: Lin, label: str) -> Lin:
    """The whole number c from a head's output fl(1/(c+1)), decoded and snapped: exact."""
    n, prog = ctx.geom.max_seq_len, ctx.prog
    decoded = decoder.decode_count(prog, ctx.geom, inverse, f"{ctx.name}.{label}",
                                   ctx.source, lean=True)
    rng = Interval(0, n - 1, True, noise=decoder.noise(prog.machine, n, lean=True))
    exact = rules.snapped(ctx, decoded, rng)
    if exact is None:
        raise ctx.error(f"the count behind this mean cannot be rounded exactly (decoding error "
                        f"{rng.noise:.3g})", "lower max_seq_len")
    return exact[0]


def exact_position(ctx: LowerCtx) -> Lin:
    """The position i as an exact whole number, built once per program: the position head's
    fl(1/(i+1)) decoded as a count (the lean decoder: tens of lanes where the position's own
    decoder takes a thousand at 2048) and snapped."""
    shared = ctx.prog.shared
    if shared.exact_position is None:
        inverse = decoder.inverse_position(ctx.prog, ctx.geom, ctx.bos_indicator(), ctx.name,
                                           ctx.source)
        shared.exact_position = exact_count(ctx, inverse, "position")
    return shared.exact_position


def reciprocal(ctx: LowerCtx, m: Lin) -> tuple[Lin, float]:
    """1/m for an exact count m (and its relative error bound); at most 3 at m = 0."""
    n = ctx.geom.max_seq_len
    recip = decoder.reciprocal(ctx.prog, m, n, f"{ctx.name}.reciprocal", ctx.source)
    return recip, decoder.reciprocal_error(n)


def step_sum(points: tuple[float, ...], at_least: Callable[[int], Lin | None]) -> Lin:
    """sum_t (p_t - p_{t-1}) K_t for t >= 1, K_t = ``at_least(t)`` the exact number of
    averaged rows with v >= p_t (None: none can be): the exact sum of v - p_0 over them."""
    total = Lin()
    for t in range(1, len(points)):
        k_t = at_least(t)
        if k_t is not None:
            total = total + k_t * (points[t] - points[t - 1])
    return total


def quotient(ctx: LowerCtx, points: tuple[float, ...], total: Lin, recip: Lin,
             recip_error: float, empty: tuple[Lin, float] | None, rng: Interval,
             group: int, rows: Callable[[], Lin] | None = None) -> tuple[Lin, Interval]:
    """``p_0 + total * recip`` (a mean of the values ``points``: ``total`` the exact sum of
    v - p_0 over the averaged rows, ``recip`` 1/their count within ``recip_error``), plus
    ``empty = (m, value)``: ``value`` where the count m is 0. ``rng``: v's facts. ``rows``:
    the count m as an exact column, built on demand, where it is never 0 (``empty``'s m
    otherwise): registered so that a comparison of the mean compares whole numbers
    (``logic._counted_compare``)."""
    n = ctx.geom.max_seq_len
    spread = points[-1] - points[0]
    # the lanes' error, and the reference's own rounding of S/m at the mean's size: the facts
    # bound the compiled value against the exact mean, and a step between the exact mean and
    # fl(S/m) (which a later affine form can expose: mean(v + 4096) - 4096) must be refused
    noise = spread * ((1 + recip_error) * (1 + COUNTED_MEAN_PRODUCT) - 1) + \
        max(abs(rng.lo), abs(rng.hi), abs(empty[1]) if empty else 0.0) * FP32_UNIT
    # the reference divides a sum of whole numbers once (ONCE)
    rounding = ONCE if rng.rounding == EXACT else INEXACT
    lo, hi = rng.lo, rng.hi
    if empty is not None:
        lo, hi = min(lo, empty[1]), max(hi, empty[1])
    bank = ctx.bank(1)
    if spread:
        ffn.product(bank, 0, total, Interval(0.0, spread * n, True), recip, Interval(0.0, 4.0))
    if empty is not None and empty[1] != points[0]:
        bank.hinge(0, 1.0 - empty[0], empty[1] - points[0])  # no averaged row
    if not bank.lanes:
        return Lin.constant(points[0]), Interval.point(points[0])
    # the column holds the mean less p_0, a fraction k/m itself (p_0 stays in the form)
    above = Interval(lo - points[0], hi - points[0], max_den=n, den_group=group, noise=noise,
                     rounding=rounding)
    (col,) = ctx.finish(bank, [above])
    at_empty = None
    if empty is not None:
        m, at_empty = empty[0], empty[1] - points[0]

        def counted_rows() -> Lin:
            return m
        rows = counted_rows
    if rows is not None and spread and len(col.terms) == 1:
        ctx.prog.shared.counted_means[next(iter(col.terms))] = CountedMean(
            total, rows, spread * n, float(n), group, at_empty)
    return col + points[0], Interval(lo, hi, max_den=n, den_group=group, noise=noise,
                                     rounding=rounding)


def counted_mean(ctx: LowerCtx, v: Stream, where: Stream | None, v_at_bos: list[float],
                 where_at_bos: float, group: int) -> Stream:
    """tw.mean(v, where) from counts (see the module docstring); ``applies`` must hold."""
    wside = None if where is None else selection.stream_side(
        ctx, where.cols[0], where.ranges[0], where_at_bos, "where", "where")
    if wside is None:  # every row 0..i: m = i + 1, and the position head holds 1 / m
        # builds the position head once per program
        decoder.position(ctx.prog, ctx.geom, ctx.bos_indicator(), ctx.name, ctx.source)
        inverse = ctx.prog.shared.inverse_position
        assert inverse is not None
        recip, recip_error, m = inverse, HEAD_RECIPROCAL_ERROR, None

        def every_row() -> Lin:  # m = i + 1
            return exact_position(ctx) + 1.0
        rows: Callable[[], Lin] | None = every_row
    else:
        ones = [i for i, w in enumerate(wside.values) if w == 1.0]
        m, inverse = count(ctx, wside.indicator(ctx, ones), float(where_at_bos == 1.0), "rows")
        rows = None  # m may be 0 (the empty value is taken then)
        if where_at_bos == 1.0:  # <bos> is averaged: the head's 1/(c'+1) is 1/m
            recip, recip_error = inverse, HEAD_RECIPROCAL_ERROR

            def counted_rows(m: Lin = m) -> Lin:  # m >= 1: <bos> is one of them
                return m
            rows = counted_rows
        else:
            recip, recip_error = reciprocal(ctx, m)
    cols, ranges = [], []
    for c, (col, rng) in enumerate(zip(v.cols, v.ranges, strict=True)):
        side = selection.stream_side(ctx, col, rng, v_at_bos[c], f"v[{c}]", "values")
        points = side.values
        # the averaged rows' values, as (where, v) pairs with ``where`` (and their indicators)
        enc = selection.encode(ctx, (side,) if wside is None else (wside, side), "key")
        at = (v_at_bos[c],) if wside is None else (where_at_bos, v_at_bos[c])

        def averaged(tup: tuple[float, ...], at_least: float) -> bool:
            return tup[-1] >= at_least and (len(tup) == 1 or tup[0] == 1.0)

        def at_least(t: int, c: int = c, enc: selection.Encoded = enc,
                     at: tuple[float, ...] = at, points: tuple[float, ...] = points) -> Lin:
            members = [i for i, tup in enumerate(enc.values) if averaged(tup, points[t])]
            return count(ctx, enc.indicator(members), float(averaged(at, points[t])),
                         f"count{c}_{t}")[0]

        total = step_sum(points, at_least)
        empty = None if m is None or where_at_bos == 1.0 else (m, v_at_bos[c])
        mean, out = quotient(ctx, points, total, recip, recip_error, empty, rng, group, rows)
        cols.append(mean)
        ranges.append(out)
    return Stream(cols, ranges)
