"""Whole numbers wider than one half-precision column (``precision="half"``).

bf16 holds every whole number up to 2**8 and a step reads a value with a gate of SILU_SCALE
per lattice step, so in half a value of more than ``HALF_STEP_POINTS`` lattice points can be
neither a column nor a step's input. Such a value is still exact as an affine form over narrow
columns (``Lin``: its terms are summed in the fp32 accumulator of the reader), and the ops
that meet one here keep it that way instead of refusing it:

- ``torch.where`` selects each group of its terms into a column of its own (one select per
  group, all in one layer) and returns their weighted sum;
- ``number_to_digits`` and the comparisons split it into base-b places, each a small affine
  form of the columns, and propagate carries place by place (``carry_chain``: one floor
  staircase per place, on values of a few dozen points) — the digits of a sum as a pupil
  adds, one layer per place.

Only half builds take these paths (fp32 reads such values directly, in one layer). Where a
place is itself too wide, the op is refused as before, naming the user's line.
docs/half-precision.md, "Wide whole numbers".
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

from torchwright_fx.base.numerics import HALF_STEP_POINTS
from torchwright_fx.families import rounding
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import Interval
from torchwright_fx.lower.context import LowerCtx
from torchwright_fx.lower.rules import Columns, grid
from torchwright_fx.lower.stream import Stream
from torchwright_fx.ops import ffn


def _signal(ctx: LowerCtx, sid: int) -> Interval:
    return ctx.prog.signals[sid].range


def lin_interval(ctx: LowerCtx, x: Lin) -> Interval:
    """The facts of ``x`` from its columns' facts (intervals add: exclusive cases are not
    known to be exclusive here)."""
    out = Interval.point(x.const)
    for sid, k in x.terms.items():
        out = out + _signal(ctx, sid).scale(k)
    return out


def points(ctx: LowerCtx, x: Lin, r: Interval) -> int | None:
    """How many lattice points ``x`` takes over ``r`` (its facts' lattice, else the lattice
    of its terms); None where it is not on a known lattice of whole numbers."""
    if not r.finite:
        return None
    if r.integral and r.step:
        spacing = r.step
    else:
        g = grid(ctx, x, r)
        if g is None or not g.integral:
            return None
        spacing = g.spacing
    return int((Fraction(r.hi) - Fraction(r.lo)) / spacing) + 1


def is_wide(ctx: LowerCtx, x: Lin, r: Interval) -> bool:
    """A half build's whole-number value of more lattice points than a half step reads."""
    if not ctx.prog.precision.half:
        return False
    n = points(ctx, x, r)
    return n is not None and n > HALF_STEP_POINTS


def _narrow(ctx: LowerCtx, x: Lin, r: Interval) -> bool:
    n = points(ctx, x, r)
    return n is not None and n <= HALF_STEP_POINTS


# -- torch.where ---------------------------------------------------------------------------------
def _groups(ctx: LowerCtx, x: Lin) -> list[tuple[float, Lin]] | None:
    """x's terms as (coefficient, sum of columns) groups, each a narrow whole-number value;
    None where a column is not one."""
    by_coef: dict[float, list[Lin]] = {}
    for sid, k in sorted(x.terms.items()):
        groups = by_coef.setdefault(abs(k), [])
        term = Lin.of(sid, math.copysign(1.0, k))
        if not _narrow(ctx, term, lin_interval(ctx, term)):
            return None
        for i, g in enumerate(groups):
            if _narrow(ctx, g + term, lin_interval(ctx, g + term)):
                groups[i] = g + term
                break
        else:
            groups.append(term)
    return [(k, g) for k, gs in by_coef.items() for g in gs]


