"""Every example compiled with precision="half" (issue 32): the ones half holds today are right
through transformers in float16 and bfloat16 (and float32) on their edge cases, demos and a
seeded sample, against the reference and the oracle; the others are refused with a
CompileError that names a line of the example and says what to change."""

from __future__ import annotations

import importlib
import random

import pytest
import torch

import torchwright_fx as tw
from examples import NAMES

HALF = ["adder_1digit", "adder", "binary_increment", "caesar_cipher", "fibonacci"]


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


@pytest.mark.parametrize("name", [n for n in NAMES if n not in HALF])
def test_half_refusal_names_the_line_and_the_way_out(name):
    module = importlib.import_module(f"examples.{name}")
    with pytest.raises(tw.CompileError) as e:
        module.make(precision="half").compile()
    text = str(e.value)
    assert "examples/" in text and ".py:" in text, text  # the user's line
    assert "precision='fp32'" in text or "max_seq_len" in text, text  # what to change


def _rasp_names() -> list[str]:
    import pkgutil

    import examples.rasp

    return [m.name for m in pkgutil.iter_modules(examples.rasp.__path__)
            if not m.name.startswith("_")]


@pytest.mark.parametrize("name", _rasp_names())
def test_tracr_library_in_half_is_refused_naming_the_op_and_why(name):
    """tracr's library (examples/rasp/) counts and aggregates over positions, which half does
    not certify yet: each program is refused at its line, naming the op and why."""
    module = importlib.import_module(f"examples.rasp.{name}")
    with pytest.raises(tw.CompileError) as e:
        module.make(max_len=5, precision="half").compile()
    text = str(e.value)
    assert "examples/rasp/" in text and ".py:" in text, text
    assert "in `" in text and "precision='half'" in text and "precision='fp32'" in text, text
