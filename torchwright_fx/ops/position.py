"""The position scalar i, from attention and one or three MLP sublayers.

A head with equal logits everywhere averages the BOS indicator over positions 0..i: its output
is y_i = fl(1/(i+1)) exactly (equal softmax weights 1/(i+1), only the BOS row is non-zero).
An MLP then inverts it, c(y) = 1/y - 1 at the points (y_c, c), c < max_seq_len, with lanes
that each switch on at a knot y_a (a count) and stay on for every larger count. Each hinge has
its own sharpness, so that the neighbouring sample points sit in its exact region (argument
>= UNDERFLOW below the knot, >= SATURATION above).

- SwiGLU: a lane is a hinge times an affine form of y (its up projection reads y too), so it
  adds a quadratic piece, t (alpha + beta t) with t = y_a - y >= 0: two free coefficients, so
  one lane takes the interpolant exactly through the next two counts, and farther where c(y)'s
  third derivative allows (within PIECE_ERROR of every count in between): 21 lanes at 42,
  138 at 512, 316 at 2048, where hinges alone took 41, 503 and 1,090.
- ReLU (up is the constant 1): a hinge adds a linear piece. c(y) is convex, so between two
  knots the chord lies above it, by at most (c - a)(b - c)/(c + 1) at a count c between knots
  a and b: knots CHORD_ERROR apart in that sense, the interpolant lowered by half of it.
- Two stages (SwiGLU beyond TWO_STAGE_LENGTH, where one stage's lanes and fp32 rounding grow): a
  coarse interpolant p within e <= sqrt(NEWTON_ERROR * (c + 1)) of c, then one Newton step
  for the reciprocal, a = p + 1, c' = a * (2 - a * y) - 1 = c - e**2 / (c + 1): two products
  (two SwiGLU lanes each), for two more MLP sublayers.

The result is within POSITION_TOLERANCE of i at every position, measured at compile time by
replaying the decoder in fp32.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import torch

from torchwright_fx.base.errors import GeometryError
from torchwright_fx.base.machines import SWIGLU, MachineKind
from torchwright_fx.base.numerics import (
    CHORD_ERROR,
    NEWTON_ERROR,
    PIECE_ERROR,
    POSITION_TOLERANCE,
    RECIPROCAL_CHORD,
    SILU_SCALE,
    TWO_STAGE_LENGTH,
    UNDERFLOW,
)
from torchwright_fx.ir.graph import Program
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import Interval
from torchwright_fx.ops import attention, ffn
from torchwright_fx.ops.attention import Geometry
from torchwright_fx.ops.lanes import Bank


def samples(n: int) -> torch.Tensor:
    """y_k = fl32(1 / (k + 1)): what the averaging head outputs at position k."""
    return 1.0 / torch.arange(1, n + 1, dtype=torch.float32)


def _knot_counts(n: int) -> list[int]:
    """Counts 0 = k_0 < k_1 < ... = n - 1, each as far from the last as the chord between them
    stays within CHORD_ERROR of every count c in between (the chord lies above: c(y) is
    convex)."""
    y = samples(n).double().numpy()
    counts = np.arange(n, dtype=np.float64)
    chosen, a = [0], 0
    while a < n - 1:
        b = a + 1
        while b + 1 <= n - 1:
            cand = b + 1
            mid = slice(a + 1, cand)
            chord = a + (cand - a) * (y[mid] - y[a]) / (y[cand] - y[a])
            if np.any(chord - counts[mid] > CHORD_ERROR):
                break
            b = cand
        chosen.append(b)
        a = b
    return chosen


@lru_cache(maxsize=32)
def knots(n: int) -> tuple[tuple[float, float, float], ...]:
    """(y_k, slope change a_k, sharpness) per ReLU knot: f(y) = sum a_k relu(y_k - y)."""
    counts = _knot_counts(n)
    y = samples(n).double().numpy()
    out, before = [], 0.0
    for a, b in zip(counts[:-1], counts[1:], strict=True):
        slope = (b - a) / float(y[a] - y[b])  # -(slope of f) on [y_b, y_a]
        out.append((float(y[a]), slope - before, _sharpness(y, a)))
        before = slope
    return tuple(out)


@lru_cache(maxsize=32)
def chord_error(n: int) -> float:
    """The ReLU interpolant's largest excess over the count (exact arithmetic)."""
    y = samples(n).double()
    counts = _knot_counts(n)
    excess = 0.0
    for a, b in zip(counts[:-1], counts[1:], strict=True):
        c = torch.arange(a + 1, b, dtype=torch.float64)
        if len(c):
            chord = a + (b - a) * (y[a + 1:b] - y[a]) / (y[b] - y[a])
            excess = max(excess, float((chord - c).max()))
    return excess


