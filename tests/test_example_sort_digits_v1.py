"""sort_digits_v1 beyond the generic suite: repeated digits are kept, the answer ends (the
seed never emitted <eos>), and a shorter maximum length."""

from __future__ import annotations

import itertools

from examples import sort_digits_v1


def test_repeated_digits_are_kept():
    for prompt, want in [("3311\n", "1133"), ("0000\n", "0000"), ("1212121212\n", "1111122222"),
                         ("9999999999\n", "9999999999"), ("5505\n", "0555")]:
        assert sort_digits_v1.program.generate(prompt) == want


def test_stops_with_eos():
    program = sort_digits_v1.program
    for prompt in ["9583\n", "9876543210\n", "7\n"]:
        new = program.generate_ids(program.vocab.encode(prompt))
        assert len(new) == len(prompt) - 1  # generate_ids stops at <eos> (or max_seq_len)


def test_four_digit_strings_with_max_len_4():
    program = sort_digits_v1.make(max_len=4)
    for digits in itertools.product("0123456789", repeat=4):
        if digits[0] in "09" and digits[1] in "5":  # a 2% slice of length 4, fast
            prompt = "".join(digits) + "\n"
            assert program.generate(prompt) == sort_digits_v1.oracle(prompt), prompt
