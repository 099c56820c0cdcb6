"""The ``tw.*`` intrinsics: each is one definition holding its eager reference semantics and
its lowering to primitive ops.

Streams are float tensors of shape ``[seq, width]``, one row per position, causal
(docs/design-notes.md §1). Calling an intrinsic on tensors runs the eager semantics;
calling it while tracing records one fx node whose target is the intrinsic itself, so
helper code in any module can use them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import torch
import torch.fx

from torchwright_fx.analysis.facts import FactsCtx, NodeFacts, as_facts
from torchwright_fx.base import numerics
from torchwright_fx.base.numerics import CLAIM_INTEGRAL_REL, CLAIM_INTEGRAL_TOL
from torchwright_fx.capture.registry import (
    checks_on,
    current_vocab,
    facts,
    intrinsic,
    resolve_callables,
    token_value,
)
from torchwright_fx.ir.graph import Check
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import BOOL, EXACT, Interval
from torchwright_fx.lower.context import LowerCtx
from torchwright_fx.lower.rules import exact_within
from torchwright_fx.lower.stream import Stream, to_stream
from torchwright_fx.ops import attention, attention_half, ffn, position_half


def as_column(v: torch.Tensor) -> torch.Tensor:
    return v if v.dim() == 2 else v.reshape(v.shape[0], -1)


# -- token intrinsics --------------------------------------------------------------------------
def _tokens(spec: str | Sequence[str]) -> list[str]:
    return [spec] if isinstance(spec, str) and (len(spec) == 1 or spec.startswith("<")) \
        else list(spec)


def _lower_is_token(ctx: LowerCtx, x: Stream, tokens: str | Sequence[str]) -> Stream:
    ids = {ctx.vocab[t] for t in _tokens(tokens)}
    col = sum((x.cols[i] for i in ids), Lin())
    return Stream([col], [BOOL])  # a float 0/1 stream, as the eager result


@intrinsic(_lower_is_token)
def is_token(x: torch.Tensor, tokens: str | Sequence[str]) -> torch.Tensor:
    """1.0 where the token is ``tokens`` (one token, or any of several), else 0.0: ``[seq, 1]``."""
    vocab = current_vocab()
    ids = sorted({vocab[t] for t in _tokens(tokens)})  # a token listed twice still counts once
    return sum((x[:, i] for i in ids), torch.zeros(x.shape[0]))[:, None]


def token(name: str) -> float:
    """The code (id) of a token, as a constant: ``torch.where(c, tw.token("1"), tw.token("0"))``."""
    return token_value(name)


def _lower_code(ctx: LowerCtx, x: Stream) -> Stream:
    col = sum((c * float(i) for i, c in enumerate(x.cols)), Lin())
    return Stream([col], [Interval(0, len(ctx.vocab) - 1, True)])


@intrinsic(_lower_code)
def code(x: torch.Tensor) -> torch.Tensor:
    """The token code (id) at each position, ``[seq, 1]``."""
    return (x * torch.arange(x.shape[1], dtype=x.dtype)).sum(-1, keepdim=True)


# -- attention intrinsics ----------------------------------------------------------------------
def moved_ranges_of(ctx: LowerCtx, ranges: list[Interval]) -> list[Interval]:
    """The facts of values an attention head moves from another position: the same, except
    that a mean's denominator is the count at *that* position, so it no longer shares one
    with the means of this position (its den_group is the head's own)."""
    return moved_ranges(ctx.name, ranges)


def moved_ranges(name: str, ranges: Sequence[Interval]) -> list[Interval]:
    """``moved_ranges_of`` for the head of the fx node ``name``."""
    return [dataclasses.replace(r, den_group=hash((name, r.den_group)) or 1)
            if r.max_den else r for r in ranges]


def _lower_shift(ctx: LowerCtx, v: Stream, k: int) -> Stream:
    if not isinstance(k, int) or k < 0:
        raise ctx.error(f"shift offset must be a constant int >= 0, got {k!r}")
    if k == 0:
        return v
    ranges = moved_ranges_of(ctx, v.ranges)
    if ctx.prog.precision.half:
        cols = attention_half.shift(ctx.prog, ctx.geom, v.cols, ranges, k, ctx.bos_indicator(),
                                    ctx.name, ctx.source)
    else:
        cols = attention.shift(ctx.prog, ctx.geom, v.cols, ranges, k, ctx.name, ctx.source)
    return Stream(cols, ranges, v.is_bool)


@intrinsic(_lower_shift)
def shift(v: torch.Tensor, k: int) -> torch.Tensor:
    """``v`` at position i - k; the BOS row (position 0) where i - k < 0."""
    if not isinstance(k, int) or isinstance(k, bool) or k < 0:
        raise ValueError(f"tw.shift(v, k) reads k positions back, so k must be a whole number "
                         f">= 0, got {k!r}: a causal model cannot look ahead")
    v = as_column(v)
    idx = (torch.arange(v.shape[0]) - k).clamp(min=0)
    return v[idx]


def _lower_latch(ctx: LowerCtx, v: Stream, when: Stream) -> Stream:
    return latch_stream(ctx, v, when, bos_value(ctx, 1, "when"))


def bos_value(ctx: LowerCtx, arg_index: int, kwarg: str) -> float:
    """An argument's value at <bos>, known at compile time (a constant argument: itself)."""
    row = ctx.bos_row(arg_index, kwarg)
    if row is not None:
        return float(row.reshape(-1)[0])
    arg = ctx.node.args[arg_index] if arg_index < len(ctx.node.args) else \
        ctx.node.kwargs.get(kwarg)
    if isinstance(arg, (int, float, bool)):
        return float(arg)
    raise ctx.error(f"the value of `{kwarg}` at <bos> is unknown")


def latch_stream(ctx: LowerCtx, v: Stream, when: Stream, when_at_bos: float) -> Stream:
    if when.width != 1 or not when.ranges[0].is_bool:
        raise ctx.error("latch's `when` must be a 0/1 stream of width 1",
                        "build it from tw.is_token, comparisons, & | ~")
    when = exact_gate(ctx, when, "the latch condition")
    # The BOS row always counts as a latch point: valid = when + (1 - when[BOS]) * is_bos.
    valid = when.cols[0] + _lower_is_token(ctx, _onehot(ctx), "<bos>").cols[0] * (1 - when_at_bos)
    ranges = moved_ranges_of(ctx, v.ranges)
    if ctx.prog.precision.half:
        cols = position_half.latch(ctx.prog, ctx.geom, v.cols, ranges, valid,
                                   ctx.bos_indicator(), ctx.name, ctx.source)
    else:
        cols = attention.latch(ctx.prog, ctx.geom, v.cols, ranges, valid, ctx.name, ctx.source)
    return Stream(cols, ranges, v.is_bool)


def _onehot(ctx: LowerCtx) -> Stream:
    return ctx.tokens


@intrinsic(_lower_latch)
def latch(v: torch.Tensor, when: torch.Tensor) -> torch.Tensor:
    """``v`` at the most recent position j <= i where ``when`` is 1; the BOS row counts as
    such a position, so before the first ``when`` the result is ``v`` at BOS."""
    v, w = as_column(v), as_column(when)[:, 0]
    marks = torch.where(w > 0.5, torch.arange(len(w)), torch.zeros_like(w, dtype=torch.long))
    return v[torch.cummax(marks, dim=0).values]


# -- output ------------------------------------------------------------------------------------
def _lower_emit(ctx: LowerCtx, trigger: Stream, seq: Sequence[Any],
                default: str | float = "<eos>") -> Stream:
    if trigger.width != 1 or not trigger.ranges[0].is_bool:
        r = trigger.ranges[0]
        got = f"width {trigger.width}" if trigger.width != 1 else \
            f"values in [{r.lo:g}, {r.hi:g}]" + ("" if r.integral else ", not whole numbers")
        raise ctx.error(f"emit's trigger must be a 0/1 stream of width 1, got {got}",
                        "build it from tw.is_token, comparisons and & | ~; a value you know is "
                        "always 0 or 1 can be declared with tw.claim(v, 0, 1, integral=True)")
    trigger = exact_gate(ctx, trigger, "emit's trigger")
    fallback = token_value(default)
    items = [to_stream(token_value(s) if isinstance(s, str) else s, 1) for s in seq]
    flags = [trigger.cols[0]]
    for k in range(1, len(items)):
        flags.append(_lower_shift(ctx, trigger, k).cols[0])
    bank = ctx.bank(1)
    bank.const(0, fallback)
    rng = Interval.point(fallback)
    for k, item in enumerate(items):
        # item k is printed where trigger[i-k] = 1 and no nearer trigger exists:
        # off = 1 - f_k + sum_{j<k} f_j is 0 exactly there and >= 1 elsewhere.
        off = 1.0 - flags[k] + sum(flags[:k], Lin())
        ffn.gated(bank, 0, item.cols[0] - fallback, item.ranges[0].shift(-fallback), off)
        rng = rng.hull(item.ranges[0])
    signals, tables = ctx.prog.signals, ctx.prog.embed_tables
    read = max(ffn.read_rounding(item.cols[0] - fallback, lambda sid: signals[sid].range, tables)
               for item in items)  # one item is printed: its noise and how fp32 reads it
    rng = rng.with_noise(sum(item.ranges[0].noise for item in items) + read)
    return Stream(ctx.finish(bank, [rng]), [rng])


def exact_gate(ctx: LowerCtx, x: Stream, what: str) -> Stream:
    """A 0/1 value that steers a gate or an attention head must be (nearly) exact: a noisy
    one is snapped onto 0/1 (one MLP sublayer: a comparison, & | ~ of comparisons, a claimed
    0/1 value all hold 0 or 1 exactly in the reference); refused only when that cannot be
    certified."""
    x = exact_within(ctx, x, numerics.GATE_NOISE)
    r = x.ranges[0]
    if r.noise > numerics.GATE_NOISE:
        raise ctx.error(f"{what} may be off 0/1 by {r.noise:.3g} in the compiled model, and "
                        "it cannot be snapped onto 0/1 (the reference does not hold it exactly)",
                        "compare it instead, (v > 0.5).float() (a comparison snaps a value "
                        "the reference holds on its lattice), and join such with & | ~")
    return x


@intrinsic(_lower_emit)
def emit(trigger: torch.Tensor, seq: Sequence[Any], default: str | float = "<eos>") -> torch.Tensor:
    """The output stream: ``seq[k]`` at position t + k after the most recent trigger t (for k <
    len(seq)), ``default`` elsewhere. Items are code streams ``[seq, 1]``, numbers or token
    names; the value at position i is the code of the token the model predicts next."""
    trig = as_column(trigger)[:, 0]
    n = trig.shape[0]
    fallback = token_value(default)
    items = [torch.full((n,), token_value(s)) if isinstance(s, (str, int, float))
             else as_column(s)[:, 0] for s in seq]
    out = torch.full((n,), fallback)
    last = -1
    for i in range(n):
        if trig[i] > 0.5:
            last = i
        if last >= 0 and i - last < len(items):
            out[i] = items[i - last][i]
    return out[:, None]


# -- declarations ------------------------------------------------------------------------------
def _lower_claim(ctx: LowerCtx, v: Stream, lo: float, hi: float, integral: bool = False) -> Stream:
    """The declared range (tightened by what is known); integral=True declares the lattice Z
    unless a coarser lattice inside Z is known. Noise is a fact of the compiled value, not of
    the exact one: the claim keeps it."""
    out = []
    for r in v.ranges:
        # o + s Z (s = p/q, o = a/b in lowest terms) holds a whole number iff b divides q
        if integral and r.step is not None and r.step != 0 and \
                r.step.denominator % r.offset.denominator != 0:
            raise ctx.error(
                f"tw.claim(..., integral=True) on a value that is never a whole number: every "
                f"value is {float(r.offset % r.step):g} more than a multiple of {r.step}",
                "fix the arithmetic before the claim (it would be refused at run time too)")
        if integral and not r.integral and r.magnitude >= numerics.CLAIM_INTEGRAL_LIMIT:
            raise ctx.error(
                f"tw.claim(..., integral=True) over [{r.lo:.6g}, {r.hi:.6g}]: from "
                f"{numerics.CLAIM_INTEGRAL_LIMIT:.0f} on, fp32 cannot tell a whole number from "
                "one off by a half, so the claim cannot be checked there",
                "claim the small whole part before adding a large offset "
                "(tw.claim(v, 0, 9, integral=True) + 2**22, not tw.claim(v + 2**22, ...))")
        lat = r.lattice if (r.integral or not integral) else (Fraction(1), Fraction(0))
        new_lo = max(float(lo), r.lo) if r.lo <= hi else float(lo)
        new_hi = min(float(hi), r.hi) if r.hi >= lo else float(hi)
        if integral and math.ceil(new_lo) > math.floor(new_hi):
            raise ctx.error(f"tw.claim(..., integral=True) over [{new_lo:g}, {new_hi:g}] (the "
                            "claimed range met with what is known of the value) holds no "
                            "whole number", "fix the claimed range or the arithmetic before it")
        claimed = Interval.of(new_lo, new_hi, lat, r.noise,
                              EXACT if integral else r.rounding)  # the reference snaps
        if not integral:  # a range-only claim keeps every other fact (fractions, near-whole)
            claimed = dataclasses.replace(claimed, max_den=r.max_den, den_group=r.den_group,
                                          near_integral=r.near_integral)
        out.append(claimed)
    if ctx.prog.precision.half:  # the certificate's value sets may use it (certify_half.py)
        ctx.prog.claims.extend(zip(v.cols, out, strict=True))
    return Stream(v.cols, out, v.is_bool or all(r.is_bool for r in out))


@intrinsic(_lower_claim)
def claim(v: torch.Tensor, lo: float, hi: float, integral: bool = False) -> torch.Tensor:
    """Declare that every value of ``v`` lies in [lo, hi] (and is an integer if ``integral``);
    checked here, trusted by the compiler to size its constructions."""
    snapped = v.round() if integral else v  # eager fp32 noise (7/23 * 23 = 6.9999995)
    if checks_on() and v.numel():
        if integral:
            off = (v - snapped).abs() - v.abs() * CLAIM_INTEGRAL_REL
            if float(off.max()) > CLAIM_INTEGRAL_TOL:
                at = int(off.reshape(off.shape[0], -1).amax(dim=1).argmax())
                raise AssertionError("tw.claim violated: non-integer values in an integral "
                                     f"claim (e.g. {float(v.reshape(-1)[int(off.argmax())])}"
                                     f"){_claim_where(at)}")
        outside = (snapped < lo) | (snapped > hi)
        if bool(outside.any()):
            at = int(outside.reshape(outside.shape[0], -1).any(dim=1).float().argmax())
            raise AssertionError(f"tw.claim violated: values in [{float(snapped.min())}, "
                                 f"{float(snapped.max())}] outside [{lo}, {hi}]"
                                 f"{_claim_where(at)}")
    return snapped


def _claim_where(position: int) -> str:
    """Where a claim first fails: claims hold at every position, <bos> (0) included."""
    if position == 0:
        return ("; first at position 0, the <bos> row (claims are checked at every position, "
                "<bos> included: give the value a default there, e.g. torch.where("
                "tw.is_token(x, '<bos>'), lo, v), or widen the claim)")
    return f"; first at position {position}"


def _lower_check(ctx: LowerCtx, v: Stream, predicate: str, msg: str = "") -> Stream:
    ctx.prog.checks.append(Check(ctx.name, resolve_callables(predicate), msg, ctx.source))
    return v


@intrinsic(_lower_check)
def check(v: torch.Tensor, predicate: Callable[[torch.Tensor], torch.Tensor], msg: str = ""
          ) -> torch.Tensor:
    """Assert ``predicate(v)`` (elementwise, all true). Checked in the reference run (exact
    math) and, by ``Compiled.probe``, against the compiled values of ``v``. Returns ``v``."""
    if not checks_on():
        return v
    ok = predicate(v)
    if not bool(torch.as_tensor(ok).all()):
        raise AssertionError(f"tw.check failed: {msg or predicate}")
    return v


# -- facts ---------------------------------------------------------------------------------------
@facts(is_token)
def _is_token_facts(ctx: FactsCtx, x: NodeFacts, tokens: str | Sequence[str]) -> NodeFacts:
    ids = {ctx.vocab[t] for t in _tokens(tokens)}
    form = None if x.forms is None else sum((x.forms[i] for i in ids), Lin())
    return NodeFacts([BOOL], False, None if form is None else [form])


@facts(code)
def _code_facts(ctx: FactsCtx, x: NodeFacts) -> NodeFacts:
    form = None if x.forms is None else sum((c * float(i) for i, c in enumerate(x.forms)), Lin())
    return NodeFacts([Interval(0, len(ctx.vocab) - 1, True)], False,
                     None if form is None else [form])


@facts(shift)
def _shift_facts(ctx: FactsCtx, v: NodeFacts, k: int) -> NodeFacts:
    if not isinstance(k, int) or k < 0:
        raise ctx.error(f"shift offset must be a constant int >= 0, got {k!r}")
    return v if k == 0 else NodeFacts(moved_ranges(ctx.name, v.ranges), v.is_bool)


def _gate_facts(ctx: FactsCtx, when: NodeFacts, what: str) -> None:
    if when.width != 1 or not when.ranges[0].is_bool:
        raise ctx.error(f"{what} must be a 0/1 stream of width 1")


@facts(latch)
def _latch_facts(ctx: FactsCtx, v: NodeFacts, when: NodeFacts) -> NodeFacts:
    _gate_facts(ctx, when, "latch's `when`")
    return NodeFacts(moved_ranges(ctx.name, v.ranges), v.is_bool)


@facts(emit)
def _emit_facts(ctx: FactsCtx, trigger: NodeFacts, seq: Sequence[Any],
                default: str | float = "<eos>") -> NodeFacts:
    _gate_facts(ctx, trigger, "emit's trigger")
    rng = Interval.point(token_value(default))
    for s in seq:
        rng = rng.hull(as_facts(token_value(s) if isinstance(s, str) else s, 1).ranges[0])
    return NodeFacts([rng])


@facts(claim)
def _claim_facts(ctx: FactsCtx, v: NodeFacts, lo: float, hi: float,
                 integral: bool = False) -> NodeFacts:
    """The declared range met with what is known (``_lower_claim``)."""
    out = []
    for r in v.ranges:
        if integral and r.step is not None and r.step != 0 and \
                r.step.denominator % r.offset.denominator != 0:
            raise ctx.error("tw.claim(..., integral=True) on a value that is never whole")
        lat = r.lattice if (r.integral or not integral) else (Fraction(1), Fraction(0))
        new_lo = max(float(lo), r.lo) if r.lo <= hi else float(lo)
        new_hi = min(float(hi), r.hi) if r.hi >= lo else float(hi)
        if integral and math.ceil(new_lo) > math.floor(new_hi):
            raise ctx.error(f"tw.claim(..., integral=True) over [{new_lo:g}, {new_hi:g}] holds "
                            "no whole number")
        out.append(Interval.of(new_lo, new_hi, lat, 0.0, EXACT if integral else r.rounding))
    return NodeFacts(out, v.is_bool or all(r.is_bool for r in out), v.forms)


@facts(check)
def _check_facts(ctx: FactsCtx, v: NodeFacts, predicate: str, msg: str = "") -> NodeFacts:
    return v
