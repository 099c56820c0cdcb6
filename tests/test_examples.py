"""Every example against its plain-Python oracle and its own eager reference.

`make test`: the in-process runtime on the whole domain (or 300 random prompts when it is
larger than 3000) plus the edge cases, and the Phi-3 checkpoint on 30 random prompts plus
the edge cases. `make test-all` adds the checkpoint on the whole domain (or 250 samples).
"""

from __future__ import annotations

import itertools
import random

import pytest
from conftest import hf_generate, load_hf

import examples

ENUMERATE_LIMIT = 3000


def _prompts(module, sample_size: int, seed: int) -> list[str]:
    pool = list(itertools.islice(module.inputs(), ENUMERATE_LIMIT + 1))
    if len(pool) > ENUMERATE_LIMIT:
        rng = random.Random(seed)
        pool = [module.sample(rng) for _ in range(min(sample_size, 250))]
    elif sample_size < len(pool):
        pool = random.Random(seed).sample(pool, sample_size)
    return list(dict.fromkeys([*module.EDGE_CASES, *pool]))


def _check(module, generate, prompts) -> None:
    wrong = []
    for prompt in prompts:
        want = module.oracle(prompt)
        got = generate(prompt)
        if got != want:
            wrong.append((prompt, got, want))
    assert not wrong, f"{len(wrong)}/{len(prompts)} wrong, first: {wrong[:5]}"


@pytest.mark.parametrize("name", examples.NAMES)
def test_reference_matches_oracle(example, name):
    ex = example(name)
    _check(ex.module, ex.program.reference, _prompts(ex.module, 300, seed=1))


@pytest.mark.parametrize("name", examples.NAMES)
def test_compiled_runtime_matches_oracle(example, name):
    ex = example(name)
    _check(ex.module, ex.program.generate, _prompts(ex.module, 300, seed=2))


@pytest.mark.parametrize("name", examples.NAMES)
def test_checkpoint_matches_oracle_on_a_sample(example, name):
    ex = example(name)
    model, tokenizer = load_hf(ex.directory)
    _check(ex.module, lambda p: hf_generate(model, tokenizer, p), _prompts(ex.module, 30, seed=3))


@pytest.mark.slow
@pytest.mark.parametrize("name", examples.NAMES)
def test_checkpoint_matches_oracle_on_the_domain(example, name):
    ex = example(name)
    model, tokenizer = load_hf(ex.directory)
    _check(ex.module, lambda p: hf_generate(model, tokenizer, p),
           _prompts(ex.module, 10**6, seed=4))
