"""The written directory is a stock Phi-3 checkpoint, and it runs every input right."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import hf_generate, load_hf

EXAMPLES = ["binary_increment", "adder_1digit"]


@pytest.mark.parametrize("name", EXAMPLES)
def test_directory_is_stock_phi3(example, name):
    ex = example(name)
    files = sorted(p.name for p in ex.directory.iterdir())
    assert not [f for f in files if f.endswith(".py")]
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
            "generation_config.json"} <= set(files)
    config = json.loads((ex.directory / "config.json").read_text())
    assert config["architectures"] == ["Phi3ForCausalLM"]
    assert config["tie_word_embeddings"] is False
    model, _ = load_hf(ex.directory)
    assert type(model).__name__ == "Phi3ForCausalLM"


def test_pipeline_prints_1100(example):
    from transformers import pipeline

    generate = pipeline("text-generation", model=str(example("binary_increment").directory))
    assert generate("1011\n", return_full_text=False)[0]["generated_text"] == "1100"


@pytest.mark.parametrize("name", EXAMPLES)
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("use_cache", [True, False])
def test_every_input_matches_reference_and_oracle(example, name, attn, use_cache):
    ex = example(name)
    model, tokenizer = load_hf(ex.directory, attn)
    assert model.config._attn_implementation == attn
    wrong = []
    # binary_increment: every bit string of length 1-4 here; the 8-bit domain in test_examples
    prompts = ex.module.inputs(4) if name == "binary_increment" else ex.module.inputs()
    for prompt in prompts:
        got = hf_generate(model, tokenizer, prompt, use_cache)
        want = ex.module.oracle(prompt)
        if not (got == want == ex.program.reference(prompt)):
            wrong.append((prompt, got, want))
    assert not wrong, wrong[:5]


def test_default_attention_is_sdpa(example):
    model, _ = load_hf(example("binary_increment").directory)
    assert model.config._attn_implementation == "sdpa"


@pytest.mark.parametrize("name", EXAMPLES)
def test_runtime_logits_equal_hf_logits(example, name):
    ex = example(name)
    model, _ = load_hf(ex.directory, "eager")
    worst = 0.0
    for prompt in list(ex.module.inputs())[::7]:
        ids = ex.program.vocab.encode(prompt + ex.module.oracle(prompt))
        ours = ex.program.logits(ids)
        with torch.no_grad():
            theirs = model(torch.tensor([ids])).logits[0]
        worst = max(worst, float((ours - theirs).abs().max()))
        assert torch.equal(ours.argmax(-1), theirs.argmax(-1)), prompt
    print(f"{name}: max |runtime - HF| logit difference {worst:.3g}")
    assert worst <= 1e-3
