"""Linear ops (no producer: affine forms), indexing, concatenation, matmul, sum, reshapes."""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.nn.functional as F

from torchwright_fx.analysis.facts import (
    FactsCtx,
    NodeFacts,
    as_facts,
    scaled,
)
from torchwright_fx.capture.registry import facts, lowering
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import (
    Interval,
)
from torchwright_fx.lower.context import LowerCtx
from torchwright_fx.lower.rules import (
    last_dim_only,
    scaled_stream,
    streams_of,
)
from torchwright_fx.lower.stream import Stream, to_stream


# -- linear ------------------------------------------------------------------------------------
@lowering(operator.add, torch.add, methods=("add", "__add__", "__radd__"))
def add_streams(ctx: LowerCtx, a: Any, b: Any, *, alpha: float = 1.0) -> Stream:
    x, y = streams_of(ctx, a, b)
    if x.is_bool and y.is_bool:
        raise ctx.error("adding two bool tensors is a logical or in torch",
                        "write a | b, or convert with .float() first")
    if alpha != 1.0:
        y = scaled_stream(y, [float(alpha)] * y.width)
    return Stream([p + q for p, q in zip(x.cols, y.cols, strict=True)],
                  [r + s for r, s in zip(x.ranges, y.ranges, strict=True)])


@lowering(operator.sub, torch.sub, methods=("sub", "__sub__"))
def _sub(ctx: LowerCtx, a: Any, b: Any, *, alpha: float = 1.0) -> Stream:
    w = ctx.out_width
    return add_streams(ctx, a, scaled_stream(to_stream(b, w), [-float(alpha)] * w))


@lowering(torch.rsub, methods=("__rsub__",))
def _rsub(ctx: LowerCtx, a: Any, b: Any) -> Stream:
    return _sub(ctx, b, a)


@lowering(operator.neg, torch.neg, methods=("neg", "__neg__"))
def _neg(ctx: LowerCtx, a: Any) -> Stream:
    return scaled_stream(to_stream(a, ctx.out_width), [-1.0] * ctx.out_width)


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
    last = idx[1]
    if last is None:  # v[:, None] turns a [seq] stream into [seq, 1]: the same column
        return v
    try:
        picked = picked_columns(v.width, last)
    except _BadIndex as e:
        raise ctx.error(e.reason, e.advice) from None
    return Stream([v.cols[i] for i in picked], [v.ranges[i] for i in picked], v.is_bool)


class _BadIndex(ValueError):
    def __init__(self, reason: str, advice: str):
        super().__init__(reason)
        self.reason, self.advice = reason, advice


def picked_columns(width: int, last: Any) -> list[int]:
    """The columns ``v[:, last]`` picks, as torch reads it: a slice; a list of bools, a mask
    (one per column); a list of numbers, indices with floats truncated toward zero
    (``x[:, [tw.token(c) for c in "ab"]]``: token codes are floats); one number."""
    cols = list(range(width))
    if isinstance(last, slice):
        return cols[last]
    listed = list(last) if isinstance(last, (list, tuple)) else None
    if listed and all(isinstance(i, bool) for i in listed):
        if len(listed) != width:
            raise _BadIndex(f"a mask of {len(listed)} bools indexes {width} columns",
                            "give one bool per column, or index by column numbers")
        return [c for c, keep in zip(cols, listed, strict=True) if keep]
    if listed is None and isinstance(last, float) and not last.is_integer():
        raise _BadIndex(f"column index {last!r} is not a whole number (torch refuses a "
                        "float index)", "index with an int: v[:, int(j)]")
    try:
        return [cols[int(i)] for i in (listed if listed is not None else [last])]
    except (TypeError, ValueError, IndexError) as e:
        raise _BadIndex(f"column index {last!r}: {e}",
                        f"index the {width} columns with whole numbers (-{width} to "
                        f"{width - 1})") from None


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
        raise ctx.error("matmul needs a stream on the left and constant weights on the right",
                        "a product of two streams is a * b (column by column), summed with "
                        ".sum(-1, keepdim=True)")
    weights = _weights(b)
    if weights.dim() == 1:
        weights = weights[:, None]
    return _apply_matrix(a, weights, None)


