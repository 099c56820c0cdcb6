"""The compiled examples exported through torch.onnx agree with the Phi-3 checkpoint."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import hf_generate, load_hf

import torchwright_fx.onnx as twx

EXAMPLES = ["binary_increment", "adder_1digit"]


@pytest.fixture(scope="module")
def exported(example, tmp_path_factory):
    out = {}
    for name in EXAMPLES:
        ex = example(name)
        out[name] = (ex, twx.load(twx.export(ex.directory, tmp_path_factory.mktemp(name) / "onnx")))
    return out


@pytest.mark.parametrize("name", EXAMPLES)
def test_onnx_greedy_equals_hf_on_every_input(exported, name):
    ex, runner = exported[name]
    model, tokenizer = load_hf(ex.directory)
    for prompt in ex.module.inputs():
        assert runner.generate(prompt) == hf_generate(model, tokenizer, prompt) == \
            ex.module.oracle(prompt), prompt


@pytest.mark.parametrize("name", EXAMPLES)
def test_onnx_teacher_forced_logits_equal_hf(exported, name):
    ex, runner = exported[name]
    model, _ = load_hf(ex.directory, "eager")
    worst = 0.0
    for prompt in ex.module.inputs():
        ids = ex.program.vocab.encode(prompt + ex.module.oracle(prompt))
        ours = runner.logits(ids)
        with torch.no_grad():
            theirs = model(torch.tensor([ids])).logits[0].numpy()
        scale = max(1.0, float(np.abs(theirs).max()))
        worst = max(worst, float(np.abs(ours - theirs).max()) / scale)
        assert (ours.argmax(-1) == theirs.argmax(-1)).all(), prompt
    print(f"{name}: max relative logit difference ONNX vs HF {worst:.2e}")
    assert worst < 1e-4


def test_generation_past_max_seq_len_raises(exported):
    _, runner = exported["binary_increment"]
    with pytest.raises(twx.SequenceTooLongError):
        runner.generate("1" * 600 + "\n")
