"""Position-based intrinsics: tw.position, tw.steps_since, tw.mean, tw.argmax / tw.argmin
(tw.gather: families/gather.py). Each is an attention head whose softmax is exactly one-hot
(or exactly uniform, for mean) in fp32; the ones that read the decoded position
(ops/position.py) size their gains so that its noise cannot flip a choice
(docs/attention.md)."""

from __future__ import annotations

import torch
import torch.fx

from torchwright_fx.analysis.facts import FactsCtx, NodeFacts
from torchwright_fx.base import numerics
from torchwright_fx.base.errors import CompileError, reason_and_advice
from torchwright_fx.capture.registry import facts, intrinsic
from torchwright_fx.families import counts, digits, selection, selection_heads
from torchwright_fx.families.intrinsics import (
    as_column,
    bos_value,
    exact_gate,
    latch,
    latch_stream,
    moved_ranges,
    moved_ranges_of,
)
from torchwright_fx.ir.graph import ALL_POSITIONS
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import EXACT, INEXACT, ONCE, Interval
from torchwright_fx.lower import rules
from torchwright_fx.lower.context import LowerCtx
from torchwright_fx.lower.stream import Stream
from torchwright_fx.ops import attention


# -- position-based intrinsics -----------------------------------------------------------------
def _bos(ctx: LowerCtx) -> Lin:
    return ctx.bos_indicator()


def position_lin(ctx: LowerCtx) -> Lin:
    from torchwright_fx.ops.position import position as build_position

    if ctx.prog.precision.half:  # a whole number from rotary cuts (ops/position_half.py)
        from torchwright_fx.ops import position_half

        return position_half.position(ctx.prog, ctx.geom, _bos(ctx), ctx.name, ctx.source)

    if ctx.geom.max_seq_len > numerics.EXACT_POSITION_LENGTH:
        return counts.exact_position(ctx)
    return build_position(ctx.prog, ctx.geom, _bos(ctx), ctx.name, ctx.source)


def position_range(ctx: LowerCtx) -> Interval:
    from torchwright_fx.ops.position import noise

    if ctx.prog.precision.half or ctx.geom.max_seq_len > numerics.EXACT_POSITION_LENGTH:
        return Interval(0, ctx.geom.max_seq_len - 1, True)

    return Interval(0, ctx.geom.max_seq_len - 1, True, noise=noise(ctx.prog.machine,
                                                                    ctx.geom.max_seq_len))


def _lower_position(ctx: LowerCtx, x: Stream) -> Stream:
    return Stream([position_lin(ctx)], [position_range(ctx)])


@intrinsic(_lower_position)
def position(x: torch.Tensor) -> torch.Tensor:
    """The position i (``<bos>`` is 0) as a number, ``[seq, 1]``. Compiled: within 0.05 of i."""
    return torch.arange(x.shape[0], dtype=torch.float32)[:, None]


def _lower_steps_since(ctx: LowerCtx, marker: Stream) -> Stream:
    pos = position_lin(ctx)
    rng = position_range(ctx)
    held = latch_stream(ctx, Stream([pos], [rng]), marker, bos_value(ctx, 0, "marker"))
    return Stream([pos - held.cols[0]], [rng.with_noise(2 * rng.noise)])


@intrinsic(_lower_steps_since)
def steps_since(marker: torch.Tensor) -> torch.Tensor:
    """i minus the position of the most recent ``marker`` at or before i (``<bos>`` counts as
    a marker), ``[seq, 1]``: 0 on the marker itself."""
    pos = torch.arange(marker.shape[0], dtype=torch.float32)[:, None]
    return pos - latch(pos, marker)


def _valid_with_fallback(ctx: LowerCtx, where: Stream | None, arg_index: int,
                         bos_weight: float) -> Lin:
    """``where`` (or all ones), plus the BOS row at ``bos_weight`` when ``where`` is 0 there."""
    if where is None:
        return Lin.constant(1.0)
    if where.width != 1 or not where.ranges[0].is_bool:
        raise ctx.error("`where` must be a 0/1 stream of width 1",
                        "build it from tw.is_token, comparisons (v > 0) and & | ~")
    where = exact_gate(ctx, where, "`where`")
    return where.cols[0] + _bos(ctx) * (bos_weight * (1.0 - _where_at_bos(ctx, arg_index)))


def _where_at_bos(ctx: LowerCtx, arg_index: int) -> float:
    """``where`` at <bos> as 0/1 (0 when unknown: the <bos> row then counts as not valid)."""
    row = ctx.bos_row(arg_index, "where")
    return float(float(row.reshape(-1)[0]) > 0.5) if row is not None else 0.0