@lowering(F.linear)
def _linear(ctx: LowerCtx, x: Any, weight: Any, bias: Any = None) -> Stream:
    if not isinstance(x, Stream) or isinstance(weight, Stream) or isinstance(bias, Stream):
        raise ctx.error("F.linear needs constant weight and bias",
                        "a product of two streams is a * b (column by column), summed with "
                        ".sum(-1, keepdim=True)")
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
    last_dim_only(ctx, dim, "sum")
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


# -- facts ---------------------------------------------------------------------------------------
def _sum_forms(x: NodeFacts, y: NodeFacts) -> list[Lin] | None:
    if x.forms is None or y.forms is None:
        return None
    return [p + q for p, q in zip(x.forms, y.forms, strict=True)]


@facts(operator.add, torch.add, methods=("add", "__add__", "__radd__"))
def _add_facts(ctx: FactsCtx, a: Any, b: Any, *, alpha: float = 1.0) -> NodeFacts:
    x, y = as_facts(a, ctx.out_width), as_facts(b, ctx.out_width)
    if x.is_bool and y.is_bool:
        raise ctx.error("adding two bool tensors is a logical or in torch")
    if alpha != 1.0:
        y = scaled(y, [float(alpha)] * y.width)
    return NodeFacts([r + s for r, s in zip(x.ranges, y.ranges, strict=True)], False,
                     _sum_forms(x, y))


@facts(operator.sub, torch.sub, methods=("sub", "__sub__"))
def _sub_facts(ctx: FactsCtx, a: Any, b: Any, *, alpha: float = 1.0) -> NodeFacts:
    w = ctx.out_width
    return _add_facts(ctx, a, scaled(as_facts(b, w), [-float(alpha)] * w))


@facts(torch.rsub, methods=("__rsub__",))
def _rsub_facts(ctx: FactsCtx, a: Any, b: Any) -> NodeFacts:
    return _sub_facts(ctx, b, a)


@facts(operator.neg, torch.neg, methods=("neg", "__neg__"))
def _neg_facts(ctx: FactsCtx, a: Any) -> NodeFacts:
    return scaled(as_facts(a, ctx.out_width), [-1.0] * ctx.out_width)


@facts(operator.pos)
def _pos_facts(ctx: FactsCtx, a: Any) -> NodeFacts:
    return as_facts(a, ctx.out_width)


@facts(operator.getitem)
def _getitem_facts(ctx: FactsCtx, v: Any, index: Any) -> NodeFacts:
    if not isinstance(v, NodeFacts):
        raise ctx.error("indexing a constant inside the program")
    idx = index if isinstance(index, tuple) else (index,)
    if idx and idx[0] is Ellipsis:
        idx = (slice(None), *idx[1:])
    if len(idx) != 2 or idx[0] != slice(None):
        raise ctx.error(f"index {index!r} selects positions")
    last = idx[1]
    if last is None:
        return v
    try:
        return v.columns(picked_columns(v.width, last))
    except _BadIndex as e:
        raise ctx.error(f"{e.reason}: {e.advice}") from None


def _cat_facts(parts: list[NodeFacts]) -> NodeFacts:
    forms = None if any(p.forms is None for p in parts) else \
        [c for p in parts for c in p.forms or ()]
    return NodeFacts([r for p in parts for r in p.ranges], all(p.is_bool for p in parts), forms)


@facts(torch.cat, torch.concat, torch.concatenate)
def _cat_rule_facts(ctx: FactsCtx, tensors: Any, dim: int = 0) -> NodeFacts:
    if dim not in (-1, 1):
        raise ctx.error(f"torch.cat along dim {dim}")
    return _cat_facts([t if isinstance(t, NodeFacts) else as_facts(t, 1) for t in tensors])