def select(ctx: LowerCtx, cond: Lin, cr: Interval, a: Lin, b: Lin, out: Interval
           ) -> tuple[Lin, Interval] | None:
    """``where(cond, a, b)`` for a wide whole-number result, as a weighted sum of narrow
    selected columns: where(c, sum k s, sum l t) = sum k where(c, s, 0) + sum l where(c, 0, t),
    the constants linear in c. None where a branch's columns are not narrow whole numbers."""
    if not ctx.prog.machine.gated_up:
        return None
    xs, ys = _groups(ctx, Lin(a.terms)), _groups(ctx, Lin(b.terms))
    if xs is None or ys is None:
        return None
    parts = [(k, g, True) for k, g in xs] + [(k, g, False) for k, g in ys]
    if a.const != b.const:  # the constants' difference on a selected 1 (cond itself may be
        parts.append((a.const - b.const, Lin.constant(1.0), True))  # a form of wide columns)
    cols = Columns(ctx, len(parts))
    ranges, zero = [], Interval.point(0.0)
    for i, (_, g, first) in enumerate(parts):
        r = lin_interval(ctx, g)
        if first:
            ffn.select(cols.bank, i, cond, g, r, Lin(), zero)
        else:
            ffn.select(cols.bank, i, cond, Lin(), zero, g, r)
        cols.whole(i)
        ranges.append(r.hull(zero).with_noise(r.noise + 2.0 * r.magnitude * cr.noise))
    picked = cols.finish(ranges)
    total = Lin.constant(b.const)
    noise = 0.0
    for (k, _, _), c, r in zip(parts, picked.cols, picked.ranges, strict=True):
        total, noise = total + c * k, noise + abs(k) * r.noise
    return total, out.with_noise(noise)


# -- places and carries --------------------------------------------------------------------------
def places(ctx: LowerCtx, x: Lin, base: int) -> list[Lin] | None:
    """p_0, p_1, ... with x = sum_j base**j p_j, each p_j an affine form of x's columns with
    coefficients below ``base`` (a coefficient is cut into its base-``base`` digits, keeping
    its sign); None where a coefficient, the constant or a column is not a whole number."""
    out: list[Lin] = []

    def add(j: int, term: Lin) -> None:
        while len(out) <= j:
            out.append(Lin())
        out[j] = out[j] + term

    for sid, k in [(None, x.const), *x.terms.items()]:
        if k != math.floor(k):
            return None
        if sid is not None and not _narrow(ctx, Lin.of(sid), _signal(ctx, sid)):
            return None
        sign, m, j = math.copysign(1.0, k), int(abs(k)), 0
        while m:
            if m % base:
                add(j, Lin.constant(sign * (m % base)) if sid is None
                    else Lin.of(sid, sign * (m % base)))
            m, j = m // base, j + 1
    return out or [Lin()]


def _few(r: Interval) -> bool:
    """A whole-number interval of at most HALF_STEP_POINTS values."""
    return r.finite and r.hi - r.lo < HALF_STEP_POINTS


def _place_ranges(ctx: LowerCtx, ps: list[Lin], base: int, through: int
                  ) -> list[Interval] | None:
    """The facts of q_0 .. q_through in ``carry_chain`` (intervals only, nothing lowered);
    None where a place below ``through`` takes more than HALF_STEP_POINTS values."""
    out, carry = [], Interval.point(0.0)
    for j in range(through + 1):
        rq = lin_interval(ctx, ps[j] if j < len(ps) else Lin()) + carry
        out.append(rq)
        if j < through:
            if not _few(rq):
                return None
            carry = (Interval.point(0.0) if 0 <= rq.lo and rq.hi < base else
                     Interval(math.floor(rq.lo / base), math.floor(rq.hi / base), True))
    return out


def _digit_range(rq: Interval, base: int) -> Interval:
    """A place's digit: q itself where q stays in [0, base), else q - base * floor(q / base)
    (the floor exact, snapped if need be): q's noise either way."""
    if 0 <= rq.lo and rq.hi < base:
        return rq
    return Interval(0, base - 1, True, noise=rq.noise)


