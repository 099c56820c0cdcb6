"""Constructs the op libraries cannot compile fail with a CompileError that names the user's
line and says what to do; the library spellings (ops.swiglu / ops.relu) compile and fix the
machine."""

from __future__ import annotations

import inspect
import math

import numpy as np
import pytest
import torch
from test_ops_helpers import Claim, Probe, fp32, run_probes

import torchwright_fx as tw
from torchwright_fx.base.machines import RELU
from torchwright_fx.ir.graph import MachineKind
from torchwright_fx.ops import relu as R
from torchwright_fx.ops import swiglu as S

VOCAB = tw.Vocab("0123456789\n")


def _line_of(fn, marker: str) -> str:
    lines, start = inspect.getsourcelines(fn)
    return f"{__file__}:{start + next(i for i, line in enumerate(lines) if marker in line)}"


def _compile_error(fn, machine: MachineKind = "swiglu") -> str:
    with pytest.raises(tw.CompileError) as err:
        tw.compile(fn, vocab=VOCAB, max_seq_len=16, machine=machine).compile()
    return str(err.value)


def test_a_claim_never_widens_what_is_known():
    # An unbounded claim keeps the code's own range [0, V-1]: the ReLU product compiles, and
    # its table is exact on the integers.
    def prog(x):
        a = tw.claim(tw.code(x), -math.inf, math.inf)
        return tw.claim(a * tw.code(x), 0, 10_000, integral=True)

    program = tw.compile(prog, vocab=tw.Vocab("abc"), machine="relu", output="value",
                         max_seq_len=8).compile()
    rng = program.build.program.output_range
    assert rng.finite and rng.hi <= (len(program.vocab) - 1) ** 2


def test_relu_product_with_ranges_is_exact_on_integers():
    digits = [float(d) for d in range(10)]
    a, b = [x for x in digits for _ in digits], digits * 10
    (got,) = run_probes([Probe(lambda p, q: p * q, [a, b], [Claim(0, 9, True)] * 2)], "relu")
    assert torch.equal(got, fp32(a) * fp32(b))


def test_op_without_lowering_names_the_line_and_op():
    def prog(x):
        v = tw.code(x)
        return torch.exp(v)  # MARK

    msg = _compile_error(prog)
    assert _line_of(prog, "MARK") in msg and "no lowering" in msg and "exp" in msg


def test_power_with_a_stream_exponent_is_rejected_with_advice():
    def prog(x):
        return 2 ** tw.code(x)  # MARK

    msg = _compile_error(prog)
    assert _line_of(prog, "MARK") in msg and "tw.piecewise" in msg


def test_reciprocal_over_a_range_containing_zero_asks_for_a_claim():
    def prog(x):
        return 1 / (tw.code(x) - 3)  # MARK

    msg = _compile_error(prog)
    assert _line_of(prog, "MARK") in msg and "includes 0" in msg and "tw.claim" in msg


