"""Comparisons, logic and torch.where."""

from __future__ import annotations

import math
import operator
from fractions import Fraction
from typing import Any

import torch

from torchwright_fx.analysis.facts import FactsCtx, NodeFacts, as_facts
from torchwright_fx.base.numerics import FP32_EXACT_INTEGERS, GATE_NOISE, WHERE_SNAP_NOISE
from torchwright_fx.capture.registry import Rule, facts, lowering
from torchwright_fx.families import wide
from torchwright_fx.families.linear import add_streams, last_dim_facts
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import (
    BOOL,
    EXACT,
    INEXACT,
    ONCE,
    Interval,
    read_float,
)
from torchwright_fx.lower.context import LowerCtx
from torchwright_fx.lower.rules import (
    Columns,
    exact_within,
    last_dim_only,
    on_exact_inputs,
    pwl_stream,
    read_noise,
    scaled_stream,
    streams_of,
    user_errors,
    value_set,
)
from torchwright_fx.lower.stream import Stream, const_vector, is_const, to_stream
from torchwright_fx.ops import ffn, position_step
from torchwright_fx.ops.ffn import COMPARE_ADVICE, Grid, Pwl, Step
from torchwright_fx.ops.ties import refuse_ties, refuse_unheld_constant


# -- comparisons and logic ------------------------------------------------------------------------
def _compare(ctx: LowerCtx, a: Any, b: Any, op: str) -> Stream:
    w = ctx.out_width
    if op in ("lt", "le"):
        a, b, op = b, a, {"lt": "gt", "le": "ge"}[op]
    scales: list[float | None] = [None] * w
    shown = -1 if is_const(a) and not is_const(b) else 1  # the steps see -b against -a
    if is_const(b):
        x, ts = to_stream(a, w), const_vector(b, w)
    elif is_const(a):
        x, ts = scaled_stream(to_stream(b, w), [-1.0] * w), [-t for t in const_vector(a, w)]
    else:
        y = to_stream(b, w)
        x = add_streams(ctx, a, scaled_stream(y, [-1.0] * w))
        # the reference compares a with b, never forms a - b: rounding is monotone, so it
        # agrees with the exact comparison unless a side reached inexactly crosses the other,
        # or two values rounded once land on the same fp32 number (a != b, fl(a) == fl(b));
        # ties and landings of a - b at 0 are judged at the size of the larger side
        pairs = zip(x.ranges, to_stream(a, w).ranges, y.ranges, strict=True)
        x = Stream(x.cols, [d.with_rounding(EXACT if max(p.rounding, q.rounding) == EXACT
                                            else ONCE if max(p.rounding, q.rounding) == ONCE
                                            else INEXACT) for d, p, q in pairs])
        scales = [max(p.magnitude, q.magnitude) for p, q in
                  zip(to_stream(a, w).ranges, y.ranges, strict=True)]
        ts = [0.0] * w

    def steps(x: Stream) -> Stream:
        fs = []
        with user_errors(ctx):
            for c, r, t, scale in zip(x.cols, x.ranges, ts, scales, strict=True):
                values = value_set(ctx, c, r)
                refuse_ties(r, values, [read_float(t)], "this comparison", scale, shown)
                refuse_unheld_constant(t, r, values, "this comparison")
                fs.append(_compare_pwl(op, t, values))
                ffn.check_resolution(r, values, "comparison", COMPARE_ADVICE)
                ffn.check_staircase(fs[-1], r, values, "comparison", COMPARE_ADVICE)
        return pwl_stream(ctx, x.cols, x.ranges, fs, [BOOL] * w, is_bool=True)

    if w == 1 and wide.is_wide(ctx, x.cols[0], x.ranges[0]):
        out = _wide_compare(ctx, x.cols[0], ts[0], op)
        if out is not None:
            return out
    if w == 1 and op in ("gt", "ge"):
        out = _position_compare(ctx, x.cols[0], x.ranges[0], ts[0], op)
        if out is not None:
            return out
    if w == 1 and x.cols[0].terms.keys() & ctx.prog.shared.counted_means.keys():
        out = _counted_compare(ctx, x.cols[0], x.ranges[0], ts[0], op, scales[0], shown)
        if out is not None:
            return out
    # refused on a noisy input the reference holds on its lattice: the input is snapped first
    return on_exact_inputs(ctx, x, steps)


