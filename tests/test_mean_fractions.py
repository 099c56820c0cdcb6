"""The fraction sets of tw.mean (ops/ffn/grids.py Fractions): the attainable values nearest a
threshold, against brute force, and the ramps a comparison puts between them."""

from __future__ import annotations

from fractions import Fraction

import pytest

from torchwright_fx.base.errors import NotExact
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
    with pytest.raises(NotExact, match="exact=False"):
        ffn.step_ramp(ffn.Step(0.5, True), fs)
    log: list[str] = []
    with ffn.recording_approximations(log):
        assert ffn.step_ramp(ffn.Step(0.5, True), fs) == (0.5, 0.5 + ffn.RAMP_WIDTH)
    assert len(log) == 1 and "averaging noise" in log[0]


def test_a_threshold_a_once_rounded_value_lands_on_is_refused():
    """A mean of 1/3 is fl(1/3) = 0.3333333432674408 in the fp32 reference, so `mean <
    0.3333333432674408` is false there and true in exact arithmetic: refused (it compiled
    and was wrong at 20 of 60 positions before); likewise x / 10 against fl(0.3). Simple
    thresholds stay exact."""
    import numpy as np
    import torch

    import torchwright_fx as tw

    vocab = tw.Vocab("ab")
    third = float(np.float32(1 / 3))

    def below_third(x: torch.Tensor) -> torch.Tensor:
        return torch.where(tw.mean(tw.is_token(x, "a")) < third, tw.token("a"), tw.token("b"))

    def tenths(x: torch.Tensor) -> torch.Tensor:
        n = tw.steps_since(tw.is_token(x, "a")) / 10
        return torch.where(n < float(np.float32(0.3)), tw.token("a"), tw.token("b"))

    for fn in (below_third, tenths):
        with pytest.raises(tw.CompileError, match="within fp32's rounding"):
            tw.compile(fn, vocab=vocab, max_seq_len=64).compile()

    def below_half(x: torch.Tensor) -> torch.Tensor:
        return torch.where(tw.mean(tw.is_token(x, "a")) < 0.5, tw.token("a"), tw.token("b"))

    program = tw.compile(below_half, vocab=vocab, max_seq_len=64).compile()
    ids = vocab.encode("ab" * 31)
    assert torch.equal(program.logits(ids).argmax(-1), program.printed_ids(ids))


def test_a_landing_at_the_ends_of_the_range_is_refused():
    """The range's float ends round the exact ends (0.1 is above 1/10): the value 1/10 of
    (steps + 1) / 10 lands on fl(0.1), and a table's 0.7 on fl(0.7) (both compiled and were
    wrong at 103 and 36 positions, found by review)."""
    import numpy as np
    import torch

    import torchwright_fx as tw

    vocab = tw.Vocab("ab0")

    def tenth(x: torch.Tensor) -> torch.Tensor:
        n = (tw.steps_since(tw.is_token(x, "a")) + 1) / 10
        return torch.where(n >= float(np.float32(0.1)), tw.token("a"), tw.token("b"))

    def table(x: torch.Tensor) -> torch.Tensor:
        v = tw.lookup(x, {"a": 0.7, "b": 0.5, "0": 0.3})
        return torch.where(v > float(np.float32(0.7)), tw.token("a"), tw.token("b"))

    for fn in (tenth, table):
        with pytest.raises(tw.CompileError, match="within fp32's rounding"):
            tw.compile(fn, vocab=vocab, max_seq_len=64).compile()


def test_landings_after_several_roundings_and_between_streams_are_refused():
    """Found by review, each compiled and wrong before: a sum of two means against fl(2/3)
    (a PAIR), three times a mean against fl(3/7) (INEXACT: fl(fl(1/7) * 3) crosses it), and
    two streams rounded once that can meet in fp32 without being equal (n / 10 against a
    table holding fl(1.1))."""
    import numpy as np
    import torch

    import torchwright_fx as tw

    vocab = tw.Vocab("ab0")

    def f32(v: float) -> float:
        return float(np.float32(v))

    def pair(x: torch.Tensor) -> torch.Tensor:
        s = tw.mean(tw.is_token(x, "a")) + tw.mean(tw.is_token(x, "b"))
        return torch.where(s >= f32(2 / 3), tw.token("a"), tw.token("b"))

    def inexact(x: torch.Tensor) -> torch.Tensor:
        return torch.where(tw.mean(tw.is_token(x, "a")) * 3 >= f32(3 / 7), tw.token("a"),
                           tw.token("b"))

    def streams(x: torch.Tensor) -> torch.Tensor:
        n = tw.steps_since(tw.is_token(x, "a")) / 10
        b = tw.lookup(x, {"0": f32(1.1) - 1}, default=f32(1.1))
        return torch.where(n >= b, tw.token("a"), tw.token("b"))

    for fn in (pair, inexact, streams):
        with pytest.raises(tw.CompileError, match="within fp32's rounding"):
            tw.compile(fn, vocab=vocab, max_seq_len=64).compile()
