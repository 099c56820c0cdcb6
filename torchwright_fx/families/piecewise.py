"""relu, abs, clamp (and its spellings hardtanh, relu6), maximum / minimum and max / min."""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.nn.functional as F

from torchwright_fx.analysis.facts import FactsCtx, NodeFacts, as_facts, const_values
from torchwright_fx.capture.registry import Rule, facts, lowering
from torchwright_fx.lower.context import LowerCtx
from torchwright_fx.lower.rules import (
    INF,
    pwl_stream,
    streams_of,
)
from torchwright_fx.lower.stream import Stream, const_vector, to_stream
from torchwright_fx.ops import ffn
from torchwright_fx.ops.ffn import Pwl


# -- piecewise-linear -----------------------------------------------------------------------------
@lowering(torch.relu, F.relu, methods=("relu",))
def _relu(ctx: LowerCtx, a: Any, inplace: bool = False) -> Stream:
    x = to_stream(a, ctx.out_width)
    ranges = [r.clamp(0.0, INF).with_noise(0.0) for r in x.ranges]
    return pwl_stream(ctx, x.cols, x.ranges, [ffn.relu_pwl()] * x.width, ranges)


@lowering(torch.abs, operator.abs, methods=("abs", "__abs__"))
def _abs(ctx: LowerCtx, a: Any) -> Stream:
    x = to_stream(a, ctx.out_width)
    ranges = [r.absolute().with_noise(0.0) for r in x.ranges]
    return pwl_stream(ctx, x.cols, x.ranges, [ffn.abs_pwl()] * x.width, ranges)


@lowering(torch.clamp, torch.clip, methods=("clamp", "clip"))
def _clamp(ctx: LowerCtx, a: Any, min: Any = None, max: Any = None) -> Stream:
    x = to_stream(a, ctx.out_width)
    if isinstance(min, Stream) or isinstance(max, Stream):  # two stages of max / min
        lower = x if min is None else _extremum(ctx, x, min, 1.0)
        return lower if max is None else _extremum(ctx, lower, max, -1.0)
    w = x.width
    los = [-INF] * w if min is None else const_vector(min, w)
    his = [INF] * w if max is None else const_vector(max, w)
    fs = [ffn.clamp_pwl(lo, hi) for lo, hi in zip(los, his, strict=True)]
    ranges = [r.clamp(lo, hi).with_noise(0.0) for r, lo, hi in zip(x.ranges, los, his, strict=True)]
    return pwl_stream(ctx, x.cols, x.ranges, fs, ranges)


def _extremum(ctx: LowerCtx, a: Any, b: Any, sign: float) -> Stream:
    # max(a, b) = b + relu(a - b); min(a, b) = b - relu(b - a)
    x, y = streams_of(ctx, a, b)
    diffs = [(p - q) * sign for p, q in zip(x.cols, y.cols, strict=True)]
    drs = [(r - s).scale(sign) for r, s in zip(x.ranges, y.ranges, strict=True)]
    f = Pwl()
    f.hinge(0.0, sign)
    part_ranges = [d.clamp(0.0, INF).scale(sign).with_noise(0.0) for d in drs]
    parts = pwl_stream(ctx, diffs, drs, [f] * x.width, part_ranges)
    ranges = [r.extremum(s, sign).with_noise(s.noise + p.noise)
              for r, s, p in zip(x.ranges, y.ranges, parts.ranges, strict=True)]
    return Stream([c + p for c, p in zip(y.cols, parts.cols, strict=True)], ranges)


@lowering(torch.maximum, torch.fmax, methods=("maximum", "fmax"))
def _maximum(ctx: LowerCtx, a: Any, b: Any) -> Stream:
    return _extremum(ctx, a, b, 1.0)


@lowering(torch.minimum, torch.fmin, methods=("minimum", "fmin"))
def _minimum(ctx: LowerCtx, a: Any, b: Any) -> Stream:
    return _extremum(ctx, a, b, -1.0)


