"""A half build's constants that bf16 does not hold (a step at 259 reads ``128 * 259``, a
number of 9 significant bits): read from two constant columns as two numbers that fp16 and
bf16 both hold (``base.machines.half_parts``, ``emit/emitter.py``). Before, such a program was
refused ("needs every weight to be an fp16 and bf16 number")."""

from __future__ import annotations

import random
import re

import hfcheck
import pytest
import torch

import torchwright_fx as tw
from torchwright_fx.base.machines import BF16, FP16, half_holds, half_parts

VOCAB = tw.Vocab("0123456789")
DIGITS = {str(i): i for i in range(10)}


def test_half_parts_are_held_and_sum_exactly():
    rng = random.Random(0)
    values = [rng.randrange(-65000, 65000) * 2.0 ** rng.randrange(-6, 3) for _ in range(3000)]
    values += [257.0, -259.0 * 128, 33151.0, 65504.0, 0.0, 3.0]
    for v in values:
        parts = half_parts(v)
        if not parts:  # beyond fp16's range, or needing more than two parts
            assert abs(v) > FP16.max_finite or not half_holds(v)
            continue
        assert sum(parts) == v and len(parts) <= 2, v
        for p in parts:
            t = torch.tensor(p, dtype=torch.float64)
            assert float(t.half()) == p and float(t.bfloat16()) == p, (v, parts)
    assert half_parts(257.0) == (256.0, 1.0) and half_parts(258.0) == (258.0,)
    assert half_parts(102400.0) == ()  # beyond fp16: no sum of two held numbers is read


def test_formats_hold_what_torch_rounds_to_itself():
    rng = random.Random(1)
    for _ in range(2000):
        x = rng.uniform(-70000, 70000) * 2.0 ** rng.randrange(-30, 1)
        x = float(torch.tensor(x, dtype=torch.float32))
        for fmt, dtype in ((FP16, torch.float16), (BF16, torch.bfloat16)):
            rounded = torch.tensor(x).to(dtype)
            assert fmt.holds(x) == (bool(rounded.isfinite()) and float(rounded) == x), (fmt, x)


def window_count(x: torch.Tensor) -> torch.Tensor:
    """Four times a product of digits plus a digit (0..333), compared at thresholds bf16 does
    not hold (the product is a signal: its comparison's constant is the threshold's)."""
    d = tw.lookup(x, DIGITS, default=0)
    v = 4 * (tw.shift(d, 1) * d) + tw.shift(d, 2)
    return tw.token("0") + (v >= 259).float() + (v > 273).float() + (v == 297).float()


def test_a_step_beyond_256_compiles_in_half_and_is_exact(tmp_path):
    compiled = tw.compile(window_count, vocab=VOCAB, precision="half").compile()
    assert compiled.build.plan.pin_cols == [1]  # the second constant column
    m = compiled.build.machine
    for t in (m.embed, *[x for la in m.layers for x in (la.gate_up, la.down)]):
        assert torch.equal(t.half().float(), t) and torch.equal(t.bfloat16().float(), t)
    compiled.save_pretrained(tmp_path)
    rng = random.Random(259)
    ids = [VOCAB.bos_id] + [VOCAB.tokens.index(str(rng.randrange(6, 10))) for _ in range(400)]
    want = compiled.traced.run(ids).round().long().tolist()
    assert sorted(set(want[1:])) == [VOCAB.tokens.index(c) for c in "0123"]  # every case
    for dtype, impl, got in hfcheck.top_tokens(tmp_path, ids):
        assert got[1:] == want[1:], (dtype, impl)


@pytest.mark.parametrize("precision", ["fp32", "half"])
def test_no_second_constant_where_none_is_needed(precision):
    def small(x):
        return tw.token("0") + (tw.lookup(x, DIGITS, default=0) >= 5).float()

    compiled = tw.compile(small, vocab=VOCAB, precision=precision).compile()
    assert compiled.build.plan.pin_cols == ([] if precision == "half" else
                                            compiled.build.plan.pin_cols)


def test_a_weight_beyond_fp16_is_refused_with_the_coefficient_it_allows():
    """A comparison of a flag weighted by 600.5: not a whole number, so half cannot cut it
    into places (families/wide.py), and its gate weight 600.5 * 256 is beyond fp16's 65504.
    The refusal says how large a coefficient may be, and comparing the digits instead
    compiles."""
    def weighted(x):
        d = tw.lookup(x, DIGITS, default=0)
        return tw.token("0") + (600.5 * (tw.shift(d, 1) >= 5).float() + d >= 300).float()

    def by_digit(x):
        d = tw.lookup(x, DIGITS, default=0)
        return tw.token("0") + (d >= 5).float()

    with pytest.raises(tw.CompileError) as e:
        tw.compile(weighted, vocab=VOCAB, precision="half").compile()
    text = str(e.value)
    assert "test_half_constants.py" in text and "below fp16's 65504" in text, text
    assert re.search(r"coefficients up to \d+;", text), text
    assert "digit by digit" in text and "precision='fp32'" in text
    tw.compile(by_digit, vocab=VOCAB, precision="half").compile()
