"""The model prints <eos> at its last certified position (ops/end.py): the flag is exactly 0
before it and lets <eos> win at it, for programs with and without a position head, on both
machines; the saved directory's generation config follows."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import lin_value

import torchwright_fx as tw
from torchwright_fx.backends import runtime
from torchwright_fx.ops import end
from torchwright_fx.ops.position import samples

VOCAB = tw.Vocab("ab0123456789")


def echo(x):
    """No position of its own: the flag brings its own averaging head."""
    return tw.code(x)


def counter(x):
    """Reads the position: the flag shares its head."""
    return tw.token("0") + tw.position(x) % 10


def flag_values(program: tw.Compiled, ids: list[int]) -> torch.Tensor:
    """E at every position, read from the final residual of the in-process runtime."""
    _, states = runtime.forward(program.weights, ids, capture=True)
    prog = program.build.program
    assert prog.end_flag is not None
    return lin_value(prog.end_flag, program.build.plan, states[-1])


@pytest.mark.parametrize("machine", ["swiglu", "relu"])
@pytest.mark.parametrize("fn", [echo, counter], ids=lambda f: f.__name__)
@pytest.mark.parametrize("n", [2, 7, 300])
def test_eos_exactly_at_the_last_position(fn, machine, n):
    program = tw.compile(fn, vocab=VOCAB, max_seq_len=n, machine=machine).compile()
    assert program.stats()["ends_with_eos"]
    ids = [VOCAB.bos_id] + [3 + (7 * i) % (len(VOCAB) - 3) for i in range(n - 1)]
    flag = flag_values(program, ids)
    assert torch.all(flag[:-1] == 0), torch.nonzero(flag[:-1])[:5]
    assert end.lowest_at_end() <= float(flag[-1]) <= end.flag_range().hi
    top = program.logits(ids).argmax(-1)
    assert torch.equal(top, program.printed_ids(ids))
    assert int(top[-1]) == VOCAB.eos_id
    # every shorter prefix answers as the program does: the flag is off there
    assert torch.equal(program.logits(ids[:-1]).argmax(-1),
                       program.traced.run(ids[:-1]).round().long())


def test_a_context_filling_answer_ends_with_eos():
    program = tw.compile(counter, vocab=VOCAB, max_seq_len=24).compile()
    ids = VOCAB.encode("ab")
    answer = program.generate_ids(ids)
    assert answer == program.reference_ids(ids) and len(ids) + len(answer) == 24
    # what a runtime that runs the last position (transformers, llama.cpp) prints after it
    assert int(program.logits(ids + answer)[-1].argmax()) == VOCAB.eos_id


def test_the_ramp_is_certified_far_beyond_todays_lengths():
    for n in (2, 3, 64, 4096, 16384, 131072):
        assert end.certified(n), n
        assert end.flag_error(n) <= 0.25
    assert not end.certified(2 ** 20)  # fl(1/(i+1)) steps below the ramp's resolution


@pytest.mark.parametrize("n", [8, 4096, 131072])
def test_the_ramp_replayed_in_fp32_at_the_last_positions(n):
    """The two hinges in fp32 on the head's outputs (the stored weights, as the checkpoint
    holds them): exactly 0 before the last position on SwiGLU and ReLU, near 1 at it."""
    _, t1, t2, s = end._ramp(n)
    k = end.sharpness() * 128.0
    y = samples(n)[-min(n, 2000):]
    f32 = torch.float32
    w = torch.tensor(-s * k, dtype=f32)
    for t, sign in ((t1, 1.0), (t2, -1.0)):
        gate = torch.tensor(s * k * t, dtype=f32) + w * y
        silu = torch.nn.functional.silu(gate) * torch.tensor(1.0 / k, dtype=f32)
        relu = torch.relu(gate) * torch.tensor(1.0 / k, dtype=f32)
        for out in (silu, relu):
            assert torch.all(out[:-1] == 0.0), (n, torch.nonzero(out[:-1])[:3])
            assert abs(float(out[-1]) - (1.0 + sign * 0.5)) <= 0.25


def test_the_directory_needs_no_total_length(tmp_path):
    program = tw.compile(echo, vocab=VOCAB, max_seq_len=16)
    directory = program.save_pretrained(tmp_path / "hf")
    generation = json.loads((directory / "generation_config.json").read_text())
    assert generation["max_new_tokens"] == 16 and "max_length" not in generation
    assert "max_new_tokens=" in (directory / "README.md").read_text()


def test_a_build_without_the_flag_keeps_the_total_cap(tmp_path):
    """Half-precision builds do not print the final <eos> (its ramp is not exact in fp16 and
    bf16): their directory caps the total with max_length."""
    program = tw.compile(echo, vocab=VOCAB, max_seq_len=16, precision="half")
    assert not program.stats()["ends_with_eos"]
    directory = program.save_pretrained(tmp_path / "hf")
    generation = json.loads((directory / "generation_config.json").read_text())
    assert generation["max_length"] == 16 and "max_new_tokens" not in generation
