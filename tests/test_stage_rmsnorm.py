"""emit/rmsnorm.py alone: the pin columns that make every RMSNorm an exact identity, checked
exactly (integers) and numerically with the runtime's fp32 RMSNorm (transformers' op order)."""

from __future__ import annotations

import math

import pytest
import torch

from torchwright_fx.backends.runtime import rms_norm
from torchwright_fx.base.errors import CompileError, EnergyError
from torchwright_fx.base.numerics import PIN_MAX_EXPONENT, PIN_MIN_EXPONENT, RMS_EPS
from torchwright_fx.emit.rmsnorm import Pins, choose_pins, pin_count

WIDTHS = [1 << e for e in range(4, 13)]  # 16 .. 4096
ENERGIES = [0.0, 1.0, 3.5, 1e6, 2.0 ** 64, 2.0 ** 64 * (1 + 2 ** -40), 1e20, 2.0 ** 80, 1e27]


def smallest_exponent(energy: float) -> int:
    """The smallest q >= PIN_MIN_EXPONENT with 2**(2q - 24) > energy, in integers."""
    q = PIN_MIN_EXPONENT
    while 4 ** q <= energy * 2 ** 24:
        q += 1
    return q


@pytest.mark.parametrize("d", WIDTHS)
@pytest.mark.parametrize("energy", ENERGIES)
def test_pins_square_to_d_times_gain_squared(d: int, energy: float) -> None:
    pins = choose_pins(d, energy)
    assert pins.count == pin_count(d) == (1 if int(math.log2(d)) % 2 == 0 else 2)
    # in integers (no rounding): count * (2**q)**2 == d * (2**m)**2, so mean(h**2) over the
    # pins alone is gain**2 and norm(h) = gain * h / gain
    assert pins.count * 4 ** pins.exponent == d * 4 ** pins.gain_exponent
    assert pins.value == 2.0 ** pins.exponent and pins.gain == 2.0 ** pins.gain_exponent
    # and in the floats the runtime uses
    assert pins.count * pins.value ** 2 == d * pins.gain ** 2


@pytest.mark.parametrize("d", [16, 32, 1024])
@pytest.mark.parametrize("energy", ENERGIES)
def test_choose_pins_picks_the_smallest_exponent_over_the_energy(d: int, energy: float) -> None:
    pins = choose_pins(d, energy)
    assert pins.exponent == smallest_exponent(energy)
    assert pins.energy_limit > energy
    if pins.exponent > PIN_MIN_EXPONENT:  # one less would not certify it
        assert Pins(pins.exponent - 1, pins.count, 0).energy_limit <= energy


@pytest.mark.parametrize("q", range(PIN_MIN_EXPONENT, PIN_MAX_EXPONENT + 1))
def test_choose_pins_at_each_boundary(q: int) -> None:
    limit = 2.0 ** (2 * q - 24)
    below = math.nextafter(limit, 0.0)
    assert choose_pins(64, below).exponent == q
    if q < PIN_MAX_EXPONENT:
        assert choose_pins(64, limit).exponent == q + 1  # the limit itself is not certified


def test_energy_beyond_the_largest_pins_is_refused() -> None:
    top = 2.0 ** (2 * PIN_MAX_EXPONENT - 24)
    assert choose_pins(16, math.nextafter(top, 0.0)).exponent == PIN_MAX_EXPONENT
    for energy in (top, top * 4, 1e40):
        with pytest.raises(EnergyError, match=r"tw\.claim") as err:
            choose_pins(16, energy)
        assert isinstance(err.value, CompileError)
        assert f"above 2**{PIN_MAX_EXPONENT}" in str(err.value)


def test_an_energy_no_float_holds_is_an_energy_error() -> None:
    for energy in (math.inf, math.nan, 1e308):
        with pytest.raises(EnergyError, match=r"tw\.claim"):
            choose_pins(16, energy)


def test_pin_count_refuses_other_widths() -> None:
    for d in (0, 24, 48, 100):
        with pytest.raises(ValueError, match="power of two"):
            pin_count(d)


# -- the identity in fp32 -------------------------------------------------------------------------


def rows(d: int, bound: float, n: int, seed: int) -> tuple[torch.Tensor, Pins]:
    """n residual rows laid out as the emitter lays them: the constant 1.0 in column 0, the
    pins next, then data columns in [-bound, bound] (the range the facts would give them)."""
    pins = choose_pins(d, 1.0 + (d - 1 - pin_count(d)) * bound ** 2)
    g = torch.Generator().manual_seed(seed)
    h = torch.empty(n, d)
    h[:, 0] = 1.0
    h[:, 1:1 + pins.count] = pins.value
    data = (torch.rand(n, d - 1 - pins.count, generator=g, dtype=torch.float64) * 2 - 1) * bound
    # some rows at the extremes: every data column at +-bound (the certified worst case)
    data[: n // 4] = bound * torch.sign(data[: n // 4])
    h[:, 1 + pins.count:] = data.float()
    return h, pins


@pytest.mark.parametrize("d", WIDTHS)
@pytest.mark.parametrize("bound", [1.0, 37.5, 2.0 ** 20, 1e9])
def test_rmsnorm_is_the_identity_bit_for_bit(d: int, bound: float) -> None:
    h, pins = rows(d, bound, 64, seed=d)
    out = rms_norm(h, torch.full((d,), pins.gain), RMS_EPS)
    assert out.dtype == torch.float32
    assert torch.equal(out, h), (out - h).abs().max()


@pytest.mark.parametrize("d", [16, 256, 4096])
def test_rmsnorm_is_not_the_identity_far_beyond_the_limit(d: int) -> None:
    """The check above can fail: data 16 times over the pins' energy limit changes h."""
    pins = choose_pins(d, 1.0)
    h = torch.zeros(8, d)
    h[:, 0] = 1.0
    h[:, 1:1 + pins.count] = pins.value
    h[:, -1] = math.sqrt(16 * pins.energy_limit)
    out = rms_norm(h, torch.full((d,), pins.gain), RMS_EPS)
    assert not torch.equal(out, h)


@pytest.mark.parametrize("d", [16, 32])
def test_the_gain_must_match_the_pins(d: int) -> None:
    h, pins = rows(d, 1.0, 8, seed=0)
    out = rms_norm(h, torch.full((d,), pins.gain * 2), RMS_EPS)
    assert torch.equal(out, 2 * h)
    wrong = rms_norm(h, torch.full((d,), 2.0 ** (pins.exponent - 1)), RMS_EPS)
    assert not torch.equal(wrong, h)
