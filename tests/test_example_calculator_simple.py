"""calculator_simple beyond the generic example tests: other operand lengths (up to 16 digits,
through the Phi-3 directory), the depth."""

from __future__ import annotations

import random

import pytest
from conftest import agrees, hf_agrees, hf_generate, load_hf

import examples.calculator_simple as ex
from examples import _calc


@pytest.mark.parametrize("n", [2, 4, 8])
def test_other_operand_lengths_on_a_sample(n):
    program = ex.make(n=n)
    rng = random.Random(n)
    prompts = _calc.edge_cases(n) + [ex.sample(rng, n) for _ in range(60)]
    assert not [p for p in prompts if not agrees(program, p, ex.oracle(p))]


def test_depth_grows_linearly_and_beats_the_seed():
    stats = ex.program.stats()
    # read (2), products, 2N-1 fold steps, print (2); the seed: 29 (22 with CP-SAT) layers,
    # 129M parameters
    assert stats["layers"] == 2 * ex.N + 3
    assert stats["parameters"] < 129e6 / 100


def test_rejects_operands_beyond_sixteen_digits():
    with pytest.raises(ValueError, match="1 to 16 digits"):
        ex.make(n=17)


@pytest.mark.slow
def test_depth_at_every_length():
    # two levels of operand reads from N = 8: one layer more
    assert [ex.make(n=n).stats()["layers"] for n in range(1, 17)] == \
        [2 * n + 3 + (n >= 8) for n in range(1, 17)]


@pytest.mark.slow
@pytest.mark.parametrize("n", [10, 16])
def test_long_operands_through_the_checkpoint(n, tmp_path):
    """N = 10 and 16 through the saved Phi-3 directory, loaded with transformers: the edge
    cases (all 9s, (10**N - 1) squared, zeros, borrows across every digit, A - B with A < B)
    and 100 seeded samples. Each is checked in one forward pass (at every answer position
    the top logit is the next token, then <eos>: what greedy generation prints); a few of
    the largest also by ``generate`` with the KV cache."""
    model, tokenizer = load_hf(ex.make(n=n).save_pretrained(tmp_path / "hf"))
    rng = random.Random(100 + n)
    prompts = _calc.edge_cases(n) + [ex.sample(rng, n) for _ in range(100)]
    wrong = [p for p in prompts if not hf_agrees(model, tokenizer, p, ex.oracle(p))]
    assert not wrong, f"{len(wrong)}/{len(prompts)} wrong: {wrong[:3]}"
    big = "9" * n
    for p in [f"{big}*{big}\n", f"{big}+{big}\n", f"1{'0' * (n - 1)}-1\n", f"1-{big}\n"]:
        assert hf_generate(model, tokenizer, p) == ex.oracle(p)
