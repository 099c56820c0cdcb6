"""Comparisons of the position with constants (ops/position_step.py): a ramp on the position
head's fl(1/(i+1)) between the two samples either side of the threshold, with no position
decoder. Compiled = a plain-Python oracle at every position, on both machines, at a short and
a long length; through transformers at 4096; and the build has no decoder's lanes."""

from __future__ import annotations

import pytest
import torch
from conftest import load_hf

import torchwright_fx as tw


@pytest.mark.parametrize("n", [300, 5000])
@pytest.mark.parametrize("machine", ["swiglu", "relu"])
def test_position_thresholds_are_exact_at_every_position(n, machine):
    vocab = tw.Vocab("01234567ab")
    c1, c2, c3 = n // 3, n // 2, n - 7

    def program(x: torch.Tensor) -> torch.Tensor:
        i = tw.position(x)
        return (tw.token("0") + (i >= c1).float() + 2 * (i - 5 > c2 - 5).float()
                + 4 * (-2 * i > -2 * c3).float())  # an affine form; i < c3 by a negative scale

    compiled = tw.compile(program, vocab=vocab, max_seq_len=n, machine=machine,
                          progress=False)
    built = compiled.compile()
    assert built.stats()["lanes_total"] <= 12  # two lanes a threshold, no decoder
    ids = vocab.encode("ab" * (n // 2))[:n - 1]  # (the last position prints <eos>)
    got = built.logits(ids).argmax(-1).tolist()
    want = [vocab.encode(str(int(i >= c1) + 2 * int(i > c2) + 4 * int(i < c3)),
                         bos=False)[0] for i in range(len(ids))]
    assert got == want


def test_position_thresholds_through_transformers(tmp_path):
    vocab = tw.Vocab("01ab")

    def program(x: torch.Tensor) -> torch.Tensor:
        return tw.token("0") + (tw.position(x) >= 3000).float()

    compiled = tw.compile(program, vocab=vocab, max_seq_len=4096, progress=False)
    compiled.compile().save_pretrained(tmp_path)
    model, _ = load_hf(tmp_path)
    ids = torch.tensor([vocab.encode("ab" * 2048)[:4095]])
    with torch.no_grad():
        got = model(ids).logits[0].argmax(-1).tolist()
    zero, one = vocab.encode("01", bos=False)
    assert got == [one if i >= 3000 else zero for i in range(4095)]


def test_a_threshold_outside_the_context_is_a_constant():
    vocab = tw.Vocab("01ab")

    def program(x: torch.Tensor) -> torch.Tensor:
        i = tw.position(x)
        return tw.token("0") + (i >= 0).float() * (i < 10 ** 6).float() * (i > -3).float()

    built = tw.compile(program, vocab=vocab, max_seq_len=64, progress=False).compile()
    ids = vocab.encode("ab" * 31)
    one = vocab.encode("1", bos=False)[0]
    assert built.logits(ids).argmax(-1).tolist() == [one] * len(ids)
