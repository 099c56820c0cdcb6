"""Hinge-based elementwise ops: relu, abs, clamp, pass-through, gates, select, logic."""

from __future__ import annotations

import math

from torchwright_fx.base.numerics import (
    GATE_GAP,
    SILU_SCALE,
)
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import (
    Interval,
)
from torchwright_fx.ops.ffn.grids import need_finite
from torchwright_fx.ops.ffn.pwl import Pwl, linear
from torchwright_fx.ops.lanes import Bank


# -- hinge-based elementwise ops ----------------------------------------------------------------
def relu_pwl() -> Pwl:
    f = Pwl()
    f.hinge(0.0, 1.0)
    return f


def abs_pwl() -> Pwl:
    """|x| = 2 relu(x) - x: one lane (SwiGLU: x * tanh(S x / 2), within 2*0.2785/S)."""
    f = Pwl(slope=-1.0)
    f.hinge(0.0, 2.0)
    return f


def clamp_pwl(lo: float, hi: float) -> Pwl:
    """clamp(x, lo, hi) for constant bounds (either may be infinite)."""
    if math.isinf(lo):
        f = Pwl(slope=1.0)
        if not math.isinf(hi):
            f.hinge(hi, -1.0)
        return f
    f = Pwl(const=lo)
    f.hinge(lo, 1.0)
    if not math.isinf(hi):
        f.hinge(hi, -1.0)
    return f



def gated(bank: Bank, out: int, x: Lin, rng: Interval, off: Lin, weight: float = 1.0) -> None:
    """``weight * x`` where ``off`` is 0, and 0 where ``off`` >= 1 (off must be integer-valued
    and non-negative): ``relu(x - M*off) - relu(-x - M*off)`` with M = max|x| + GATE_GAP."""
    need_finite(rng, "a gated value")
    m = rng.magnitude + GATE_GAP
    bank.hinge(out, x - off * m, weight)
    bank.hinge(out, -x - off * m, -weight)


def select(bank: Bank, out: int, cond: Lin, a: Lin, ra: Interval, b: Lin, rb: Interval) -> None:
    """``a`` where cond = 1 else ``b`` (cond a 0/1 stream)."""
    if bank.machine.gated_up:
        # SiLU(S*(2c-1)) * a/S is a when c = 1 (sigmoid(S) rounds to 1) and 0 when c = 0.
        sign = cond * 2.0 - 1.0
        if not (a.is_const and a.const == 0.0):
            bank.lane(out, sign * SILU_SCALE, a * (1.0 / SILU_SCALE))
        if not (b.is_const and b.const == 0.0):
            bank.lane(out, -sign * SILU_SCALE, b * (1.0 / SILU_SCALE))
        return
    need_finite(ra.hull(rb), "torch.where on the ReLU machine")
    _linear_or_const(bank, out, b)
    gated(bank, out, a - b, ra - rb, 1.0 - cond)


def _linear_or_const(bank: Bank, out: int, x: Lin) -> None:
    if x.is_const:
        bank.const(out, x.const)
    else:
        linear(bank, out, x, 1.0)

# -- logic ------------------------------------------------------------------------------------
def at_least(k: int) -> Pwl:
    """[count >= k] for an integer count: relu(count - k + 1) - relu(count - k), exact."""
    f = Pwl()
    f.hinge(k - 1, 1.0)
    f.hinge(k, -1.0)
    return f
