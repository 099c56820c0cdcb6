"""``keys == queries`` on more whole numbers than one side of a selection encodes
(``MAX_SELECT_VALUES``), matched digit by digit: each side's exact value is split into base
2**k digits by floor staircases, and the selection is the AND of the digits' equalities, one
``&`` part of ``base`` content dims each (docs/attention.md, "Query-dependent selection")."""

from __future__ import annotations

from fractions import Fraction

from torchwright_fx.base.numerics import (
    DIGIT_BASES,
    MAX_SELECT_PARTS,
    MAX_SELECT_VALUES,
    UNIQUE_MATCH_PARTS,
)
from torchwright_fx.families import rounding
from torchwright_fx.families.selection import Leaf, Selector, exact_column, stream_side
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import Interval
from torchwright_fx.lower.context import LowerCtx
from torchwright_fx.lower.stream import Stream


def _layouts(max_parts: int) -> list[tuple[int, int]]:
    """(parts, base) of at least two parts, fewest content dims first."""
    return sorted(((m, b) for m in range(2, max_parts + 1) for b in DIGIT_BASES),
                  key=lambda mb: (mb[0] * mb[1], mb[0]))


def digit_equality(ctx: LowerCtx, keys: Stream, queries: Stream, key_bos: float,
                   query_bos: float, unique: bool = False) -> Selector | None:
    """``keys == queries`` on more whole numbers than one side encodes (MAX_SELECT_VALUES), as
    the AND of equalities of their base-2**k digits: u = v - lo is split into ``parts`` digits
    with floor staircases on the exact (snapped) values, each digit one factor of ``base``
    dims. None when this does not apply (the plain selection then decides or refuses).
    ``unique``: exactly one key matches every query (gather's positions), read by a head of
    whole-number logits with no <bos> dims (``gather._unique_match``), so any number of
    parts up to UNIQUE_MATCH_PARTS may be used; otherwise at most MAX_SELECT_PARTS, whose
    selected keys' logits must tie bit for bit, plus a <bos> dim a part."""
    if keys.width != 1 or queries.width != 1:
        return None
    ranges = (keys.ranges[0], queries.ranges[0])
    if not all(r.finite and r.integral for r in ranges):
        return None
    lo = min(r.lo for r in ranges)
    n = int(max(r.hi for r in ranges) - lo) + 1
    if n <= MAX_SELECT_VALUES:
        return None
    layouts = _layouts(UNIQUE_MATCH_PARTS if unique else MAX_SELECT_PARTS)
    extra = 0 if unique else 1  # the readers' <bos> dim a part
    fits = [(m, b) for m, b in layouts if b ** m >= n and m * (b + extra) <= ctx.geom.tail]
    if not fits:
        need = min((m * (b + extra) for m, b in layouts if b ** m >= n), default=None)
        if need is None:
            return None
        d_head = 1 << (need + ctx.geom.rotary - 1).bit_length()
        raise ctx.error(f"select == on {n} whole numbers is matched digit by digit, which "
                        f"needs {need} content dims in one head, more than the "
                        f"{ctx.geom.tail} of d_head={ctx.geom.d_head}",
                        f"compile with d_head={d_head}, or narrow the values' range", d_head)
    parts, base = fits[0]
    sides = []
    for s, what in ((keys, "keys"), (queries, "queries")):
        col, rng = exact_column(ctx, s.cols[0], s.ranges[0], what)
        if rng.noise > 0:
            return None
        sides.append((col, rng))
    digits: list[list[tuple[Lin, Interval, float]]] = []
    for (col, rng), at_bos in zip(sides, (key_bos, query_bos), strict=True):
        u, top = col - lo, int(rng.hi - lo)
        floors = [u]  # floor(u / base**j), exact: u is a whole number and base a power of 2
        for j in range(1, parts):
            scaled = Stream([u * (1.0 / base ** j)],
                            [Interval(float(rng.lo - lo) / base ** j, top / base ** j,
                                      step=Fraction(1, base ** j))])
            floors.append(rounding.rounded(ctx, scaled, "floor").cols[0])
        b = int(at_bos - lo)
        side_digits = []
        for j in range(parts):
            high = top // base ** j
            d = floors[j] - floors[j + 1] * float(base) if j + 1 < parts else floors[j]
            side_digits.append((d, Interval(0, min(base - 1, high), True),
                                float(b // base ** j % base if j + 1 < parts else b // base ** j)))
        digits.append(side_digits)
    selector: Selector | None = None
    for j in range(parts):
        (kd, kr, kb), (qd, qr, qb) = digits[0][j], digits[1][j]
        leaf = Leaf((stream_side(ctx, kd, kr, kb, f"keys digit {j}", "keys"),),
                    (stream_side(ctx, qd, qr, qb, f"queries digit {j}", "queries"),),
                    lambda kv, qv: kv[0] == qv[0], f"digit {j} ==", "==")
        selector = leaf if selector is None else selector & leaf
    return selector
