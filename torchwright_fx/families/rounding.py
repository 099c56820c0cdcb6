"""Rounding (floor, ceil, round, trunc, frac), %, fmod and sign: staircases on lattices."""

from __future__ import annotations

import dataclasses
import math
import operator
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import torch

from torchwright_fx.analysis.facts import (
    FactsCtx,
    NodeFacts,
    as_facts,
    const_values,
    scaled,
)
from torchwright_fx.base.numerics import NOISE_TOLERANCE
from torchwright_fx.capture.registry import Rule, facts, lowering
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import (
    EXACT,
    INEXACT,
    ONCE,
    Interval,
    lattice_sum,
)
from torchwright_fx.lower.context import LowerCtx
from torchwright_fx.lower.rules import (
    Columns,
    divided_stream,
    grid,
    on_exact_inputs,
    pwl_stream,
    scaled_stream,
    snapped,
    user_errors,
    value_set,
)
from torchwright_fx.lower.stream import Stream, const_vector, to_stream
from torchwright_fx.ops import ffn
from torchwright_fx.ops.ffn import COMPARE_ADVICE, Grid, Step
from torchwright_fx.ops.ties import refuse_ties


# -- rounding -------------------------------------------------------------------------------------
def _round_range(kind: str, r: Interval) -> Interval:
    f = ffn.ROUNDERS[kind]
    lo = float(f(r.lo)) if math.isfinite(r.lo) else r.lo
    hi = float(f(r.hi)) if math.isfinite(r.hi) else r.hi
    return Interval(lo, hi, True)


def rounded(ctx: LowerCtx, x: Stream, kind: str) -> Stream:
    """floor / ceil / round / trunc of every column (``_rounded``), on exact inputs if need be
    (``_on_exact_inputs``)."""
    return _on_exact_inputs(ctx, x, lambda s: _rounded(ctx, s, kind))


def _on_exact_inputs(ctx: LowerCtx, x: Stream, compute: Callable[[Stream], Stream]) -> Stream:
    """``compute(x)``, unless a noisy input on a lattice (a decoded position or count, far
    along a long context) leaves its result too noisy for the exact steps after it, or gets
    it refused: then the inputs are rounded onto their lattices first (``rules.snapped``, one
    or two MLP sublayers) and ``compute`` runs on exact values. The steps refuse the ties a
    reference off its lattice could break (``refuse_ties``), so any lattice input may snap."""
    return on_exact_inputs(ctx, x, compute, float(NOISE_TOLERANCE), reference_checked=True)


def _rounded(ctx: LowerCtx, x: Stream, kind: str, scales: list[float] | None = None
             ) -> Stream:
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
    return _fine_stage(ctx, x, kind, plans, stage1, out_cols, scales)


def _fine_stage(ctx: LowerCtx, x: Stream, kind: str, plans: list[ffn.StairPlan | None],
                stage1: Stream, out_cols: list[Lin], scales: list[float] | None = None
                ) -> Stream:
    """Second stage of a split staircase: kind(x) = block*q + kind(x - block*q). ``scales``:
    what the caller multiplies each result by (a remainder's modulus): a fine stage whose
    noise that many times is more than the steps after it tolerate is snapped first."""
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
    if scales is not None:  # a long staircase's lanes round in fp32; m times that may be too much
        cols2, ranges2 = list(stage2.cols), list(stage2.ranges)
        for i, (c, r) in enumerate(zip(stage2.cols, stage2.ranges, strict=True)):
            if r.noise * abs(scales[i]) > NOISE_TOLERANCE:
                cols2[i], ranges2[i] = snapped(ctx, c, r) or (c, r)
        stage2 = Stream(cols2, ranges2)
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
            scaled_up = scaled_stream(x, [k] * x.width)
            return scaled_stream(rounded(ctx, scaled_up, kind), [1 / k] * x.width)
        return rounded(ctx, x, kind)

    return lower


