"""FFN constructions (DESIGN §6), written once on top of ``Bank``.

Each function adds lanes that write one output column of a bank. ``x`` arguments are affine
forms over signals with their value interval. Errors are those of ``Bank.hinge`` unless stated.
"""

from __future__ import annotations

import math

from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import Interval
from torchwright_fx.ops.lanes import Bank
from torchwright_fx.ops.numerics import (
    GATE_GAP,
    INTEGER_RAMP_HI,
    INTEGER_RAMP_LO,
    RAMP_WIDTH,
    SILU_SCALE,
)


class RangeError(ValueError):
    """A construction needs a finite value range that the program does not provide."""


def _need_finite(rng: Interval, what: str) -> None:
    if not rng.finite:
        raise RangeError(f"{what} needs a finite value range, got [{rng.lo}, {rng.hi}]; "
                         "declare one with tw.claim(v, lo, hi)")


def ramp(bank: Bank, out: int, x: Lin, a: float, b: float, weight: float = 1.0) -> None:
    """``weight * clamp((x - a) / (b - a), 0, 1)``."""
    w = b - a
    bank.hinge(out, (x - a) * (1.0 / w), weight)
    bank.hinge(out, (x - b) * (1.0 / w), -weight)


def step(bank: Bank, out: int, x: Lin, rng: Interval, t: float, *, strict: bool,
         weight: float = 1.0) -> None:
    """``weight * [x > t]`` (strict) or ``weight * [x >= t]``.

    Integer-valued x: the ramp sits strictly between two integers, exact at every integer.
    Real-valued x: the ramp is [t, t + RAMP_WIDTH] (strict) or [t - RAMP_WIDTH, t]; exact
    outside it, linear inside it.
    """
    true_always = rng.lo > t if strict else rng.lo >= t
    false_always = rng.hi <= t if strict else rng.hi < t
    if true_always:
        bank.const(out, weight)
        return
    if false_always:
        return
    if rng.integral:
        edge = math.floor(t) + 1 if strict else math.ceil(t)  # first integer that passes
        ramp(bank, out, x, edge - 1 + INTEGER_RAMP_LO, edge - 1 + INTEGER_RAMP_HI, weight)
    elif strict:
        ramp(bank, out, x, t, t + RAMP_WIDTH, weight)
    else:
        ramp(bank, out, x, t - RAMP_WIDTH, t, weight)


def equals(bank: Bank, out: int, x: Lin, rng: Interval, t: float, weight: float = 1.0) -> None:
    """``weight * [x == t]`` for integer-valued x."""
    if not rng.integral:
        raise RangeError("== needs an integer-valued stream (compare with a tolerance instead)")
    if not float(t).is_integer():
        return
    step(bank, out, x, rng, t, strict=False, weight=weight)
    step(bank, out, x, rng, t, strict=True, weight=-weight)


def relu(bank: Bank, out: int, x: Lin, rng: Interval, weight: float = 1.0) -> None:
    if rng.lo >= 0:
        bank.const(out, 0.0)
        linear(bank, out, x, weight)
    elif rng.hi > 0:
        bank.hinge(out, x, weight)


def linear(bank: Bank, out: int, x: Lin, weight: float) -> None:
    """Pass ``weight * x`` through the bank: hinge(x) - hinge(-x) = x exactly in real
    arithmetic on both machines (SiLU(a) - SiLU(-a) = a)."""
    bank.hinge(out, x, weight)
    bank.hinge(out, -x, -weight)


def gated(bank: Bank, out: int, x: Lin, rng: Interval, off: Lin, weight: float = 1.0) -> None:
    """``weight * x`` where ``off`` is 0, and 0 where ``off`` >= 1 (off must be integer-valued
    and non-negative): ``relu(x - M*off) - relu(-x - M*off)`` with M = max|x| + GATE_GAP."""
    _need_finite(rng, "a gated value")
    m = rng.magnitude + GATE_GAP
    bank.hinge(out, x - off * m, weight)
    bank.hinge(out, -x - off * m, -weight)


def select(bank: Bank, out: int, cond: Lin, a: Lin, ra: Interval, b: Lin, rb: Interval) -> None:
    """``a`` where cond = 1 else ``b`` (cond a 0/1 stream)."""
    if bank.machine == "swiglu":
        # SiLU(S*(2c-1)) * a/S is a when c = 1 (sigmoid(S) rounds to 1) and 0 when c = 0.
        sign = cond * 2.0 - 1.0
        if not (a.is_const and a.const == 0.0):
            bank.lane(out, sign * SILU_SCALE, a * (1.0 / SILU_SCALE))
        if not (b.is_const and b.const == 0.0):
            bank.lane(out, -sign * SILU_SCALE, b * (1.0 / SILU_SCALE))
        return
    _need_finite(ra.hull(rb), "torch.where on the ReLU machine")
    _linear_or_const(bank, out, b)
    gated(bank, out, a - b, ra - rb, 1.0 - cond)


def _linear_or_const(bank: Bank, out: int, x: Lin) -> None:
    if x.is_const:
        bank.const(out, x.const)
    else:
        linear(bank, out, x, 1.0)


def product(bank: Bank, out: int, a: Lin, ra: Interval, b: Lin, rb: Interval) -> None:
    """``a * b`` of two streams."""
    if bank.machine == "swiglu":
        # SiLU(a)*b + SiLU(-a)*(-b) = a*b*(sigmoid(a) + sigmoid(-a)) = a*b exactly.
        bank.lane(out, a, b)
        bank.lane(out, -a, -b)
        return
    if ra.is_bool:
        select(bank, out, a, b, rb, Lin(), Interval.point(0))
    elif rb.is_bool:
        select(bank, out, b, a, ra, Lin(), Interval.point(0))
    else:
        raise RangeError("a product of two non-boolean streams has no exact ReLU construction; "
                         "use the SwiGLU machine or tw.ops.relu.mul with a declared range")


def logical_and(bank: Bank, out: int, a: Lin, b: Lin) -> None:
    bank.hinge(out, a + b - 1.0)


def logical_or(bank: Bank, out: int, a: Lin, b: Lin) -> None:
    # a + b - and(a, b); the linear part passes through exactly
    linear(bank, out, a + b, 1.0)
    bank.hinge(out, a + b - 1.0, -1.0)


def lookup(bank: Bank, out: int, x: Lin, rng: Interval, table: dict[int, float],
           default: float) -> None:
    """``table.get(x, default)`` for integer-valued x: a staircase of integer steps."""
    if not rng.integral:
        raise RangeError("lookup needs an integer-valued key stream")
    _need_finite(rng, "lookup")
    lo, hi = int(rng.lo), int(rng.hi)
    if hi - lo > 4096:
        raise RangeError(f"lookup key range [{lo}, {hi}] is too wide (over 4096 entries)")
    prev = table.get(lo, default)
    bank.const(out, prev)
    for key in range(lo + 1, hi + 1):
        value = table.get(key, default)
        if value != prev:
            step(bank, out, x, rng, key, strict=False, weight=value - prev)
        prev = value
