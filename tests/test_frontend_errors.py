"""Programs that cannot compile fail with an error naming the user's source line."""

from __future__ import annotations

import pytest
import torch

import torchwright_fx as tw
from torchwright_fx.base.machines import RELU
from torchwright_fx.ops import relu as R
from torchwright_fx.ops import swiglu as S

VOCAB = tw.Vocab("01\n")


def _line_of(fn, marker: str) -> int:
    import inspect

    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if marker in line)


def test_python_if_on_a_traced_value_names_the_line():
    def prog(x):
        one = tw.is_token(x, "1")
        if one.sum() > 0:  # MARK-IF
            return one
        return one

    with pytest.raises(tw.CompileError) as err:
        tw.trace(prog, vocab=VOCAB)
    msg = str(err.value)
    assert f"{__file__}:{_line_of(prog, 'MARK-IF')}" in msg
    assert "torch.where" in msg


def test_unknown_torch_op_names_the_line_and_op():
    def prog(x):
        one = tw.is_token(x, "1")
        wave = torch.sin(one)  # MARK-SIN
        return tw.emit(tw.is_token(x, "\n"), [wave])

    with pytest.raises(tw.CompileError) as err:
        tw.compile(prog, vocab=VOCAB).compile()
    msg = str(err.value)
    assert f"{__file__}:{_line_of(prog, 'MARK-SIN')}" in msg
    assert "sin" in msg and "no lowering" in msg


def test_mixing_the_two_op_libraries_names_both_lines():
    def prog(x):
        one = tw.is_token(x, "1")
        a = S.mul(one, one)  # MARK-SWIGLU
        b = R.relu(a)  # MARK-RELU
        return tw.emit(tw.is_token(x, "\n"), [b])

    with pytest.raises(tw.CompileError) as err:
        tw.compile(prog, vocab=VOCAB).compile()
    msg = str(err.value)
    assert f"{__file__}:{_line_of(prog, 'MARK-SWIGLU')}" in msg
    assert f"{__file__}:{_line_of(prog, 'MARK-RELU')}" in msg
    assert "mixes" in msg


def test_library_op_against_requested_machine_names_the_line():
    def prog(x):
        one = tw.is_token(x, "1")
        return tw.emit(tw.is_token(x, "\n"), [R.relu(one)])  # MARK-R

    with pytest.raises(tw.CompileError) as err:
        tw.compile(prog, vocab=VOCAB, machine="swiglu").compile()
    assert f"{__file__}:{_line_of(prog, 'MARK-R')}" in str(err.value)


def test_indexing_positions_is_rejected_with_advice():
    def prog(x):
        one = tw.is_token(x, "1")
        first = one[0]  # MARK-IDX
        return tw.emit(tw.is_token(x, "\n"), [first + one])

    with pytest.raises(tw.CompileError) as err:
        tw.compile(prog, vocab=VOCAB).compile()
    msg = str(err.value)
    assert f"{__file__}:{_line_of(prog, 'MARK-IDX')}" in msg


def test_wrong_output_width_is_rejected():
    def prog(x):
        return x

    with pytest.raises(tw.CompileError, match="one code stream of width 1"):
        tw.compile(prog, vocab=VOCAB).compile()


def test_latch_needs_a_boolean_condition():
    def prog(x):
        code = tw.code(x)
        return tw.latch(code, code)  # MARK-LATCH

    with pytest.raises(tw.CompileError) as err:
        tw.compile(prog, vocab=VOCAB).compile()
    assert f"{__file__}:{_line_of(prog, 'MARK-LATCH')}" in str(err.value)


def test_library_ops_compile_on_their_machine():
    def prog(x):
        one = tw.is_token(x, "1")
        nl = tw.is_token(x, "\n")
        last = tw.shift(one, 1)
        out = R.select(last, tw.token("1"), tw.token("0"))
        return tw.emit(nl, [out])

    compiled = tw.compile(prog, vocab=VOCAB, max_seq_len=16)
    assert compiled.build.program.machine is RELU
    for prompt in ["1\n", "0\n", "01\n", "10\n"]:
        assert compiled.generate(prompt) == compiled.reference(prompt) == prompt[-2]