lowering(torch.floor, methods=("floor",))(_rounding_rule("floor"))
lowering(torch.ceil, methods=("ceil",))(_rounding_rule("ceil"))
lowering(torch.round, methods=("round",))(_rounding_rule("round"))
lowering(torch.trunc, torch.fix, methods=("trunc", "fix", "int", "long"))(_rounding_rule("trunc"))


@lowering(torch.frac, methods=("frac",))
def _frac(ctx: LowerCtx, a: Any) -> Stream:
    x = to_stream(a, ctx.out_width)
    t = rounded(ctx, x, "trunc")
    return Stream([c - d for c, d in zip(x.cols, t.cols, strict=True)],
                  [Interval.of(max(r.lo, -1.0) if r.lo < 0 else 0.0,
                               min(r.hi, 1.0) if r.hi > 0 else 0.0,
                               lattice_sum(r.lattice, (Fraction(1), Fraction(0))),
                               r.noise + q.noise, r.derived())
                   for r, q in zip(x.ranges, t.ranges, strict=True)])


def _modulus(ctx: LowerCtx, a: Any, m: Any, kind: str) -> Stream:
    """x - m * kind(x / m) for a constant m: torch.remainder (floor) and torch.fmod (trunc)."""
    if not isinstance(a, Stream) or isinstance(m, Stream):
        raise ctx.error("% / remainder / fmod need a stream and a constant modulus",
                        "for two small whole numbers, tabulate it: tw.lookup2(a, m, {(i, j): "
                        "i % j for i in range(...) for j in range(1, ...)})")
    x = to_stream(a, ctx.out_width)
    ms = const_vector(m, x.width)
    if any(k == 0 for k in ms):
        raise ctx.error("modulus 0")
    return _on_exact_inputs(ctx, x, lambda s: _remainder_of(ctx, s, ms, kind))


def _remainder_of(ctx: LowerCtx, x: Stream, ms: list[float], kind: str) -> Stream:
    quotient = _rounded(ctx, divided_stream(x, ms), kind, ms)  # x - m q: m times q's noise
    if any(r.noise * abs(k) > NOISE_TOLERANCE and len(c.terms) > 1
           for c, r, k in zip(x.cols, quotient.ranges, ms, strict=True)):
        # the fine stage's form reads x's terms, too many to snap with it: x as one column first
        one = [(snapped(ctx, c, r) or (c, r)) if len(c.terms) > 1 else (c, r)
               for c, r in zip(x.cols, x.ranges, strict=True)]
        x = Stream([c for c, _ in one], [r for _, r in one], x.is_bool)
        quotient = _rounded(ctx, divided_stream(x, ms), kind, ms)
    cols = [c - q * k for c, q, k in zip(x.cols, quotient.cols, ms, strict=True)]
    ranges = [_mod_range(ctx, c, r, k, kind).with_noise(r.noise + abs(k) * q.noise)
              .with_rounding(r.derived() if Interval.point(k).rounding == EXACT else INEXACT)
              for c, r, k, q in zip(x.cols, x.ranges, ms, quotient.ranges, strict=True)]
    return Stream(cols, ranges)


def _mod_range(ctx: LowerCtx, x: Lin, r: Interval, m: float, kind: str) -> Interval:
    """x - m*q with q an integer: x's lattice joined with m's multiples. On a lattice the
    residues are the points of (s, offset) in [0, |m|) or (-|m|, 0], s = gcd(spacing, |m|)."""
    return mod_range_on(r, m, kind, grid(ctx, x, r))


def mod_range_on(r: Interval, m: float, kind: str, g: Grid | None) -> Interval:
    """``_mod_range`` for a value on the lattice ``g`` (None: no lattice)."""
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


@lowering(operator.mod, torch.remainder, methods=("__mod__", "remainder"))
def _remainder(ctx: LowerCtx, a: Any, m: Any) -> Stream:
    return _modulus(ctx, a, m, "floor")


@lowering(torch.fmod, methods=("fmod",))
def _fmod(ctx: LowerCtx, a: Any, m: Any) -> Stream:
    return _modulus(ctx, a, m, "trunc")


@lowering(torch.sign, methods=("sign",))
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