def _max_or_reduction(sign: float) -> Rule:
    """torch.max(a, b) is elementwise; torch.max(a) and torch.max(a, dim) reduce."""
    def lower(ctx: LowerCtx, a: Any, b: Any = None, *rest: Any, **kwargs: Any) -> Stream:
        if b is None or isinstance(b, int) or rest or kwargs:
            name = "max" if sign > 0 else "min"
            dim = b if isinstance(b, int) else kwargs.get("dim")
            if dim in (0, -2) or dim is None:
                raise ctx.error(f"torch.{name} over positions (dim=0) would read the whole "
                                "sequence, future included",
                                f"use tw.arg{name}(score, v) for the value at the best position "
                                f"so far, or torch.{name}imum(a, b) of two streams")
            raise ctx.error(f"torch.{name} as a reduction over the last dim",
                            f"use torch.{name}imum(a, b) of two streams, or tw.arg{name} "
                            "over positions")
        return _extremum(ctx, a, b, sign)

    return lower


lowering(torch.max, methods=("max",))(_max_or_reduction(1.0))
lowering(torch.min, methods=("min",))(_max_or_reduction(-1.0))


@lowering(F.hardtanh)
def _hardtanh(ctx: LowerCtx, a: Any, min_val: float = -1.0, max_val: float = 1.0,
              inplace: bool = False) -> Stream:
    return _clamp(ctx, a, min_val, max_val)


@lowering(F.relu6)
def _relu6(ctx: LowerCtx, a: Any, inplace: bool = False) -> Stream:
    return _clamp(ctx, a, 0.0, 6.0)


# -- facts ---------------------------------------------------------------------------------------
@facts(torch.relu, F.relu, methods=("relu",))
def _relu_facts(ctx: FactsCtx, a: Any, inplace: bool = False) -> NodeFacts:
    return NodeFacts([r.clamp(0.0, INF) for r in as_facts(a, ctx.out_width).ranges])


@facts(torch.abs, operator.abs, methods=("abs", "__abs__"))
def _abs_facts(ctx: FactsCtx, a: Any) -> NodeFacts:
    return NodeFacts([r.absolute() for r in as_facts(a, ctx.out_width).ranges])


@facts(torch.clamp, torch.clip, methods=("clamp", "clip"))
def _clamp_facts(ctx: FactsCtx, a: Any, min: Any = None, max: Any = None) -> NodeFacts:
    x = as_facts(a, ctx.out_width)
    if isinstance(min, NodeFacts) or isinstance(max, NodeFacts):  # max / min of streams
        lower = x if min is None else _extremum_facts(ctx, x, min, 1.0)
        return lower if max is None else _extremum_facts(ctx, lower, max, -1.0)
    w = x.width
    los = [-INF] * w if min is None else const_values(min, w)
    his = [INF] * w if max is None else const_values(max, w)
    return NodeFacts([r.clamp(lo, hi) for r, lo, hi in zip(x.ranges, los, his, strict=True)])


def _extremum_facts(ctx: FactsCtx, a: Any, b: Any, sign: float) -> NodeFacts:
    x, y = as_facts(a, ctx.out_width), as_facts(b, ctx.out_width)
    return NodeFacts([r.extremum(s, sign) for r, s in zip(x.ranges, y.ranges, strict=True)])


@facts(torch.maximum, torch.fmax, methods=("maximum", "fmax"))
def _maximum_facts(ctx: FactsCtx, a: Any, b: Any) -> NodeFacts:
    return _extremum_facts(ctx, a, b, 1.0)


@facts(torch.minimum, torch.fmin, methods=("minimum", "fmin"))
def _minimum_facts(ctx: FactsCtx, a: Any, b: Any) -> NodeFacts:
    return _extremum_facts(ctx, a, b, -1.0)


def _max_or_reduction_facts(sign: float) -> Rule:
    def rule(ctx: FactsCtx, a: Any, b: Any = None, *rest: Any, **kwargs: Any) -> NodeFacts:
        if b is None or isinstance(b, int) or rest or kwargs:
            raise ctx.error("torch.max / torch.min as a reduction")
        return _extremum_facts(ctx, a, b, sign)

    return rule


facts(torch.max, methods=("max",))(_max_or_reduction_facts(1.0))
facts(torch.min, methods=("min",))(_max_or_reduction_facts(-1.0))


@facts(F.hardtanh)
def _hardtanh_facts(ctx: FactsCtx, a: Any, min_val: float = -1.0, max_val: float = 1.0,
                    inplace: bool = False) -> NodeFacts:
    return _clamp_facts(ctx, a, min_val, max_val)


@facts(F.relu6)
def _relu6_facts(ctx: FactsCtx, a: Any, inplace: bool = False) -> NodeFacts:
    return _clamp_facts(ctx, a, 0.0, 6.0)