def carry_chain(ctx: LowerCtx, ps: list[Lin], base: int, through: int
                ) -> tuple[list[tuple[Lin, Interval]], tuple[Lin, Interval]]:
    """The digits d_0 .. d_{through-1} of sum_j base**j p_j and the rest q_{through} (with
    value = base**through * (q + sum_{j > through} base**(j - through) p_j) + the digits'
    value): q_0 = p_0, d_j = q_j mod base, q_{j+1} = p_{j+1} + floor(q_j / base), one floor
    staircase per place where q_j can leave [0, base). The caller has checked the places
    with ``_place_ranges``."""
    digits: list[tuple[Lin, Interval]] = []
    carry, carry_rng = Lin(), Interval.point(0.0)
    for j in range(through + 1):
        q = (ps[j] if j < len(ps) else Lin()) + carry
        rq = lin_interval(ctx, ps[j] if j < len(ps) else Lin()) + carry_rng
        if j == through:
            return digits, (q, rq)
        assert _few(rq), "checked by _place_ranges"
        if 0 <= rq.lo and rq.hi < base:
            digits.append((q, rq))
            carry, carry_rng = Lin(), Interval.point(0.0)
            continue
        f = rounding.rounded(ctx, Stream([q.divided(base)], [rq.divided(base)]), "floor")
        carry, carry_rng = f.cols[0], f.ranges[0]
        digits.append((q - carry * float(base), _digit_range(rq, base)))
    raise AssertionError("unreachable")


def digits_of(ctx: LowerCtx, x: Lin, r: Interval, n_digits: int, base: int) -> Stream | None:
    """``number_to_digits`` of a wide whole number x >= 0 (most significant first), by
    ``carry_chain``; None where x's terms or places are not narrow whole numbers."""
    ps = places(ctx, x, base)
    ranges = None if ps is None else _place_ranges(ctx, ps, base, n_digits - 1)
    if ps is None or ranges is None:
        return None
    high = Lin()  # the places above the top digit, as a multiple of base**(n_digits - 1)
    for j in range(n_digits, len(ps)):
        high = high + ps[j] * float(base ** (j - n_digits + 1))
    top_rng = ranges[-1] + lin_interval(ctx, high)
    modulus = r.hi >= base ** n_digits or top_rng.lo < 0  # the top digit needs its own
    if modulus and not _few(top_rng):
        return None
    digits, (q, _) = carry_chain(ctx, ps, base, n_digits - 1)
    top = q + high
    noise = top_rng.noise
    if modulus:
        f = rounding.rounded(ctx, Stream([top.divided(base)], [top_rng.divided(base)]),
                             "floor")
        top = top - f.cols[0] * float(base)
        top_hi = base - 1
    else:  # floor(x / base**(n-1)) itself, below base by the value's range
        top_hi = min(base - 1, math.floor(r.hi / base ** (n_digits - 1)))
    cols = [top] + [d for d, _ in reversed(digits)]
    ranges = [Interval(0, top_hi, True, noise=noise)] + \
        [Interval(0, base - 1, True, noise=r.noise) for _, r in reversed(digits)]
    return Stream(cols, ranges)


def _chain_base(ctx: LowerCtx, x: Lin) -> tuple[int, list[Lin], list[Interval]] | None:
    """The base (10 or 16) whose places of x stay narrow through their carries, fewest places
    first (10 on a tie: a number written in tens), with the places and their facts; None
    where none does or x's terms are not narrow whole numbers."""
    best = None
    for base in (10, 16):
        ps = places(ctx, x, base)
        ranges = None if ps is None else _place_ranges(ctx, ps, base, len(ps) - 1)
        if ps is not None and ranges is not None and _few(ranges[-1]) and \
                (best is None or len(ps) < len(best[1])):
            best = (base, ps, ranges)
    return best


def signable(ctx: LowerCtx, x: Lin) -> bool:
    """Whether ``sign_form`` applies to x (its places' intervals only; nothing lowered)."""
    return _chain_base(ctx, x) is not None


def sign_form(ctx: LowerCtx, x: Lin) -> tuple[Lin, Interval] | None:
    """A narrow q with x >= 0 iff q >= 0, for a wide whole number x: the rest above x's
    lowest places after their carries (x = base**J q + digits in [0, base**J)); None where
    x's terms or places are not narrow whole numbers."""
    chosen = _chain_base(ctx, x)
    if chosen is None:
        return None
    base, ps, _ = chosen
    _, (q, rq) = carry_chain(ctx, ps, base, len(ps) - 1)
    return q, rq


