"""Whole numbers wider than a half column (families/wide.py), as a new user writes them: a
number read from its digits, compared with a constant or another number, cut back into
digits, chosen by torch.where, used as a table key. In half, bf16 holds no column of more than
256 whole numbers, so these are kept as affine forms of narrow columns and cut into places
with carries. Each program is compiled with precision="half" and its top token at every
position of a long prompt is compared with the eager reference through transformers in
float32, float16 and bfloat16 (eager and sdpa attention)."""

from __future__ import annotations

import random

import hfcheck
import pytest
import torch

import torchwright_fx as tw

VOCAB = tw.Vocab("0123456789")
DIGITS = {str(i): i for i in range(10)}


def _number(x: torch.Tensor, first: int = 0) -> torch.Tensor:
    """The three digits ending ``first`` places back, as one number (0..999)."""
    d = tw.lookup(x, DIGITS, default=0)
    back = [d if k == 0 else tw.shift(d, k) for k in range(first, first + 3)]
    return 100 * back[2] + 10 * back[1] + back[0]


def compare_constant(x):
    n = _number(x)
    return tw.token("0") + (n >= 537).float() + (n > 537).float() + 2 * (n <= 120).float() \
        + 4 * (n == 999).float()


def compare_numbers(x):
    a, b = _number(x), _number(x, 3)
    return tw.token("0") + (a > b).float() + 2 * (a == b).float()


def digits_of_a_sum(x):
    total = _number(x) + _number(x, 3)  # 0..1998
    return tw.token("0") + tw.number_to_digits(total, 4)[:, 1:2]  # the hundreds


def chosen_then_cut(x):
    d = tw.lookup(x, DIGITS, default=0)
    n = torch.where(d >= 5, _number(x, 1), 999 - _number(x, 1))
    return tw.token("0") + tw.number_to_digits(n, 3)[:, 0:1]  # the hundreds


def wide_key(x):
    return tw.token("0") + tw.lookup(_number(x), {k: k * k % 7 for k in range(1000)},
                                     default=0)


PROGRAMS = [compare_constant, compare_numbers, digits_of_a_sum, chosen_then_cut, wide_key]


@pytest.mark.parametrize("fn", PROGRAMS, ids=lambda f: f.__name__)
def test_wide_numbers_are_exact_in_every_dtype(fn, tmp_path):
    compiled = tw.compile(fn, vocab=VOCAB, precision="half").compile()
    assert compiled.stats()["certified"] == ["fp32", "fp16", "bf16"]
    compiled.save_pretrained(tmp_path)
    rng = random.Random(fn.__name__)
    # runs of equal and near-equal numbers as well as random ones (the == and > cases)
    text = "".join(rng.choice(["999", "537", "538", "536", "120", "121", str(rng.randrange(1000))
                               ]).zfill(3) for _ in range(120))
    ids = [VOCAB.bos_id] + [VOCAB.tokens.index(c) for c in text]
    want = compiled.traced.run(ids).round().long().tolist()
    assert len(set(want[4:])) > 1  # not a constant answer
    for dtype, impl, got in hfcheck.top_tokens(tmp_path, ids):
        assert got[1:] == want[1:], (dtype, impl)


def test_fp32_builds_read_wide_numbers_directly():
    """The places are a half construction: fp32 compares the number in one layer."""
    half = tw.compile(compare_constant, vocab=VOCAB, precision="half").compile()
    full = tw.compile(compare_constant, vocab=VOCAB).compile()
    assert full.stats()["layers"] < half.stats()["layers"]
