"""RASP's query-dependent attention: ``select``, ``aggregate``, ``selector_width`` and
``select_latest`` — their eager semantics, their facts and the heads that read a selector.
How a selector becomes content dims of a head is in ``families/selection.py``.

Semantics (causal, as every stream here). ``tw.select(keys, queries, predicate)`` is the
relation "position i selects position j" for ``1 <= j <= i`` where
``predicate(keys[j], queries[i])`` holds (RASP's order: key first). The ``<bos>`` row
(j = 0) is never selected: it is the fallback, as in ``tw.latch``. Eagerly a selector is a
bool tensor ``[seq, seq]`` (row i = query position); ``&``, ``|`` and ``~`` combine selectors
and the readers apply the causal mask ``1 <= j <= i``:

- ``aggregate(sel, v, default=0)``: the mean of ``v`` over the selected j; ``default`` when
  none is selected (RASP's numerical and, with one selected value, categorical Aggregate).
- ``select_latest(sel, v, default=0)``: ``v`` at the largest selected j; ``default`` when none.
- ``selector_width(sel)``: the number of selected j, a whole number.

The construction (docs/attention.md, "Query-dependent selection", says why each gain is what it
is). Each side is one-hot encoded by MLP indicator columns (the token stream is its own), the
predicate's equal rows or columns are grouped into classes, and a pair's logit is ``G`` times
one product ``1 * 1`` where the predicate holds, 0 otherwise: every selected key's logit is
bit-identical, so the softmax is exactly uniform over the selection. ``&`` adds the factors'
dims; ``<bos>`` has its own dim: the fallback of aggregate and select_latest (its value row is
``default``), tied with the selection in selector_width (weight ``1/(w+1)``, decoded to w).
An ``==`` whose keys are the position plus a constant (RASP's ``Select(indices, f, EQ)``) read
by aggregate or select_latest selects one key at most: one head scoring the square of the
distance instead, no class per position (``gather.match_position``), where certified.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from torchwright_fx.analysis.facts import FactsCtx, NodeFacts, as_facts
from torchwright_fx.base import numerics
from torchwright_fx.base.errors import HeadTooSmall
from torchwright_fx.base.numerics import FALLBACK_GAP, MEAN_GAIN, WIDTH_GAIN
from torchwright_fx.capture.registry import (
    current_vocab,
    facts,
    intrinsic,
    lowering,
    resolve_callables,
    token_value,
)
from torchwright_fx.families import bit_select, counts, digits, gather, selection, selection_heads
from torchwright_fx.families.intrinsics import (
    as_column,
    moved_ranges,
    moved_ranges_of,
)
from torchwright_fx.families.selection import Leaf, Selector, bos_indicator
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import EXACT, INEXACT, ONCE, Interval
from torchwright_fx.lower.context import LowerCtx
from torchwright_fx.lower.stream import Stream, to_stream
from torchwright_fx.ops import attention

PREDICATES: dict[str, Callable[[float, float], bool]] = {
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
    ">": operator.gt, ">=": operator.ge,
    "true": lambda k, q: True, "false": lambda k, q: False,
}


# -- eager semantics -----------------------------------------------------------------------------
def _values_eager(v: torch.Tensor) -> torch.Tensor:
    """A stream's values: the token stream's codes, else the single column."""
    if v.dim() == 2 and v.shape[1] == len(current_vocab()) and v.shape[1] > 1:
        return v.argmax(dim=1).to(torch.float32)
    v = as_column(v)
    if v.shape[1] != 1:
        raise ValueError(f"select's keys and queries must be one column (or the token stream), "
                         f"got width {v.shape[1]}")
    return v[:, 0].to(torch.float32)


def _predicate(predicate: str | Callable[[float, float], Any]) -> Callable[[float, float], bool]:
    if isinstance(predicate, str):
        if predicate not in PREDICATES:
            raise ValueError(f"unknown predicate {predicate!r}: use one of "
                             f"{', '.join(map(repr, PREDICATES))} or a function (key, query)")
        return PREDICATES[predicate]
    if not callable(predicate):
        raise TypeError(f"a predicate is a string or a function (key, query) -> bool, got "
                        f"{type(predicate).__name__}")
    return lambda k, q: bool(predicate(k, q))


def _causal_rows(sel: torch.Tensor, rows: int = 1024) -> Iterator[tuple[slice, torch.Tensor]]:
    """The causal selector a block of query rows at a time, so that what the eager readers
    derive from it (positions, counts) stays O(rows * n) in memory at 131072 positions."""
    if sel.dim() != 2 or sel.shape[0] != sel.shape[1] or sel.dtype != torch.bool:
        raise TypeError("expected a selector (from tw.select), got a tensor of shape "
                        f"{tuple(sel.shape)} and dtype {sel.dtype}")
    n = sel.shape[0]
    keys = torch.arange(n)
    for start in range(0, n, rows):
        at = slice(start, min(n, start + rows))
        mask = (keys[None, :] <= torch.arange(at.start, at.stop)[:, None]) & (keys[None, :] > 0)
        yield at, sel[at] & mask


def _lower_select(ctx: LowerCtx, keys: Any, queries: Any, predicate: Any) -> Selector:
    pred = _predicate(resolve_callables(predicate))
    if predicate in ("true", "false"):
        return Leaf((), (), lambda kv, qv: predicate == "true", str(predicate))
    k, q = (v if isinstance(v, Stream) else to_stream(v, 1) for v in (keys, queries))
    tokens = ctx.input_node in ctx.node.args[:2]
    if predicate == "==" and not tokens and (k.width > 1 or q.width > 1):
        return bit_select.bits_equal(ctx, k, q)
    if predicate == "==":  # many whole numbers: matched digit by digit
        by_digits = digits.digit_equality(ctx, k, q, selection.value_at_bos(ctx, 0, "keys"),
                                          selection.value_at_bos(ctx, 1, "queries"))
        if by_digits is not None:
            return by_digits
    leaf = Leaf((selection.side(ctx, k, "keys", 0),), (selection.side(ctx, q, "queries", 1),),
                lambda kv, qv: pred(kv[0], qv[0]), _describe(predicate),
                predicate if isinstance(predicate, str) else None)
    return gather.position_match(ctx, k, q, leaf) if predicate == "==" else leaf


@intrinsic(_lower_select)
def select(keys: torch.Tensor, queries: torch.Tensor,
           predicate: str | Callable[[float, float], Any]) -> torch.Tensor:
    """A selector: position i selects j (1 <= j <= i) where ``predicate(keys[j], queries[i])``.

    ``predicate`` is ``"=="``, ``"!="``, ``"<"``, ``"<="``, ``">"``, ``">="`` (key op query),
    ``"true"``, ``"false"``, or a function ``(key, query) -> bool`` of two numbers. Keys and
    queries are one-column streams with finitely many values (the token stream counts as its
    codes), or, for ``"=="``, two bit vectors of one width (columns of exact 0/1 values):
    position i selects j where every column agrees, matched bit by bit. Combine selectors
    with ``&``, ``|``, ``~``; read them with ``tw.aggregate``, ``tw.select_latest`` and
    ``tw.selector_width``.
    """
    pred = _predicate(predicate)
    if predicate == "==" and keys.dim() == 2 and queries.dim() == 2 and \
            min(keys.shape[1], queries.shape[1]) > 1:  # bit vectors (or two token streams)
        return bit_select.eager(keys, queries)
    k, q = _values_eager(keys), _values_eager(queries)
    ku, kidx = torch.unique(k, return_inverse=True)
    qu, qidx = torch.unique(q, return_inverse=True)
    table_ = torch.tensor([[pred(float(kv), float(qv)) for kv in ku] for qv in qu],
                          dtype=torch.bool).reshape(len(qu), len(ku))
    return table_[qidx][:, kidx]


def _describe(predicate: Any) -> str:
    return repr(predicate) if isinstance(predicate, str) else \
        getattr(resolve_callables(predicate), "__name__", "predicate")


def _values_column(v: torch.Tensor | float, n: int) -> torch.Tensor:
    """The values an aggregate reads, ``[n, width]``; a number is the same at every position."""
    if not isinstance(v, torch.Tensor):
        return torch.full((n, 1), float(v))
    return as_column(v).to(torch.float32)


def _default_value(default: str | float) -> float:
    return token_value(default)


@intrinsic()  # lowered by _lower_aggregate below
def aggregate(sel: torch.Tensor, v: torch.Tensor, default: str | float = 0.0) -> torch.Tensor:
    """The mean of ``v`` over the positions ``sel`` selects (1 <= j <= i); ``default`` where
    none is selected. With one selected position (or equal values) it is that value."""
    n = sel.shape[0]
    v = _values_column(v, n)
    out, counts = torch.zeros(n, v.shape[1]), torch.zeros(n, 1)
    for at, m in _causal_rows(sel):
        m = m.to(torch.float32)
        counts[at] = m.sum(dim=1, keepdim=True)
        out[at] = (m @ v) / counts[at].clamp(min=1)
    return torch.where(counts > 0, out, torch.full_like(out, _default_value(default)))


@intrinsic()  # lowered by _lower_latest below
def select_latest(sel: torch.Tensor, v: torch.Tensor, default: str | float = 0.0
                  ) -> torch.Tensor:
    """``v`` at the most recent position ``sel`` selects (1 <= j <= i); ``default`` where none
    is selected."""
    n = sel.shape[0]
    v = _values_column(v, n)
    last = torch.full((n,), -1, dtype=torch.long)
    for at, m in _causal_rows(sel):  # the latest selected key: the largest index, -1 if none
        last[at] = torch.where(m, torch.arange(n)[None, :], -1).max(dim=1).values
    out = v[last.clamp(min=0)]
    return torch.where((last >= 0)[:, None], out, torch.full_like(out, _default_value(default)))


@intrinsic()  # lowered by _lower_width below
def selector_width(sel: torch.Tensor) -> torch.Tensor:
    """The number of positions ``sel`` selects (1 <= j <= i), ``[seq, 1]``."""
    width = torch.zeros(sel.shape[0], 1)
    for at, m in _causal_rows(sel):
        width[at] = m.sum(dim=1, keepdim=True).to(torch.float32)
    return width


def heads(ctx: LowerCtx, q: list[Lin], k: list[Lin], values: list[Lin],
           ranges: list[Interval]) -> list[Lin]:
    return attention.heads(ctx.prog, ctx.geom, q, k, values, ranges, ctx.name, ctx.source)


def _with_default(ctx: LowerCtx, v: Stream, default: float) -> list[Lin]:
    """v with its <bos> row replaced by ``default`` (the fallback the head reads)."""
    at_bos = selection.row_at_bos(ctx, v, 1, "v")
    bos = bos_indicator(ctx)
    return [c + bos * (default - b) for c, b in zip(v.cols, at_bos, strict=True)]


def _matched(ctx: LowerCtx, sel: Selector, v: Stream, default: float) -> Stream | None:
    """``select(position + c, q, "==")`` read by one head, no class per position
    (``gather.match_position``); None where ``sel`` is not that or the head is not certified."""
    if not isinstance(sel, gather.PositionMatch):
        return None
    ranges = moved_ranges_of(ctx, [r.hull(Interval.point(default)) for r in v.ranges])
    return gather.match_position(ctx, sel, _with_default(ctx, v, default), ranges, v.is_bool)


def _check_selector(ctx: LowerCtx, sel: Any) -> Selector:
    if not isinstance(sel, Selector):
        raise ctx.error("expected a selector from tw.select", "build it with "
                        "tw.select(keys, queries, predicate)")
    return sel


def _const_stream(value: float, width: int) -> Stream:
    return Stream.const([value] * width)


@lowering(aggregate)
def _lower_aggregate(ctx: LowerCtx, sel: Any, v: Any, default: Any = 0.0) -> Stream:
    sel = _check_selector(ctx, sel)
    default = _default_value(default)
    v = v if isinstance(v, Stream) else to_stream(v, 1)
    matched = _matched(ctx, sel, v, default)  # at most one key: its value, no mean
    if matched is not None:
        return matched
    feats = selection.content(ctx, sel, "aggregate")
    if feats is None:
        return _const_stream(default, v.width)
    m = len(feats)
    q, k = selection_heads.head_qk(ctx, feats, MEAN_GAIN, [m * MEAN_GAIN - FALLBACK_GAP], False,
                             "aggregate")
    n = ctx.geom.max_seq_len
    # the denominator is the selection's count: shared by every aggregate of this selector
    # (the same object for the same tw.select node); a default that is not a whole number is
    # not k/n with that count, so such an aggregate keeps a group of its own
    owner = id(sel) if float(default).is_integer() else ctx.name
    group = hash(("aggregate", owner)) or 1
    if counts.applies(ctx, v):  # long contexts: exact counts, not one rounded sum per row
        try:
            return _counted_aggregate(ctx, sel, v, default, group)
        except HeadTooSmall:  # sel & [v >= p] takes one more dim than the head holds: the
            pass  # averaging head below (its unused count heads are dead code)
    ranges = [Interval(min(r.lo, default), max(r.hi, default), max_den=n if r.integral else 0,
                       den_group=group,
                       noise=r.noise + numerics.mean_noise(n) * max(r.magnitude, abs(default)),
                       rounding=ONCE if r.integral and r.rounding == EXACT else INEXACT)
              for r in v.ranges]
    if all(r.integral and r.lo == r.hi for r in v.ranges):  # a constant: the mean is itself
        ranges = [dataclasses.replace(r, max_den=0) for r in ranges]
    return Stream(heads(ctx, q, k, _with_default(ctx, v, default), ranges), ranges)


def _every_query() -> selection.Side:
    """A query side of one value whose indicator is the constant 1: with it, a factor on the
    keys alone (selector_width(sel & [v >= p]))."""
    return selection.Side((0.0,), 0.0, "every query", (0.0,), tokens=(Lin.constant(1.0),))


def _at_least(p: float) -> Callable[[Sequence[float], Sequence[float]], bool]:
    return lambda kv, qv: kv[0] >= p


def _counted_aggregate(ctx: LowerCtx, sel: Selector, v: Stream, default: float,
                       group: int) -> Stream:
    """aggregate from exact counts (families/counts.py): m = selector_width(sel) and, per value
    step p_t of v, K_t = selector_width(sel & [v_j >= p_t]); the mean is
    p_0 + sum_t (p_t - p_{t-1}) K_t / m, and ``default`` where m is 0."""
    inverse = _width_inverse(ctx, sel)
    assert inverse is not None
    m = counts.exact_count(ctx, inverse, "rows")
    recip, recip_error = counts.reciprocal(ctx, m)
    cols, ranges = [], []
    at_bos = selection.row_at_bos(ctx, v, 1, "v")  # the selection's keys drop that row
    for c, (col, rng) in enumerate(zip(v.cols, v.ranges, strict=True)):
        side = selection.stream_side(ctx, col, rng, at_bos[c], f"v[{c}]", "values")
        points = side.values

        def at_least(t: int, c: int = c, side: selection.Side = side) -> Lin | None:
            leaf = Leaf((side,), (_every_query(),), _at_least(side.values[t]),
                        f"v >= {side.values[t]:g}")
            k_inverse = _width_inverse(ctx, sel & leaf)  # None: no selected value reaches it
            return None if k_inverse is None else \
                counts.exact_count(ctx, k_inverse, f"count{c}_{t}")

        total = counts.step_sum(points, at_least)
        mean, out = counts.quotient(ctx, points, total, recip, recip_error, (m, default),
                                    rng, group)
        cols.append(mean)
        ranges.append(out)
    return Stream(cols, ranges)


@lowering(select_latest)
def _lower_latest(ctx: LowerCtx, sel: Any, v: Any, default: Any = 0.0) -> Stream:
    sel = _check_selector(ctx, sel)
    default = _default_value(default)
    v = v if isinstance(v, Stream) else to_stream(v, 1)
    matched = _matched(ctx, sel, v, default)
    if matched is not None:
        return matched
    feats = selection.content(ctx, sel, "select_latest")
    if feats is None:
        return _const_stream(default, v.width)
    ranges = moved_ranges_of(ctx, [r.hull(Interval.point(default)) for r in v.ranges])
    if ctx.prog.precision.half:  # recency from the exact position (ops/position_half.py)
        return Stream(selection_heads.latest_half(ctx, feats, _with_default(ctx, v, default),
                                            ranges), ranges, v.is_bool)
    m = len(feats)
    # m parts: every selected key carries m validity units, the latch's check at m
    selection_heads.check_recency(ctx, m, "select_latest")
    gain = ctx.geom.validity
    # <bos> ties with the selection in content (m dims of the same product): the lobe then
    # puts every selected j >= 1 above it
    q, k = selection_heads.head_qk(ctx, feats, gain, [gain] * m, True, "select_latest")
    if not feats:  # "true": every position but <bos> is valid
        q[ctx.geom.rotary] = Lin.constant(gain)
        k[ctx.geom.rotary] = 1.0 - bos_indicator(ctx)
    return Stream(heads(ctx, q, k, _with_default(ctx, v, default), ranges), ranges, v.is_bool)


def _width_inverse(ctx: LowerCtx, sel: Selector) -> Lin | None:
    """fl(1/(w+1)), w the number of positions ``sel`` selects: <bos> ties with the selection
    (m dims of the same G * 1 product); None when it never selects."""
    feats = selection.content(ctx, sel, "selector_width")
    if feats is None:
        return None
    m = len(feats)
    q, k = selection_heads.head_qk(ctx, feats, WIDTH_GAIN, [WIDTH_GAIN] * max(m, 1), False,
                             "selector_width")
    if m == 0:  # "true": every key (and <bos>) at the same logit
        q[ctx.geom.rotary] = Lin()
    (inverse,) = heads(ctx, q, k, [bos_indicator(ctx)], [Interval(0.0, 1.0)])
    return inverse


@lowering(selector_width)
def _lower_width(ctx: LowerCtx, sel: Any) -> Stream:
    from torchwright_fx.ops.position import decode_count, noise

    sel = _check_selector(ctx, sel)
    if ctx.prog.precision.half:  # a search of exact comparisons (ops/count_half.py)
        feats = selection.content(ctx, sel, "selector_width")
        if feats is None:
            return _const_stream(0.0, 1)
        return Stream([selection_heads.width_half(ctx, feats)],
                      [Interval(0, ctx.geom.max_seq_len - 1, True)])
    inverse = _width_inverse(ctx, sel)
    if inverse is None:
        return _const_stream(0.0, 1)
    n = ctx.geom.max_seq_len
    if n > numerics.EXACT_POSITION_LENGTH:  # decoded and snapped, as the position is there
        return Stream([counts.exact_count(ctx, inverse, "width")], [Interval(0, n - 1, True)])
    width = decode_count(ctx.prog, ctx.geom, inverse, f"{ctx.name}.width", ctx.source)
    return Stream([width], [Interval(0, n - 1, True, noise=noise(ctx.prog.machine, n))])


__all__ = ["aggregate", "select", "select_latest", "selector_width"]


# -- facts ---------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class SelectorFacts:
    """A selector in the analysis: the values each key and query side can take (None: not
    known to be few) and the predicate over them, combined by ``&``, ``|`` and ``~`` as
    selectors are while lowering (each combination a new selector: an aggregate's den_group
    is its selector's)."""

    keys: tuple[tuple[float, ...] | None, ...]
    queries: tuple[tuple[float, ...] | None, ...]
    holds: Callable[[Sequence[float], Sequence[float]], bool]
    op: str = ""  # "", "&", "|", "~"
    parts: tuple[SelectorFacts, ...] = ()
    tw_facts = True

    def never(self) -> bool:
        """It selects nothing, whatever the values (``selection.content`` is None)."""
        if self.op == "&":
            return any(p.never() for p in self.parts)
        sides = [*self.keys, *self.queries]
        if any(v is None for v in sides):
            return False
        keys = list(itertools.product(*[v or () for v in self.keys]))
        queries = list(itertools.product(*[v or () for v in self.queries]))
        if max(len(keys), len(queries)) > numerics.MAX_SELECT_TUPLES:
            return False
        try:
            return not any(self.holds(kv, qv) for kv in keys for qv in queries)
        except Exception:  # a user predicate that fails on some value: it may hold
            return False

    def _combine(self, op: str, other: SelectorFacts | None) -> SelectorFacts:
        if other is None:
            return SelectorFacts(self.keys, self.queries,
                                 lambda kv, qv: not self.holds(kv, qv), op, (self,))
        ka, qa = len(self.keys), len(self.queries)

        def holds(kv: Sequence[float], qv: Sequence[float]) -> bool:
            first, second = self.holds(kv[:ka], qv[:qa]), other.holds(kv[ka:], qv[qa:])
            return (first and second) if op == "&" else (first or second)

        return SelectorFacts(self.keys + other.keys, self.queries + other.queries, holds, op,
                             (self, other))

    def __and__(self, other: SelectorFacts) -> SelectorFacts:
        return self._combine("&", other)

    def __or__(self, other: SelectorFacts) -> SelectorFacts:
        return self._combine("|", other)

    def __invert__(self) -> SelectorFacts:
        return self._combine("~", None)


def _side_values(ctx: FactsCtx, s: Any, arg_index: int) -> tuple[float, ...] | None:
    """The values a key or query side takes as the reference sees them (``selection.side``)."""
    args = ctx.node.args
    if arg_index < len(args) and args[arg_index] is ctx.input_node:
        return tuple(float(i) for i in range(len(ctx.vocab)))
    x = s if isinstance(s, NodeFacts) else as_facts(s, 1)
    if x.width != 1:  # a bit vector (bit_select): its values are tuples, not listed here
        return None
    r = x.ranges[0]
    g = ctx.grid(x.form(0), r) if x.width == 1 and r.finite else None
    if g is None or g.count(r) > numerics.MAX_SELECT_VALUES:
        return None
    return tuple(float(np.float32(p)) for p in g.points(r))


@facts(select)
def _select_facts(ctx: FactsCtx, keys: Any, queries: Any, predicate: Any) -> SelectorFacts:
    if predicate in ("true", "false"):
        return SelectorFacts((), (), lambda kv, qv: predicate == "true")
    pred = _predicate(resolve_callables(predicate))
    return SelectorFacts((_side_values(ctx, keys, 0),), (_side_values(ctx, queries, 1),),
                         lambda kv, qv: pred(kv[0], qv[0]))


def _selector_facts(ctx: FactsCtx, sel: Any) -> SelectorFacts:
    if not isinstance(sel, SelectorFacts):
        raise ctx.error("expected a selector from tw.select")
    return sel


@facts(aggregate)
def _aggregate_facts(ctx: FactsCtx, sel: Any, v: Any, default: Any = 0.0) -> NodeFacts:
    """The mean of the selected values, or ``default`` (``_lower_aggregate``): k/n with the
    selection's count n, shared by the aggregates of one selector."""
    sel = _selector_facts(ctx, sel)
    default = _default_value(default)
    x = v if isinstance(v, NodeFacts) else as_facts(v, 1)
    if sel.never():
        return NodeFacts.const([default] * x.width)
    n = ctx.max_seq_len
    owner = id(sel) if float(default).is_integer() else ctx.name
    group = hash(("aggregate", owner)) or 1
    ranges = [Interval(min(r.lo, default), max(r.hi, default), max_den=n if r.integral else 0,
                       den_group=group,
                       rounding=ONCE if r.integral and r.rounding == EXACT else INEXACT)
              for r in x.ranges]
    if all(r.integral and r.lo == r.hi for r in x.ranges):  # a constant: the mean is itself
        ranges = [dataclasses.replace(r, max_den=0) for r in ranges]
    return NodeFacts(ranges)


@facts(select_latest)
def _select_latest_facts(ctx: FactsCtx, sel: Any, v: Any, default: Any = 0.0) -> NodeFacts:
    x = v if isinstance(v, NodeFacts) else as_facts(v, 1)
    if _selector_facts(ctx, sel).never():
        return NodeFacts.const([_default_value(default)] * x.width)
    at = Interval.point(_default_value(default))
    return NodeFacts(moved_ranges(ctx.name, [r.hull(at) for r in x.ranges]), x.is_bool)


@facts(selector_width)
def _selector_width_facts(ctx: FactsCtx, sel: Any) -> NodeFacts:
    if _selector_facts(ctx, sel).never():
        return NodeFacts.const([0.0])
    return NodeFacts([Interval(0, ctx.max_seq_len - 1, True)])
