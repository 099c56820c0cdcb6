"""RMSNorm made an exact identity (docs/design-notes.md §5).

Pin columns hold powers of two in every embedding row so that the sum of squares of the pins
is exactly d * 4**m. Every norm gain is 2**m, so ``norm(h) = 2**m * h / sqrt(mean(h**2))`` is
``h`` bit for bit as long as the data's energy is absorbed by fp32 rounding when it is added
to the pins' (below half an ulp of the smallest pin's square: 2**(2q - 24)).

For d = 2**e: e even -> one pin 2**(m + e/2); e odd -> two pins 2**(m + (e-1)/2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from torchwright_fx.base.errors import EnergyError
from torchwright_fx.base.numerics import PIN_MAX_EXPONENT, PIN_MIN_EXPONENT
from torchwright_fx.schedule.columns import pin_count  # the scheduler reserves the pins


@dataclass(frozen=True)
class Pins:
    exponent: int  # q: every pin is 2**q
    count: int
    gain_exponent: int  # m: norm gains are 2**m

    @property
    def value(self) -> float:
        return 2.0 ** self.exponent

    @property
    def gain(self) -> float:
        return 2.0 ** self.gain_exponent

    @property
    def energy_limit(self) -> float:
        return 2.0 ** (2 * self.exponent - 24)


def choose_pins(d_model: int, data_energy: float) -> Pins:
    """The smallest pin exponent q >= PIN_MIN_EXPONENT whose limit certifies ``data_energy``
    (the sum over data columns of the largest square each can hold)."""
    e = int(math.log2(d_model))
    if not data_energy < 2.0 ** (2 * PIN_MAX_EXPONENT - 24):  # NaN and infinity included
        raise EnergyError(
            f"data energy {data_energy:.3g} needs pins above 2**{PIN_MAX_EXPONENT}, where fp32 "
            "sums of squares overflow; declare tighter ranges with tw.claim")
    q = PIN_MIN_EXPONENT
    while 2.0 ** (2 * q - 24) <= data_energy:
        q += 1
    return Pins(q, pin_count(d_model), q - e // 2)
