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


@pytest.mark.parametrize("n_digits", [4, 5])
def test_longest_operands(n_digits):
    """5 digits: floor(sum / 10**5) lives on a lattice of spacing 1e-5 (a decimal denominator
    the grid must recognise; it once fell back to a 0.1-wide real ramp and printed 27222 for
    2+97220)."""
    program = adder_v2.make(n_digits=n_digits)
    rng = random.Random(n_digits)
    top = "9" * n_digits
    prompts = [f"{top}+{top}\n", f"{top}+1\n", "0+0\n", f"2+{top[:-1]}0\n",
               *(adder.sample(rng, n_digits) for _ in range(25))]
    assert [p for p in prompts if program.generate(p) != adder.oracle(p)] == []


def test_too_long_operands_are_refused_with_a_pointer_to_adder():
    with pytest.raises(ValueError, match="examples.adder"):
        adder_v2.make(n_digits=6)