def _lower_mean(ctx: LowerCtx, v: Stream, where: Stream | None = None) -> Stream:
    valid = _valid_with_fallback(ctx, where, 1, 0.5)
    # An average of integers is not one, but a fraction k/n with n <= max_seq_len positions.
    n = ctx.geom.max_seq_len
    group = ALL_POSITIONS if where is None else \
        hash((tuple(sorted(valid.terms.items())), valid.const)) or 1  # same positions
    if counts.applies(ctx, v):  # long contexts: exact counts, not one rounded sum per row
        w_at_bos = 1.0 if where is None else _where_at_bos(ctx, 1)
        return counts.counted_mean(ctx, v, where, selection.row_at_bos(ctx, v, 0, "v"),
                                   w_at_bos, group)
    # the reference divides a sum of whole numbers once (ONCE), else sums rounded values
    ranges = [Interval(r.lo, r.hi, max_den=n if r.integral else 0, den_group=group,
                       noise=r.noise + numerics.mean_noise(n) * r.magnitude,
                       rounding=ONCE if r.integral and r.rounding == EXACT else INEXACT)
              for r in v.ranges]
    cols = attention.mean(ctx.prog, ctx.geom, v.cols, ranges, valid, ctx.name, ctx.source)
    return Stream(cols, ranges)


@intrinsic(_lower_mean)
def mean(v: torch.Tensor, where: torch.Tensor | None = None) -> torch.Tensor:
    """The mean of ``v`` over positions j <= i (with ``where`` = 1); the ``<bos>`` row when no
    such position exists. Compiled: fp32 averaging, relative error ~1e-7."""
    v = as_column(v)
    w = torch.ones(v.shape[0]) if where is None else (as_column(where)[:, 0] > 0.5).float()
    counts = torch.cumsum(w, 0)
    sums = torch.cumsum(v * w[:, None], 0)
    out = sums / counts.clamp(min=1)[:, None]
    return torch.where((counts > 0)[:, None], out, v[:1].expand_as(v))


def _lower_argmax(ctx: LowerCtx, score: Stream, v: Stream, where: Stream | None = None,
                  sign: float = 1.0) -> Stream:
    if score.width != 1 or not score.ranges[0].integral or not score.ranges[0].finite:
        raise ctx.error("argmax/argmin need an integer-valued score of width 1 with a finite "
                        "range", "give it one column of whole numbers: scale the score to "
                        "integers, round it (torch.round), or declare it with "
                        "tw.claim(v, lo, hi, integral=True)")
    rng = score.ranges[0]
    if rng.rounding > ONCE:
        raise ctx.error("argmax/argmin's score is computed inexactly by the reference (fp32 "
                        "rounding more than once, or a decimal constant such as 0.7), so two "
                        "scores equal in exact arithmetic may differ there and the tie go the "
                        "other way", "compute the score from whole numbers (integer weights, "
                        "counts) or round it first (torch.round)")
    if ctx.prog.precision.half:  # from latches and the latest-match head
        from torchwright_fx.families import argmax_half

        return argmax_half.argmax(ctx, score, v, where, sign)
    n = ctx.geom.max_seq_len
    margin = numerics.AMPLITUDE_HEADROOM * numerics.ATTENTION_MARGIN
    # gain * noise stays within a sixteenth of the headroom: a noisier whole-number score is
    # snapped onto its integers first
    score = rules.exact_within(ctx, score, 1 / (8 * n))
    rng = score.ranges[0]
    if rng.noise > 1 / (8 * n):
        raise ctx.error(f"argmax/argmin's score may be off by {rng.noise:.3g} in the compiled "
                        f"model, more than the 1/(8 max_seq_len) = {1 / (8 * n):.3g} its "
                        "attention margin allows, and too far from its integers to snap "
                        f"onto them{rules.noise_origin(ctx, 0)}",
                        "lower max_seq_len when the noise comes from tw.mean or tw.position "
                        "(it grows with the length), or compute the score from exact whole "
                        "numbers (tw.lookup results, comparisons) before tw.argmax")
    tie = margin  # per position step: the most recent tied position wins
    gain = tie * (n - 1) + margin  # per unit of score: any better score beats any recency
    span = rng.hi - rng.lo
    mid = (rng.lo + rng.hi) / 2  # the score enters centred: smaller logits, less rounding
    noise_p = position_range(ctx).noise

    def consumed(span: float) -> float:
        """What eats the margin: decoded positions, score noise, fp32 rounding of the logits
        (the ranking compares two of them)."""
        spread = gain * span + tie * (n - 1)
        validity = 0.0 if where is None else 2.0 * spread + 2.0 * margin
        err = attention.logit_rounding([gain * span / 2, tie * (n - 1), validity])
        return 2 * tie * noise_p + 2 * gain * rng.noise + 2 * err

    budget = margin - numerics.ATTENTION_MARGIN
    if consumed(span) > budget:
        problem = (f"argmax/argmin over a score spanning {span:g} at max_seq_len={n}: fp32 "
                   f"cannot resolve the tie-break toward the most recent position in one head "
                   f"(the logits reach {gain * span / 2 + tie * (n - 1):.3g} and may round by "
                   f"more than the margin allows)")
        widest = 0
        while consumed(widest + 1) <= budget:
            widest += 1
        narrow = (f"narrow the score (torch.clamp or tw.claim): at this length a span of "
                  f"{widest} works in one head" if widest else "lower max_seq_len")
        try:
            two = _by_best_score(ctx, score, v, where, sign)
        except CompileError as e:
            reason, advice = reason_and_advice(e)
            raise ctx.error(f"{problem}; in two heads (the best score, then its most recent "
                            f"position): {reason}", f"{advice}; or {narrow}") from None
        if two is not None:
            return two
        raise ctx.error(problem, narrow)
    spread = gain * span + tie * (n - 1)
    key_terms = [(gain * sign, score.cols[0] - mid), (tie, position_lin(ctx))]
    if where is not None:  # valid beats invalid; the <bos> fallback at half weight
        validity = 2.0 * spread + 2.0 * margin
        key_terms.append((validity, _valid_with_fallback(ctx, where, 2, 0.5)))
    ranges = moved_ranges_of(ctx, v.ranges)
    cols = attention.scored(ctx.prog, ctx.geom, v.cols, ranges, key_terms, ctx.name, ctx.source)
    return Stream(cols, ranges, v.is_bool)


