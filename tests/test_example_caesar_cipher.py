"""caesar_cipher beyond the generic suite: every shift of every letter at every word length
(the seed handled only exactly five letters), and a shorter maximum length."""

from __future__ import annotations

import random
import string

from examples import caesar_cipher


def test_every_shift_at_every_length():
    letters = string.ascii_lowercase
    prompts = []
    for shift in "0123456789":
        for n in range(1, 6):
            for start in (0, 19):  # words from both ends of the alphabet
                word = "".join(letters[(start + i * 7) % 26] for i in range(n))
                prompts.append(f"{shift}{word}\n")
    for prompt in prompts:
        assert caesar_cipher.program.generate(prompt) == caesar_cipher.oracle(prompt), prompt


def test_max_letters_parameter():
    program = caesar_cipher.make(max_letters=3)
    rng = random.Random(3)
    for prompt in ["9zzz\n", "0a\n", "5xy\n", *(caesar_cipher.sample(rng, 3) for _ in range(30))]:
        assert program.generate(prompt) == caesar_cipher.oracle(prompt), prompt
