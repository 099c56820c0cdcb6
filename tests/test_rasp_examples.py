"""tracr's lib.py as examples (examples/rasp/): every program against its eager reference and
its plain-Python oracle, in process and through its Phi-3 directory with transformers.

`make test`: each program built for inputs up to 20 long (``make(max_len=20)``, a smaller
max_seq_len: the same circuit, faster to run), on the first 200 inputs of its domain (every
input of up to 3 tokens; up to 6 brackets for shuffle_dyck), the edge cases that fit,
and seeded random inputs of lengths 5, 10 and 20; the checkpoint on the random inputs and the
edge cases. `make test-all` adds the shipped builds (``program``,
inputs up to 100 long) at lengths 5, 10, 20 and 100 through the checkpoint.
"""

from __future__ import annotations

import importlib
import itertools
import random
from types import ModuleType

import pytest
from conftest import check_program, hf_generate, load_hf

NAMES = ["length", "reverse", "hist", "sort_unique", "sort", "sort_freq", "frac_prevs",
         "pair_balance", "shuffle_dyck", "shuffle_dyck2", "shift_by", "detect_pattern",
         "count_less_freq", "count", "nary_sequencemap"]
SMALL = 20  # the fast builds' longest input
PER_LENGTH = 4  # random inputs per length (fast); the slow test takes more
TINY = 200  # the first inputs of each domain, shortest first: every input of up to 3 tokens


# These models are small: one thread runs them faster than two (and much faster than two on
# a busy machine).
pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.one_thread


def _module(name: str) -> ModuleType:
    return importlib.import_module(f"examples.rasp.{name}")


def _length(prompt: str) -> int:
    return len(prompt) - 1  # the input, without the trigger


def _random(module: ModuleType, lengths: list[int], per_length: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [module.random_input(rng, n) for n in lengths if n <= module.MAX_LEN
            for _ in range(per_length)]


def _hf_check(program, module: ModuleType, prompts: list[str], directory) -> None:
    model, tokenizer = load_hf(program.save_pretrained(directory))
    wrong = [(p, got, want) for p in prompts
             if (got := hf_generate(model, tokenizer, p)) != (want := module.oracle(p))]
    assert not wrong, f"{len(wrong)}/{len(prompts)} wrong through transformers (prompt, " \
                      f"got, oracle): {wrong[:3]}"


@pytest.mark.parametrize("name", NAMES)
def test_small_build_matches_oracle(name, tmp_path):
    module = _module(name)
    max_len = min(SMALL, module.MAX_LEN)
    program = module.make(max_len=max_len)
    tiny = list(itertools.islice(module.inputs(max_len), TINY))
    edges = [p for p in module.EDGE_CASES if _length(p) <= max_len]
    sampled = _random(module, [5, 10, 20], PER_LENGTH, seed=16)
    check_program(program, module.oracle, [*tiny, *edges, *sampled])
    _hf_check(program, module, [*edges, *sampled], tmp_path / name)


@pytest.mark.parametrize("name", NAMES)
def test_nothing_is_printed_before_the_trigger(name):
    module = _module(name)
    program = module.make(max_len=min(SMALL, module.MAX_LEN))
    prompt = module.random_input(random.Random(0), 5)[:-1]
    assert program.generate(prompt) == program.reference(prompt) == ""


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_shipped_build_through_the_checkpoint(name, tmp_path):
    """The module's ``program`` (inputs up to 100 long; sort_unique: 26), lengths 5 to 100."""
    module = _module(name)
    prompts = [*module.EDGE_CASES, *_random(module, [5, 10, 20, 100], 4, seed=100),
               *_random(module, [module.MAX_LEN], 2, seed=101)]
    prompts = check_program(module.program, module.oracle, prompts)
    assert any(_length(p) == module.MAX_LEN for p in prompts)
    _hf_check(module.program, module, prompts, tmp_path / name)