@facts(torch.stack)
def _stack_facts(ctx: FactsCtx, tensors: Any, dim: int = 0) -> NodeFacts:
    parts = [t if isinstance(t, NodeFacts) else as_facts(t, 1) for t in tensors]
    if dim not in (-1, 1) or any(p.width != 1 for p in parts):
        raise ctx.error(f"torch.stack along dim {dim}")
    return _cat_facts(parts)


def _matrix_facts(x: NodeFacts, w: torch.Tensor, bias: torch.Tensor | None) -> NodeFacts:
    """x @ w + bias (``_apply_matrix``)."""
    forms, ranges = [], []
    for j in range(w.shape[1]):
        b = 0.0 if bias is None else float(bias[j])
        form, rng = Lin.constant(b), Interval.point(b)
        for i in range(w.shape[0]):
            k = float(w[i, j])
            if k != 0.0:
                form = form + x.forms[i] * k if x.forms is not None else form
                rng = rng + x.ranges[i].scale(k)
        forms.append(form)
        ranges.append(rng)
    return NodeFacts(ranges, False, forms if x.forms is not None else None)


@facts(operator.matmul, torch.matmul, torch.mm, methods=("matmul", "__matmul__", "mm"))
def _matmul_facts(ctx: FactsCtx, a: Any, b: Any) -> NodeFacts:
    if not isinstance(a, NodeFacts) or isinstance(b, NodeFacts):
        raise ctx.error("matmul needs a stream on the left and constant weights on the right")
    weights = _weights(b)
    return _matrix_facts(a, weights[:, None] if weights.dim() == 1 else weights, None)


@facts(F.linear)
def _linear_facts(ctx: FactsCtx, x: Any, weight: Any, bias: Any = None) -> NodeFacts:
    if not isinstance(x, NodeFacts) or isinstance(weight, NodeFacts) or \
            isinstance(bias, NodeFacts):
        raise ctx.error("F.linear needs constant weight and bias")
    b = None if bias is None else _weights(bias).reshape(-1)
    return _matrix_facts(x, _weights(weight).T, b)


def last_dim_facts(ctx: FactsCtx, dim: Any, what: str) -> None:
    """A reduction's dim must be the last (``rules.last_dim_only``)."""
    if dim not in (-1, 1, (-1,), (1,), [-1], [1]):
        raise ctx.error(f"{what} over positions (or all dims)")


@facts(torch.sum, methods=("sum",))
def _sum_facts(ctx: FactsCtx, v: Any, dim: Any = None, keepdim: bool = False,
               **_: Any) -> NodeFacts:
    last_dim_facts(ctx, dim, "sum")
    x = as_facts(v, 1) if not isinstance(v, NodeFacts) else v
    rng, form = Interval.point(0.0), Lin()
    for i, r in enumerate(x.ranges):
        rng = rng + r
        form = form + (x.form(i) or Lin())
    return NodeFacts([rng], False, None if x.forms is None else [form])


@facts(methods=("float", "contiguous", "clone", "detach", "to", "type", "double"))
def _same_facts(ctx: FactsCtx, v: Any, *_: Any, **__: Any) -> NodeFacts:
    x = as_facts(v, ctx.out_width)
    return NodeFacts(x.ranges, False, x.forms)


@facts(torch.squeeze, torch.unsqueeze, torch.reshape, methods=(
    "squeeze", "unsqueeze", "view", "reshape", "flatten"))
def _reshape_facts(ctx: FactsCtx, v: Any, *_: Any, **__: Any) -> NodeFacts:
    x = as_facts(v, ctx.out_width)
    if x.width != ctx.out_width:
        raise ctx.error("a reshape that changes the width of a stream")
    return x


@facts(torch.ones_like, torch.zeros_like, torch.full_like)
def _const_like_facts(ctx: FactsCtx, v: Any, *args: Any, **kwargs: Any) -> NodeFacts:
    row = ctx.shape.bos.reshape(-1)
    return NodeFacts.const([float(r) for r in row], ctx.shape.dtype == torch.bool)
