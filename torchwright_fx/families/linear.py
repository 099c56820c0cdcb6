"""Linear ops (no producer: affine forms), indexing, concatenation, matmul, sum, reshapes."""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.nn.functional as F

from torchwright_fx.capture.registry import lowering
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import (
    Interval,
)
from torchwright_fx.lower.context import LowerCtx
from torchwright_fx.lower.rules import (
    _last_dim,
    _scale,
    _streams,
)
from torchwright_fx.lower.stream import Stream, to_stream


# -- linear ------------------------------------------------------------------------------------
@lowering(operator.add, torch.add, methods=("add", "__add__", "__radd__"))
def _add(ctx: LowerCtx, a: Any, b: Any, *, alpha: float = 1.0) -> Stream:
    x, y = _streams(ctx, a, b)
    if x.is_bool and y.is_bool:
        raise ctx.error("adding two bool tensors is a logical or in torch",
                        "write a | b, or convert with .float() first")
    if alpha != 1.0:
        y = _scale(y, [float(alpha)] * y.width)
    return Stream([p + q for p, q in zip(x.cols, y.cols, strict=True)],
                  [r + s for r, s in zip(x.ranges, y.ranges, strict=True)])


@lowering(operator.sub, torch.sub, methods=("sub", "__sub__"))
def _sub(ctx: LowerCtx, a: Any, b: Any, *, alpha: float = 1.0) -> Stream:
    return _add(ctx, a, _scale(to_stream(b, ctx.out_width), [-float(alpha)] * ctx.out_width))


@lowering(torch.rsub, methods=("__rsub__",))
def _rsub(ctx: LowerCtx, a: Any, b: Any) -> Stream:
    return _sub(ctx, b, a)


@lowering(operator.neg, torch.neg, methods=("neg", "__neg__"))
def _neg(ctx: LowerCtx, a: Any) -> Stream:
    return _scale(to_stream(a, ctx.out_width), [-1.0] * ctx.out_width)


@lowering(operator.pos)
def _pos(ctx: LowerCtx, a: Any) -> Stream:
    return to_stream(a, ctx.out_width)


@lowering(operator.getitem)
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


@lowering(torch.cat, torch.concat, torch.concatenate)
def _cat(ctx: LowerCtx, tensors: Any, dim: int = 0) -> Stream:
    if dim not in (-1, 1):
        raise ctx.error(f"torch.cat along dim {dim}", "concatenate along the last dim (dim=-1)")
    parts = [to_stream(t, 1) if not isinstance(t, Stream) else t for t in tensors]
    return Stream([c for p in parts for c in p.cols], [r for p in parts for r in p.ranges],
                  all(p.is_bool for p in parts))


@lowering(torch.stack)
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


@lowering(operator.matmul, torch.matmul, torch.mm, methods=("matmul", "__matmul__", "mm"))
def _matmul(ctx: LowerCtx, a: Any, b: Any) -> Stream:
    if not isinstance(a, Stream) or isinstance(b, Stream):
        raise ctx.error("matmul needs a stream on the left and constant weights on the right")
    weights = _weights(b)
    if weights.dim() == 1:
        weights = weights[:, None]
    return _apply_matrix(a, weights, None)


@lowering(F.linear)
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


@lowering(torch.sum, methods=("sum",))
def _sum(ctx: LowerCtx, v: Any, dim: Any = None, keepdim: bool = False, **_: Any) -> Stream:
    _last_dim(ctx, dim, "sum")
    x = v if isinstance(v, Stream) else to_stream(v, 1)
    total = Lin()
    rng = Interval.point(0.0)
    for c, r in zip(x.cols, x.ranges, strict=True):
        total, rng = total + c, rng + r
    return Stream([total], [rng])


# -- identity-like --------------------------------------------------------------------------------
@lowering(methods=("float", "contiguous", "clone", "detach", "to", "type", "double"))
def _same(ctx: LowerCtx, v: Any, *_: Any, **__: Any) -> Stream:
    x = to_stream(v, ctx.out_width)
    return Stream(x.cols, x.ranges, False)


@lowering(torch.squeeze, torch.unsqueeze, torch.reshape, methods=(
    "squeeze", "unsqueeze", "view", "reshape", "flatten"))
def _reshape(ctx: LowerCtx, v: Any, *_: Any, **__: Any) -> Stream:
    x = to_stream(v, ctx.out_width)
    if x.width != ctx.out_width:
        raise ctx.error("a reshape that changes the width of a stream")
    return x


@lowering(torch.ones_like, torch.zeros_like, torch.full_like)
def _const_like(ctx: LowerCtx, v: Any, *args: Any, **kwargs: Any) -> Stream:
    row = ctx.shape.bos.reshape(-1)  # a constant stream: any row will do
    return Stream.const([float(r) for r in row], ctx.shape.dtype == torch.bool)
