"""calculator_scratchpad: the work-token format, a depth that does not grow with N, and 16
digits through the Phi-3 directory."""

from __future__ import annotations

import random
import re

import pytest
from conftest import agrees, hf_agrees, hf_generate, load_hf

import examples.calculator_scratchpad as ex
from examples import _calc


def _answer(output: str) -> str:
    """What a reader takes as the answer: the text after the last token that is not a digit
    or '-'."""
    return re.split(r"[^0-9-]", output)[-1]




@pytest.mark.parametrize("n", [1, 3, 16])
def test_work_format(n):
    rng = random.Random(n)
    w = ex.width(n)
    for prompt in _calc.edge_cases(n) + [ex.sample(rng, n) for _ in range(300)]:
        out = ex.oracle_n(prompt, n)
        work, answer = out.split("=")
        assert answer == _answer(out) == _calc.oracle(prompt)
        totals = [int(work[i:i + w]) for i in range(0, len(work), w)]
        assert len(totals) == 2 * n and all(len(str(t)) <= w for t in totals)
        last = [t % 10 for t in totals]  # the result's digits, units first
        if "-" not in prompt:
            assert totals[-1] < 10  # nothing is carried out of the top column
            assert str(int("".join(map(str, reversed(last))))) == answer
        else:  # the first half holds A - B when it carries out of column N-1, else B - A
            half = last[:n] if totals[n - 1] >= 10 else last[n:]
            value = str(int("".join(map(str, reversed(half)))))
            assert (value if totals[n - 1] >= 10 else "-" + value) == answer


def test_example_in_the_docs():
    assert ex.oracle("12*34\n") == "008010004000000000=408"
    assert ex.oracle("100-999\n") == "001000001019019018=-899"


@pytest.mark.parametrize("n", [1, 2, 4])
def test_depth_is_flat(n):
    assert ex.make(n=n).stats()["layers"] == 5 == ex.program.stats()["layers"]


@pytest.mark.slow
def test_depth_is_flat_up_to_sixteen_digits():
    assert {ex.make(n=n).stats()["layers"] for n in range(1, 17)} == {5}


def test_two_digit_build_on_a_sample():
    program = ex.make(n=2)
    rng = random.Random(2)
    prompts = _calc.edge_cases(2) + [ex.sample(rng, 2) for _ in range(60)]
    assert not [p for p in prompts if not agrees(program, p, ex.oracle_n(p, 2))]


@pytest.mark.slow
@pytest.mark.parametrize("n", [10, 16])
def test_long_operands_through_the_checkpoint(n, tmp_path):
    """N = 10 and 16 through the saved Phi-3 directory, loaded with transformers: the edge
    cases (all 9s, (10**N - 1) squared, zeros, borrows across every digit, A - B with A < B)
    and 100 seeded samples, work tokens included. Each is checked in one forward pass (at
    every answer position the top logit is the next token, then <eos>: what greedy
    generation prints); a few of the largest also by ``generate`` with the KV cache."""
    model, tokenizer = load_hf(ex.make(n=n).save_pretrained(tmp_path / "hf"))
    rng = random.Random(300 + n)
    prompts = _calc.edge_cases(n) + [ex.sample(rng, n) for _ in range(100)]
    wrong = [p for p in prompts if not hf_agrees(model, tokenizer, p, ex.oracle_n(p, n))]
    assert not wrong, f"{len(wrong)}/{len(prompts)} wrong: {wrong[:3]}"
    big = "9" * n
    for p in [f"{big}*{big}\n", f"{big}+{big}\n", f"1{'0' * (n - 1)}-1\n", f"1-{big}\n"]:
        assert hf_generate(model, tokenizer, p) == ex.oracle_n(p, n)
