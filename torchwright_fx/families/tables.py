"""Tables: ``tw.lookup`` (a value -> a value, by a dict), ``tw.lookup2`` (a pair of whole
numbers -> a value), digit conversions (``tw.digits_to_number``, ``tw.number_to_digits``) and
vector equality (``tw.equals``). Each is an eager reference plus its lowering: staircases and
per-token tables built in ``ops/ffn/``, on the lattice facts of ``ir/ranges.py``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import torch
import torch.fx

from torchwright_fx.analysis.facts import FactsCtx, NodeFacts, as_facts, const_values
from torchwright_fx.capture.registry import current_vocab, facts, intrinsic, token_value
from torchwright_fx.families import rounding, wide
from torchwright_fx.families.intrinsics import as_column
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import BOOL, Interval, read_float
from torchwright_fx.lower import rules
from torchwright_fx.lower.context import LowerCtx
from torchwright_fx.lower.stream import Stream, const_vector, to_stream
from torchwright_fx.ops import ffn
from torchwright_fx.ops.ffn import Pwl
from torchwright_fx.ops.ties import refuse_ties, refuse_unheld_constant


# -- lookup ------------------------------------------------------------------------------------
def _lower_lookup(ctx: LowerCtx, v: Stream, table: dict, default: str | float = 0.0) -> Stream:
    fallback = token_value(default)
    if ctx.node.args[0] is _input_node(ctx):  # the token stream itself: a per-token table
        row = [fallback] * len(ctx.vocab)
        for key, value in table.items():
            row[ctx.vocab[key]] = token_value(value)
        col = sum((c * row[i] for i, c in enumerate(v.cols)), Lin())
        return Stream([col], [_hull(row)])
    if v.width != 1:
        raise ctx.error(f"lookup keys must be one column, got width {v.width}",
                        "look up one column, tw.lookup(v[:, j], ...), or two with "
                        "tw.lookup2(v[:, 0], v[:, 1], {(i, j): ...})")
    entries = {int(k): token_value(val) for k, val in table.items()}
    key = v.ranges[0]
    if wide.is_wide(ctx, v.cols[0], key):  # half: by the key's places
        out = wide.table(ctx, v.cols[0], key, entries, fallback)
        if out is not None:
            return out
    try:
        f = ffn.lookup_function(key, entries, fallback)
    except ffn.RangeError as e:
        raise ctx.error(str(e) + (rules.noise_origin(ctx, 0) if e.noisy else ""),
                        "" if e.noisy else "declare a key that is whole (a mean times its "
                        "count) with tw.claim(v, lo, hi, integral=True), or round it first: "
                        "tw.lookup(torch.round(v), ...)") from None
    lo, hi = math.ceil(key.lo), math.floor(key.hi)
    reached = [entries.get(k, fallback) for k in range(lo, hi + 1)] or [fallback]
    # The whole value in the bank (the lanes expanded from the middle of the key range stay
    # small, and so do the partial sums of whoever reads the column).
    bank = ctx.bank(1)
    ffn.emit_into_bank(bank, 0, v.cols[0], key, f)
    grid = ffn.Grid(Fraction(1), Fraction(0))
    signals = ctx.prog.signals
    exact = ffn.exact_lanes(f, v.cols[0], key, lambda sid: signals[sid].range,
                            ctx.prog.embed_tables)
    rng = _hull(reached).with_noise(ffn.pwl_noise(f, key, grid, ctx.prog.machine, exact))
    return Stream(ctx.finish(bank, [rng]), [rng])


def _input_node(ctx: LowerCtx) -> torch.fx.Node:
    return ctx.input_node


def _hull(values: Sequence[float]) -> Interval:
    return Interval.of_values(list(values))


@intrinsic(_lower_lookup)
def lookup(v: torch.Tensor, table: dict, default: str | float = 0.0) -> torch.Tensor:
    """``table[key]`` at each position, ``default`` for keys not in the table.

    On the token stream ``x`` the keys are tokens (a per-token table, free in the embedding);
    on an integer-valued ``[seq, 1]`` stream the keys are integers. Values may be numbers or
    token names (their codes).
    """
    fallback = token_value(default)
    if v.dim() == 2 and v.shape[1] == len(current_vocab()) and v.shape[1] > 1:
        vocab = current_vocab()
        row = torch.full((len(vocab),), fallback)
        for key, value in table.items():
            row[vocab[key]] = token_value(value)
        return (v @ row)[:, None]
    keys = as_column(v)[:, 0].round().long().tolist()
    values = {int(k): token_value(val) for k, val in table.items()}
    return torch.tensor([values.get(k, fallback) for k in keys])[:, None]


# -- 2-D lookup -----------------------------------------------------------------------------------
def _table2(table: Any) -> dict[tuple[int, int], float]:
    if isinstance(table, dict):
        return {(int(k[0]), int(k[1])): token_value(val) for k, val in table.items()}
    rows = table.tolist() if isinstance(table, torch.Tensor) else table
    return {(i, j): token_value(val) for i, row in enumerate(rows) for j, val in enumerate(row)}


def _lower_lookup2(ctx: LowerCtx, a: Stream, b: Stream, table2: Any,
                   default: str | float = 0.0) -> Stream:
    if a.width != 1 or b.width != 1:
        raise ctx.error("lookup2 keys must be streams of width 1")
    ra, rb = a.ranges[0], b.ranges[0]
    for name, r in (("first", ra), ("second", rb)):
        if not (r.integral and r.finite):
            raise ctx.error(f"lookup2's {name} key needs a finite integer range, got "
                            f"[{r.lo}, {r.hi}]", "declare it with tw.claim(v, lo, hi, "
                            "integral=True)")
    lo_a, lo_b = math.ceil(ra.lo), math.ceil(rb.lo)
    n_a, n_b = math.floor(ra.hi) - lo_a + 1, math.floor(rb.hi) - lo_b + 1
    entries = _table2(table2)
    fallback = token_value(default)
    # The two keys as one integer key: exact (integer arithmetic below 2**24).
    key = (a.cols[0] - lo_a) * float(n_b) + (b.cols[0] - lo_b)
    flat = {i * n_b + j: entries.get((lo_a + i, lo_b + j), fallback)
            for i in range(n_a) for j in range(n_b)}
    key_rng = Interval(0, n_a * n_b - 1, True)
    if n_a * n_b > 4096:
        raise ctx.error(f"lookup2 over {n_a} x {n_b} keys is too large (over 4096 entries)",
                        "narrow the key ranges with tw.claim")
    f = ffn.lookup_pwl(0, n_a * n_b - 1, flat, fallback)
    values = list(flat.values())
    rng = Interval(min(values), max(values), all(float(v).is_integer() for v in values))
    return rules.pwl_stream(ctx, [key], [key_rng], [f], [rng])


@intrinsic(_lower_lookup2)
def lookup2(a: torch.Tensor, b: torch.Tensor, table: Any, default: str | float = 0.0
            ) -> torch.Tensor:
    """``table[(a, b)]`` at each position for two small integer streams, ``default`` for
    missing keys. ``table`` is a dict ``{(i, j): value}`` or a 2-D list/tensor indexed from 0;
    values may be numbers or token names (their codes)."""
    entries = _table2(table)
    fallback = token_value(default)
    ka = a.reshape(a.shape[0], -1)[:, 0].round().long().tolist()
    kb = b.reshape(b.shape[0], -1)[:, 0].round().long().tolist()
    return torch.tensor([entries.get((i, j), fallback) for i, j in zip(ka, kb, strict=True)]
                        )[:, None]


# -- digits ---------------------------------------------------------------------------------------
def _digit_columns(digits: Any) -> list[Any]:
    if isinstance(digits, (list, tuple)):
        return list(digits)
    return [digits[:, k] for k in range(digits.shape[-1])]


def _lower_digits_to_number(ctx: LowerCtx, digits: Any, base: int = 10) -> Stream:
    parts: list[Stream] = []
    for d in _digit_columns(digits) if isinstance(digits, (list, tuple)) else [digits]:
        s = to_stream(d, 1) if not isinstance(d, Stream) else d
        parts += [Stream([c], [r]) for c, r in zip(s.cols, s.ranges, strict=True)]
    n = len(parts)
    total, rng = Lin(), Interval.point(0.0)
    for k, p in enumerate(parts):
        weight = float(base ** (n - 1 - k))
        total, rng = total + p.cols[0] * weight, rng + p.ranges[0].scale(weight)
    return Stream([total], [rng])


@intrinsic(_lower_digits_to_number)
def digits_to_number(digits: Any, base: int = 10) -> torch.Tensor:
    """sum_k digits[k] * base**(n-1-k): most significant digit first. ``digits`` is a list of
    ``[seq, 1]`` streams or one ``[seq, n]`` stream. Linear: free."""
    cols = [c.reshape(c.shape[0], -1) for c in _digit_columns(digits)]
    n = len(cols)
    return sum((c * float(base ** (n - 1 - k)) for k, c in enumerate(cols)),
               torch.zeros_like(cols[0]))


def _lower_number_to_digits(ctx: LowerCtx, v: Stream, n_digits: int, base: int = 10) -> Stream:
    if v.width != 1:
        raise ctx.error("number_to_digits takes a stream of width 1")
    r = v.ranges[0]
    with rules.user_errors(ctx):
        ffn.need_finite(r, "number_to_digits")
    if r.lo < 0:
        bos = ctx.bos_row(0)
        at_bos = float(bos.reshape(-1)[0]) if bos is not None else 0.0
        if at_bos < 0:
            raise ctx.error(f"number_to_digits needs a non-negative value, and this one is "
                            f"{at_bos:g} at <bos> (position 0; its range is [{r.lo:g}, "
                            f"{r.hi:g}])", "clamp it first, torch.clamp(v, min=0) (a claim "
                            "would fail at <bos>), or give it a default there with "
                            "torch.where(tw.is_token(x, '<bos>'), 0, v)")
        raise ctx.error(f"number_to_digits needs a non-negative range, got [{r.lo:g}, {r.hi:g}]",
                        "clamp it (torch.clamp(v, min=0)) or declare it with "
                        "tw.claim(v, 0, hi, integral=True)")
    if wide.is_wide(ctx, v.cols[0], r):  # half: place by place, with carries
        out = wide.digits_of(ctx, v.cols[0], r, n_digits, base)
        if out is not None:
            return out
    wraps = r.hi >= base ** n_digits  # the top digit needs its own modulus
    powers = [float(base ** k) for k in range(n_digits + (1 if wraps else 0))]
    scaled = Stream([v.cols[0].divided(p) for p in powers], [r.divided(p) for p in powers])
    floors = rounding.rounded(ctx, scaled, "floor")  # f_k = floor(v / base**k)
    digits, ranges = [], []
    for k in range(n_digits):
        nxt = floors.cols[k + 1] if k + 1 < len(powers) else Lin()
        digits.append(floors.cols[k] - nxt * float(base))
        top = k == n_digits - 1 and not wraps
        ranges.append(Interval(0, min(base - 1, math.floor(r.hi / powers[k])) if top
                               else base - 1, True))
    return Stream(digits[::-1], ranges[::-1])


@intrinsic(_lower_number_to_digits)
def number_to_digits(v: torch.Tensor, n_digits: int, base: int = 10) -> torch.Tensor:
    """The ``n_digits`` lowest base-``base`` digits of ``floor(v)`` (v >= 0 over a declared
    range), most significant first: ``[seq, n_digits]``, digit k = floor(v / base**(n-1-k))
    mod base. Compiled by floor staircases: exact on integer (or grid) valued v."""
    v = v.reshape(v.shape[0], -1)[:, :1]
    cols = [torch.remainder(torch.floor(v / float(base ** (n_digits - 1 - k))), base)
            for k in range(n_digits)]
    return torch.cat(cols, dim=-1)


# -- vector equality ------------------------------------------------------------------------------
def _mismatch(ctx: LowerCtx, c: Lin, r: Interval, t: float
              ) -> tuple[Lin, Interval, bool] | None:
    """An integer-valued form m with m == 0 exactly where c == t (in lattice steps), its
    range, and whether |m| is linear (t at an end of c's range). None if c never equals t."""
    g = rules.grid(ctx, c, r)
    if g is None:
        raise ffn.RangeError("tw.equals needs integer-valued (or grid-valued) streams; "
                             "compare the whole numbers they are computed from, or declare "
                             "values that are whole with tw.claim(v, lo, hi, integral=True)")
    tq = read_float(t)  # as the lattice reads its points
    if tq is None or (tq - g.offset) % g.spacing != 0 or not r.lo <= t <= r.hi:
        return None
    k = 1.0 / float(g.spacing)
    span = Interval(round((r.lo - t) * k), round((r.hi - t) * k), True)
    if span.lo == 0:
        return (c - t) * k, span, True
    if span.hi == 0:
        return (c - t) * -k, -span, True
    return (c - t) * k, span, False


def _lower_equals(ctx: LowerCtx, v: Stream, target: Any) -> Stream:
    if isinstance(target, (list, tuple)):  # fx hands lists over as immutable_list
        target = torch.tensor([float(t) for t in target], dtype=torch.float64)
    ts = const_vector(target, v.width)
    count, count_hi = Lin(), 0.0  # the number of lattice steps away from target, summed
    signed: list[tuple[Lin, Interval]] = []
    with rules.user_errors(ctx):
        for c, r, t in zip(v.cols, v.ranges, ts, strict=True):
            refuse_ties(r, rules.value_set(ctx, c, r), [read_float(t)],
                        "tw.equals")
            refuse_unheld_constant(t, r, rules.value_set(ctx, c, r), "tw.equals")
            found = _mismatch(ctx, c, r, t)
            if found is None:
                return Stream.const([0.0], True)
            m, span, linear = found
            if linear:
                count, count_hi = count + m, count_hi + span.hi
            else:
                signed.append((m, span))
    if signed:  # |m| = -m + 2 relu(m): one lane per such column, in a first stage
        spans = [Interval(0.0, sp.magnitude, True) for _, sp in signed]
        parts = rules.pwl_stream(ctx, [m for m, _ in signed], [sp for _, sp in signed],
                                 [ffn.abs_pwl()] * len(signed), spans)
        count = count + sum(parts.cols, Lin())
        count_hi += sum(sp.hi for sp in spans)
    # [count == 0] = relu(1 - count) = 1 - count + relu(count - 1): exact on integer counts.
    eq = Pwl(const=1.0, slope=-1.0)
    eq.hinge(1.0, 1.0)
    return rules.pwl_stream(ctx, [count], [Interval(0.0, count_hi, True)], [eq], [BOOL],
                            is_bool=True)


@intrinsic(_lower_equals)
def equals(v: torch.Tensor, target: Any) -> torch.Tensor:
    """1 where every column of ``v`` equals the constant vector ``target`` (else 0),
    ``[seq, 1]``. Needs integer-valued columns; one MLP sublayer when each column is 0/1 or
    ``target`` sits at an end of its range, two otherwise."""
    t = torch.as_tensor(target, dtype=v.dtype).reshape(1, -1)
    return (v.reshape(v.shape[0], -1) == t).all(-1, keepdim=True).to(v.dtype)


__all__ = ["digits_to_number", "equals", "lookup", "lookup2", "number_to_digits"]


# -- facts ---------------------------------------------------------------------------------------
@facts(lookup)
def _lookup_facts(ctx: FactsCtx, v: NodeFacts, table: dict,
                  default: str | float = 0.0) -> NodeFacts:
    """The entries the key can reach, and the default (``_lower_lookup``)."""
    fallback = token_value(default)
    if ctx.node.args[0] is ctx.input_node:  # a per-token table: linear in the one-hot
        row = [fallback] * len(ctx.vocab)
        for key, value in table.items():
            row[ctx.vocab[key]] = token_value(value)
        form = None if v.forms is None else sum((c * row[i] for i, c in enumerate(v.forms)),
                                                Lin())
        return NodeFacts([_hull(row)], False, None if form is None else [form])
    if v.width != 1:
        raise ctx.error(f"lookup keys must be one column, got width {v.width}")
    entries = {int(k): token_value(val) for k, val in table.items()}
    key = v.ranges[0]
    if not key.finite:
        return NodeFacts([_hull([*entries.values(), fallback])])
    lo, hi = math.ceil(key.lo), math.floor(key.hi)
    return NodeFacts([_hull([entries.get(k, fallback) for k in range(lo, hi + 1)]
                            or [fallback])])


@facts(lookup2)
def _lookup2_facts(ctx: FactsCtx, a: NodeFacts, b: NodeFacts, table2: Any,
                   default: str | float = 0.0) -> NodeFacts:
    if a.width != 1 or b.width != 1:
        raise ctx.error("lookup2 keys must be streams of width 1")
    ra, rb = a.ranges[0], b.ranges[0]
    entries, fallback = _table2(table2), token_value(default)
    values = [*entries.values(), fallback]  # keys of unknown or too wide ranges: any entry
    if ra.integral and ra.finite and rb.integral and rb.finite:
        lo_a, lo_b = math.ceil(ra.lo), math.ceil(rb.lo)
        n_a, n_b = math.floor(ra.hi) - lo_a + 1, math.floor(rb.hi) - lo_b + 1
        if n_a * n_b <= 4096:
            values = [entries.get((lo_a + i, lo_b + j), fallback) for i in range(n_a)
                      for j in range(n_b)]
    return NodeFacts([Interval(min(values), max(values),
                               all(float(v).is_integer() for v in values))])


@facts(digits_to_number)
def _digits_to_number_facts(ctx: FactsCtx, digits: Any, base: int = 10) -> NodeFacts:
    parts = []
    for d in _digit_columns(digits) if isinstance(digits, (list, tuple)) else [digits]:
        s = as_facts(d, 1) if not isinstance(d, NodeFacts) else d
        parts += [s.columns([i]) for i in range(s.width)]
    n = len(parts)
    form: Lin | None = Lin()
    rng = Interval.point(0.0)
    for k, p in enumerate(parts):
        weight = float(base ** (n - 1 - k))
        rng = rng + p.ranges[0].scale(weight)
        form = None if form is None or p.forms is None else form + p.forms[0] * weight
    return NodeFacts([rng], False, None if form is None else [form])


@facts(number_to_digits)
def _number_to_digits_facts(ctx: FactsCtx, v: NodeFacts, n_digits: int,
                            base: int = 10) -> NodeFacts:
    if v.width != 1:
        raise ctx.error("number_to_digits takes a stream of width 1")
    r = v.ranges[0]
    wraps = not r.finite or r.lo < 0 or r.hi >= base ** n_digits  # floor(v) mod base
    ranges = [Interval(0, min(base - 1, math.floor(r.hi / float(base ** k)))
                       if k == n_digits - 1 and not wraps else base - 1, True)
              for k in range(n_digits)]
    return NodeFacts(ranges[::-1])


@facts(equals)
def _equals_facts(ctx: FactsCtx, v: NodeFacts, target: Any) -> NodeFacts:
    """0/1; the constant 0 where a column never takes its target value (``_lower_equals``)."""
    if isinstance(target, (list, tuple)):
        target = torch.tensor([float(t) for t in target], dtype=torch.float64)
    for i, (r, t) in enumerate(zip(v.ranges, const_values(target, v.width), strict=True)):
        g = ctx.grid(v.form(i), r)
        if g is None:
            raise ctx.error("tw.equals needs integer-valued (or grid-valued) streams")
        tq = read_float(t)
        if (tq - g.offset) % g.spacing != 0 or not r.lo <= t <= r.hi:
            return NodeFacts.const([0.0], True)
    return NodeFacts([BOOL], True)

