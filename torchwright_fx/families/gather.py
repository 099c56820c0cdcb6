"""tw.gather: v at a position an integer stream names, clamped to [0, i]. One head scoring
``-gain * (p_j - at_i)^2`` where fp32 certifies it (short contexts), else the exact position
matched digit by digit by a head no recency lobe needs: positions are distinct, so exactly one
key matches (docs/attention.md, "The limits that remain" and "Long contexts")."""

from __future__ import annotations

import math

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