def _counted_compare(ctx: LowerCtx, x: Lin, rng: Interval, t: float, op: str,
                     scale: float | None, shown: int) -> Stream | None:
    """[x op t] for x = sum_k c_k * mean_k + b, means built from counts over the same rows
    (``counts.quotient``): each mean less its first value is total_k / m for whole numbers
    total_k and m, so where m >= 1, x op t is the sign of
    Q * (sum_k c_k * total_k + (b - t) * m), a whole number: exact at any length, where the
    attainable means either side of t crowd closer than the means' own error (1.9e-6 apart
    around 1/4 at 131072 positions). Where m can be 0 (a ``where`` or a selection) the form is
    0 there, and the value the means take then is added as a constant on [m == 0]. None where
    the form does not apply (the means' own steps then decide or refuse)."""
    counted = ctx.prog.shared.counted_means
    if not x.terms or not all(sid in counted for sid in x.terms):
        return None
    means = [counted[sid] for sid in x.terms]
    if len({cm.group for cm in means}) != 1:
        return None
    coefs = [read_float(c) for c in x.terms.values()]
    fb = read_float(x.const) - read_float(t)
    q = math.lcm(fb.denominator, *(c.denominator for c in coefs))
    a, b = [c * q for c in coefs], fb * q  # whole numbers
    rows_hi = means[0].rows_hi
    reach = sum(abs(float(ak)) * cm.total_hi for ak, cm in zip(a, means, strict=True)) + \
        abs(float(b)) * rows_hi + 1.0
    if reach >= FP32_EXACT_INTEGERS:
        return None
    with user_errors(ctx):  # the reference compares fl(mean) with t: it must not land on t
        values = value_set(ctx, x, rng)
        refuse_ties(rng, values, [read_float(t)], "this comparison", scale, shown)
        refuse_unheld_constant(t, rng, values, "this comparison")
    rows = means[0].rows()
    z = rows * float(b)
    for ak, cm in zip(a, means, strict=True):
        z = z + cm.total * float(ak)
    if any(cm.at_empty is not None for cm in means):  # no rows: every total and m are 0
        empty = sum(float(c) * (cm.at_empty or 0.0) for c, cm in zip(coefs, means, strict=True))
        if _holds(op, empty + float(fb), 0.0) != _holds(op, 0.0, 0.0):
            some = _compare(ctx, Stream([rows], [Interval(0, rows_hi, True)]), 0.5, "gt")
            lift = 1.0 if _holds(op, 1.0, 0.0) == _holds(op, empty + float(fb), 0.0) else -1.0
            z = z + (1.0 - some.cols[0]) * lift
    return _compare(ctx, Stream([z], [Interval(-reach, reach, True)]), 0.0, op)


def _holds(op: str, a: float, b: float) -> bool:
    return {"gt": a > b, "ge": a >= b, "eq": a == b, "ne": a != b}[op]


def _wide_compare(ctx: LowerCtx, x: Lin, t: float, op: str) -> Stream | None:
    """[x > t], [x >= t], [x == t] or [x != t] for a wide whole number x (half precision):
    the sign of x - T from its places after their carries (``wide.sign_form``)."""
    def at_least(k: float) -> Stream | None:  # [x >= k], k whole
        form = wide.sign_form(ctx, x - k)
        if form is None:
            return None
        q, rq = form
        return _compare(ctx, Stream([q], [rq]), 0.0, "ge")

    if op in ("gt", "ge"):
        return at_least(math.floor(t) + 1.0 if op == "gt" else float(math.ceil(t)))
    if t != math.floor(t):
        return Stream([Lin.constant(0.0 if op == "eq" else 1.0)], [BOOL], True)
    if not (wide.signable(ctx, x - t) and wide.signable(ctx, x - (t + 1.0))):
        return None  # decided before either side is built
    lo, hi = at_least(t), at_least(t + 1.0)
    assert lo is not None and hi is not None
    eq = lo.cols[0] - hi.cols[0]
    return Stream([eq if op == "eq" else 1.0 - eq], [BOOL], True)


