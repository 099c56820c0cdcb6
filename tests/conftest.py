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


class ShapeBuilder:
    """Hand-built programs of FFN banks and heads over one embedding column, for the tests of
    one stage whose result depends only on the graph's shape (schedule/, CP-SAT). Every FFN
    gets ``lanes_per_ffn`` lanes of its own (unique gate constants) unless given ``lanes``."""

    def __init__(self, d_head: int = 16, lanes_per_ffn: int = 4, run_dce: bool = True):
        from torchwright_fx.ir.graph import Program
        from torchwright_fx.ir.ranges import Interval
        from torchwright_fx.vocab import Vocab

        self.unit = Interval(0.0, 1.0)
        self.d_head, self.lanes_per_ffn, self.run_dce = d_head, lanes_per_ffn, run_dce
        self.prog = Program(Vocab("ab"), "swiglu")
        (self.e,) = self.prog.embed((0.0, 0.0, 0.0, 1.0, 0.0), self.unit, "e", "").signals()
        self._unique = 0

    def lanes(self, reads, n: int):
        """n lanes nobody else has (their gate constants are unique)."""
        from torchwright_fx.ir.graph import Lane
        from torchwright_fx.ir.linear import Lin, lin_sum

        out = []
        for _ in range(n):
            self._unique += 1
            out.append(Lane(lin_sum(Lin.of(s) for s in reads) + self._unique, Lin.constant(1.0)))
        return out

    def ffn(self, reads, n_lanes: int | None = None, n_out: int = 1, lanes=None) -> list[int]:
        from torchwright_fx.ir.graph import FFN

        if lanes is None:
            lanes = self.lanes(reads, self.lanes_per_ffn if n_lanes is None else n_lanes)
        pid = self.prog.next_producer_id()
        outs = [self.prog.new_signal(pid, self.unit, f"f{pid}[{o}]", "") for o in range(n_out)]
        self.prog.add(FFN(pid, lanes, {s: {i: 1.0 + o for i in range(len(lanes))}
                                       for o, s in enumerate(outs)}, f"f{pid}", ""))
        return outs

    def head(self, reads) -> list[int]:
        from torchwright_fx.ir.graph import Head
        from torchwright_fx.ir.linear import Lin

        pid = self.prog.next_producer_id()
        outs = [self.prog.new_signal(pid, self.unit, f"h{pid}[{i}]", "")
                for i in range(len(reads))]
        q = [Lin.constant(0.0)] * self.d_head
        self.prog.add(Head(pid, q, list(q), [Lin.of(s) for s in reads], outs, f"h{pid}", ""))
        return outs

    def finish(self, outputs):
        """The program reading ``outputs``: through dead-code elimination, or (``run_dce``
        False) with ``live`` set as dce would and the pass itself not run."""
        from torchwright_fx.ir.linear import Lin, lin_sum
        from torchwright_fx.passes.dce import eliminate_dead, live_signals

        self.prog.output = lin_sum(Lin.of(s) for s in outputs)
        if self.run_dce:
            return eliminate_dead(self.prog)
        self.prog.live = frozenset(live_signals(self.prog))
        return self.prog

