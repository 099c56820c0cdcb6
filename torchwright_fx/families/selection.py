"""Selectors while lowering (``tw.select``): the values of keys and queries, their indicator
columns, and the content dims of a selection head (docs/attention.md, "Query-dependent
selection"). The intrinsics that read selectors live in ``families/selectors.py``.

A selector is a predicate over the values of some key streams and query streams. Its head
holds, per part (``&`` joins parts), one content dim per class of interchangeable key values
(or query values): the dot product of a pair is ``G * 1`` in exactly one dim when the part
holds and 0 in every dim otherwise, so every selected key's logit is the same fp32 value.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from torchwright_fx.base.numerics import (
    MAX_SELECT_PARTS,
    MAX_SELECT_TUPLES,
    MAX_SELECT_VALUES,
    SELECT_FEATURE_NOISE,
)
from torchwright_fx.families import logic
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import BOOL, ONCE, Interval, read_float
from torchwright_fx.lower import rules
from torchwright_fx.lower.context import LowerCtx
from torchwright_fx.lower.stream import Stream
from torchwright_fx.ops import ffn
from torchwright_fx.ops.ties import refuse_ties


def bos_indicator(ctx: LowerCtx) -> Lin:
    """1 at the <bos> position, else 0: the input's <bos> embedding column."""
    return ctx.bos_indicator()


def value_at_bos(ctx: LowerCtx, arg_index: int, what: str) -> float:
    row = ctx.bos_row(arg_index)
    if row is not None:
        return float(row.reshape(-1)[0])
    arg = ctx.node.args[arg_index] if arg_index < len(ctx.node.args) else None
    if isinstance(arg, (int, float, bool)):
        return float(arg)
    raise ctx.error(f"the value of select's {what} at <bos> is unknown")


def row_at_bos(ctx: LowerCtx, s: Stream, arg_index: int, kwarg: str) -> list[float]:
    """The values of stream argument ``s`` at <bos>, one per column (known at compile time)."""
    row = ctx.bos_row(arg_index, kwarg)
    if row is not None:
        values = [float(x) for x in row.reshape(-1)]
        return values * s.width if len(values) == 1 else values
    if all(not c.terms for c in s.cols):
        return [float(c.const) for c in s.cols]
    raise ctx.error(f"the value of `{kwarg}` at <bos> is unknown")


@dataclass(frozen=True)
class Side:
    """One key or query stream: its values, and 0/1 indicator columns of sets of them built on
    demand (one MLP staircase each, shared per stream; the token stream's are free)."""

    values: tuple[float, ...]  # as the reference sees them (fp32), for the predicate
    at_bos: float  # the stream's value at <bos>, known at compile time
    label: str
    points: tuple[float, ...] = ()  # the exact grid points behind ``values``, for the steps
    col: Lin | None = None  # the stream (None: the token stream, see ``tokens``)
    rng: Interval | None = None
    grid: ffn.Grid | None = None
    tokens: tuple[Lin, ...] = ()  # the token stream's one-hot columns

    def indicator(self, ctx: LowerCtx, members: Sequence[int]) -> Lin:
        """1 where the stream's value is one of ``values[m]`` for m in members, else 0."""
        if self.col is None:
            return sum((self.tokens[m] for m in members), Lin())
        assert self.rng is not None and self.grid is not None
        chosen = sorted(set(members))
        key = (tuple(sorted(self.col.terms.items())), self.col.const, self.points[0],
               len(self.points), tuple(chosen))
        cached = ctx.prog.shared.indicators.get(key)
        if cached is not None:
            return cached
        steps, m = [], 0
        while m < len(chosen):  # one up-step and one down-step per run of consecutive values
            end = m
            while end + 1 < len(chosen) and chosen[end + 1] == chosen[end] + 1:
                end += 1
            lo, hi = self.points[chosen[m]], self.points[chosen[end]]
            steps += [ffn.Step(lo, False, 1.0), ffn.Step(hi, True, -1.0)]
            m = end + 1
        with rules.user_errors(ctx):
            for step in steps:
                refuse_ties(self.rng, self.grid, [read_float(step.at)], "select")
            f = ffn.staircase(0.0, steps, self.grid)
            ffn.check_resolution(self.rng, self.grid, "select", logic.COMPARE_ADVICE)
            ffn.check_staircase(f, self.rng, self.grid, "select", logic.COMPARE_ADVICE)
        col = _whole_column(ctx, self.col, self.rng, f, self.label)
        ctx.prog.shared.indicators[key] = col
        return col

    def onehot(self, ctx: LowerCtx) -> list[Lin]:
        return [self.indicator(ctx, [m]) for m in range(len(self.values))]


