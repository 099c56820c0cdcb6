"""adder beyond the generic suite: other operand lengths, sums that grow a digit, depth."""

from __future__ import annotations

import random

import pytest

from examples import adder


@pytest.mark.parametrize("n_digits", [1, 2, 4, 6])
def test_other_operand_lengths(n_digits):
    program = adder.make(n_digits=n_digits)
    top = "9" * n_digits
    rng = random.Random(n_digits)
    prompts = [f"{top}+{top}\n", f"{top}+1\n", f"1+{top}\n", "0+0\n", f"{'0' * n_digits}+1\n",
               *(adder.sample(rng, n_digits) for _ in range(20))]
    for prompt in prompts:
        assert program.generate(prompt) == adder.oracle(prompt), prompt
    # align, one layer per place, print
    assert program.stats()["layers"] == n_digits + 2


def test_every_sum_over_999_keeps_its_top_digit():
    for prompt in ["999+999\n", "500+500\n", "001+999\n", "999+001\n", "995+5\n", "999+1\n"]:
        want = adder.oracle(prompt)
        assert len(want) == 4 and adder.program.generate(prompt) == want
