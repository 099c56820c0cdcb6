"""RMSNorm made an exact identity (docs/design-notes.md §5).

Pin columns hold ``a_i * 2**t`` in every embedding row, with whole numbers a_i whose squares sum
to d (``schedule.columns.pin_squares``), so that the sum of squares of the pins is exactly
``d * 4**t``. Every norm gain is 2**t, so ``norm(h) = 2**t * h / sqrt(mean(h**2))`` is ``h`` bit
for bit as long as the data's energy is absorbed by fp32 rounding wherever it is added to a
partial sum that holds a pin (below half an ulp of the smallest pin's square), and the mean is
exactly ``4**t`` however a runtime takes it (``schedule.columns.exact_width``).

For d = 2**e: e even -> one pin 2**(t + e/2); e odd -> two pins 2**(t + (e-1)/2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from torchwright_fx.base.errors import EnergyError
from torchwright_fx.base.numerics import PIN_MAX_EXPONENT, PIN_MIN_EXPONENT
from torchwright_fx.schedule.columns import pin_squares  # the scheduler reserves the pins


@dataclass(frozen=True)
class Pins:
    roots: tuple[int, ...]  # a_i: the pins are a_i * 2**t, their squares sum to d * 4**t
    gain_exponent: int  # t: norm gains are 2**t

    @property
    def values(self) -> list[float]:
        return [a * 2.0 ** self.gain_exponent for a in self.roots]

    @property
    def count(self) -> int:
        return len(self.roots)

    @property
    def gain(self) -> float:
        return 2.0 ** self.gain_exponent

    @property
    def energy_limit(self) -> float:
        """Half an ulp of the smallest pin's square in fp32: data energy below it is rounded
        away wherever it is added."""
        return _half_ulp(min(self.roots) ** 2 * 4.0 ** self.gain_exponent)


def _half_ulp(x: float) -> float:
    return 2.0 ** (math.frexp(x)[1] - 1 - 24)  # x in [2**k, 2**(k+1)): ulp 2**(k - 23)


def choose_pins(d_model: int, data_energy: float) -> Pins:
    """The smallest t whose pins certify ``data_energy`` (the sum over data columns of the
    largest square each can hold), with the smallest pin at least 2**PIN_MIN_EXPONENT (the
    mean 4**t then drowns eps) and the largest at most 2**PIN_MAX_EXPONENT (the squares'
    sum stays finite in fp32)."""
    if math.isnan(data_energy):
        raise EnergyError("data energy is NaN: a value range is undefined; declare ranges "
                          "with tw.claim")
    roots = pin_squares(d_model)
    t = PIN_MIN_EXPONENT - math.floor(math.log2(min(roots)))
    while Pins(roots, t).energy_limit <= data_energy:
        t += 1
        if max(roots) * 2.0 ** t > 2.0 ** PIN_MAX_EXPONENT:
            raise EnergyError(
                f"data energy {data_energy:.3g} needs pins above 2**{PIN_MAX_EXPONENT}, where "
                "fp32 sums of squares overflow; declare tighter ranges with tw.claim")
    return Pins(roots, t)