def _by_best_score(ctx: LowerCtx, score: Stream, v: Stream, where: Stream | None,
                   sign: float) -> Stream | None:
    """argmax in two heads, for contexts too long for one (its recency tie-break makes the
    logits grow as span * max_seq_len): the best score so far M_i, from a head that averages
    the tied best keys (no tie-break: logits gain * score, every worse key flushed to 0),
    snapped to its exact integer; then the most recent valid j with score_j == M_i
    (``select_latest``'s recency lobe), the <bos> row when there is none. None when M cannot
    be snapped (the caller refuses)."""
    rng = score.ranges[0]
    margin = numerics.AMPLITUDE_HEADROOM * numerics.ATTENTION_MARGIN
    if rng.noise > 0.05:  # a tied best key's logit may trail by gain * 2 noise
        return None
    gain = margin / (1 - 2 * rng.noise)  # per unit of score: any worse key trails by margin
    span, mid = rng.hi - rng.lo, (rng.lo + rng.hi) / 2
    key_terms = [(gain * sign, score.cols[0] - mid)]
    if where is not None:  # valid beats invalid; the <bos> fallback at half weight
        key_terms.append((2.0 * gain * span + 2.0 * margin,
                          _valid_with_fallback(ctx, where, 2, 0.5)))
    # the head averages the score less a whole number at its middle: its rounding grows with
    # the averaged magnitude (mean_noise per unit), which centring halves at least
    centre = float(round(mid))
    moved = Interval(rng.lo - centre, rng.hi - centre, True)
    best_rng = moved.with_noise(rng.noise + numerics.mean_noise(ctx.geom.max_seq_len) *
                                moved.magnitude)
    (best,) = attention.scored(ctx.prog, ctx.geom, [score.cols[0] - centre], [best_rng],
                               key_terms, f"{ctx.name}.best", ctx.source)
    snapped = rules.snapped(ctx, best, best_rng)
    if snapped is None:
        return None
    exact = (snapped[0] + centre, Interval(rng.lo, rng.hi, True))
    score_bos = bos_value(ctx, 0, "score")
    keys, key_bos = score.cols[0], score_bos
    keys_rng = Interval(rng.lo, rng.hi, True, noise=rng.noise)
    if where is not None:  # an invalid key takes a score no best can have
        where_bos = bos_value(ctx, 2, "where")
        keys = keys + (1.0 - where.cols[0]) * (span + 1)
        keys_rng = Interval(rng.lo, rng.hi + span + 1, True,
                            noise=rng.noise + (span + 1) * where.ranges[0].noise)
        key_bos = score_bos + (1.0 - where_bos) * (span + 1)
    k, q = Stream([keys], [keys_rng]), Stream([exact[0]], [exact[1]])
    sel = digits.digit_equality(ctx, k, q, key_bos, score_bos) or selection.Leaf(
        (selection.stream_side(ctx, keys, keys_rng, key_bos, "scores", "keys"),),
        (selection.stream_side(ctx, exact[0], exact[1], score_bos, "best score", "queries"),),
        lambda kv, qv: kv[0] == qv[0], "score == best", "==")
    return latest_match(ctx, sel, v, "argmax")


