"""emit/rmsnorm.py alone: the pin columns that make every RMSNorm an exact identity, checked
exactly (integers) and numerically with the runtime's fp32 RMSNorm (transformers' op order)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from torchwright_fx.backends.runtime import rms_norm
from torchwright_fx.base.errors import CompileError, EnergyError
from torchwright_fx.base.numerics import PIN_MAX_EXPONENT, PIN_MIN_EXPONENT, RMS_EPS
from torchwright_fx.emit.rmsnorm import Pins, choose_pins
from torchwright_fx.schedule.columns import exact_width, pin_count, pin_squares

POWERS = [1 << e for e in range(4, 13)]  # 16 .. 4096
# widths the compiler now picks between powers of two (tight to the live columns)
OTHERS = [24, 45, 57, 62, 63, 78, 100, 300, 700, 1000, 1500]
WIDTHS = POWERS + OTHERS
ENERGIES = [0.0, 1.0, 3.5, 1e6, 2.0 ** 64, 2.0 ** 64 * (1 + 2 ** -40), 1e20, 2.0 ** 80, 1e27]


def smallest_exponent(energy: float) -> int:
    """Powers of two: the smallest q >= PIN_MIN_EXPONENT with 2**(2q - 24) > energy, in
    integers (the pin 2**q)."""
    q = PIN_MIN_EXPONENT
    while 4 ** q <= energy * 2 ** 24:
        q += 1
    return q


def test_the_other_widths_are_exact():
    assert all(exact_width(d) for d in WIDTHS)
    assert not exact_width(41) and not exact_width(47)  # d * fl(1/d) rounds below 1


@pytest.mark.parametrize("d", range(1, 400))
def test_pin_squares_are_fewest_and_sum_to_d(d: int) -> None:
    roots = pin_squares(d)
    assert sum(a * a for a in roots) == d and 1 <= len(roots) <= 4
    fewer = {1: [], 2: [1], 3: [1, 2], 4: [1, 2, 3]}[len(roots)]
    for k in fewer:  # no representation with k squares exists
        assert not any(sum(a * a for a in c) == d for c in
                       itertools.combinations_with_replacement(range(1, math.isqrt(d) + 1), k))
    if d & (d - 1) == 0:  # powers of two: one pin, or two equal ones
        assert roots == ((math.isqrt(d),) if int(math.log2(d)) % 2 == 0 else
                         (math.isqrt(d // 2),) * 2)


@pytest.mark.parametrize("d", WIDTHS)
@pytest.mark.parametrize("energy", ENERGIES)
def test_pins_square_to_d_times_gain_squared(d: int, energy: float) -> None:
    pins = choose_pins(d, energy)
    assert pins.count == pin_count(d)
    # in integers (no rounding): sum a_i**2 == d, so the pins' squares sum to d * (2**t)**2
    # and mean(h**2) over the pins alone is gain**2: norm(h) = gain * h / gain
    assert sum(a * a for a in pins.roots) == d
    assert pins.gain == 2.0 ** pins.gain_exponent
    # and in the floats the runtime uses
    assert sum(v * v for v in pins.values) == d * pins.gain ** 2
    assert min(pins.values) >= 2.0 ** PIN_MIN_EXPONENT


@pytest.mark.parametrize("d", [16, 32, 1024])
@pytest.mark.parametrize("energy", ENERGIES)
def test_choose_pins_picks_the_smallest_exponent_over_the_energy(d: int, energy: float) -> None:
    pins = choose_pins(d, energy)
    assert min(pins.values) == 2.0 ** smallest_exponent(energy)
    assert pins.energy_limit > energy


@pytest.mark.parametrize("d", OTHERS)
@pytest.mark.parametrize("energy", ENERGIES)
def test_choose_pins_is_tight_at_other_widths(d: int, energy: float) -> None:
    pins = choose_pins(d, energy)
    assert pins.energy_limit > energy
    lower = Pins(pins.roots, pins.gain_exponent - 1)
    if min(lower.values) >= 2.0 ** PIN_MIN_EXPONENT:  # one less would not certify it
        assert lower.energy_limit <= energy


@pytest.mark.parametrize("q", range(PIN_MIN_EXPONENT, PIN_MAX_EXPONENT + 1))
def test_choose_pins_at_each_boundary(q: int) -> None:
    limit = 2.0 ** (2 * q - 24)
    below = math.nextafter(limit, 0.0)
    assert choose_pins(64, below).values == [2.0 ** q]
    if q < PIN_MAX_EXPONENT:
        assert choose_pins(64, limit).values == [2.0 ** (q + 1)]  # the limit is not certified


def test_energy_beyond_the_largest_pins_is_refused() -> None:
    top = 2.0 ** (2 * PIN_MAX_EXPONENT - 24)
    assert choose_pins(16, math.nextafter(top, 0.0)).values == [2.0 ** PIN_MAX_EXPONENT]
    for energy in (top, top * 4, 1e40):
        with pytest.raises(EnergyError, match=r"tw\.claim") as err:
            choose_pins(16, energy)
        assert isinstance(err.value, CompileError)
        assert f"above 2**{PIN_MAX_EXPONENT}" in str(err.value)


def test_an_energy_no_float_holds_is_an_energy_error() -> None:
    for energy in (math.inf, math.nan, 1e308):
        with pytest.raises(EnergyError, match=r"tw\.claim"):
            choose_pins(16, energy)


# -- the identity in fp32 -------------------------------------------------------------------------


def rows(d: int, bound: float, n: int, seed: int) -> tuple[torch.Tensor, Pins]:
    """n residual rows laid out as the emitter lays them: the constant 1.0 in column 0, the
    pins next, then data columns in [-bound, bound] (the range the facts would give them)."""
    pins = choose_pins(d, 1.0 + (d - 1 - pin_count(d)) * bound ** 2)
    g = torch.Generator().manual_seed(seed)
    h = torch.empty(n, d)
    h[:, 0] = 1.0
    h[:, 1:1 + pins.count] = torch.tensor(pins.values)
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


@pytest.mark.parametrize("d", WIDTHS)
@pytest.mark.parametrize("bound", [1.0, 2.0 ** 20, 1e9])
def test_rmsnorm_dividing_in_double_is_the_identity(d: int, bound: float) -> None:
    """llama.cpp's order: the sum of squares in double, divided by d, rounded to float."""
    h, pins = rows(d, bound, 16, seed=d + 1)
    mean = (h.double() ** 2).sum(-1, keepdim=True) / d
    scale = 1.0 / torch.sqrt(mean.float() + RMS_EPS)
    assert torch.equal(h * scale * pins.gain, h)


@pytest.mark.parametrize("d", [16, 57, 256, 4096])
def test_rmsnorm_is_not_the_identity_far_beyond_the_limit(d: int) -> None:
    """The check above can fail: data 16 times over the pins' energy limit changes h."""
    pins = choose_pins(d, 1.0)
    h = torch.zeros(8, d)
    h[:, 0] = 1.0
    h[:, 1:1 + pins.count] = torch.tensor(pins.values)
    h[:, -1] = math.sqrt(16 * pins.energy_limit)
    out = rms_norm(h, torch.full((d,), pins.gain), RMS_EPS)
    assert not torch.equal(out, h)


@pytest.mark.parametrize("d", [16, 32, 45])
def test_the_gain_must_match_the_pins(d: int) -> None:
    h, pins = rows(d, 1.0, 8, seed=0)
    out = rms_norm(h, torch.full((d,), pins.gain * 2), RMS_EPS)
    assert torch.equal(out, 2 * h)
    wrong = rms_norm(h, torch.full((d,), pins.gain / 2 * 3), RMS_EPS)
    assert not torch.equal(wrong, h)