class Selector:
    """A selector while lowering: a predicate over the values of some key and query streams.
    ``&``, ``|`` and ``~`` build new selectors (the lowering runs them like any Python op)."""

    keys: tuple[Side, ...]
    queries: tuple[Side, ...]
    tw_lowered = True  # the lowering hands it to the intrinsics that read it

    def holds(self, kv: Sequence[float], qv: Sequence[float]) -> bool:
        raise NotImplementedError

    def factors(self) -> list[Leaf] | None:
        """Selectors whose dims add up to this one's (an AND); None: never selects."""
        return [self.flat()]

    def flat(self) -> Leaf:
        return Leaf(self.keys, self.queries, self.holds, str(self))

    def __and__(self, other: object) -> Selector:
        return Combined("&", self, _selector(other))

    def __or__(self, other: object) -> Selector:
        return Combined("|", self, _selector(other))

    def __invert__(self) -> Selector:
        return Combined("~", self, None)

    __rand__ = __and__
    __ror__ = __or__


def _selector(x: object) -> Selector:
    if not isinstance(x, Selector):
        raise TypeError(f"selectors combine only with selectors (tw.select), not "
                        f"{type(x).__name__}")
    return x


@dataclass(frozen=True, eq=False)
class Leaf(Selector):
    keys: tuple[Side, ...]
    queries: tuple[Side, ...]
    pred: Callable[[Sequence[float], Sequence[float]], bool]
    label: str
    op: str | None = None  # the predicate's name when it is one of PREDICATES
    vetoes = False  # its dims are veto dims (bit_select.BitsEqual), not a part

    def veto(self, ctx: LowerCtx) -> Features:
        raise NotImplementedError

    def holds(self, kv: Sequence[float], qv: Sequence[float]) -> bool:
        return self.pred(kv, qv)

    def factors(self) -> list[Leaf] | None:
        if not self.keys and not self.queries:
            return [] if self.pred((), ()) else None
        return [self]

    def flat(self) -> Leaf:
        return self

    def __str__(self) -> str:
        return self.label


@dataclass(frozen=True, eq=False)
class Combined(Selector):
    op: str
    a: Selector
    b: Selector | None

    @property
    def keys(self) -> tuple[Side, ...]:  # type: ignore[override]
        return self.a.keys + (self.b.keys if self.b else ())

    @property
    def queries(self) -> tuple[Side, ...]:  # type: ignore[override]
        return self.a.queries + (self.b.queries if self.b else ())

    def holds(self, kv: Sequence[float], qv: Sequence[float]) -> bool:
        ka, qa = len(self.a.keys), len(self.a.queries)
        first = self.a.holds(kv[:ka], qv[:qa])
        if self.op == "~":
            return not first
        assert self.b is not None
        second = self.b.holds(kv[ka:], qv[qa:])
        return (first and second) if self.op == "&" else (first or second)

    def factors(self) -> list[Leaf] | None:
        if self.op == "&":
            assert self.b is not None
            fa, fb = self.a.factors(), self.b.factors()
            return None if fa is None or fb is None else fa + fb
        return [self.flat()]

    def __str__(self) -> str:
        return f"~({self.a})" if self.op == "~" else f"({self.a}) {self.op} ({self.b})"


def side(ctx: LowerCtx, s: Stream, what: str, arg_index: int) -> Side:
    """The values of a key or query stream and their one-hot columns (shared per stream)."""
    arg = ctx.node.args[arg_index] if arg_index < len(ctx.node.args) else None
    label = f"{what} ({getattr(arg, 'name', arg)})"
    if arg is ctx.input_node:  # the token stream: its own one-hot, values = token codes
        codes = tuple(float(i) for i in range(len(ctx.vocab)))
        return Side(codes, float(ctx.vocab.bos_id), label, codes, tokens=tuple(s.cols))
    if s.width != 1:
        raise ctx.error(f"select's {what} must be one column (or the token stream x itself), "
                        f"got width {s.width}", "select on tw.code(...) of a moved token stream")
    return stream_side(ctx, s.cols[0], s.ranges[0], value_at_bos(ctx, arg_index, what), label,
                       what)


