"""calculator_advanced beyond the generic example tests: the multi-level scan (N >= 4) and
the logarithmic depth."""

from __future__ import annotations

import random

import pytest

import examples.calculator_advanced as ex
import examples.calculator_simple as simple
from examples import _calc


def agrees(program, prompt: str, answer: str) -> bool:
    """Greedy generation gives `answer` then <eos>: checked in one teacher-forced forward pass
    (at every answer position the top logit is the next answer token)."""
    vocab = program.vocab
    ids = vocab.encode(prompt)
    want = vocab.encode(answer, bos=False) + [vocab.eos_id]
    logits = program.logits(ids + want[:-1])
    return logits[len(ids) - 1:].argmax(-1).tolist() == want


@pytest.mark.parametrize("n", [2, 4])
def test_other_operand_lengths_on_a_sample(n):
    program = ex.make(n=n)
    rng = random.Random(n)
    prompts = _calc.edge_cases(n) + [ex.sample(rng, n) for _ in range(60)]
    assert not [p for p in prompts if not agrees(program, p, ex.oracle(p))]


def test_shallower_than_the_fold_and_than_the_seed():
    # the seed: 36 (26 with CP-SAT) layers at d=1024, 160M parameters
    assert ex.program.stats()["layers"] == 6 < simple.program.stats()["layers"]
    assert ex.program.stats()["parameters"] < 160e6 / 100


@pytest.mark.slow
def test_depth_grows_slowly():
    layers = [ex.make(n=n).stats()["layers"] for n in range(1, 7)]
    assert layers == [5, 6, 6, 7, 7, 7]