def _sharpness(y: np.ndarray, a: int) -> float:
    """A hinge at y_a whose neighbouring samples sit in its exact regions."""
    nearest = float(y[a] - y[a + 1]) if a == 0 else min(float(y[a] - y[a + 1]),
                                                         float(y[a - 1] - y[a]))
    return UNDERFLOW * 1.05 / (SILU_SCALE * nearest)


@lru_cache(maxsize=32)
def pieces(n: int, two_stage: bool = False) -> tuple[tuple[float, float, float, float], ...]:
    """(y_a, alpha, beta, sharpness) per SwiGLU lane: f(y) = sum relu(t) (alpha + beta t), t =
    y_a - y. Greedy from count 0: each piece starts at the count where the last one ended (where
    the sum so far is exact), is exact at its far end b, takes beta by least squares over the
    counts between, and reaches the farthest b that keeps every count within the allowance
    (PIECE_ERROR, or sqrt(NEWTON_ERROR * (c + 1)) for a coarse stage)."""
    y = samples(n).double().numpy()
    counts = np.arange(n, dtype=np.float64)
    limit = np.sqrt(NEWTON_ERROR * (counts + 1)) if two_stage else np.full(n, PIECE_ERROR)
    total = np.zeros(n)  # the pieces so far, at every count
    out, a = [], 0
    while a < n - 1:
        b, alpha, beta = a + 1, 0.0, 0.0
        for end in range(a + 1, n):
            t = y[a] - y[a + 1:end + 1]
            r = counts[a + 1:end + 1] - total[a + 1:end + 1]
            # exact at the end: alpha = r_b / t_b - beta t_b; the rest errs by u + beta v
            u, v = t * r[-1] / t[-1] - r, t * (t - t[-1])
            vv = float(v @ v)
            bet = -float(u @ v) / vv if vv > 0 else 0.0
            if end > a + 1 and np.any(np.abs(u + bet * v) > limit[a + 1:end + 1]):
                break
            b, alpha, beta = end, float(r[-1] / t[-1] - bet * t[-1]), bet
        t = np.maximum(y[a] - y, 0.0)
        total += t * (alpha + beta * t)
        out.append((float(y[a]), alpha, beta, _sharpness(y, a)))
        a = b
    return tuple(out)


