"""caesar_cipher: ``3hello\\n`` -> ``khoor``.

The first character is the shift, a digit 0-9 read at run time; then come 1..``max_letters``
lowercase letters (default 5), each printed shifted forward by that many places mod 26
(``3xyzab`` -> ``abcde``, ``0hello`` -> ``hello``). Every word length 1..max_letters works.

At the newline the word's letters sit 1..n places back and the shift digit n+1 back, but the
length n is known only at run time. It is one of 1..max_letters, so for each output slot k
the program computes the letter under every hypothesis n and keeps the one whose shift digit
is where it assumed: all in one layer, because the selection is folded into the arithmetic
(see the comments). The slots are held at the newline and printed by one ``emit``; a slot
past the word's end holds ``<eos>``.
"""

# report() for the default build (max_letters=5), heuristic scheduler:
#   caesar_cipher: 2 layers (critical-path bound 2), d_model=64 (peak live width 49),
#   d_head=32, 10 heads/layer (11 used), 45 lanes/layer, 186,560 parameters, compiled in 0.2-1.3s
# (the seed: 9 layers at d=512, 6.8M parameters, exactly 5 letters only).

from __future__ import annotations

import itertools
import random
import string
from collections.abc import Iterator
from typing import Any

import torch

import torchwright_fx as tw

MAX_LETTERS = 5
LETTERS = string.ascii_lowercase
DIGITS = "0123456789"
VOCAB = tw.Vocab(DIGITS + LETTERS + "\n")
DEMOS = ["3hello\n", "1xyzab\n", "0hello\n", "9z\n"]
EDGE_CASES = [
    # the seed's own cases (5 letters: the only length the seed handled)
    "0hello\n", "1abcde\n", "1hello\n", "3hello\n", "1xyzab\n", "3xyzab\n", "9abcde\n",
    "5vwxyz\n",
    # every length, both ends of the alphabet, the largest shift
    "0a\n", "9z\n", "1z\n", "9zz\n", "5abc\n", "7wxyz\n", "9zzzzz\n", "0zzzzz\n", "9aaaaa\n",
    "4q\n", "8az\n",
]
WORDS = ["a", "m", "z", "ab", "az", "za", "zz", "cat", "xyz", "qqq", "word", "zaza", "wxyz",
         "hello", "abcde", "xyzab", "vwxyz", "zzzzz", "aaaaa", "qwert"]


def oracle(prompt: str) -> str:
    shift, word = int(prompt[0]), prompt[1:].strip()
    return "".join(LETTERS[(LETTERS.index(c) + shift) % 26] for c in word)


def inputs(max_letters: int = MAX_LETTERS) -> Iterator[str]:
    """Every shift for every single letter, and for a set of words of each length 1..5 (the
    whole domain, 10 * (26 + ... + 26**5), is about 124M prompts)."""
    words = [*LETTERS, *(w for w in WORDS if len(w) <= max_letters)]
    for shift, word in itertools.product(DIGITS, dict.fromkeys(words)):
        yield f"{shift}{word}\n"


def sample(rng: random.Random, max_letters: int = MAX_LETTERS) -> str:
    word = "".join(rng.choice(LETTERS) for _ in range(rng.randint(1, max_letters)))
    return f"{rng.choice(DIGITS)}{word}\n"


def make(max_letters: int = MAX_LETTERS, **options: Any) -> tw.Compiled:

    def caesar_cipher(x: torch.Tensor) -> torch.Tensor:
        newline = tw.is_token(x, "\n")
        # a letter's index 0..25, or the shift digit's value
        value = tw.lookup(x, {**{d: int(d) for d in DIGITS},
                              **{c: i for i, c in enumerate(LETTERS)}})
        token = torch.cat([value, tw.is_token(x, list(DIGITS)).float()], dim=-1)
        back = {k: tw.shift(token, k) for k in range(1, max_letters + 2)}  # k places back
        eos, a = tw.token("<eos>"), tw.token("a")

        slots: list[Any] = []
        for k in range(max_letters):  # the k-th letter printed
            code: Any = eos  # when the word is too short to have a letter k
            for n in range(k + 1, max_letters + 1):  # if the word has n letters:
                digit_in_place = back[n + 1][:, 1:2]  # the shift digit is n+1 back,
                shifted = back[n - k][:, 0:1] + back[n + 1][:, 0:1]  # letter k + shift: 0..34
                # The code of letter (shifted mod 26), counted only when this n holds: the
                # linear part through a select, the wrap through a test that can pass only
                # when the digit is in place (shifted <= 34 < 61 - 35).
                code = code + torch.where(digit_in_place.bool(), a + shifted - eos, 0)
                code = code - 26 * (shifted + 35 * digit_in_place >= 61).float()
            slots.append(tw.claim(code, 0, len(VOCAB) - 1, integral=True))  # a token code
        held = tw.latch(torch.cat(slots, dim=-1), newline)
        return tw.emit(newline, [held[:, k:k + 1] for k in range(max_letters)])

    return tw.compile(caesar_cipher, vocab=VOCAB, **options).with_domain(
        lambda: inputs(max_letters), oracle)


program = make()
