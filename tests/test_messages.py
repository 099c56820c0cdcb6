"""The messages that left new users stuck (issue 19), each with the text that unsticks them."""

from __future__ import annotations

import pytest
import torch

import torchwright_fx as tw

V = tw.Vocab("ab\n")


def _refused(fn) -> str:
    with pytest.raises(tw.CompileError) as info:
        tw.compile(fn, vocab=V).compile()
    return str(info.value)


def test_negative_shift_says_shifts_look_back_only():
    def prog(x):
        return tw.shift(tw.code(x), -1)

    with pytest.raises(ValueError, match="cannot look ahead"):
        prog(V.one_hot([V.bos_id, 3, 4]))
    assert "cannot look ahead" in _refused(prog)


def test_emit_trigger_that_is_not_0_1_mentions_claim():
    def prog(x):
        return tw.emit(tw.mean(tw.is_token(x, "a")), ["a"])

    msg = _refused(prog)
    assert "got values in [0, 1], not whole numbers" in msg
    assert "tw.claim(v, 0, 1, integral=True)" in msg


def test_claim_violation_names_the_position_and_bos():
    def prog(x):
        return tw.emit(tw.is_token(x, "\n"), [tw.claim(tw.code(x) - 1, 0, 300)])

    with pytest.raises(AssertionError, match=r"first at position 0, the <bos> row"):
        tw.compile(prog, vocab=V).reference("ab\n")

    def later(x):
        return tw.emit(tw.is_token(x, "\n"), [tw.claim(tw.code(x), 0, 3)])

    with pytest.raises(AssertionError, match=r"first at position 2$"):
        tw.compile(later, vocab=V).reference("ab\n")


def test_number_to_digits_negative_at_bos_says_so():
    def prog(x):
        d = tw.number_to_digits(tw.code(x) - 1, 2)
        return tw.emit(tw.is_token(x, "\n"), [d[:, :1]])

    msg = _refused(prog)
    assert "-1 at <bos>" in msg and "torch.clamp(v, min=0)" in msg


def test_torch_max_over_positions_points_to_argmax():
    def prog(x):
        return torch.max(tw.code(x), dim=0).values

    msg = _refused(prog)
    assert "over positions" in msg and "tw.argmax(score, v)" in msg


@pytest.mark.parametrize("op, hint", [
    (lambda v: torch.cumsum(v, 0), "tw.mean(v) * (tw.position(x) + 1)"),
    (lambda v: torch.roll(v, 1, 0), "tw.shift(v, k)"),
    (lambda v: torch.flip(v, [0]), "tw.gather"),
])
def test_cross_position_torch_ops_point_to_intrinsics(op, hint):
    def prog(x):
        return op(tw.code(x))

    msg = _refused(prog)
    assert "no lowering for torch." in msg and hint in msg
