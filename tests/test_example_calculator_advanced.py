"""calculator_advanced beyond the generic example tests: the multi-level scan and the two-layer
reduction rounds (N >= 7), the logarithmic depth, 16 digits through the Phi-3 directory."""

from __future__ import annotations

import random

import pytest
from conftest import agrees, hf_agrees, hf_generate, load_hf

import examples.calculator_advanced as ex
import examples.calculator_simple as simple
from examples import _calc


@pytest.mark.parametrize("n", [2, 4, 8])
def test_other_operand_lengths_on_a_sample(n):
    program = ex.make(n=n)
    rng = random.Random(n)
    prompts = _calc.edge_cases(n) + [ex.sample(rng, n) for _ in range(60)]
    assert not [p for p in prompts if not agrees(program, p, ex.oracle(p))]


def test_shallower_than_the_fold_and_than_the_seed():
    # the seed: 36 (26 with CP-SAT) layers at d=1024, 160M parameters
    assert ex.program.stats()["layers"] == 8 < simple.program.stats()["layers"]
    assert ex.program.stats()["parameters"] < 160e6 / 100


@pytest.mark.slow
def test_depth_grows_slowly():
    layers = [ex.make(n=n).stats()["layers"] for n in range(1, 17)]
    assert layers == [6, 7, 8, 8, 8, 8, 9] + [10] * 9


@pytest.mark.slow
@pytest.mark.parametrize("n", [10, 16])
def test_long_operands_through_the_checkpoint(n, tmp_path):
    """N = 10 and 16 through the saved Phi-3 directory, loaded with transformers: the edge
    cases (all 9s, (10**N - 1) squared, zeros, borrows across every digit, A - B with A < B)
    and 100 seeded samples. Each is checked in one forward pass (at every answer position
    the top logit is the next token, then <eos>: what greedy generation prints); a few of
    the largest also by ``generate`` with the KV cache."""
    model, tokenizer = load_hf(ex.make(n=n).save_pretrained(tmp_path / "hf"))
    rng = random.Random(200 + n)
    prompts = _calc.edge_cases(n) + [ex.sample(rng, n) for _ in range(100)]
    wrong = [p for p in prompts if not hf_agrees(model, tokenizer, p, ex.oracle(p))]
    assert not wrong, f"{len(wrong)}/{len(prompts)} wrong: {wrong[:3]}"
    big = "9" * n
    for p in [f"{big}*{big}\n", f"{big}+{big}\n", f"1{'0' * (n - 1)}-1\n", f"1-{big}\n"]:
        assert hf_generate(model, tokenizer, p) == ex.oracle(p)