def exact_column(ctx: LowerCtx, col: Lin, rng: Interval, what: str, tolerance: float = 0.0
                 ) -> tuple[Lin, Interval]:
    """A key or query column as the selection needs it: finite, reached by the reference
    with at most one rounding, and bit-exact (a noisy one is snapped onto its lattice, unless
    its noise is within ``tolerance``)."""
    if not rng.finite:
        raise ctx.error(f"select's {what} have no finite range",
                        "declare it with tw.claim(v, lo, hi, integral=True)")
    if rng.rounding > ONCE:
        raise ctx.error(f"select's {what} are computed inexactly by the reference (fp32 rounding "
                        "more than once), so the predicate could hold in exact arithmetic and "
                        "fail in the reference", "compute them from whole numbers, or round "
                        "them first (torch.round)")
    if ctx.prog.precision.half:  # every value is exact there: the certificate replays it
        return col, rng.with_noise(0.0)
    if rng.noise > tolerance:  # a decoded position or count: rounded onto its lattice first
        col, rng = rules.snapped(ctx, col, rng) or (col, rng)
    return col, rng


def stream_side(ctx: LowerCtx, col: Lin, rng: Interval, at_bos: float, label: str, what: str,
                tolerance: float = 0.0) -> Side:
    """The Side of one column (``side`` for an argument; ``digit_equality`` for a digit)."""
    col, rng = exact_column(ctx, col, rng, what, tolerance)
    grid = rules.grid(ctx, col, rng)
    if grid is None:
        raise ctx.error(f"select's {what} must take finitely many values (integers, token codes "
                        f"or a grid); these are real-valued in [{rng.lo:g}, {rng.hi:g}]",
                        "round them (torch.round) or declare tw.claim(v, lo, hi, integral=True)")
    points = grid.points(rng)
    if len(points) > MAX_SELECT_VALUES:
        raise ctx.error(f"select's {what} take {len(points)} values, more than the "
                        f"{MAX_SELECT_VALUES} a selection head encodes",
                        "narrow the range with tw.claim or torch.clamp; to match many whole "
                        "numbers with ==, match their digits in one selection: "
                        "tw.select(k % 16, q % 16, '==') & tw.select(k // 16 % 16, q // 16 % 16, "
                        "'==') & tw.select(k // 256, q // 256, '==') (up to 4096 values at "
                        "d_head=64); to move values by position use tw.shift or tw.gather")
    # the predicate sees each value as the reference does: the exact point rounded once to
    # fp32 (0.4 is 0.4000000059604645 there), so `lambda k, q: k == 0.4` decides alike
    seen = tuple(float(np.float32(p)) for p in points)
    return Side(seen, at_bos, label, tuple(points), col, rng, grid)


# -- features ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Features:
    """Content dims of one factor: ``q[r] * k[r]`` summed is 1 when the factor holds, else 0
    (each feature is 0/1 and at most one product is nonzero). Keys are 0 at <bos>. The last
    ``vetoes`` dims are a bit vector's (``families/bit_select.py``): each product exactly 0
    when its selection holds, -1 or less in sum when it fails."""

    q: list[Lin]
    k: list[Lin]
    vetoes: int = 0


@dataclass(frozen=True)
class Encoded:
    """One side of a factor: its value tuples and 0/1 indicators of sets of them."""

    values: list[tuple[float, ...]]
    indicator: Callable[[Sequence[int]], Lin]
    at_bos: tuple[float, ...]


def _whole_column(ctx: LowerCtx, x: Lin, rng: Interval, f: ffn.Pwl, label: str) -> Lin:
    """f(x), 0/1, as one signal holding the whole value (no affine part or constant outside,
    the constant from a constant lane: SiLU(S)/S is exactly 1), so that a head's query row
    G * column computes exactly the same product as the constant G of the <bos> dims."""
    bank = ctx.bank(1)
    ffn.emit_into_bank(bank, 0, x, rng, f)
    const, bank.consts[0] = bank.consts[0], 0.0
    if const:
        bank.hinge(0, Lin.constant(1.0), const)
    grid = rules.value_set(ctx, x, rng)
    exact = ffn.exact_lanes(f, x, rng, lambda sid: ctx.prog.signals[sid].range,
                            ctx.prog.embed_tables)
    noise = ffn.pwl_noise(f, rng, grid, ctx.prog.machine, exact)
    if noise > SELECT_FEATURE_NOISE:
        raise ctx.error(
            f"select's {label} are not bit-exact in the compiled model (off by up to "
            f"{rng.noise:.3g}: values decoded from positions or counts, such as tw.position, "
            "tw.steps_since and tw.selector_width, are within a tolerance of the integer), and "
            "a selection head needs exact 0/1 encodings of its keys and queries",
            "select on token codes, tables and comparisons of them, or values moved by "
            "tw.shift / tw.latch; to find the position holding a count, compare the count "
            "with a threshold and use tw.latch or tw.argmax")
    (col,) = bank.finish(ctx.prog, [BOOL], f"{ctx.name}.indicator", ctx.source)
    return col