def latest_match(ctx: LowerCtx, sel: selection.Selector, v: Stream, what: str) -> Stream:
    """v at the most recent key the selector selects (``select_latest``'s head), v's own
    <bos> row when none: how gather and argmax finish on a selection."""
    feats = selection.content(ctx, sel, "select_latest")
    assert feats is not None
    if ctx.prog.precision.half:
        ranges = moved_ranges_of(ctx, v.ranges)
        return Stream(selection_heads.latest_half(ctx, feats, v.cols, ranges), ranges, v.is_bool)
    selection_heads.check_recency(ctx, len(feats), what)
    gain = ctx.geom.validity
    q, k = selection_heads.head_qk(ctx, feats, gain, [gain] * len(feats), True, what)
    ranges = moved_ranges_of(ctx, v.ranges)
    cols = attention.heads(ctx.prog, ctx.geom, q, k, v.cols, ranges, ctx.name, ctx.source)
    return Stream(cols, ranges, v.is_bool)


@intrinsic(_lower_argmax)
def argmax(score: torch.Tensor, v: torch.Tensor, where: torch.Tensor | None = None
           ) -> torch.Tensor:
    """``v`` at the position j <= i (with ``where`` = 1) of largest integer ``score``; ties go
    to the most recent; the ``<bos>`` row when no position qualifies."""
    return _arg_extreme(score, v, where, 1.0)


def _lower_argmin(ctx: LowerCtx, score: Stream, v: Stream, where: Stream | None = None) -> Stream:
    return _lower_argmax(ctx, score, v, where, sign=-1.0)


@intrinsic(_lower_argmin)
def argmin(score: torch.Tensor, v: torch.Tensor, where: torch.Tensor | None = None
           ) -> torch.Tensor:
    """Like ``argmax`` with the smallest score."""
    return _arg_extreme(score, v, where, -1.0)


def _arg_extreme(score: torch.Tensor, v: torch.Tensor, where: torch.Tensor | None,
                 sign: float) -> torch.Tensor:
    s, v = as_column(score)[:, 0] * sign, as_column(v)
    ok = torch.ones_like(s, dtype=torch.bool) if where is None else as_column(where)[:, 0] > 0.5
    rows, best, best_score = [], 0, None  # the running winner: ties go to the later position
    for j, (score_j, ok_j) in enumerate(zip(s.tolist(), ok.tolist(), strict=True)):
        if ok_j and (best_score is None or score_j >= best_score):
            best, best_score = j, score_j
        rows.append(best)
    return v[torch.tensor(rows)]


# -- facts ---------------------------------------------------------------------------------------
@facts(position)
def _position_facts(ctx: FactsCtx, x: NodeFacts) -> NodeFacts:
    return NodeFacts([Interval(0, ctx.max_seq_len - 1, True)], False, [ctx.position_form()])


def _gate_facts(ctx: FactsCtx, w: NodeFacts | None, what: str) -> None:
    if w is not None and (w.width != 1 or not w.ranges[0].is_bool):
        raise ctx.error(f"{what} must be a 0/1 stream of width 1")


@facts(steps_since)
def _steps_since_facts(ctx: FactsCtx, marker: NodeFacts) -> NodeFacts:
    _gate_facts(ctx, marker, "the marker")
    rng = Interval(0, ctx.max_seq_len - 1, True)
    return NodeFacts([rng], False, [ctx.position_form() - ctx.fresh([rng])[0]])


@facts(mean)
def _mean_facts(ctx: FactsCtx, v: NodeFacts, where: NodeFacts | None = None) -> NodeFacts:
    """k/n for whole values (n <= max_seq_len positions), rounded once by the reference;
    means over the same positions share a den_group (``_lower_mean``)."""
    _gate_facts(ctx, where, "`where`")
    n = ctx.max_seq_len
    group = ALL_POSITIONS
    if where is not None:
        row = ctx.bos_row(1, "where")
        at_bos = float(float(row.reshape(-1)[0]) > 0.5) if row is not None else 0.0
        valid = (where.form(0) or Lin.of(-1)) + ctx.bos_form() * (0.5 * (1.0 - at_bos))
        group = hash((tuple(sorted(valid.terms.items())), valid.const)) or 1
    return NodeFacts([Interval(r.lo, r.hi, max_den=n if r.integral else 0, den_group=group,
                               rounding=ONCE if r.integral and r.rounding == EXACT else INEXACT)
                      for r in v.ranges])


def moved_facts(ctx: FactsCtx, v: NodeFacts) -> NodeFacts:
    """A value an attention head reads at another position (argmax, argmin, gather)."""
    return NodeFacts(moved_ranges(ctx.name, v.ranges), v.is_bool)


@facts(argmax)
def _argmax_facts(ctx: FactsCtx, score: NodeFacts, v: NodeFacts,
                  where: NodeFacts | None = None) -> NodeFacts:
    _gate_facts(ctx, where, "`where`")
    return moved_facts(ctx, v)


facts(argmin)(_argmax_facts)
