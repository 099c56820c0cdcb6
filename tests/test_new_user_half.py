"""New-user programs in half precision (written as a user would, while the half target was
built): each compiles with precision="half" and is right at every position of 128-token
streams through transformers in float32, float16 and bfloat16, eager and sdpa, against the
eager reference. Four run in `make test`, the rest under the slow marker."""

from __future__ import annotations

import random

import pytest
import torch
from transformers import AutoModelForCausalLM

import torchwright_fx as tw

V1 = tw.Vocab("abcde01234 ;")
D = {str(i): i for i in range(5)}


def prev_letter_is_same(x: torch.Tensor) -> torch.Tensor:
    same = tw.is_token(x, "a") * tw.shift(tw.is_token(x, "a"), 1)
    return torch.where(same.bool(), tw.token("1"), tw.token("0"))

def last_digit_seen(x: torch.Tensor) -> torch.Tensor:
    d = tw.lookup(x, D, default=0)
    isd = tw.is_token(x, list("01234"))
    return tw.token("0") + tw.latch(d, isd)

def distance_since_space(x: torch.Tensor) -> torch.Tensor:
    s = tw.steps_since(tw.is_token(x, " "))
    return tw.token("0") + torch.clamp(s, 0, 4)

def sum_of_last_two_digits_mod5(x: torch.Tensor) -> torch.Tensor:
    d = tw.lookup(x, D, default=0)
    return tw.token("0") + (d + tw.shift(d, 1)) % 5

def parity_of_position(x: torch.Tensor) -> torch.Tensor:
    return torch.where(tw.position(x) % 2 == 0, tw.token("a"), tw.token("b"))

def echo_after_semicolon(x: torch.Tensor) -> torch.Tensor:
    semi = tw.is_token(x, ";")
    letters = tw.is_token(x, list("abcde"))
    held = tw.latch(tw.lookup(x, {c: c for c in "abcde"}, default="a"), letters)
    return tw.emit(semi, [held, tw.shift(held, 1)], default="<eos>")

def gap_between_letters(x: torch.Tensor) -> torch.Tensor:
    letter = tw.is_token(x, list("abcde"))
    since = tw.steps_since(letter)
    before = tw.shift(since, 1)
    return tw.token("0") + torch.clamp(before, 0, 4) * letter.long()

def max_of_three(x: torch.Tensor) -> torch.Tensor:
    d = tw.lookup(x, D, default=0)
    m = torch.maximum(torch.maximum(d, tw.shift(d, 1)), tw.shift(d, 2))
    return tw.token("0") + m


V2 = tw.Vocab("xyz0123456789=\n")
D10 = {str(i): i for i in range(10)}


def running_parity_of_x(x: torch.Tensor) -> torch.Tensor:
    # 1 if the last 3 tokens contain an odd number of 'x'
    a = tw.is_token(x, "x")
    s = a + tw.shift(a, 1) + tw.shift(a, 2)
    return tw.token("0") + s % 2

def countdown_after_eq(x: torch.Tensor) -> torch.Tensor:
    since = tw.steps_since(tw.is_token(x, "="))
    return tw.token("0") + torch.clamp(9 - since, 0, 9)

def remember_first_digit_after_newline(x: torch.Tensor) -> torch.Tensor:
    nl = tw.is_token(x, "\n")
    d = tw.lookup(x, D10, default=0)
    after = tw.shift(nl, 1)
    return tw.token("0") + tw.latch(d, after.bool() & tw.is_token(x, list("0123456789")).bool())

def double_mod10(x: torch.Tensor) -> torch.Tensor:
    d = tw.lookup(x, D10, default=0)
    return tw.token("0") + (2 * d) % 10

def compare_neighbours(x: torch.Tensor) -> torch.Tensor:
    d = tw.lookup(x, D10, default=0)
    p = tw.shift(d, 1)
    return torch.where(d > p, tw.token("x"), torch.where(d == p, tw.token("y"), tw.token("z")))

def answer_after_eq(x: torch.Tensor) -> torch.Tensor:
    eq = tw.is_token(x, "=")
    a = tw.lookup(x, D10, default=0)
    b = tw.shift(a, 2)
    tot = tw.claim(tw.shift(a, 1) + b, 0, 18, integral=True)
    tens = tw.lookup(tot // 10, {0: "0", 1: "1"})
    return tw.emit(eq, [tens, tw.lookup(tot % 10, {i: str(i) for i in range(10)})])

def position_bucket(x: torch.Tensor) -> torch.Tensor:
    p = tw.position(x)
    return tw.token("0") + torch.clamp(p // 13, 0, 9)

def shift5(x: torch.Tensor) -> torch.Tensor:
    return tw.token("0") + tw.shift(tw.lookup(x, D10, default=0), 5)



FIRST = [(V1, f) for f in (prev_letter_is_same, last_digit_seen, distance_since_space,
                          sum_of_last_two_digits_mod5, parity_of_position, echo_after_semicolon,
                          gap_between_letters, max_of_three)]
SECOND = [(V2, f) for f in (running_parity_of_x, countdown_after_eq,
                           remember_first_digit_after_newline, double_mod10, compare_neighbours,
                           answer_after_eq, position_bucket, shift5)]
QUICK = {"last_digit_seen", "parity_of_position", "answer_after_eq", "countdown_after_eq"}
CASES = [pytest.param(v, f, id=f.__name__, marks=() if f.__name__ in QUICK else pytest.mark.slow)
         for v, f in FIRST + SECOND]


@pytest.mark.parametrize("vocab,fn", CASES)
def test_new_user_half_program(vocab, fn, tmp_path):
    compiled = tw.compile(fn, vocab=vocab, precision="half").compile()
    compiled.save_pretrained(tmp_path)
    rng = random.Random(fn.__name__)
    streams = [[vocab.bos_id] + [rng.randrange(3, len(vocab)) for _ in range(127)]
               for _ in range(2)]
    wants = [compiled.traced.run(s).round().long().tolist() for s in streams]
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for impl in ("eager", "sdpa"):
            model = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=dtype,
                                                         attn_implementation=impl)
            for s, want in zip(streams, wants, strict=True):
                with torch.no_grad():
                    got = model(torch.tensor([s])).logits[0].argmax(-1).tolist()
                assert got[1:] == want[1:], (dtype, impl)
