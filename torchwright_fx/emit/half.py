"""The half-precision emitter's two parts that differ from fp32 (docs/half-precision.md Q1, Q5).

RMSNorm without pins. With ``rms_norm_eps = 2**(2e)`` and the sum of squares of the residual
small beside it, ``rsqrt(mean(h**2) + eps)`` rounds to exactly ``2**-e`` in each format, so the
norm is ``h -> 2**(a - e) * h`` for gains ``2**a``, and every reader of a normalised stream
(q/k/v, gate/up, lm_head) is multiplied by ``2**(e - a)`` to read h itself. The threshold
(derived; measured exactly in fp16 and bf16 and with room in fp32) is ``mean(h**2) <=
eps * 2**-p`` for p significant bits, so fp32 binds: ``mean(h**2) <= 2**(2e - 24)``. The gain
stays at most 2**15 (fp16's largest power of two below 65504). e is at most 24: beyond it
fp16 loses whole numbers below 2**(e - 14) to subnormals in transformers' cast of ``h *
rsqrt(...)`` (Q1 part B).

lm_head, one-hot: token t reads ``G * (u_t - u_{t+1})`` from the step columns of
``ops/half.py``: logit G for the code, 0 for every other token.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from torchwright_fx.base.errors import EnergyError
from torchwright_fx.base.machines import FP16, FP32
from torchwright_fx.base.numerics import DECODE_GAIN, HALF_GAIN_EXPONENT, HALF_NORM_EXPONENT
from torchwright_fx.ir.graph import Program
from torchwright_fx.ir.linear import Lin


@dataclass(frozen=True)
class HalfNorm:
    exponent: int  # e: rms_norm_eps = 2**(2e)
    gain_exponent: int  # a: every norm gain is 2**a

    @property
    def eps(self) -> float:
        return 2.0 ** (2 * self.exponent)

    @property
    def gain(self) -> float:
        return 2.0 ** self.gain_exponent

    @property
    def reader_scale(self) -> float:
        """What a reader of the normalised residual multiplies its weights by."""
        return 2.0 ** (self.exponent - self.gain_exponent)


def choose_norm(d_model: int, data_energy: float, constants: int = 1) -> HalfNorm:
    """The smallest e whose threshold ``mean(h**2) <= 2**(2e - p)`` holds for fp32 (p = 24,
    the binding format), for the residual's energy bound ``data_energy`` (a sum over
    columns, the constant column's 1 included). The constant column holds the reader scale
    ``2**(e - a)`` instead of 1, so that it reads 1 after the norm and a reader's constant
    weight is not scaled up (a step's constant, 128 t, times 2**(e - a) overflows fp16);
    ``constants``: how many such columns (``emitter._Writer._constant``)."""
    p = FP32.significand_bits
    e = 1
    while e <= HALF_NORM_EXPONENT:
        scale = 2.0 ** (e - min(e, HALF_GAIN_EXPONENT))
        mean = (data_energy - 1.0 + constants * scale * scale) / d_model
        if mean <= 2.0 ** (2 * e - p):
            break
        e += 1
    if e > HALF_NORM_EXPONENT:
        raise EnergyError(
            f"precision='half': the residual's energy (mean square up to {mean:.3g}) is too "
            f"large for the RMSNorm identity in fp16 (it needs mean(h^2) <= 2**"
            f"{2 * HALF_NORM_EXPONENT - p}); declare tighter ranges with tw.claim, or use "
            "precision='fp32'")
    return HalfNorm(e, min(e, HALF_GAIN_EXPONENT))


def width_for_readers(prog: Program, data_energy: float, start: int, widest: int) -> int:
    """The smallest power of two from ``start`` at which every reader's weight, its
    coefficient times the norm's reader scale (which falls as the width grows: the scale
    follows the mean of squares, energy / d), is below fp16's 65504; ``start`` where none is
    (the weight's refusal then names the op). A program whose values are large (products
    of digits, latched positions) pays for its readers' large coefficients with a wider
    residual instead of a refusal."""
    most = 0.0
    for p in prog.producers.values():
        lins = [x for lane in p.lanes for x in (lane.gate, lane.up)] if hasattr(p, "lanes") \
            else [*p.q, *p.k, *p.v]
        for x in lins:
            most = max([most, *(abs(c) for c in x.terms.values())])
    d = start
    while most and d <= widest:
        try:
            if most * choose_norm(d, data_energy, constants=2).reader_scale <= FP16.max_finite:
                return d
        except EnergyError:
            pass
        d *= 2
    return start


def lm_head(prog: Program, row, scale: float) -> torch.Tensor:
    """[vocab, d]: token t in the reachable codes lo..hi gets ``G * (u_t - u_{t+1})`` read
    through ``row(lin, scale)`` (the emitter's row writer); every other token 0."""
    lo, hi = prog.output_codes
    vocab = len(prog.vocab.tokens)
    d = row(prog.output, scale).numel()
    head = torch.zeros(vocab, d, dtype=torch.float64)
    steps = list(prog.output_steps)
    for t in range(lo, hi + 1):
        up = row(steps[t - lo - 1] if t > lo else Lin.constant(1.0), scale)  # u_lo = 1
        down = row(steps[t - lo], scale) if t < hi else torch.zeros(d, dtype=torch.float64)
        head[t] = DECODE_GAIN * (up - down)
    return head


def exact_in_half(t: torch.Tensor) -> bool:
    """Every entry is a number fp16 and bf16 both hold (and finite in fp16)."""
    x = t.to(torch.float32)
    return bool((x.abs() <= FP16.max_finite).all() and
                (x.to(torch.float16).to(torch.float32) == x).all() and
                (x.to(torch.bfloat16).to(torch.float32) == x).all())
