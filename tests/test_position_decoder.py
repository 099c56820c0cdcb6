"""The count decoder (ops/position.py): a head's fl(1/(c+1)) back to the whole number c.

On SwiGLU each lane is a hinge times an affine form of the head's output, a quadratic piece
exact at the two counts after its knot (and farther where the curve allows), so a decoder
takes at most one lane per two counts; on ReLU each lane is a hinge (a chord)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import torchwright_fx as tw
from torchwright_fx.base import numerics
from torchwright_fx.base.machines import RELU, SWIGLU
from torchwright_fx.ops import position


def _exact_math(n: int, two_stage: bool = False) -> np.ndarray:
    """The pieces' sum at every count, in float64: relu(t) (alpha + beta t), t = y_a - y, at
    the head's fp32 outputs y."""
    y = position.samples(n).double().numpy()
    total = np.zeros(n)
    for ya, alpha, beta, _ in position.pieces(n, two_stage):
        t = np.maximum(ya - y, 0.0)
        total += t * (alpha + beta * t)
    return total


@pytest.mark.parametrize("n", [2, 3, 4, 12, 42, 101, 512])
def test_swiglu_pieces_take_two_counts_a_lane_and_land_on_every_count(n):
    assert len(position.pieces(n)) <= n // 2 + 1
    assert np.abs(_exact_math(n) - np.arange(n)).max() <= numerics.PIECE_ERROR
    assert position.noise(SWIGLU, n) < numerics.POSITION_TOLERANCE / 2


def test_swiglu_decoder_is_far_smaller_than_the_chords():
    assert 2 * position.lane_count(SWIGLU, 42) <= position.lane_count(RELU, 42) + 1
    assert 3 * position.lane_count(SWIGLU, 512) < position.lane_count(RELU, 512)
    # no noisier than the chord decoder it replaced (measured then: 2e-5 at 42, 2.8e-3 at 512)
    assert position.noise(SWIGLU, 42) < 2e-5 and position.noise(SWIGLU, 512) < 2.8e-3


@pytest.mark.parametrize("n", [1024, 16384])
def test_coarse_pieces_stay_within_the_newton_allowance(n):
    c = np.arange(n)
    assert np.all(np.abs(_exact_math(n, True) - c) <= np.sqrt(numerics.NEWTON_ERROR * (c + 1)))


VOCAB = tw.Vocab("0123456789")


def _position_digit(x: torch.Tensor) -> torch.Tensor:
    return tw.token("0") + torch.remainder(tw.position(x), 10)


@pytest.mark.parametrize("machine", ["swiglu", "relu"])
def test_a_decoded_position_is_exact_at_every_position(machine):
    program = tw.compile(_position_digit, vocab=VOCAB, max_seq_len=300,
                         machine=machine).compile()
    ids = VOCAB.encode("0123456789" * 29 + "01234")
    assert torch.equal(program.logits(ids).argmax(-1), program.printed_ids(ids))


@pytest.mark.parametrize("n", [2, 42, 512, 2048])
def test_swiglu_decodes_bos_as_exactly_zero(n):
    """``gather.match_position`` builds <bos>'s logit from the target squared, trusting the
    decoded position 0 there: every SwiGLU lane is exactly 0 at the head's output 1."""
    assert position.error_at_bos(SWIGLU, n) == 0.0
    assert position.error_at_bos(RELU, 512) > 0.0  # the centred chords' offset
