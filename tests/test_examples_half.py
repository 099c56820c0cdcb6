"""Every example compiled with precision="half" (issue 32) is right through transformers in
float16 and bfloat16 (and float32) on its edge cases, demos and a seeded sample, against the
reference and the oracle."""

from __future__ import annotations

import importlib
import random

import pytest
import torch

import torchwright_fx as tw
from examples import NAMES

HALF = ["adder_1digit", "adder", "binary_increment", "caesar_cipher", "fibonacci",
        "sort_digits_v1", "range_printer", "calculator_simple", "calculator_advanced",
        "adder_v2", "calculator_memorize", "calculator_scratchpad"]


@pytest.mark.parametrize("name", HALF)
def test_half_example_is_right_in_every_dtype(name):
    module = importlib.import_module(f"examples.{name}")
    compiled = module.make(precision="half").compile()
    assert compiled.stats()["certified"] == ["fp32", "fp16", "bf16"]
    rng = random.Random(32)
    prompts = list(dict.fromkeys([*getattr(module, "EDGE_CASES", []), *module.DEMOS,
                                  *(module.sample(rng) for _ in range(6))]))
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        report = tw.verify(compiled, prompts, backend="hf", dtype=dtype)
        assert report.count == len(prompts) and not report.mismatches, (dtype, report)


def test_every_example_compiles_in_half():
    assert sorted(HALF) == sorted(NAMES)


def _rasp_names() -> list[str]:
    import pkgutil

    import examples.rasp

    return [m.name for m in pkgutil.iter_modules(examples.rasp.__path__)
            if not m.name.startswith("_")]


# tracr's programs that half holds (counts, gathers, latches and shifts; nary_sequencemap's
# printing table reads a value of over 256 points, cut into places: families/wide.py); the
# others aggregate (a mean of several values)
RASP_HALF = {"count", "count_less_freq", "detect_pattern", "length", "reverse", "shift_by",
             "sort_freq", "nary_sequencemap", "hist"}


@pytest.mark.parametrize("length", [pytest.param(5), pytest.param(10, marks=pytest.mark.slow),
                                    pytest.param(20, marks=pytest.mark.slow)])
@pytest.mark.parametrize("name", _rasp_names())
def test_tracr_library_in_half_is_right_in_every_dtype_or_refused_naming_the_op(name, length):
    """tracr's library (examples/rasp/) at lengths 5, 10 and 20: each program half holds is
    right in float32, float16 and bfloat16 on seeded inputs of every length (against the
    reference and the oracle); each other is refused at its line, naming the op and why."""
    module = importlib.import_module(f"examples.rasp.{name}")
    if name not in RASP_HALF:
        with pytest.raises(tw.CompileError) as e:
            module.make(max_len=length, precision="half").compile()
        text = str(e.value)
        assert "examples/rasp/" in text and ".py:" in text, text
        assert "precision='half'" in text and "precision='fp32'" in text, text
        return
    try:
        compiled = module.make(max_len=length, precision="half").compile()
    except tw.CompileError as e:
        raise AssertionError(f"{name} at length {length} was refused in half: {e}") from None
    rng = random.Random(length)
    prompts = list(dict.fromkeys(module.random_input(rng, n) for n in range(1, length + 1)
                                 for _ in range(2)))
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        report = tw.verify(compiled, prompts, backend="hf", dtype=dtype)
        assert report.count == len(prompts) and not report.mismatches, (dtype, report)
