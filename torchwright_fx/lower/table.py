"""The lowering table: each fx target (torch function, Tensor method, Python operator) mapped
to one rule ``rule(ctx, *args, **kwargs) -> Stream``. A rule builds the output's affine forms
(linear ops: no producer at all) or one FFN bank (non-linear ops), and derives the output's
value ranges from its inputs' ranges. Intrinsics carry their own rule (``intrinsics.py``).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import BOOL, Interval
from torchwright_fx.lower.context import LowerCtx
from torchwright_fx.lower.stream import Stream, const_vector, is_const, to_stream
from torchwright_fx.ops import ffn
from torchwright_fx.ops.lanes import Bank

Rule = Callable[..., Any]
FUNCTIONS: dict[Any, Rule] = {}
METHODS: dict[str, Rule] = {}


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


# -- linear ------------------------------------------------------------------------------------
@rule(operator.add, torch.add, methods=("add", "__add__", "__radd__"))
def _add(ctx: LowerCtx, a: Any, b: Any, *, alpha: float = 1.0) -> Stream:
    x, y = _streams(ctx, a, b)
    if x.is_bool and y.is_bool:
        raise ctx.error("adding two bool tensors is a logical or in torch",
                        "write a | b, or convert with .float() first")
    if alpha != 1.0:
        y = _scale(y, [float(alpha)] * y.width)
    return Stream([p + q for p, q in zip(x.cols, y.cols)],
                  [r + s for r, s in zip(x.ranges, y.ranges)])


@rule(operator.sub, torch.sub, methods=("sub", "__sub__"))
def _sub(ctx: LowerCtx, a: Any, b: Any, *, alpha: float = 1.0) -> Stream:
    return _add(ctx, a, _scale(to_stream(b, ctx.out_width), [-float(alpha)] * ctx.out_width))


@rule(operator.neg, torch.neg, methods=("neg", "__neg__"))
def _neg(ctx: LowerCtx, a: Any) -> Stream:
    return _scale(to_stream(a, ctx.out_width), [-1.0] * ctx.out_width)


@rule(operator.pos)
def _pos(ctx: LowerCtx, a: Any) -> Stream:
    return to_stream(a, ctx.out_width)


def _scale(x: Stream, ks: list[float]) -> Stream:
    return Stream([c * k for c, k in zip(x.cols, ks)], [r.scale(k) for r, k in zip(x.ranges, ks)])


@rule(operator.mul, torch.mul, methods=("mul", "__mul__", "__rmul__"))
def _mul(ctx: LowerCtx, a: Any, b: Any) -> Stream:
    w = ctx.out_width
    if is_const(b) or is_const(a):
        stream, k = (a, b) if is_const(b) else (b, a)
        return _scale(to_stream(stream, w), const_vector(k, w))
    x, y = _streams(ctx, a, b)
    bank = ctx.bank(w)
    for i in range(w):
        try:
            ffn.product(bank, i, x.cols[i], x.ranges[i], y.cols[i], y.ranges[i])
        except ffn.RangeError as e:
            raise ctx.error(str(e)) from None
    ranges = [r * s for r, s in zip(x.ranges, y.ranges)]
    return Stream(ctx.finish(bank, ranges), ranges, x.is_bool and y.is_bool)


@rule(operator.truediv, torch.div, torch.true_divide, methods=("div", "__truediv__"))
def _div(ctx: LowerCtx, a: Any, b: Any, *, rounding_mode: str | None = None) -> Stream:
    if not is_const(b) or rounding_mode is not None:
        raise ctx.error("division by a stream (or with rounding) is not supported yet",
                        "divide by a constant, or use a lookup table")
    return _scale(to_stream(a, ctx.out_width), [1.0 / k for k in const_vector(b, ctx.out_width)])


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
    picked = cols[last] if isinstance(last, slice) else (
        [cols[i] for i in last] if isinstance(last, (list, tuple)) else [cols[int(last)]])
    return Stream([v.cols[i] for i in picked], [v.ranges[i] for i in picked], v.is_bool)


@rule(torch.cat, torch.concat, torch.concatenate)
def _cat(ctx: LowerCtx, tensors: Any, dim: int = 0) -> Stream:
    if dim not in (-1, 1):
        raise ctx.error(f"torch.cat along dim {dim}", "concatenate along the last dim (dim=-1)")
    parts = [to_stream(t, 1) if not isinstance(t, Stream) else t for t in tensors]
    return Stream([c for p in parts for c in p.cols], [r for p in parts for r in p.ranges])


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


@rule(torch.sum, methods=("sum",))
def _sum(ctx: LowerCtx, v: Any, dim: Any = None, keepdim: bool = False, **_: Any) -> Stream:
    if dim not in (-1, 1, (-1,), (1,), [-1], [1]):
        raise ctx.error("sum over positions (or all dims)", "sum over the last dim: v.sum(-1)")
    x = to_stream(v, 1)
    total = Lin()
    rng = Interval.point(0.0)
    for c, r in zip(x.cols, x.ranges):
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


@rule(methods=("int", "long", "round"))
def _to_int(ctx: LowerCtx, v: Any, *_: Any) -> Stream:
    x = to_stream(v, ctx.out_width)
    if not all(r.integral for r in x.ranges):
        raise ctx.error("rounding a non-integer stream is not supported yet",
                        "declare it integral with tw.claim(v, lo, hi, integral=True)")
    return Stream(x.cols, x.ranges)


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
        x = _add(ctx, a, _scale(to_stream(b, w), [-1.0] * w))
        ts = [0.0] * w
    bank = ctx.bank(w)
    for i in range(w):
        xi, ri, t = x.cols[i], x.ranges[i], ts[i]
        try:
            if op in ("gt", "ge"):
                ffn.step(bank, i, xi, ri, t, strict=op == "gt")
            elif op == "eq":
                ffn.equals(bank, i, xi, ri, t)
            else:
                bank.const(i, 1.0)
                ffn.equals(bank, i, xi, ri, t, weight=-1.0)
        except ffn.RangeError as e:
            raise ctx.error(str(e)) from None
    return Stream(ctx.finish(bank, [BOOL] * w), [BOOL] * w, True)


def _comparison(op: str) -> Rule:
    def lower(ctx: LowerCtx, a: Any, b: Any) -> Stream:
        return _compare(ctx, a, b, op)

    return lower


for _op in ("gt", "ge", "lt", "le", "eq", "ne"):
    rule(getattr(operator, _op), getattr(torch, _op),
         methods=(_op, f"__{_op}__"))(_comparison(_op))


def _bools(ctx: LowerCtx, *values: Any) -> list[Stream]:
    out = _streams(ctx, *values)
    for s in out:
        if not all(r.is_bool for r in s.ranges):
            raise ctx.error("logical ops need 0/1 streams",
                            "build conditions from comparisons and tw.is_token")
    return out


@rule(operator.and_, torch.logical_and, methods=("__and__", "logical_and"))
def _and(ctx: LowerCtx, a: Any, b: Any) -> Stream:
    x, y = _bools(ctx, a, b)
    bank = ctx.bank(x.width)
    for i in range(x.width):
        ffn.logical_and(bank, i, x.cols[i], y.cols[i])
    return Stream(ctx.finish(bank, [BOOL] * x.width), [BOOL] * x.width, True)


@rule(operator.or_, torch.logical_or, methods=("__or__", "logical_or"))
def _or(ctx: LowerCtx, a: Any, b: Any) -> Stream:
    x, y = _bools(ctx, a, b)
    bank = ctx.bank(x.width)
    for i in range(x.width):
        ffn.logical_or(bank, i, x.cols[i], y.cols[i])
    return Stream(ctx.finish(bank, [BOOL] * x.width), [BOOL] * x.width, True)


@rule(operator.invert, torch.logical_not, methods=("__invert__", "logical_not"))
def _not(ctx: LowerCtx, a: Any) -> Stream:
    (x,) = _bools(ctx, a)
    return Stream([1.0 - c for c in x.cols], [BOOL] * x.width, True)


@rule(torch.where)
def _where(ctx: LowerCtx, cond: Any, a: Any, b: Any) -> Stream:
    w = ctx.out_width
    (c,) = _bools(ctx, cond)
    c = c.broadcast(w)
    x, y = _streams(ctx, a, b)
    bank = ctx.bank(w)
    for i in range(w):
        try:
            ffn.select(bank, i, c.cols[i], x.cols[i], x.ranges[i], y.cols[i], y.ranges[i])
        except ffn.RangeError as e:
            raise ctx.error(str(e)) from None
    ranges = [r.hull(s) for r, s in zip(x.ranges, y.ranges)]
    return Stream(ctx.finish(bank, ranges), ranges, x.is_bool and y.is_bool)


# -- piecewise-linear -----------------------------------------------------------------------------
def _hinge_part(bank: Bank, i: int, x: Lin, r: Interval, weight: float) -> Interval:
    """Add ``weight * relu(x)`` to output i (skipping lanes the range makes linear or zero);
    return the interval of the added term."""
    if r.hi <= 0:
        return Interval.point(0.0)
    if r.lo >= 0:
        bank.const(i, 0.0)
        ffn.linear(bank, i, x, weight)
    else:
        bank.hinge(i, x, weight)
    return Interval(0.0, r.hi, r.integral).scale(weight)


@rule(torch.relu, F.relu, methods=("relu",))
def _relu(ctx: LowerCtx, a: Any) -> Stream:
    x = to_stream(a, ctx.out_width)
    if all(r.lo >= 0 for r in x.ranges):
        return Stream(x.cols, x.ranges)
    bank = ctx.bank(x.width)
    ranges = [_hinge_part(bank, i, x.cols[i], x.ranges[i], 1.0) for i in range(x.width)]
    return Stream(ctx.finish(bank, ranges), ranges)


@rule(torch.abs, operator.abs, methods=("abs", "__abs__"))
def _abs(ctx: LowerCtx, a: Any) -> Stream:
    x = to_stream(a, ctx.out_width)
    bank = ctx.bank(x.width)
    ranges = []
    for i in range(x.width):
        r = x.ranges[i]
        bank.hinge(i, x.cols[i])
        bank.hinge(i, -x.cols[i])
        lo = 0.0 if r.lo <= 0 <= r.hi else min(abs(r.lo), abs(r.hi))
        ranges.append(Interval(lo, r.magnitude, r.integral))
    return Stream(ctx.finish(bank, ranges), ranges)


@rule(torch.clamp, torch.clip, methods=("clamp", "clip"))
def _clamp(ctx: LowerCtx, a: Any, min: Any = None, max: Any = None) -> Stream:
    # clamp(x, lo, hi) = x - relu(lo - x) ... written as x + relu(lo - x) - relu(x - hi)
    x = to_stream(a, ctx.out_width)
    if isinstance(min, Stream) or isinstance(max, Stream):
        raise ctx.error("clamp bounds must be constants", "use torch.maximum / torch.minimum")
    inf = float("inf")
    lo = -inf if min is None else float(min)
    hi = inf if max is None else float(max)
    bank = ctx.bank(x.width)
    part_ranges = []
    for i in range(x.width):
        r = x.ranges[i]
        below = _hinge_part(bank, i, lo - x.cols[i], Interval(lo, lo) - r, 1.0) \
            if lo > -inf else Interval.point(0.0)
        above = _hinge_part(bank, i, x.cols[i] - hi, r.shift(-hi), -1.0) \
            if hi < inf else Interval.point(0.0)
        part_ranges.append(below + above)
    parts = ctx.finish(bank, part_ranges)
    ranges = [r.clamp(lo, hi) for r in x.ranges]
    return Stream([c + p for c, p in zip(x.cols, parts)], ranges)


def _extremum(ctx: LowerCtx, a: Any, b: Any, sign: float) -> Stream:
    # max(a, b) = b + relu(a - b); min(a, b) = b - relu(b - a)
    x, y = _streams(ctx, a, b)
    bank = ctx.bank(x.width)
    parts = []
    for i in range(x.width):
        d, rd = (x.cols[i] - y.cols[i]) * sign, (x.ranges[i] - y.ranges[i]).scale(sign)
        parts.append(_hinge_part(bank, i, d, rd, sign))
    outs = ctx.finish(bank, parts)
    ranges = []
    for r, s in zip(x.ranges, y.ranges):
        pick = max if sign > 0 else min
        ranges.append(Interval(pick(r.lo, s.lo), pick(r.hi, s.hi), r.integral and s.integral))
    return Stream([c + p for c, p in zip(y.cols, outs)], ranges)


@rule(torch.maximum, methods=("maximum",))
def _maximum(ctx: LowerCtx, a: Any, b: Any) -> Stream:
    return _extremum(ctx, a, b, 1.0)


@rule(torch.minimum, methods=("minimum",))
def _minimum(ctx: LowerCtx, a: Any, b: Any) -> Stream:
    return _extremum(ctx, a, b, -1.0)
