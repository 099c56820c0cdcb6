"""binary_increment beyond the generic suite: any bit length at the same depth."""

from __future__ import annotations

import random

import pytest

from examples import binary_increment


@pytest.mark.parametrize("max_bits", [1, 16, 24])
def test_other_bit_lengths_two_layers(max_bits):
    program = binary_increment.make(max_bits=max_bits, max_seq_len=64)
    rng = random.Random(max_bits)
    prompts = ["1" * max_bits + "\n", "0" * max_bits + "\n", "1" + "0" * (max_bits - 1) + "\n",
               "0\n", "1\n", *(binary_increment.sample(rng, max_bits) for _ in range(30))]
    wrong = [p for p in prompts if program.generate(p) != binary_increment.oracle(p)]
    assert wrong == []
    assert program.stats()["layers"] == 2


def test_nothing_is_printed_before_a_newline():
    assert binary_increment.program.generate("") == ""
    assert binary_increment.program.generate("101") == ""
