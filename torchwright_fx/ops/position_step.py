"""[i >= c] for the position i and a constant c, from the position head alone.

The position head outputs y_i = fl(1/(i+1)) exactly (ops/position.py), and y is decreasing in
i: i >= c exactly where y_i <= y_c. One ramp between y_c and y_{c-1} (over the middle half of
their gap) gives the step, so a program that only compares its position with constants needs
no position decoder (tens to hundreds of lanes at long contexts): two lanes.

The ramp reads y at a scale of 1/(y_{c-1} - y_c), about 2 c**2, so fp32 rounds its hinges
by up to an ulp of 2 c (n - c) / n at the far positions: certified by replaying both hinges in
fp32 at every position up to max_seq_len, with y off by a few ulps (the residual and RMSNorm
round it), twice the worst error kept as the result's noise (a later gate or step snaps it).
"""

from __future__ import annotations

from functools import lru_cache

import torch

from torchwright_fx.base.machines import MachineKind
from torchwright_fx.base.numerics import (
    FP32_UNIT,
    NOISE_TOLERANCE,
    POSITION_READ_ROUNDINGS,
    SILU_SCALE,
)
from torchwright_fx.ir.graph import Program
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import Interval
from torchwright_fx.ops.attention import Geometry
from torchwright_fx.ops.lanes import Bank
from torchwright_fx.ops.position import inverse_position, samples


def _ramp(c: int, n: int) -> tuple[float, float]:
    """(lo, hi): the ramp over the middle half of (y_c, y_{c-1}); [y <= lo] is [i >= c]."""
    y = samples(n).double()
    a, b = float(y[c]), float(y[c - 1])
    return a + (b - a) / 4, a + 3 * (b - a) / 4


def _replay(c: int, n: int, smooth: bool, scale: float) -> float:
    """The worst |output - [i >= c]| over positions 0..n-1, the lanes in fp32, y scaled."""
    lo, hi = _ramp(c, n)
    w = hi - lo
    y = samples(n) * torch.tensor(scale, dtype=torch.float32)
    k = SILU_SCALE if smooth else 1.0
    f32 = torch.float32
    out = torch.zeros(n, dtype=f32)
    for knot, weight in ((hi, 1.0), (lo, -1.0)):  # weight * relu((knot - y) / w)
        gate = torch.tensor(k * knot / w, dtype=f32) - torch.tensor(k / w, dtype=f32) * y
        act = torch.nn.functional.silu(gate) if smooth else torch.relu(gate)
        out += act * torch.tensor(weight / k, dtype=f32)
    want = (torch.arange(n) >= c).to(torch.float64)
    return float((out.double() - want).abs().max())


@lru_cache(maxsize=256)
def error(machine: MachineKind, c: int, n: int) -> float:
    """The bound on |compiled [i >= c] - [i >= c]| at every position below n."""
    worst = max(_replay(c, n, machine.smooth_hinge,
                        1.0 + s * POSITION_READ_ROUNDINGS * FP32_UNIT) for s in (-1, 0, 1))
    return 2.0 * worst


def at_least(prog: Program, geom: Geometry, bos: Lin, c: int, name: str, source: str
             ) -> tuple[Lin, Interval] | None:
    """[i >= c] (1 <= c < max_seq_len) as a 0/1 column and its facts; None where the fp32
    replay cannot keep it within a step's tolerance (the caller decodes the position)."""
    n = geom.max_seq_len
    bound = error(prog.machine, c, n)
    if bound >= float(NOISE_TOLERANCE) / 2:
        return None
    inverse = inverse_position(prog, geom, bos, name, source)
    lo, hi = _ramp(c, n)
    w = hi - lo
    bank = Bank(prog.machine, 1)
    bank.hinge(0, (hi - inverse) * (1.0 / w), 1.0)
    bank.hinge(0, (lo - inverse) * (1.0 / w), -1.0)
    rng = Interval(0.0, 1.0, True, noise=bound)
    (col,) = bank.finish(prog, [rng], f"{name}.at_least", source)
    return col, rng
