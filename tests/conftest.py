"""Shared fixtures: each example is compiled once per session and written as a Phi-3
directory that the tests load through transformers, as a user would."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import pytest
import torch

torch.set_num_threads(2)


class CompiledExample:
    def __init__(self, name: str, directory: Path):
        self.module: ModuleType = importlib.import_module(f"examples.{name}")
        self.program = self.module.program
        self.directory = self.program.save_pretrained(directory)


@pytest.fixture(scope="session")
def example(tmp_path_factory: pytest.TempPathFactory):
    cache: dict[str, CompiledExample] = {}

    def get(name: str) -> CompiledExample:
        if name not in cache:
            cache[name] = CompiledExample(name, tmp_path_factory.mktemp(name) / "hf")
        return cache[name]

    return get


def load_hf(directory: Path, attn: str | None = None):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs = {} if attn is None else {"attn_implementation": attn}
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32, **kwargs)
    return model.eval(), AutoTokenizer.from_pretrained(directory)


def hf_generate(model, tokenizer, prompt: str, use_cache: bool = True) -> str:
    enc = tokenizer(prompt, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**enc, do_sample=False, use_cache=use_cache,
                             max_new_tokens=model.config.max_position_embeddings
                             - enc["input_ids"].shape[1])
    return tokenizer.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)


@pytest.fixture
def one_thread():
    """The new-user programs are tiny (d_model 16-64): one thread runs them several times
    faster than two."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def check_program(program, oracle, prompts) -> list[str]:
    """reference == generate == oracle on every prompt; returns the prompts (deduplicated)."""
    prompts = list(dict.fromkeys(prompts))
    wrong = []
    for p in prompts:
        want = oracle(p)
        ref, got = program.reference(p), program.generate(p)
        if not ref == got == want:
            wrong.append((p, ref, got, want))
    assert not wrong, f"{len(wrong)}/{len(prompts)} wrong (prompt, reference, generate, " \
                      f"oracle): {wrong[:5]}"
    return prompts


def agrees(program, prompt: str, answer: str) -> bool:
    """Greedy generation gives `answer` then <eos>: checked in one teacher-forced forward pass
    (at every answer position the top logit is the next answer token)."""
    vocab = program.vocab
    ids = vocab.encode(prompt)
    want = vocab.encode(answer, bos=False) + [vocab.eos_id]
    logits = program.logits(ids + want[:-1])
    return logits[len(ids) - 1:].argmax(-1).tolist() == want


def hf_agrees(model, tokenizer, prompt: str, answer: str) -> bool:
    """``agrees`` through a transformers model: one forward pass over prompt and answer."""
    n_prompt = len(tokenizer(prompt)["input_ids"])
    ids = tokenizer(prompt + answer, return_tensors="pt")["input_ids"]
    want = ids[0, n_prompt:].tolist() + [tokenizer.eos_token_id]
    with torch.no_grad():
        logits = model(ids).logits[0]
    return logits[n_prompt - 1:].argmax(-1).tolist() == want


def lin_value(lin, plan, residual: torch.Tensor) -> torch.Tensor:
    """An affine form over signals (a ``Lin``: the output, a view's column) read off residual
    states ``[T, d_model]`` through the plan's columns, in float64."""
    value = torch.full((residual.shape[0],), lin.const, dtype=torch.float64)
    for sid, coef in lin.terms.items():
        value += coef * residual[:, plan.columns[sid]].double()
    return value
