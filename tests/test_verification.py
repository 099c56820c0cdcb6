"""Probe, checks, verify, and what happens with bad input at run time."""

from __future__ import annotations

import dataclasses
import inspect
import operator

import pytest
import torch

import torchwright_fx as tw
from torchwright_fx.capture import registry

VOCAB = tw.Vocab("abcdef\n")


def _line(fn, marker: str) -> str:
    lines, start = inspect.getsourcelines(fn)
    return f"{__file__}:{start + next(i for i, t in enumerate(lines) if marker in t)}"


def _program(x):
    c = tw.code(x)
    big = c > 6  # MARK-COMPARE
    held = tw.latch(big.float(), tw.is_token(x, "\n"))
    return tw.emit(tw.is_token(x, "\n"), [torch.where(held > 0.5, tw.token("a"), tw.token("b"))])


def test_probe_is_clean_on_a_correct_build():
    report = tw.compile(_program, vocab=VOCAB, max_seq_len=32).probe("abcdef\nb")
    assert report.ok, str(report)


def test_probe_names_a_planted_wrong_construction(monkeypatch):
    real = registry.OPS[operator.gt]
    real_rule = real.lower

    def off_by_one(ctx, a, b):  # the lowering of `>` with a perturbed threshold
        return real_rule(ctx, a, b + 1 if b == 6 else b)

    monkeypatch.setitem(registry.OPS, operator.gt, dataclasses.replace(real, lower=off_by_one))
    compiled = tw.compile(_program, vocab=VOCAB, max_seq_len=32)
    report = compiled.probe("abcdef\n")
    assert report.first_bad is not None, str(report)
    assert report.first_bad.name == "gt"
    assert _line(_program, "MARK-COMPARE") in report.first_bad.source


def _checked(x):
    c = tw.code(x)
    y = torch.relu(c * 0.001 - 0.0055)  # values 0.0005 apart: inside the hinge's rounded corner
    return tw.check(y, lambda t: (t == 0) | (t >= 0.0004), "relu output is 0 or >= 0.0004")


def test_a_step_on_the_noisy_value_is_refused_at_compile_time():
    def stepped(x):
        y = _checked(x)
        return tw.emit(tw.is_token(x, "\n"), [torch.where(y > 0.0001, tw.token("a"),
                                                           tw.token("b"))])

    with pytest.raises(tw.CompileError, match="compiled input may be off by"):
        tw.compile(stepped, vocab=VOCAB, max_seq_len=32).compile()


def test_check_passes_in_exact_math_and_fails_in_a_debug_run():
    # The value itself (output="value"), so that the probe reads what the check sees.
    compiled = tw.compile(_checked, vocab=VOCAB, max_seq_len=32, output="value")
    compiled.traced.run(VOCAB.encode("abcdef\n"))  # the eager run evaluates the check: passes
    report = compiled.probe("abcdef\n")
    assert report.failed_checks and "relu output is 0" in report.failed_checks[0], str(report)


def test_failing_check_in_exact_math_raises():
    def prog(x):
        c = tw.check(tw.code(x), lambda t: t < 5, "codes below 5")
        return tw.emit(tw.is_token(x, "\n"), [c])

    with pytest.raises(AssertionError, match="codes below 5"):
        tw.compile(prog, vocab=VOCAB, max_seq_len=32).reference("f\n")


def test_claim_is_checked_in_the_reference():
    def prog(x):
        c = tw.claim(tw.code(x), 0, 4)
        return tw.emit(tw.is_token(x, "\n"), [c])

    with pytest.raises(AssertionError, match="claim violated"):
        tw.compile(prog, vocab=VOCAB, max_seq_len=32).reference("f\n")


@pytest.mark.parametrize("name", ["binary_increment", "adder_1digit"])
def test_verify_exhaustive_has_no_mismatch(name):
    import importlib

    program = importlib.import_module(f"examples.{name}").program
    report = tw.verify(program, exhaustive=True)
    print(report)
    assert report.ok and report.count >= 30
    assert report.worst_margin >= 1.0


def _swapped(x):
    """Prints the letter after '\n' swapped a<->b: wrong on purpose for the oracle below."""
    return tw.emit(tw.is_token(x, "\n"), [tw.lookup(tw.shift(tw.code(x), 1),
                                                    {VOCAB["a"]: "b", VOCAB["b"]: "a"}, "c")])


@pytest.mark.parametrize("backend", ["runtime", "hf", "onnx"])
def test_every_backend_runs_through_one_verify(backend):
    """The three runners (backends/protocol.py) agree on a program and report an oracle's
    disagreement the same way."""
    program = tw.compile(_swapped, vocab=VOCAB, max_seq_len=8)
    prompts = ["a\n", "b\n", "f\n"]
    report = program.verify(prompts, backend=backend)
    assert report.ok and report.count == 3 and report.backend == backend
    wrong = program.verify(prompts, backend=backend, oracle=lambda p: p[0])
    assert sorted(p for p, *_ in wrong.mismatches) == ["a\n", "b\n", "f\n"]
    with pytest.raises(ValueError, match="choose one of 'hf', 'runtime', 'onnx'"):
        program.verify(prompts, backend="vllm")


def test_weights_is_the_compiled_machine_and_machine_is_its_old_name():
    program = tw.compile(_swapped, vocab=VOCAB, max_seq_len=8)
    assert program.weights.max_seq_len == 8
    with pytest.warns(DeprecationWarning, match="Compiled.weights"):
        assert program.machine is program.weights


def test_unknown_characters_raise_a_clear_error():
    from examples.binary_increment import program

    with pytest.raises(tw.InputError, match=r"outside the vocabulary.*'2'"):
        program.generate("1021\n")
    # as the tokenizer does, <unk> when asked: same answer from weights and reference
    assert program.generate("1x\n", allow_unknown=True) == \
        program.reference("1x\n", allow_unknown=True)


def test_prompt_longer_than_max_seq_len_raises():
    compiled = tw.compile(_program, vocab=VOCAB, max_seq_len=8)
    with pytest.raises(tw.InputError, match="max_seq_len=8"):
        compiled.generate("abcdefabcdef\n")


def test_empty_prompt_generates_from_bos_alone():
    from examples.binary_increment import program

    assert program.generate("") == program.reference("") == ""


def test_generation_stops_at_max_seq_len():
    def forever(x):  # never emits <eos>
        return tw.code(x) * 0 + tw.token("a")

    compiled = tw.compile(forever, vocab=VOCAB, max_seq_len=8)
    assert compiled.generate("b") == compiled.reference("b") == "a" * 6
