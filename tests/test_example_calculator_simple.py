"""calculator_simple beyond the generic example tests: other operand lengths, the depth."""

from __future__ import annotations

import random

import pytest

import examples.calculator_simple as ex
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


def test_depth_is_the_fold_plus_three_and_beats_the_seed():
    stats = ex.program.stats()
    # read, columns, 2N-1 fold steps, print; the seed: 29 (22 with CP-SAT) layers, 129M params
    assert stats["layers"] == 2 * ex.N + 2
    assert stats["parameters"] < 129e6 / 100


def test_rejects_operands_too_long_for_exact_fp32():
    with pytest.raises(ValueError, match="1 to 6 digits"):
        ex.make(n=7)


def test_six_digit_operands_on_a_sample():
    """n = 6 is the longest build: |A - B| < 10**6 is claimed so that its width tests stay
    within fp32's exact range (the compiler refuses them otherwise)."""
    import random

    from examples import _calc

    program = ex.make(n=6)
    rng = random.Random(6)
    prompts = _calc.edge_cases(6) + [ex.sample(rng, 6) for _ in range(30)]
    assert [p for p in prompts if program.generate(p) != ex.oracle(p)] == []