def table(ctx: LowerCtx, x: Lin, r: Interval, entries: dict[int, float], fallback: float
          ) -> Stream | None:
    """``lookup`` keyed by a wide whole number: the key's places after their carries, cut
    into a low part L (the lowest places, at most HALF_STEP_POINTS / 2 values) and a high
    part H (the rest, narrow); for each value h of H that the table uses, one indicator
    [H == h] and one table of L switched off where H != h by adding the low part's size to
    its key (a key with no entries). Two layers after the carries; None where the key's
    terms or parts are not narrow whole numbers."""
    chosen = _chain_base(ctx, x)
    if chosen is None:
        return None
    base, ps, ranges = chosen
    top = len(ps) - 1
    k = 0
    while k < top and base ** (k + 1) <= HALF_STEP_POINTS // 2:
        k += 1
    size = base ** k
    high_rng = ranges[top].scale(base ** (top - k))
    for j in range(k, top):
        high_rng = high_rng + _digit_range(ranges[j], base).scale(base ** (j - k))
    if k == 0 or not _few(high_rng):
        return None
    digits, (q, _) = carry_chain(ctx, ps, base, top)
    low = sum((d * float(base ** j) for j, (d, _) in enumerate(digits[:k])), Lin())
    high = q * float(base ** (top - k))
    for j in range(k, top):
        high = high + digits[j][0] * float(base ** (j - k))
    used = [h for h in range(math.ceil(high_rng.lo), math.floor(high_rng.hi) + 1)
            if any(entries.get(h * size + j, fallback) != fallback for j in range(size))]
    reached = [entries.get(v, fallback) for v in range(math.ceil(r.lo), math.floor(r.hi) + 1)]
    out_rng = Interval.of_values(sorted(set(reached + [fallback])))
    if not used:
        return Stream([Lin.constant(fallback)], [out_rng])
    g = grid(ctx, high, high_rng)
    eq = [ffn.staircase(0.0, [ffn.Step(h, False, 1.0), ffn.Step(h, True, -1.0)], g)
          for h in used]
    on = _whole(ctx, [(high, high_rng, f, Interval(0, 1, True)) for f in eq])
    low_noise = sum(r.noise * base ** j for j, (_, r) in enumerate(digits[:k]))
    parts = []
    for h, (ind, ind_rng) in zip(used, on, strict=True):
        part = {j: entries.get(h * size + j, fallback) - fallback for j in range(size)}
        key_rng = Interval(0, 2 * size - 1, True, noise=low_noise + size * ind_rng.noise)
        parts.append((low + (1.0 - ind) * float(size), key_rng,
                      ffn.lookup_pwl(0, 2 * size - 1, part, 0.0),
                      Interval.of_values(sorted(set(part.values()) | {0.0}))))
    cols = _whole(ctx, parts)
    total = sum((c for c, _ in cols), Lin.constant(fallback))
    return Stream([total], [out_rng.with_noise(sum(r.noise for _, r in cols))])


def _whole(ctx: LowerCtx, fs: list[tuple[Lin, Interval, ffn.Pwl, Interval]]
           ) -> list[tuple[Lin, Interval]]:
    """f(x) for each (x, x's facts, f, f's values), in one bank, each whole in its column.
    Every f is flat beyond its knots (a staircase), and every lane is expanded from above
    x's range (``relu(k - x)``): the lanes' slopes then cancel and no multiple of x is passed
    through the bank, whose gate would read x's large coefficients once more."""
    bank, rngs = ctx.bank(len(fs)), []
    signals = ctx.prog.signals
    for i, (x, r, f, out) in enumerate(fs):
        step = float(r.step) if r.step else 1.0
        around = Interval.of(r.lo - step, r.hi + step, r.lattice)  # every knot inside
        e = ffn.emit_into_bank(bank, i, x, around, dataclasses.replace(f, anchor=math.inf))
        assert not e.affine.terms, "a staircase's lanes leave no slope"
        exact = ffn.exact_lanes(f, x, r, lambda sid: signals[sid].range, ctx.prog.embed_tables)
        rngs.append(out.with_noise(ffn.pwl_noise(f, r, grid(ctx, x, r), ctx.prog.machine,
                                                 exact)))
    return list(zip(ctx.finish(bank, rngs), rngs, strict=True))