def _silu_lanes(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """fp32 SiLU(g) * u + SiLU(-g) * (-u): a SwiGLU product's two lanes, summed."""
    silu = torch.nn.functional.silu
    return silu(gate) * up + silu(-gate) * (-up)


def _replay(n: int, machine: MachineKind, two_stage: bool) -> torch.Tensor:
    """The decoder's output at every position, in fp32 as the runtime computes it."""
    y = samples(n)
    f32 = torch.float32

    def w(x: float) -> torch.Tensor:
        return torch.tensor(x, dtype=f32)

    total = torch.zeros(n, dtype=f32)
    if machine.gated_up:  # gate k (y_a - y), up (alpha + beta (y_a - y)) / k
        act = torch.nn.functional.silu if machine.smooth_hinge else torch.relu
        for ya, alpha, beta, sharp in pieces(n, two_stage):
            k = SILU_SCALE * sharp if machine.smooth_hinge else 1.0
            total += act(w(k * ya) - w(k) * y) * (w((alpha + beta * ya) / k) - w(beta / k) * y)
    else:
        for yk, ak, _ in knots(n):
            total += torch.relu(w(yk) - y) * w(ak)
        total += w(-chord_error(n) / 2)
    if not two_stage:
        return total
    a = total + 1.0
    u = _silu_lanes(a, y)
    return _silu_lanes(a, 2.0 - u) - 1.0


@lru_cache(maxsize=64)
def measured_error(n: int, machine: MachineKind = SWIGLU, two_stage: bool = False) -> float:
    """Worst |decoded - i| over all positions, replaying the lanes in fp32."""
    got = _replay(n, machine, two_stage).double()
    return float((got - torch.arange(n, dtype=torch.float64)).abs().max())


def _bound(n: int, measured: float) -> float:
    """Twice the fp32 replay (the runtime may round its sums in another order), plus fp32
    rounding of i itself (2**-23 relative)."""
    return 2.0 * measured + n * 2.0 ** -23


@lru_cache(maxsize=64)
def two_stages(machine: MachineKind, n: int) -> bool:
    """Whether the decoder takes the Newton stage (SwiGLU beyond TWO_STAGE_LENGTH)."""
    return machine.smooth_hinge and n > TWO_STAGE_LENGTH


def noise(machine: MachineKind, n: int, lean: bool = False) -> float:
    """The bound on |compiled position - i| (``lean``: of a lean decode_count)."""
    two = two_stages(machine, n) or (lean and machine.smooth_hinge)
    return _bound(n, measured_error(n, machine, two))


@lru_cache(maxsize=64)
def error_at_bos(machine: MachineKind, n: int) -> float:
    """The bound on |compiled position - 0| at <bos>, where the head's output is exactly 1:
    twice the fp32 replay there. On SwiGLU every lane is exactly 0 there (the first piece's
    gate is k - k, the others' SiLU underflows), so it is 0 in any order of summation."""
    return 2.0 * abs(float(_replay(n, machine, two_stages(machine, n))[0]))


def lane_count(machine: MachineKind, n: int) -> int:
    """MLP lanes of one decoder (knots, plus two products of two lanes in two stages)."""
    if not machine.gated_up:
        return len(knots(n))
    two = two_stages(machine, n)
    return len(pieces(n, two)) + (4 if two else 0)


def decode_count(prog: Program, geom: Geometry, inverse: Lin, name: str, source: str,
                 lean: bool = False) -> Lin:
    """The count c from a head's output fl(1/(c+1)) (c < max_seq_len). ``lean``: the two-stage
    decoder at any length on SwiGLU (tens of lanes instead of a thousand at 2048, for two more
    MLP sublayers): for counts built many at a time, such as a counted mean's."""
    n, machine = geom.max_seq_len, prog.machine
    two = two_stages(machine, n) or (lean and machine.smooth_hinge)
    error = _bound(n, measured_error(n, machine, two))
    if error > POSITION_TOLERANCE:
        raise GeometryError(f"position decoding error {error:.3f} at "
                            f"max_seq_len={n} exceeds {POSITION_TOLERANCE}", "lower max_seq_len")
    bank = Bank(machine, 1)
    if machine.gated_up:
        for ya, alpha, beta, sharp in pieces(n, two):
            bank.hinge_times(0, ya - inverse, alpha + beta * (ya - inverse), sharpness=sharp)
    else:
        for yk, ak, sharp in knots(n):
            bank.hinge(0, yk - inverse, ak, sharpness=sharp)
        bank.const(0, -chord_error(n) / 2)  # the chord lies above: centre its error
    final = Interval(0.0, n - 1, True, noise=error)
    if not two:
        (count,) = bank.finish(prog, [final], name, source)
        return count
    # the coarse stage, then the Newton step a * (2 - a * y) - 1 (a = coarse + 1)
    top = max(math.sqrt(NEWTON_ERROR * n), 1.0)
    (coarse,) = bank.finish(prog, [Interval(-1.0, n - 1 + 2 * top)], f"{name}.coarse", source)
    a, ra = coarse + 1.0, Interval(0.0, n + 2 * top)
    ry = Interval(0.0, 1.0)
    product = Bank(machine, 1)
    ffn.product(product, 0, a, ra, inverse, ry)
    (u,) = product.finish(prog, [Interval(0.0, 2.0)], f"{name}.newton", source)
    step = Bank(machine, 1)
    ffn.product(step, 0, a, ra, 2.0 - u, Interval(0.0, 2.0))
    step.const(0, -1.0)
    (count,) = step.finish(prog, [final], name, source)
    return count


def inverse_position(prog: Program, geom: Geometry, bos: Lin, name: str, source: str) -> Lin:
    """fl(1 / (i + 1)), the averaging head the position decodes, built once per program."""
    if prog.shared.inverse_position is None:
        (prog.shared.inverse_position,) = attention.mean(
            prog, geom, [bos], [Interval(0.0, 1.0)], Lin.constant(1.0), f"{name}.inverse_count",
            source)
    return prog.shared.inverse_position


def position(prog: Program, geom: Geometry, bos: Lin, name: str, source: str) -> Lin:
    """The position scalar, built once per program and shared."""
    if prog.shared.position is not None:
        return prog.shared.position
    inverse = inverse_position(prog, geom, bos, name, source)
    prog.shared.position = decode_count(prog, geom, inverse, f"{name}.position", source)
    return prog.shared.position


# -- the reciprocal of an exact count -------------------------------------------------------------
# 1/m for a whole number 1 <= m <= n held exactly in a column (a snapped count): a
# piecewise-linear interpolant through integer knots, then one Newton step. 1/m is convex, so the
# chord between knots a < b lies above it; knots are as far apart as keeps the chord within
# RECIPROCAL_CHORD of 1/m (relative) at every integer between, and the Newton step
# r' = r (2 - m r) squares that relative error. Written as sum_a w_a relu(k_a - m) plus 1/n, every
# term is positive (w_a are the slope changes), so fp32 adds no cancellation.
@lru_cache(maxsize=16)
def reciprocal_knots(n: int) -> tuple[tuple[float, float], ...]:
    """(knot k_a, weight w_a) with r0(m) = 1/(n) + sum w_a relu(k_a - m) on 1 <= m <= n."""
    m = np.arange(1, n + 1, dtype=np.float64)
    chosen, a = [1], 1
    while a < n:
        lo, hi = a + 1, n  # the farthest b whose chord from a stays within the bound
        while lo < hi:
            b = (lo + hi + 1) // 2
            mid = m[a:b - 1]  # the integers strictly between a and b
            chord = 1 / a + (mid - a) * (1 / b - 1 / a) / (b - a)
            if len(mid) and np.max(chord * mid - 1) > RECIPROCAL_CHORD:
                hi = b - 1
            else:
                lo = b
        chosen.append(lo)
        a = lo
    out, after = [], 0.0  # from the right: the slope of r0 beyond each knot
    for a, b in zip(reversed(chosen[:-1]), reversed(chosen[1:]), strict=True):
        slope = (1 / b - 1 / a) / (b - a)  # negative
        out.append((float(b), after - slope))  # relu(b - m) turns on below b
        after = slope
    return tuple(reversed(out))


def _replay_reciprocal(n: int) -> torch.Tensor:
    """The reciprocal's output at every count 1..n, in fp32 as the runtime computes it."""
    f32 = torch.float32
    m = torch.arange(1, n + 1, dtype=f32)
    total = torch.zeros(n, dtype=f32)
    for k, w in reciprocal_knots(n):
        z = SILU_SCALE * (torch.tensor(k, dtype=f32) - m)
        total += torch.nn.functional.silu(z) * torch.tensor(w / SILU_SCALE, dtype=f32)
    r0 = total + torch.tensor(1.0 / n, dtype=f32)
    u = _silu_lanes(m, r0)
    return _silu_lanes(2.0 - u, r0)


@lru_cache(maxsize=16)
def reciprocal_error(n: int) -> float:
    """The bound on |compiled 1/m - 1/m| * m over 1 <= m <= n: twice the fp32 replay's worst
    relative error (another summation order), plus the reader's rounding (2**-23)."""
    m = torch.arange(1, n + 1, dtype=torch.float64)
    measured = float(((_replay_reciprocal(n).double() * m) - 1).abs().max())
    return 2.0 * measured + 2.0 ** -23


def reciprocal(prog: Program, m: Lin, n: int, name: str, source: str) -> Lin:
    """1/m for the exact whole number m in [0, n] held in ``m`` (within reciprocal_error(n) of
    it, relative, for m >= 1; at most 3 at m = 0). Three MLP sublayers."""
    machine = prog.machine
    bank = Bank(machine, 1)
    for k, w in reciprocal_knots(n):
        bank.hinge(0, k - m, w)
    bank.const(0, 1.0 / n)
    (r0,) = bank.finish(prog, [Interval(0.0, 2.0)], f"{name}.coarse", source)
    rm, rr = Interval(0.0, n, True), Interval(0.0, 2.0)
    product = Bank(machine, 1)
    ffn.product(product, 0, m, rm, r0, rr)
    (u,) = product.finish(prog, [Interval(0.0, 2.0)], f"{name}.newton", source)
    step = Bank(machine, 1)
    ffn.product(step, 0, 2.0 - u, Interval(0.0, 2.0), r0, rr)
    (r,) = step.finish(prog, [Interval(0.0, 4.0)], name, source)
    return r
