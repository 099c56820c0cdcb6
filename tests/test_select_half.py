"""Content selection in half precision (issue 32): ``tw.select_latest`` and ``tw.gather`` as
one head whose logit is ``G (p_j + 1) (c_j - m + 1)`` (ops/position_half.latest), and
``tw.argmax`` / ``tw.argmin`` from latches of [score >= s] and that head. Each program,
written as a user would, compiles with precision="half" and is right at every position of
128-token streams through transformers in float32, float16 and bfloat16, eager and sdpa,
against the eager reference; what half cannot hold is refused naming the line."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

import torchwright_fx as tw
from tests.select_half_programs import (
    ARGMAX_PROGRAMS,
    PROGRAMS,
    D,
    V,
    _bits,
    digit_after_last_same_bits,
    streams,
)

QUICK = {"digit_after_last_same_token", "halfway_back", "two_conditions"}


@pytest.mark.parametrize("fn", [pytest.param(f, id=f.__name__, marks=() if f.__name__ in QUICK
                                             else pytest.mark.slow) for f in PROGRAMS])
def test_half_selection_is_right_in_every_dtype(fn, tmp_path):
    right_in_every_dtype(fn, 128, tmp_path)


def right_in_every_dtype(fn, n: int, directory) -> None:
    """``fn`` compiled in half at max_seq_len n, saved, and loaded in fp32/fp16/bf16 x
    eager/sdpa: the top token at every position of ``streams`` equals the reference's (which
    equals the eager function's)."""
    compiled = tw.compile(fn, vocab=V, precision="half", max_seq_len=n).compile()
    assert compiled.stats()["certified"] == ["fp32", "fp16", "bf16"]
    compiled.save_pretrained(directory)
    cases = streams(fn.__name__, n)
    wants = [compiled.traced.run(s).round().long().tolist() for s in cases]
    with tw.using_vocab(V):  # the traced reference is the eager function
        for s, want in zip(cases, wants, strict=True):
            assert want[1:] == fn(V.one_hot(s)).round().long().reshape(-1).tolist()[1:]
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for impl in ("eager", "sdpa"):
            model = AutoModelForCausalLM.from_pretrained(directory, dtype=dtype,
                                                         attn_implementation=impl)
            for s, want in zip(cases, wants, strict=True):
                with torch.no_grad():
                    got = model(torch.tensor([s])).logits[0].argmax(-1).tolist()
                assert got[1:] == want[1:], (dtype, impl)


def test_three_joined_conditions_are_refused_with_the_way_out():
    def three(x: torch.Tensor) -> torch.Tensor:
        d = tw.lookup(x, D, default=0)
        a = tw.is_token(x, list("ab")).float()
        b = tw.is_token(x, list("bc")).float()
        sel = tw.select(d, d, "==") & tw.select(a, a, "==") & tw.select(b, b, "==")
        return tw.token("0") + tw.select_latest(sel, d)

    with pytest.raises(tw.CompileError) as e:
        tw.compile(three, vocab=V, precision="half").compile()
    text = str(e.value)
    assert "test_select_half.py" in text and "predicate function" in text, text

    def joined(x: torch.Tensor) -> torch.Tensor:  # the advice: one select, one predicate
        d = tw.lookup(x, D, default=0)
        kind = tw.lookup(x, {"a": 1, "b": 3, "c": 2}, default=0)  # [in ab] + 2 [in bc]
        key = d * 4 + kind
        sel = tw.select(key, key, "==")
        return tw.token("0") + tw.select_latest(sel, d)

    tw.compile(joined, vocab=V, precision="half").compile()


@pytest.mark.parametrize("fn", ARGMAX_PROGRAMS, ids=lambda f: f.__name__)
def test_half_argmax_is_right_in_every_dtype(fn, tmp_path):
    test_half_selection_is_right_in_every_dtype(fn, tmp_path)


def test_argmax_of_a_wide_score_is_refused_with_the_way_out():
    def latest_peak(x: torch.Tensor) -> torch.Tensor:
        d = tw.lookup(x, D, default=0)
        return tw.token("0") + tw.argmax(tw.position(x), d)  # 128 score values

    with pytest.raises(tw.CompileError) as e:
        tw.compile(latest_peak, vocab=V, precision="half").compile()
    text = str(e.value)
    assert "test_select_half.py" in text and "takes 128" in text, text
    assert "torch.clamp" in text and "precision='fp32'" in text, text

    def clamped_peak(x: torch.Tensor) -> torch.Tensor:  # the advice: a narrower score
        d = tw.lookup(x, D, default=0)
        return tw.token("0") + tw.argmax(torch.clamp(tw.position(x), 0, 16), d)

    tw.compile(clamped_peak, vocab=V, precision="half").compile()


def test_select_latest_on_bit_vectors_is_refused_in_half_with_the_way_out():
    """Half's select_latest gates its keys as 0/1 features, which a bit vector's veto dims are
    not: refused, naming the line; in fp32 the same program compiles and is right."""
    with pytest.raises(tw.CompileError) as e:
        tw.compile(digit_after_last_same_bits, vocab=V, precision="half",
                   max_seq_len=64).compile()
    assert "not certified in half" in str(e.value) and "precision='fp32'" in str(e.value)
    assert "select_half_programs.py" in str(e.value)
    def by_number(x: torch.Tensor) -> torch.Tensor:  # the other way out: the bits' number
        def number(b: torch.Tensor) -> torch.Tensor:
            return sum(2 ** i * b[:, i:i + 1] for i in range(3))  # _bits: three columns

        bits = _bits(x)
        d = tw.lookup(x, D, default=0)
        return tw.token("0") + tw.select_latest(
            tw.select(number(tw.shift(bits, 1)), number(bits), "=="), d, default=0)

    tw.compile(by_number, vocab=V, precision="half", max_seq_len=64).compile()
    compiled = tw.compile(digit_after_last_same_bits, vocab=V, max_seq_len=64).compile()
    for s in streams("bits", 63):  # (the last position of the context prints <eos>)
        want = compiled.traced.run(s).round().long().reshape(-1)
        assert torch.equal(compiled.printed_ids(s).reshape(-1)[1:], want[1:])
