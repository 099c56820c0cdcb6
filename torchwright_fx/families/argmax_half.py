"""``tw.argmax`` / ``tw.argmin`` in half precision (``precision="half"``; docs/half-precision.md):
the best score so far from latches, then the latest-match head. fp32's one head ranks score and
recency in one logit, gain * score + tie * position, whose sizes half cannot hold."""

from __future__ import annotations

from torchwright_fx.base import numerics
from torchwright_fx.families import positional, selection
from torchwright_fx.families.intrinsics import bos_value, exact_gate
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import Interval
from torchwright_fx.lower import rules
from torchwright_fx.lower.context import LowerCtx
from torchwright_fx.lower.stream import Stream
from torchwright_fx.ops import ffn, position_half


def argmax(ctx: LowerCtx, score: Stream, v: Stream, where: Stream | None, sign: float
           ) -> Stream:
    """argmax in half precision, from heads whose logits are whole multiples of a gain: the
    best score so far is ``lo + sum_s any_s``, any_s = [some valid j <= i scores >= s] (a latch
    of that indicator, <bos> included as the reference includes it); then ``v`` at the latest
    valid j >= 1 whose score is the best (``select_latest``'s head), the <bos> row when none:
    ties go to the most recent, as the reference's."""
    rng = score.ranges[0]
    lo, hi = int(rng.lo), int(rng.hi)
    if hi - lo > numerics.HALF_ARGMAX_VALUES:
        raise ctx.error(f"precision='half' finds the best score with one head per value it "
                        f"can take beyond the least, at most {numerics.HALF_ARGMAX_VALUES}, "
                        f"and this score takes {hi - lo + 1} (in [{lo}, {hi}])",
                        "narrow its range (torch.clamp, or tw.claim the range that occurs), "
                        "or compile with precision='fp32'")
    s_col = score.cols[0] * sign
    s_lo, s_hi = (lo, hi) if sign > 0 else (-hi, -lo)
    s_bos = bos_value(ctx, 0, "score") * sign
    span = s_hi - s_lo + 1
    ok = Lin.constant(1.0) if where is None else \
        exact_gate(ctx, where, "`where`").cols[0]
    ok_bos = 1.0 if where is None else positional._where_at_bos(ctx, 2)
    key = s_col + (ok - 1.0) * float(span)  # an invalid key: below every score
    key_rng = Interval(s_lo - span, s_hi, True)
    key_bos = s_bos + (ok_bos - 1.0) * span
    bos = positional._bos(ctx)
    steps = rules.pwl_stream(ctx, [key] * (span - 1), [key_rng] * (span - 1),
                             [ffn.at_least(t) for t in range(s_lo + 1, s_hi + 1)],
                             [Interval(0, 1, True)] * (span - 1), is_bool=True)
    best = Lin.constant(float(s_lo))
    for t, c in zip(range(s_lo + 1, s_hi + 1), steps.cols, strict=True):
        at_bos = float(key_bos >= t)  # <bos> always counts as a latch point
        (held,) = position_half.latch(ctx.prog, ctx.geom, [c], [Interval(0, 1, True)],
                                      c + bos * (1.0 - at_bos), bos, f"{ctx.name}.best{t}",
                                      ctx.source)
        best = best + held
    ctx.prog.claims.append((best, Interval(s_lo, s_hi, True)))  # one value: the best score
    best_bos = max(s_lo, key_bos)
    sel = selection.Leaf(
        (selection.stream_side(ctx, key, key_rng, key_bos, "scores", "keys"),),
        (selection.stream_side(ctx, best, Interval(s_lo, s_hi, True), best_bos, "best score",
                               "queries"),),
        lambda kv, qv: kv[0] == qv[0], "score == best", "==")
    return positional.latest_match(ctx, sel, v, "argmax")
