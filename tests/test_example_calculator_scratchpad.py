"""calculator_scratchpad: the work-token format, and a depth that does not grow with N."""

from __future__ import annotations

import random
import re

import pytest

import examples.calculator_scratchpad as ex
from examples import _calc


def agrees(program, prompt: str, answer: str) -> bool:
    """Greedy generation gives `answer` then <eos>: checked in one teacher-forced forward pass
    (at every answer position the top logit is the next answer token)."""
    vocab = program.vocab
    ids = vocab.encode(prompt)
    want = vocab.encode(answer, bos=False) + [vocab.eos_id]
    logits = program.logits(ids + want[:-1])
    return logits[len(ids) - 1:].argmax(-1).tolist() == want


def _answer(output: str) -> str:
    """What a reader takes as the answer: the text after the last token that is not a digit
    or '-'."""
    return re.split(r"[^0-9-]", output)[-1]


def test_work_format():
    rng = random.Random(0)
    n, w = ex.N, ex.width(ex.N)
    for prompt in _calc.edge_cases(n) + [ex.sample(rng) for _ in range(500)]:
        out = ex.oracle(prompt)
        work, answer = out.split("=")
        assert answer == _answer(out) == _calc.oracle(prompt)
        totals = [int(work[i:i + w]) for i in range(0, len(work), w)]
        assert len(totals) == 2 * n
        assert totals[-1] < 10  # nothing is carried out of the top column
        digits = "".join(str(t % 10) for t in reversed(totals[:n + 1 if "-" in prompt else None]))
        value = int(digits) - (10 ** n if "-" in prompt else 0)  # the complement's overflow
        assert str(value) == answer.lstrip("-")


def test_example_in_the_docs():
    assert ex.oracle("12*34\n") == "008010004000000000=408"
    assert ex.oracle("100-999\n") == "019019018001000000=-899"


@pytest.mark.parametrize("n", [1, 2, 4])
def test_depth_is_flat(n):
    assert ex.make(n=n).stats()["layers"] == 3 == ex.program.stats()["layers"]


def test_two_digit_build_on_a_sample():
    program = ex.make(n=2)
    rng = random.Random(2)
    prompts = _calc.edge_cases(2) + [ex.sample(rng, 2) for _ in range(60)]
    assert not [p for p in prompts if not agrees(program, p, ex.oracle_n(p, 2))]