def test_floor_of_a_wide_claim_uses_the_known_range():
    def prog(x):
        v = tw.claim(tw.code(x) / 3, -math.inf, math.inf)
        return torch.floor(v)

    program = tw.compile(prog, vocab=tw.Vocab("abcdefg"), max_seq_len=8).compile()
    ids = program.vocab.encode("abcdefg")  # fills max_seq_len: <eos> at its last position
    want = [i // 3 for i in ids][:-1] + [program.vocab.eos_id]
    assert program.logits(ids).argmax(-1).tolist() == want
    assert program.logits(ids[:-1]).argmax(-1).tolist() == [i // 3 for i in ids[:-1]]


def test_equality_of_real_valued_streams_is_rejected():
    def prog(x):
        # sqrt(d + 2) has no lattice fp32 resolves
        v = tw.lookup(x, {str(d): math.sqrt(d + 2) for d in range(10)})
        return (tw.shift(v, 1) == math.sqrt(3)).float()  # MARK

    msg = _compile_error(prog)
    assert _line_of(prog, "MARK") in msg and "integer-valued" in msg


def test_too_close_breakpoints_are_rejected_on_swiglu_only():
    def prog(x):
        return tw.piecewise(abs, tw.code(x), [0.0, 0.1, 5.0])  # MARK

    msg = _compile_error(prog, "swiglu")
    assert _line_of(prog, "MARK") in msg and "input_scale" in msg
    tw.compile(prog, vocab=VOCAB, max_seq_len=16, machine="relu").compile()

    def sharper(x):
        return tw.piecewise(abs, tw.code(x), [0.0, 0.1, 5.0], input_scale=4.0)

    tw.compile(sharper, vocab=VOCAB, max_seq_len=16).compile()


def test_number_to_digits_needs_a_non_negative_range():
    def prog(x):
        return tw.number_to_digits(tw.code(x) - 5, 2)[:, :1]  # MARK

    assert _line_of(prog, "MARK") in _compile_error(prog)


def test_lookup2_needs_integer_keys():
    def prog(x):
        half = tw.code(x) / 2
        return tw.lookup2(half, tw.code(x), {(0, 0): 1.0})  # MARK

    msg = _compile_error(prog)
    assert _line_of(prog, "MARK") in msg and "integral=True" in msg


@pytest.mark.parametrize("machine, lib", [("swiglu", S), ("relu", R)])
def test_library_spellings_compile_on_their_machine(machine, lib):
    # real values away from every step's ramp (integers, half-integers, multiples of 3)
    # (binary fractions: decimals such as 2.2 are read as the decimal, rounded once by fp32,
    # and b % 3 of those could tie at an integer)
    pts = [-3.75, -2.625, -1.25, -0.625, 0.375, 0.75, 1.375, 2.75, 3.625]
    pos = [0.75, 1.25, 2.25, 3.375, 4.375, 5.25, 6.25, 7.25, 7.75]

    def op(a, b):
        return (lib.mul(a, b, step=0.05) + lib.square(a) + lib.reciprocal(b, rel_tol=1e-3)
                + lib.floor(a) + lib.mod(b, 3) + lib.round(b) + lib.ceil(a)
                + lib.piecewise(lambda t: t * t, lib.clamp(a, -3, 3), [-3.0, 0.0, 3.0])
                + lib.select(lib.compare(a, 0.25), lib.relu(a), lib.abs(b))
                + lib.maximum(a, b) + lib.minimum(a, b))

    (got,) = run_probes([Probe(op, [pts, pos], [Claim(-4, 4), Claim(0.5, 8)])], machine)
    a, b = fp32(pts).numpy(), fp32(pos).numpy()
    clamped = np.clip(a, -3, 3)
    want = (a * b + a * a + 1 / b + np.floor(a) + np.mod(b, 3) + np.round(b) + np.ceil(a)
            + np.interp(clamped, [-3, 0, 3], [9, 0, 9]) + np.where(a > 0.25, np.maximum(a, 0),
                                                                   np.abs(b))
            + np.maximum(a, b) + np.minimum(a, b))
    assert np.allclose(got.numpy(), want, atol=0.05), np.abs(got.numpy() - want).max()


def test_library_ops_fix_the_machine():
    def prog(x):
        return R.floor(tw.code(x) / 2)

    compiled = tw.compile(prog, vocab=VOCAB, max_seq_len=16).compile()
    assert compiled.build.program.machine is RELU


def test_a_step_beyond_fp32_resolution_names_the_line_and_the_limit():
    def prog(x):
        # integers up to ~1.3e8 on a lattice of spacing 1: fp32 cannot resolve 1 at the gate
        big = tw.code(x) * 10 ** 7 + tw.shift(tw.code(x), 1)
        return (big >= 10 ** 6).float()  # MARK

    msg = _compile_error(prog)
    assert _line_of(prog, "MARK") in msg
    # beyond 2**24 the reference rounds the sum once, so it may land on the threshold: refused
    # as such (or, below 2**24, as more lattice steps than fp32 resolves); both say compare
    assert ("lattice steps" in msg and "compare smaller parts" in msg) or \
        ("may land on the threshold" in msg and "compare whole numbers" in msg), msg


def test_a_step_just_inside_fp32_resolution_is_exact():
    def prog(x):
        big = tw.code(x) * 150_000 + tw.shift(tw.code(x), 1)  # spacing 1, up to ~2e6
        return (big > 999_999).float()

    program = tw.compile(prog, vocab=VOCAB, max_seq_len=16)
    ids = VOCAB.encode("0123456789")
    want = program.traced.run(ids)
    from test_ops_helpers import read_lin

    from torchwright_fx.backends import runtime

    _, states = runtime.forward(program.weights, ids, capture=True)
    got = read_lin(program, program.build.program.output, states)
    assert torch.equal(got.float(), want.float())