# -- facts ---------------------------------------------------------------------------------------
def rounded_facts(ctx: FactsCtx, x: NodeFacts, kind: str) -> NodeFacts:
    """floor / ceil / round / trunc of every column (``rounded``): whole numbers between the
    rounded ends; a column already whole (or constant) keeps its form, as lowering keeps it."""
    ranges, forms = [], []
    for i, r in enumerate(x.ranges):
        out = _round_range(kind, r)
        ranges.append(out)
        form = x.form(i)
        g = ctx.grid(form, r)
        if r.lo == r.hi:
            forms.append(Lin.constant(out.lo))
        elif g is not None and g.integral and form is not None:
            forms.append(form)
        else:
            forms.append(ctx.fresh([out])[0])
    return NodeFacts(ranges, False, forms)


def _rounding_facts(kind: str) -> Rule:
    def rule(ctx: FactsCtx, a: Any, *_: Any, decimals: int = 0, **__: Any) -> NodeFacts:
        x = as_facts(a, ctx.out_width)
        if decimals:
            k = 10.0 ** decimals
            return scaled(rounded_facts(ctx, scaled(x, [k] * x.width), kind), [1 / k] * x.width)
        return rounded_facts(ctx, x, kind)

    return rule


facts(torch.floor, methods=("floor",))(_rounding_facts("floor"))
facts(torch.ceil, methods=("ceil",))(_rounding_facts("ceil"))
facts(torch.round, methods=("round",))(_rounding_facts("round"))
facts(torch.trunc, torch.fix, methods=("trunc", "fix", "int", "long"))(_rounding_facts("trunc"))


@facts(torch.frac, methods=("frac",))
def _frac_facts(ctx: FactsCtx, a: Any) -> NodeFacts:
    x = as_facts(a, ctx.out_width)
    return NodeFacts([Interval.of(max(r.lo, -1.0) if r.lo < 0 else 0.0,
                                  min(r.hi, 1.0) if r.hi > 0 else 0.0,
                                  lattice_sum(r.lattice, (Fraction(1), Fraction(0))),
                                  0.0, r.derived()) for r in x.ranges])


def _modulus_facts(ctx: FactsCtx, a: Any, m: Any, kind: str) -> NodeFacts:
    """x - m * kind(x / m) for a constant m (``_modulus``)."""
    if not isinstance(a, NodeFacts) or isinstance(m, NodeFacts):
        raise ctx.error("% / remainder / fmod need a stream and a constant modulus")
    x = as_facts(a, ctx.out_width)
    ms = const_values(m, x.width)
    if any(k == 0 for k in ms):
        raise ctx.error("modulus 0")
    return NodeFacts([mod_range_on(r, k, kind, ctx.grid(x.form(i), r))
                      .with_rounding(r.derived() if Interval.point(k).rounding == EXACT
                                     else INEXACT)
                      for i, (r, k) in enumerate(zip(x.ranges, ms, strict=True))])


@facts(operator.mod, torch.remainder, methods=("__mod__", "remainder"))
def _remainder_facts(ctx: FactsCtx, a: Any, m: Any) -> NodeFacts:
    return _modulus_facts(ctx, a, m, "floor")


@facts(torch.fmod, methods=("fmod",))
def _fmod_facts(ctx: FactsCtx, a: Any, m: Any) -> NodeFacts:
    return _modulus_facts(ctx, a, m, "trunc")


@facts(torch.sign, methods=("sign",))
def _sign_facts(ctx: FactsCtx, a: Any) -> NodeFacts:
    ranges = []
    for r in as_facts(a, ctx.out_width).ranges:
        n_steps = int(r.lo <= 0 < r.hi) + int(r.lo < 0 <= r.hi)
        base = -1.0 if r.lo < 0 else (0.0 if r.lo == 0 else 1.0)
        # one correct rounding keeps a value's sign and its zeros; more may not (a - b)
        rounding = EXACT if r.rounding <= ONCE else INEXACT
        ranges.append(Interval(base, base + n_steps, True, rounding=rounding))
    return NodeFacts(ranges)