def encode(ctx: LowerCtx, sides: tuple[Side, ...], what: str) -> Encoded:
    """The value tuples of the streams and their indicators: one stream's own, or a one-hot
    column per tuple of several streams (an AND lane per tuple)."""
    if len(sides) == 1:
        s = sides[0]
        return Encoded([(v,) for v in s.values], lambda m: s.indicator(ctx, m), (s.at_bos,))
    tuples = list(itertools.product(*(s.values for s in sides)))
    if len(tuples) > MAX_SELECT_TUPLES:
        raise ctx.error(f"this selector combines {len(sides)} {what} streams into "
                        f"{len(tuples)} value tuples, more than {MAX_SELECT_TUPLES}",
                        "combine selectors with & (which needs no tuples), or narrow the ranges")
    index = [dict(zip(s.values, s.onehot(ctx), strict=True)) for s in sides]
    counts = [sum((index[m][t[m]] for m in range(len(sides))), Lin()) for t in tuples]
    count_range = Interval(0, len(sides), True)
    onehot = [_whole_column(ctx, c, count_range, logic.count_pwl("and", len(sides)), what)
              for c in counts]
    return Encoded(tuples, lambda m: sum((onehot[i] for i in m), Lin()),
                   tuple(s.at_bos for s in sides))


def _factor(ctx: LowerCtx, keys: Encoded, queries: Encoded,
            p: list[list[bool]]) -> Features:
    """The dims of one 0/1 predicate matrix ``p[query tuple][key tuple]``."""
    rows: dict[tuple[bool, ...], list[int]] = {}  # row pattern -> query values
    cols: dict[tuple[bool, ...], list[int]] = {}  # column pattern -> key values
    for a, row in enumerate(p):
        rows.setdefault(tuple(row), []).append(a)
    for b in range(len(keys.values)):
        cols.setdefault(tuple(p[a][b] for a in range(len(queries.values))), []).append(b)
    rows.pop(tuple([False] * len(keys.values)), None)
    cols.pop(tuple([False] * len(queries.values)), None)
    bos_key = keys.values.index(keys.at_bos) if keys.at_bos in keys.values else None

    def key_feature(members: list[int]) -> Lin:
        f = keys.indicator(members)
        if bos_key is not None and bos_key in members:
            f = f - bos_indicator(ctx)  # the <bos> row is never selected
        return f

    q, k = [], []
    if len(cols) <= len(rows):  # one dim per key class: the query says which classes it takes
        for pattern, members in cols.items():
            k.append(key_feature(members))
            q.append(queries.indicator([a for a in range(len(queries.values)) if pattern[a]]))
    else:  # one dim per query class: the key says which query classes it satisfies
        for pattern, members in rows.items():
            q.append(queries.indicator(members))
            k.append(key_feature([b for b in range(len(keys.values)) if pattern[b]]))
    return Features(q, k)


def _matrix(leaf: Leaf) -> list[list[bool]]:
    """The predicate on every (query tuple, key tuple), in the order encode numbers them."""
    kvals = list(itertools.product(*(s.values for s in leaf.keys)))
    qvals = list(itertools.product(*(s.values for s in leaf.queries)))
    return [[leaf.holds(kv, qv) for kv in kvals] for qv in qvals]


def _classes(p: list[list[bool]]) -> int:
    """The dims a leaf takes as one factor: min(key classes, query classes), all-false
    rows and columns dropped."""
    rows = {tuple(r) for r in p if any(r)}
    cols = {c for c in zip(*p, strict=True) if any(c)} if p else set()
    return min(len(rows), len(cols))


