"""tw.gather: v at a position an integer stream names, clamped to [0, i]. One head scoring
``-gain * (p_j - at_i)^2`` where fp32 certifies it (short contexts), else the exact position
matched digit by digit by a head no recency lobe needs: positions are distinct, so exactly one
key matches (docs/attention.md, "The limits that remain" and "Long contexts")."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from torchwright_fx.analysis.facts import FactsCtx, NodeFacts
from torchwright_fx.base import numerics
from torchwright_fx.base.errors import CompileError, reason_and_advice
from torchwright_fx.capture.registry import facts, intrinsic
from torchwright_fx.families import counts, digits, selection, selection_heads
from torchwright_fx.families.intrinsics import as_column, moved_ranges_of
from torchwright_fx.families.positional import (
    latest_match,
    moved_facts,
    position_lin,
    position_range,
)
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import Interval
from torchwright_fx.lower import rules
from torchwright_fx.lower.context import LowerCtx
from torchwright_fx.lower.stream import Stream
from torchwright_fx.ops import attention, ffn


def _lower_gather(ctx: LowerCtx, v: Stream, at: Stream) -> Stream:
    """One head scoring ``-gain * (p_j - at_i)^2`` (``_by_square``); where fp32 cannot certify
    that (long contexts, ReLU's product tables), a selection matching the position digit by
    digit (``_by_digits``), which needs a larger d_head."""
    if at.width != 1 or not at.ranges[0].integral:
        raise ctx.error("gather's position must be an integer-valued stream of width 1",
                        "round it (tw.gather(v, torch.round(at))), or declare a position that "
                        "is whole with tw.claim(at, lo, hi, integral=True)")
    if ctx.prog.precision.half:  # the square's logits are beyond half: match the position
        matched = _by_digits(ctx, v, at, half=True)
        assert matched is not None  # half matches the position as one equality if not digits
        return matched
    problem = _square_problem(ctx, at)
    if problem is None:
        return _by_square(ctx, v, at)
    try:
        by_digits = _by_digits(ctx, v, at)
    except CompileError as e:
        reason, advice = reason_and_advice(e)
        raise ctx.error(f"{problem}; matching the position digit by digit instead: {reason}",
                        advice, getattr(e, "d_head", None)) from None
    if by_digits is None:
        raise ctx.error(problem, "lower max_seq_len, or read a fixed distance back with "
                                 "tw.shift")
    return by_digits


def _square_problem(ctx: LowerCtx, at: Stream) -> str | None:
    """Why the square's head cannot be certified (None: it can)."""
    from torchwright_fx.ops.position import POSITION_TOLERANCE

    budget = POSITION_TOLERANCE - position_range(ctx).noise
    if at.ranges[0].noise > budget:
        return (f"gather's position may be off by {at.ranges[0].noise:.3g} in the compiled "
                f"model, over the {budget:.3g} its attention margin allows")
    _square_of_position(ctx, position_lin(ctx))
    # logit_j = -gain * (p_j - t_i)^2 up to terms of i alone, on positions centred at c.
    # With |p_j - j| <= POSITION_TOLERANCE the target leads its neighbours by
    # gain * (1 - 2 * POSITION_TOLERANCE): AMPLITUDE_HEADROOM times the attention margin, so a
    # third of it is headroom. An error e of the square against the decoded position moves the
    # lead by up to 2 gain e, the fp32 rounding of the two logits by twice logit_rounding:
    # together they must stay within that third.
    square_noise = ctx.prog.shared.position_squared_error
    gain = _square_gain()
    c = _centre(ctx.geom.max_seq_len)
    top = float(max(c, ctx.geom.max_seq_len - 1 - c))  # the largest |centred position|
    rounding = attention.logit_rounding([2 * gain * top * top, gain * top * top])
    budget = gain * (1 - 2 * POSITION_TOLERANCE) - numerics.ATTENTION_MARGIN
    if 2 * gain * square_noise + 2 * rounding > budget:
        return (f"gather at max_seq_len={ctx.geom.max_seq_len}: its logits (up to "
                f"{3 * gain * top * top:.3g}) may round by {rounding:.3g} in fp32 and the "
                f"position squared be off by {square_noise:.3g} (the {ctx.prog.machine} "
                "machine's product tables), more than its attention margin allows")
    return None


def _square_gain() -> float:
    from torchwright_fx.ops.position import POSITION_TOLERANCE

    return numerics.AMPLITUDE_HEADROOM * numerics.ATTENTION_MARGIN / (1 - 2 * POSITION_TOLERANCE)


def _by_square(ctx: LowerCtx, v: Stream, at: Stream) -> Stream:
    pos = position_lin(ctx)
    square = _square_of_position(ctx, pos)
    gain, c = _square_gain(), _centre(ctx.geom.max_seq_len)
    # centred: -gain (p' - t')^2 = 2 gain t' p' - gain p'^2 - gain t'^2, p' = p - c, t' = t - c
    terms = [((at.cols[0] - c) * (2.0 * gain), pos - c), (Lin.constant(-gain), square)]
    ranges = moved_ranges_of(ctx, v.ranges)
    cols = attention.query_scored(ctx.prog, ctx.geom, v.cols, ranges, terms, ctx.name,
                                  ctx.source)
    return Stream(cols, ranges, v.is_bool)


def _by_digits(ctx: LowerCtx, v: Stream, at: Stream, half: bool = False) -> Stream | None:
    """v at key j with p_j == clamp(at_i, 0, p_i), matched digit by digit on the exact
    (snapped) positions (``digits.digit_equality``), one key matching at every query (the
    <bos> row, position 0, where the target clamps to 0). ``half``: positions are exact whole
    numbers below 128, matched as one equality (its values' classes) when they are too few
    for digits."""
    p = Stream([position_lin(ctx)], [position_range(ctx)])
    a, a_rng = at.cols[0], at.ranges[0]
    if not half:  # both onto the integers first: the clamp's lanes add their noise
        p = _exact_position(ctx, p)
        if a_rng.noise > 0:
            a, a_rng = rules.snapped(ctx, a, a_rng) or (a, a_rng)
    # clamp(at, 0, p) = relu(at) - relu(at - p), both lanes in one bank
    over, over_rng = a - p.cols[0], a_rng - p.ranges[0]
    relus = rules.pwl_stream(ctx, [a, over], [a_rng, over_rng], [ffn.relu_pwl()] * 2,
                             [r.clamp(0.0, math.inf).with_noise(0.0) for r in (a_rng, over_rng)])
    loose = relus.ranges[0] - relus.ranges[1]  # the facts lose the clamp's correlation
    clamped = Interval(max(loose.lo, 0.0), min(loose.hi, p.ranges[0].hi), True,
                       noise=loose.noise)
    target = Stream([relus.cols[0] - relus.cols[1]], [clamped])
    sel = digits.digit_equality(ctx, p, target, 0.0, 0.0, unique=not half)
    if sel is None and half:
        sel = selection.Leaf(
            (selection.stream_side(ctx, p.cols[0], p.ranges[0], 0.0, "positions", "keys"),),
            (selection.stream_side(ctx, target.cols[0], clamped, 0.0, "gather's position",
                                   "queries"),),
            lambda kv, qv: kv[0] == qv[0], "position == at", "==")
    if sel is None:
        return None
    return latest_match(ctx, sel, v, "gather") if half else _unique_match(ctx, sel, v)


def _exact_position(ctx: LowerCtx, p: Stream) -> Stream:
    """The decoded position snapped onto the integers, once per program."""
    if p.ranges[0].noise == 0:
        return p
    return Stream([counts.exact_position(ctx)], [p.ranges[0].with_noise(0.0)])


def _unique_match(ctx: LowerCtx, sel: selection.Selector, v: Stream) -> Stream:
    """v at the one key whose every digit matches (positions are distinct, and the clamped
    target is a position j <= i: one key matches at every query, the <bos> row at 0). No
    recency lobe: the logit is the gain times the number of digits that match, a whole number
    fp32 sums exactly in any order, and the match leads every other key by half the gain at
    any length."""
    feats = selection.content(ctx, sel, "gather", numerics.UNIQUE_MATCH_PARTS)
    assert feats is not None
    # a selection never selects the <bos> row (its features are 0): it takes m - 1/2 parts'
    # worth, half a gain below a full match and above every partial one, and wins where the
    # target is 0 (no key matches then)
    gain = numerics.UNIQUE_MATCH_GAIN
    q, k = selection_heads.head_qk(ctx, feats, gain, [gain * (len(feats) - 0.5)], False, "gather")
    ranges = moved_ranges_of(ctx, v.ranges)
    cols = attention.heads(ctx.prog, ctx.geom, q, k, v.cols, ranges, ctx.name, ctx.source)
    return Stream(cols, ranges, v.is_bool)


def _centre(n: int) -> int:
    """gather works on positions centred at this whole number: its logits, and the error of
    the square, are a quarter of what they are around 0."""
    return (n - 1) // 2


def _square_of_position(ctx: LowerCtx, pos: Lin) -> Lin:
    """(p - c)^2 for the decoded position p and c = _centre(max_seq_len)."""
    if ctx.prog.shared.position_squared is not None:
        return ctx.prog.shared.position_squared
    bank = ctx.bank(1)
    n = ctx.geom.max_seq_len
    c = _centre(n)
    r = position_range(ctx)
    exact = Interval(-c, n - 1 - c, True)
    ffn.product(bank, 0, pos - c, exact, pos - c, exact)
    # |p'^2 - i'^2| <= 2 max|i'| e + e^2 for |p' - i'| <= e, plus the product's own error: the
    # ReLU quarter-square tables (exact only on a grid of knots) or SwiGLU's fp32 rounding
    if not ctx.prog.machine.gated_up:
        table = sum(err for *_, err in ffn.quarter_square_tables(pos - c, exact, pos - c, exact,
                                                                  None, (None, None)))
    else:
        table = ffn.product_rounding(exact, exact)
    top = max(c, n - 1 - c)
    noise = 2 * top * r.noise + r.noise ** 2 + table
    rng = Interval(0, top ** 2, True, noise=noise)
    (sq,) = bank.finish(ctx.prog, [rng], f"{ctx.name}.position_squared", ctx.source)
    ctx.prog.shared.position_squared = sq
    ctx.prog.shared.position_squared_error = table  # |sq - p'^2| for the decoded p
    return sq


@intrinsic(_lower_gather)
def gather(v: torch.Tensor, at: torch.Tensor) -> torch.Tensor:
    """``v`` at position ``at`` (an integer stream), clamped to [0, i]."""
    v = as_column(v)
    idx = as_column(at)[:, 0].round().long()
    idx = torch.minimum(idx.clamp(min=0), torch.arange(v.shape[0]))
    return v[idx]



@facts(gather)
def _gather_facts(ctx: FactsCtx, v: NodeFacts, at: NodeFacts) -> NodeFacts:
    return moved_facts(ctx, v)


# -- select(position + c, q, "==") read by select_latest: the square, with a fallback ---------
@dataclass(frozen=True, eq=False)
class PositionMatch(selection.Leaf):
    """``select(keys, queries, "==")`` whose keys are the position plus a whole constant c:
    at most one key j >= 1 matches, the one at position ``at = queries - c``. Read as any
    selection; ``select_latest`` reads it by ``match_position`` where that is certified."""

    at: Lin = field(default_factory=Lin)
    at_rng: Interval = field(default_factory=lambda: Interval.point(0.0))


def position_match(ctx: LowerCtx, keys: Stream, queries: Stream, leaf: selection.Leaf
                   ) -> selection.Leaf:
    """``leaf`` as a PositionMatch where its keys are the position the program already
    decoded (plus a whole constant) and its queries one whole-number column; else itself."""
    shared = ctx.prog.shared
    pos = shared.exact_position if ctx.geom.max_seq_len > numerics.EXACT_POSITION_LENGTH \
        else shared.position
    if pos is None or ctx.prog.precision.half or keys.width != 1 or queries.width != 1:
        return leaf
    offset = keys.cols[0] - pos
    q_rng = queries.ranges[0]
    if offset.terms or not float(offset.const).is_integer() or not (q_rng.integral and
                                                                    q_rng.finite):
        return leaf
    c = offset.const
    return PositionMatch(leaf.keys, leaf.queries, leaf.pred, leaf.label, leaf.op,
                         queries.cols[0] - c, q_rng.shift(-c))


def _match_problem(ctx: LowerCtx, sel: PositionMatch, t_square_error: float) -> str | None:
    """Why ``match_position``'s head cannot be certified (None: it can). The match leads
    <bos> by half the gain and <bos> leads every other key by half the gain, less what the
    decoded positions, the squares and fp32's rounding of the logits take."""
    from torchwright_fx.ops.position import POSITION_TOLERANCE, error_at_bos

    e = position_range(ctx).noise + sel.at_rng.noise
    if e > POSITION_TOLERANCE:
        return f"the matched position may be off by {e:.3g}"
    gain, c, n = _match_gain(), _centre(ctx.geom.max_seq_len), ctx.geom.max_seq_len
    top = float(max(c, n - 1 - c))
    t_top = max(abs(sel.at_rng.lo - c), abs(sel.at_rng.hi - c))
    t_max = max(abs(sel.at_rng.lo), abs(sel.at_rng.hi))
    rounding = attention.logit_rounding([2 * gain * top * t_top, gain * top * top,
                                         gain * (t_max * t_max + 0.5)])
    lead = gain * (0.5 - 2 * e)  # (1 - e)^2 - 1/2 and 1/2 - e^2, both above 1/2 - 2e
    # <bos>'s logit is built from t^2, not from (p_0 - t)^2: a decoded p_0 off 0 moves it by
    # 2 |t| |p_0| (none where the position is exact: long contexts, and SwiGLU's decoder at 0)
    at_bos = 0.0 if n > numerics.EXACT_POSITION_LENGTH else error_at_bos(ctx.prog.machine, n)
    lost = gain * (ctx.prog.shared.position_squared_error + t_square_error +
                   2 * t_max * at_bos) + 2 * rounding
    if lead - lost < numerics.ATTENTION_MARGIN:
        return (f"select_latest on positions at max_seq_len={n}: its logits (up to "
                f"{3 * gain * top * top:.3g}) leave {lead - lost:.3g} of the attention margin "
                f"{numerics.ATTENTION_MARGIN:g}")
    return None


def _match_gain() -> float:
    """Twice gather's: the nearest rival (<bos>, or <bos>'s nearest) trails by half of it."""
    return 2.0 * _square_gain()


def match_position(ctx: LowerCtx, sel: PositionMatch, values: list[Lin], ranges: list[Interval],
                   is_bool: bool) -> Stream | None:
    """``values`` (<bos> row: the default) at the key whose position is ``at`` (1 <= at <= i),
    the <bos> row where there is none: one head scoring ``-gain (p_j - at)^2`` on the keys
    j >= 1 and ``-gain / 2`` on <bos> (its query term ``gain (at^2 - 1/2)`` cancels the square
    <bos>'s position 0 would score). None where it is not certified (the selection's own
    classes read it then)."""
    if not ctx.prog.machine.gated_up:
        return None
    at, at_rng = sel.at, sel.at_rng
    t_max = max(abs(at_rng.lo), abs(at_rng.hi))
    t_square_error = ffn.product_rounding(at_rng, at_rng) + 2 * t_max * at_rng.noise + \
        at_rng.noise ** 2
    pos = position_lin(ctx)
    square = _square_of_position(ctx, pos)
    if _match_problem(ctx, sel, t_square_error) is not None:
        return None
    bank = ctx.bank(1)
    ffn.product(bank, 0, at, at_rng, at, at_rng)
    (t_square,) = bank.finish(ctx.prog, [Interval(0.0, t_max * t_max, True,
                                                  noise=t_square_error)],
                              f"{ctx.name}.at_squared", ctx.source)
    gain, c = _match_gain(), _centre(ctx.geom.max_seq_len)
    terms = [((at - c) * (2.0 * gain), pos - c), (Lin.constant(-gain), square),
             ((t_square - 0.5) * gain, ctx.bos_indicator())]
    cols = attention.query_scored(ctx.prog, ctx.geom, values, ranges, terms, ctx.name,
                                  ctx.source)
    return Stream(cols, ranges, is_bool)
