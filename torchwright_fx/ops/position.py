"""The position scalar i, from attention and one MLP sublayer.

A head with equal logits everywhere averages the BOS indicator over positions 0..i: its output
is y_i = fl(1/(i+1)) exactly (equal softmax weights 1/(i+1), only the BOS row is non-zero).
An MLP then inverts it with the piecewise-linear interpolant through (y_n, n), n < max_seq_len:
one hinge per knot y_k, each with its own sharpness so that the neighbouring sample points sit
in the hinge's exact region (argument >= UNDERFLOW below the knot, >= SATURATION above).
The result is within POSITION_TOLERANCE of i at every position, measured at compile time by
replaying the interpolant in fp32.
"""

from __future__ import annotations

from functools import lru_cache

import torch

from torchwright_fx.ir.graph import Program
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import Interval
from torchwright_fx.ops import attention
from torchwright_fx.ops.attention import Geometry, GeometryError
from torchwright_fx.ops.lanes import Bank
from torchwright_fx.ops.numerics import SILU_SCALE, UNDERFLOW

# Integer-valued streams are consumed by ramps placed a quarter unit from every integer
# (numerics.INTEGER_RAMP_LO), so any error below that is harmless; we demand far less.
POSITION_TOLERANCE = 0.05


def samples(n: int) -> torch.Tensor:
    """y_k = fl32(1 / (k + 1)): what the averaging head outputs at position k."""
    return 1.0 / torch.arange(1, n + 1, dtype=torch.float32)


@lru_cache(maxsize=32)
def knots(n: int) -> tuple[tuple[float, float, float], ...]:
    """(y_k, slope change a_k, sharpness) for k = 0..n-2: f(y) = sum a_k relu(y_k - y)."""
    y = samples(n).double()
    gaps = y[:-1] - y[1:]  # y_k - y_{k+1} > 0
    slopes = 1.0 / gaps  # -(slope of f) on [y_{k+1}, y_k]
    a = torch.cat([slopes[:1], slopes[1:] - slopes[:-1]])
    out = []
    for k in range(n - 1):
        nearest = float(gaps[k]) if k == 0 else min(float(gaps[k]), float(gaps[k - 1]))
        out.append((float(y[k]), float(a[k]), UNDERFLOW * 1.05 / (SILU_SCALE * nearest)))
    return tuple(out)


@lru_cache(maxsize=32)
def measured_error(n: int) -> float:
    """Worst |f(y_i) - i| over all positions, replaying the SwiGLU lanes in fp32."""
    y = samples(n)
    total = torch.zeros(n, dtype=torch.float32)
    for yk, ak, sharp in knots(n):
        k = SILU_SCALE * sharp
        f32 = torch.float32
        gate = torch.tensor(k * yk, dtype=f32) - torch.tensor(k, dtype=f32) * y
        total += torch.nn.functional.silu(gate) * torch.tensor(ak / k, dtype=torch.float32)
    return float((total.double() - torch.arange(n, dtype=torch.float64)).abs().max())


def noise(machine: str, n: int) -> float:
    """The bound on |compiled position - i|: twice the fp32 replay of the decoder (the runtime
    may round its sums in another order), plus fp32 rounding of i itself (2**-23 relative)."""
    return 2.0 * measured_error(n) + n * 2.0 ** -23


def position(prog: Program, geom: Geometry, bos: Lin, name: str, source: str) -> Lin:
    """The position scalar, built once per program and shared."""
    cached = prog.memo.get("position")
    if isinstance(cached, Lin):
        return cached
    (inverse,) = attention.mean(prog, geom, [bos], [Interval(0.0, 1.0)], Lin.constant(1.0),
                                f"{name}.inverse_count", source)
    pos = decode_count(prog, geom, inverse, f"{name}.position", source)
    prog.memo["position"] = pos
    return pos


def decode_count(prog: Program, geom: Geometry, inverse: Lin, name: str, source: str) -> Lin:
    """The count c from a head's output fl(1/(c+1)) (c < max_seq_len): one hinge per knot."""
    n = geom.max_seq_len
    if prog.machine == "swiglu" and measured_error(n) > POSITION_TOLERANCE:
        raise GeometryError(f"position decoding error {measured_error(n):.3f} at "
                            f"max_seq_len={n} exceeds {POSITION_TOLERANCE}")
    bank = Bank(prog.machine, 1)
    for yk, ak, sharp in knots(n):
        bank.hinge(0, yk - inverse, ak, sharpness=sharp)
    (count,) = bank.finish(prog, [Interval(0.0, n - 1, True, noise=noise(prog.machine, n))],
                           name, source)
    return count