def _equality_digits(ctx: LowerCtx, leaf: Leaf, n_digits: int, room: int
                     ) -> list[Features] | None:
    """``keys == queries`` on many values as an AND of equalities of digits: the values of
    both sides are numbered, and each digit of the number (base b) is one factor of b dims,
    so n values take n_digits * b dims instead of n; None if that exceeds ``room``."""
    (ks,), (qs,) = leaf.keys, leaf.queries
    union = sorted(set(ks.values) | set(qs.values))
    number = {v: i for i, v in enumerate(union)}
    base = 2
    while base ** n_digits < len(union):
        base += 1
    if n_digits * base > room:
        return None
    feats = []
    for d in range(n_digits):
        kdig = [number[v] // base ** d % base for v in ks.values]
        qdig = [number[v] // base ** d % base for v in qs.values]
        bos = number[ks.at_bos] // base ** d % base if ks.at_bos in number else -1
        def key_set(m: Sequence[int], kd: list[int] = kdig) -> Lin:
            return ks.indicator(ctx, [b for b, g in enumerate(kd) if g in m])

        def query_set(m: Sequence[int], qd: list[int] = qdig) -> Lin:
            return qs.indicator(ctx, [a for a, g in enumerate(qd) if g in m])

        digits: list[tuple[float, ...]] = [(float(g),) for g in range(base)]
        keys = Encoded(digits, key_set, (float(bos),))
        queries = Encoded(digits, query_set, (-1.0,))
        # one factor: digit d of the key's number equals digit d of the query's; every
        # factor's key features are zero at <bos> (its class loses the <bos> indicator)
        feats.append(_factor(ctx, keys, queries,
                             [[a == b for b in range(base)] for a in range(base)]))
    return feats


def content(ctx: LowerCtx, sel: Selector, what: str, max_parts: int = MAX_SELECT_PARTS
            ) -> list[Features] | None:
    """The factors' features; None when the selector can never select anything. A factor
    ``keys == queries`` with more value classes than the head holds is split into digits.
    ``max_parts``: more than MAX_SELECT_PARTS only for a match no two keys share (gather)."""
    leaves = sel.factors()
    if leaves is None:
        return None
    vetoes = [leaf.veto(ctx) for leaf in leaves if leaf.vetoes]
    veto_q = [d for f in vetoes for d in f.q]
    veto_k = [d for f in vetoes for d in f.k]
    leaves = [leaf for leaf in leaves if not leaf.vetoes]
    if veto_q and not leaves:  # bits alone: their dims join a part that every key satisfies
        leaves = [Leaf((), (), lambda kv, qv: True, "every key")]
    matrices = [_matrix(leaf) for leaf in leaves]
    sizes = [_classes(p) for p in matrices]
    if any(n == 0 for n in sizes):
        return None  # a factor that never holds

    def bos_dims(m: int) -> int:  # aggregate: one fallback dim; the others tie, one per part
        return 1 if what == "aggregate" else max(m, 1)

    split: dict[int, list[Features]] = {}
    total = sum(sizes) + bos_dims(len(leaves)) + len(veto_q)
    if total > ctx.geom.tail:  # split below: note the size that would not split
        shared = ctx.prog.shared
        shared.split_d_head = max(shared.split_d_head,
                                  1 << (total + ctx.geom.rotary - 1).bit_length())
    for i in sorted(range(len(leaves)), key=lambda i: -sizes[i]):
        leaf = leaves[i]
        if total <= ctx.geom.tail:
            break
        if leaf.op != "==" or len(leaf.keys) != 1 or len(leaf.queries) != 1:
            continue
        for n_digits in (2, 3):
            m = len(leaves) + sum(len(f) - 1 for f in split.values()) + n_digits - 1
            if m > MAX_SELECT_PARTS:
                break
            room = ctx.geom.tail - (total - sizes[i]) - (bos_dims(m) - bos_dims(m - n_digits + 1))
            feats = _equality_digits(ctx, leaf, n_digits, room)
            if feats is not None:
                split[i] = feats
                total += sum(len(f.q) for f in feats) - sizes[i] + \
                    bos_dims(m) - bos_dims(m - n_digits + 1)
                break
    feats = []
    for i, leaf in enumerate(leaves):
        if not leaf.keys and not leaf.queries:  # every key: one dim, G at every key but <bos>
            feats.append(Features([Lin.constant(1.0)], [1.0 - bos_indicator(ctx)]))
            continue
        if i in split:
            feats += split[i]
            continue
        kenc, qenc = encode(ctx, leaf.keys, "key"), encode(ctx, leaf.queries, "query")
        feats.append(_factor(ctx, kenc, qenc, matrices[i]))
    if len(feats) > max_parts:
        raise ctx.error(f"{what} joins {len(feats)} selections with &, more than "
                        f"{MAX_SELECT_PARTS} in one head (the selected keys' logits must sum the "
                        "same few equal products bit for bit)",
                        "combine fewer selectors, or join conditions into one tw.select with "
                        "a predicate function")
    if veto_q:
        feats[0] = Features(feats[0].q + veto_q, feats[0].k + veto_k, len(veto_q))
    return feats
