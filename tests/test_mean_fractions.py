"""The fraction sets of tw.mean (ops/ffn/grids.py Fractions): the attainable values nearest a
threshold, against brute force, and the ramps a comparison puts between them."""

from __future__ import annotations

from fractions import Fraction

import pytest

from torchwright_fx.ops import ffn


def attainable(scale: Fraction, offset: Fraction, max_den: int, lo: int, hi: int) -> set:
    return {offset + scale * Fraction(k, n) for n in range(1, max_den + 1)
            for k in range(lo * n, hi * n + 1)}


@pytest.mark.parametrize("scale,offset", [(Fraction(1), Fraction(0)),
                                          (Fraction(-3, 2), Fraction(1)),
                                          (Fraction(10), Fraction(-7, 3))])
@pytest.mark.parametrize("t", [Fraction(0), Fraction(2, 3), Fraction(1, 7), Fraction(-5, 4),
                               Fraction(1), Fraction(31, 100)])
def test_nearest_attainable_values_match_brute_force(scale, offset, t):
    fs = ffn.Fractions(scale, offset, 12, noise=0.0)
    values = attainable(scale, offset, 12, -30, 30)
    for strict in (False, True):
        above = min(v for v in values if (v > t if strict else v >= t))
        below = max(v for v in values if (v < t if strict else v <= t))
        assert fs.above(t, strict) == above
        assert fs.below(t, strict) == below


@pytest.mark.parametrize("strict", [False, True])
def test_a_step_ramp_separates_every_attainable_value(strict):
    fs = ffn.Fractions(Fraction(1), Fraction(0), 40, noise=1e-9)
    t = 0.25
    a, b = ffn.step_ramp(ffn.Step(t, strict), fs)
    for v in attainable(Fraction(1), Fraction(0), 40, 0, 1):
        passes = v > Fraction(t) if strict else v >= Fraction(t)
        assert (float(v) >= b) if passes else (float(v) <= a), (v, a, b)


def test_a_gap_below_the_noise_is_refused_unless_approximations_are_accepted():
    fs = ffn.Fractions(Fraction(1), Fraction(0), 4096, noise=1e-3)
    with pytest.raises(ffn.NotExact, match="exact=False"):
        ffn.step_ramp(ffn.Step(0.5, True), fs)
    log: list[str] = []
    with ffn.recording_approximations(log):
        assert ffn.step_ramp(ffn.Step(0.5, True), fs) == (0.5, 0.5 + ffn.RAMP_WIDTH)
    assert len(log) == 1 and "averaging noise" in log[0]