def _position_compare(ctx: LowerCtx, x: Lin, rng: Interval, t: float, op: str
                      ) -> Stream | None:
    """[x > t] or [x >= t] for x = alpha * position + beta (alpha != 0) in fp32: a step on the
    position head's output, with no position decoder (ops/position_step.py). None where x is
    not such a form, where the reference may round it (then the generic steps judge its ties),
    or where the step cannot be certified (the decoded position then decides)."""
    shared = ctx.prog.shared
    if ctx.prog.precision.half or rng.rounding != EXACT:
        return None
    for pos in (shared.position, shared.exact_position):
        if pos is None or not pos.terms or x.terms.keys() != pos.terms.keys():
            continue
        sid = next(iter(pos.terms))
        alpha = Fraction(x.terms[sid]) / Fraction(pos.terms[sid])
        if alpha == 0 or any(Fraction(x.terms[k]) != alpha * Fraction(pos.terms[k])
                             for k in pos.terms):
            continue
        # x op t as position op' s, in exact arithmetic (the reference computes x exactly)
        s = (Fraction(t) - (Fraction(x.const) - alpha * Fraction(pos.const))) / alpha
        if alpha > 0:  # i > s or i >= s: i >= c
            c = math.floor(s) + 1 if op == "gt" else math.ceil(s)
            below = False
        else:  # i < s or i <= s: not i >= c
            c = math.ceil(s) if op == "gt" else math.floor(s) + 1
            below = True
        n = ctx.geom.max_seq_len
        if c <= 0 or c >= n:  # the same at every position
            value = float((c <= 0) != below)
            return Stream([Lin.constant(value)], [Interval(value, value, True)], is_bool=True)
        built = position_step.at_least(ctx.prog, ctx.geom, ctx.bos_indicator(), c,
                                       ctx.name, ctx.source)
        if built is None:
            return None
        col, rng = built
        if below:
            col = 1.0 - col
        return Stream([col], [rng], is_bool=True)
    return None


def _compare_pwl(op: str, t: float, g: Grid | ffn.Fractions | None) -> Pwl:
    """[x > t], [x >= t], [x == t] or [x != t] as a staircase (== needs a grid or a mean's
    fractions: exact)."""
    if op in ("gt", "ge"):
        return ffn.staircase(0.0, [Step(t, op == "gt")], g)
    if g is None:
        raise ffn.RangeError("== and != need an integer-valued (or grid-valued) stream; "
                             "compare the whole numbers it is computed from (d == 2, not "
                             "tw.reciprocal(d) == 0.5), or declare a value that is whole with "
                             "tw.claim(v, lo, hi, integral=True)")
    sign = 1.0 if op == "eq" else -1.0
    return ffn.staircase(0.0 if op == "eq" else 1.0,
                         [Step(t, False, sign), Step(t, True, -sign)], g)


def _comparison(op: str) -> Rule:
    def lower(ctx: LowerCtx, a: Any, b: Any) -> Stream:
        return _compare(ctx, a, b, op)

    return lower


for _op in ("gt", "ge", "lt", "le", "eq", "ne"):
    lowering(getattr(operator, _op), getattr(torch, _op),
         methods=(_op, f"__{_op}__"))(_comparison(_op))
lowering(torch.greater, methods=("greater",))(_comparison("gt"))
lowering(torch.greater_equal, methods=("greater_equal",))(_comparison("ge"))
lowering(torch.less, methods=("less",))(_comparison("lt"))
lowering(torch.less_equal, methods=("less_equal",))(_comparison("le"))
lowering(torch.not_equal, methods=("not_equal",))(_comparison("ne"))


