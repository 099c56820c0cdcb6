"""Counts in half precision (issue 32): ``tw.selector_width`` as an averaging head and a search
of exact comparisons (ops/count_half.py). The search plan is checked against an independent
walk of every output each runtime can give; programs written as a user would are right at
every position through transformers in float32, float16 and bfloat16, eager and sdpa; past the
counts half holds, the refusal names the line and a max_seq_len that compiles."""

from __future__ import annotations

import numpy as np
import pytest

import torchwright_fx as tw
from tests.select_half_programs import COUNT_LENGTH, COUNT_PROGRAMS, V
from tests.test_select_half import right_in_every_dtype
from torchwright_fx.base.numerics import HALF_COUNT_NORM_EXPONENT
from torchwright_fx.ops import count_half


@pytest.mark.parametrize("n", [2, 3, 12, 33, 64, 97])
def test_plan_decodes_every_output_of_every_count_with_margin(n):
    """Walk the tree as the model does, on every value each runtime can output for count w:
    each level's bits are the signs of K (t - y), every |K (t - y)| within [LEAD, CAP], and the
    leaf reached is w."""
    levels, leaves = count_half.plan(n)
    sets = count_half.outputs(n)
    for w in range(n):
        for y in sets[w]:
            index = 0  # the root
            for level in levels:
                win = level[index]
                assert win.lo <= w <= win.hi
                bits = []
                for m, high, low, k in win.cuts:
                    u = k * (high + low - y)
                    assert count_half.LEAD <= abs(u) <= count_half.CAP, (w, y, m, u)
                    assert (u > 0) == (w >= m), (w, y, m)
                    bits.append(u > 0)
                child = sum(bits)
                assert bits == sorted(bits, reverse=True)  # monotone: a prefix of ones
                index = next(i for i, nxt in enumerate(levels[levels.index(level) + 1])
                             if nxt.parent == index and nxt.child == child) \
                    if level is not levels[-1] else \
                    next(i for i, leaf in enumerate(leaves)
                         if leaf.parent == index and leaf.child == child)
            assert leaves[index].lo == leaves[index].hi == w


def test_outputs_are_separated_and_refused_where_a_format_merges_them():
    sets = count_half.outputs(97)
    assert all(sets[w].max() < sets[w - 1].min() for w in range(1, 97))
    grid = 2.0 ** (HALF_COUNT_NORM_EXPONENT - 24)  # fp16's grid after the norm, at most
    assert all((np.abs(s - 256.0 / (w + 1)) <= np.maximum(2 ** -7 * 256.0 / (w + 1), grid)).all()
               for w, s in enumerate(sets))
    with pytest.raises(tw.CompileError, match="counts up to 96") as e:
        count_half.outputs(128)
    assert "max_seq_len to 97" in e.value.advice


QUICK = {"count_same_token", "smaller_of_same_kind", "count_same_bits"}


@pytest.mark.parametrize("fn", [pytest.param(f, id=f.__name__, marks=() if f.__name__ in QUICK
                                             else pytest.mark.slow) for f in COUNT_PROGRAMS])
def test_half_count_is_right_in_every_dtype(fn, tmp_path):
    right_in_every_dtype(fn, COUNT_LENGTH, tmp_path)


def test_a_count_at_half_default_length_is_refused_with_a_length_that_compiles():
    fn = COUNT_PROGRAMS[0]
    with pytest.raises(tw.CompileError) as e:
        tw.compile(fn, vocab=V, precision="half").compile()  # max_seq_len 128
    text = str(e.value)
    assert "select_half_programs.py" in text and "max_seq_len to 97" in text, text
    tw.compile(fn, vocab=V, precision="half", max_seq_len=97).compile()  # the advice compiles
