"""adder_v2 beyond the generic suite: agrees with adder, and its depth does not grow with
the operand length (until the floor staircase needs two stages)."""

from __future__ import annotations

import random

import pytest

from examples import adder, adder_v2


def test_same_answers_as_adder():
    rng = random.Random(5)
    for prompt in [*adder.EDGE_CASES, *(adder.sample(rng) for _ in range(30))]:
        assert adder_v2.program.generate(prompt) == adder.program.generate(prompt), prompt


@pytest.mark.parametrize("n_digits", [1, 2])
def test_shorter_operands_same_depth(n_digits):
    program = adder_v2.make(n_digits=n_digits)
    rng = random.Random(n_digits)
    top = "9" * n_digits
    for prompt in [f"{top}+{top}\n", "0+0\n", f"1+{top}\n",
                   *(adder.sample(rng, n_digits) for _ in range(20))]:
        assert program.generate(prompt) == adder.oracle(prompt), prompt
    assert program.stats()["layers"] == 3