def _bools(ctx: LowerCtx, *values: Any) -> list[Stream]:
    out = streams_of(ctx, *values)
    for s in out:
        if not all(r.is_bool for r in s.ranges):
            raise ctx.error("logical ops need 0/1 streams",
                            "build conditions from comparisons and tw.is_token")
    return out


def count_pwl(op: str, n: int) -> Pwl:
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
                          [count_pwl(op, 2)] * x.width, [BOOL] * x.width, is_bool=True)

    return lower


lowering(operator.and_, torch.logical_and, torch.bitwise_and,
     methods=("__and__", "__rand__", "logical_and", "bitwise_and"))(_logic("and"))
lowering(operator.or_, torch.logical_or, torch.bitwise_or,
     methods=("__or__", "__ror__", "logical_or", "bitwise_or"))(_logic("or"))
lowering(operator.xor, torch.logical_xor, torch.bitwise_xor,
     methods=("__xor__", "__rxor__", "logical_xor", "bitwise_xor"))(_logic("xor"))


@lowering(operator.invert, torch.logical_not, torch.bitwise_not,
      methods=("__invert__", "logical_not", "bitwise_not"))
def _not(ctx: LowerCtx, a: Any) -> Stream:
    (x,) = _bools(ctx, a)
    return Stream([1.0 - c for c in x.cols], [BOOL] * x.width, True)


def _reduce_logic(op: str) -> Rule:
    def lower(ctx: LowerCtx, v: Any, dim: Any = None, keepdim: bool = False) -> Stream:
        last_dim_only(ctx, dim, "all" if op == "and" else "any")
        x = v if isinstance(v, Stream) else to_stream(v, 1)
        if not all(r.is_bool for r in x.ranges):
            raise ctx.error("all / any need 0/1 streams",
                            "compare first: (v > 0).any(-1), (v == k).all(-1)")
        count = sum(x.cols, Lin())
        total = sum(x.ranges[1:], x.ranges[0])
        return pwl_stream(ctx, [count], [total],
                          [count_pwl(op, x.width)], [BOOL], is_bool=True)

    return lower


lowering(torch.all, methods=("all",))(_reduce_logic("and"))
lowering(torch.any, methods=("any",))(_reduce_logic("or"))


@lowering(torch.where)
def _where(ctx: LowerCtx, cond: Any, a: Any, b: Any) -> Stream:
    w = ctx.out_width
    (c,) = _bools(ctx, cond)
    x, y = streams_of(ctx, a, b)
    both = x.ranges[0].hull(y.ranges[0])
    if any(cr.noise > GATE_NOISE and 2.0 * r.hull(s).magnitude * cr.noise > WHERE_SNAP_NOISE
           for cr, r, s in zip(c.broadcast(w).ranges, x.ranges, y.ranges, strict=True)):
        c = exact_within(ctx, c, GATE_NOISE)  # (numerics.WHERE_SNAP_NOISE)
    c = c.broadcast(w)
    if w == 1 and wide.is_wide(ctx, x.cols[0], both):
        # a whole number half cannot hold in one column: its terms, selected group by group
        split = wide.select(ctx, c.cols[0], c.ranges[0], x.cols[0], y.cols[0], both)
        if split is not None:
            return Stream([split[0]], [split[1]])
    cols = Columns(ctx, w)
    with user_errors(ctx):
        for i in range(w):
            ffn.select(cols.bank, i, c.cols[i], x.cols[i], x.ranges[i], y.cols[i], y.ranges[i])
            cols.whole(i)
    ranges = []
    for r, s, cr, a, b in zip(x.ranges, y.ranges, c.ranges, x.cols, y.cols, strict=True):
        out = r.hull(s)
        gate = 2.0 * out.magnitude if ctx.prog.machine.gated_up else \
            (r - s).magnitude + ffn.GATE_GAP
        read = max(read_noise(ctx, a), read_noise(ctx, b))
        ranges.append(out.with_noise(out.noise + gate * cr.noise + read))
    return cols.finish(ranges, x.is_bool and y.is_bool)


@lowering(methods=("bool",))
def _to_bool(ctx: LowerCtx, v: Any) -> Stream:
    x = to_stream(v, ctx.out_width)
    if all(r.is_bool for r in x.ranges):
        return x.as_bool()
    return _compare(ctx, x, 0.0, "ne")


# -- facts ---------------------------------------------------------------------------------------
def _compare_facts(ctx: FactsCtx, a: Any, b: Any) -> NodeFacts:
    """A comparison is 0/1 (``_compare``); whether it can be decided exactly is lowering's."""
    for v in (a, b):
        as_facts(v, ctx.out_width)
    return NodeFacts([BOOL] * ctx.out_width, True)


for _op in ("gt", "ge", "lt", "le", "eq", "ne"):
    facts(getattr(operator, _op), getattr(torch, _op),
          methods=(_op, f"__{_op}__"))(_compare_facts)
facts(torch.greater, torch.greater_equal, torch.less, torch.less_equal, torch.not_equal,
      methods=("greater", "greater_equal", "less", "less_equal", "not_equal"))(_compare_facts)


def _bool_facts(ctx: FactsCtx, *values: Any) -> list[NodeFacts]:
    out = [as_facts(v, ctx.out_width) for v in values]
    if not all(r.is_bool for x in out for r in x.ranges):
        raise ctx.error("logical ops need 0/1 streams")
    return out


@facts(operator.and_, torch.logical_and, torch.bitwise_and, operator.or_, torch.logical_or,
       torch.bitwise_or, operator.xor, torch.logical_xor, torch.bitwise_xor,
       methods=("__and__", "__rand__", "logical_and", "bitwise_and", "__or__", "__ror__",
                "logical_or", "bitwise_or", "__xor__", "__rxor__", "logical_xor", "bitwise_xor"))
def _logic_facts(ctx: FactsCtx, a: Any, b: Any) -> NodeFacts:
    x, _ = _bool_facts(ctx, a, b)
    return NodeFacts([BOOL] * x.width, True)


@facts(operator.invert, torch.logical_not, torch.bitwise_not,
       methods=("__invert__", "logical_not", "bitwise_not"))
def _not_facts(ctx: FactsCtx, a: Any) -> NodeFacts:
    (x,) = _bool_facts(ctx, a)
    forms = None if x.forms is None else [1.0 - c for c in x.forms]
    return NodeFacts([BOOL] * x.width, True, forms)


def _reduce_logic_facts(what: str) -> Rule:
    def rule(ctx: FactsCtx, v: Any, dim: Any = None, keepdim: bool = False) -> NodeFacts:
        last_dim_facts(ctx, dim, what)
        x = v if isinstance(v, NodeFacts) else as_facts(v, 1)
        if not all(r.is_bool for r in x.ranges):
            raise ctx.error("all / any need 0/1 streams")
        return NodeFacts([BOOL], True)

    return rule


facts(torch.all, methods=("all",))(_reduce_logic_facts("all"))
facts(torch.any, methods=("any",))(_reduce_logic_facts("any"))


@facts(torch.where)
def _where_facts(ctx: FactsCtx, cond: Any, a: Any, b: Any) -> NodeFacts:
    _bool_facts(ctx, cond)
    x, y = as_facts(a, ctx.out_width), as_facts(b, ctx.out_width)
    return NodeFacts([r.hull(s) for r, s in zip(x.ranges, y.ranges, strict=True)],
                     x.is_bool and y.is_bool)


@facts(methods=("bool",))
def _to_bool_facts(ctx: FactsCtx, v: Any) -> NodeFacts:
    x = as_facts(v, ctx.out_width)
    if all(r.is_bool for r in x.ranges):
        return x.as_bool()
    return _compare_facts(ctx, x, 0.0)
