"""End-to-end verification: the compiled model's greedy output against the reference (and
an oracle, when the program has one) over a set of prompts."""

from __future__ import annotations

import math
import random
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch

from torchwright_fx.backends import runtime
from torchwright_fx.backends.protocol import Runner
from torchwright_fx.base.errors import TorchwrightError
from torchwright_fx.verify.protocol import CompiledProgram


@dataclass
class VerifyReport:
    name: str
    backend: str
    dtype: str = "float32"
    count: int = 0
    mismatches: list[tuple[str, str, str]] = field(default_factory=list)  # prompt, got, want
    worst_margin: float = float("inf")  # smallest lead of the right token over the next best
    worst_margin_prompt: str = ""

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def __str__(self) -> str:
        lines = [f"verify {self.name} [{self.backend}, {self.dtype}]: {self.count} inputs, "
                 f"{len(self.mismatches)} mismatches, worst logit margin "
                 f"{self.worst_margin:.3g} (on {self.worst_margin_prompt!r})"]
        for prompt, got, want in self.mismatches[:5]:
            lines.append(f"  {prompt!r}: got {got!r}, want {want!r}")
        return "\n".join(lines)


BACKENDS = ("hf", "runtime", "onnx")


class _Backend:
    """The runner ``verify`` checks (``backends/protocol.py``), with its files kept for as
    long as it runs: ``hf`` loads the saved Phi-3 directory with transformers (in ``dtype``),
    ``onnx`` the torch.onnx export of it with ONNX Runtime (fp32), ``runtime`` runs the
    weights in process (in ``dtype``, as transformers' eager Phi-3 computes in it)."""

    def __init__(self, compiled: CompiledProgram, backend: str,
                 dtype: torch.dtype = torch.float32):
        if backend not in BACKENDS:
            raise ValueError(f"backend={backend!r}: choose one of "
                             f"{', '.join(map(repr, BACKENDS))}")
        if dtype not in runtime.DTYPES or (backend == "onnx" and dtype != torch.float32):
            raise ValueError(f"dtype={dtype} with backend={backend!r}: runtime and hf take "
                             "torch.float32, torch.float16 or torch.bfloat16; onnx float32")
        self.tmp = tempfile.TemporaryDirectory()
        self.eos_id = compiled.vocab.eos_id
        self.runner: Runner
        if backend == "runtime":
            self.runner = runtime.Runtime(compiled.weights, dtype)
        elif backend == "hf":
            from torchwright_fx.backends.hf import TransformersRunner

            self.runner = TransformersRunner(compiled.save_pretrained(self.tmp.name + "/hf"),
                                             dtype=dtype)
        else:
            from torchwright_fx.backends.onnx import load

            self.runner = load(compiled.to_onnx(self.tmp.name + "/onnx"))

    def logits(self, ids: list[int]) -> torch.Tensor:
        return torch.as_tensor(self.runner.logits(ids))

    def generate(self, ids: list[int]) -> list[int]:
        new = self.runner.generate_ids(ids)
        return new[:-1] if new and new[-1] == self.eos_id else new  # ONNX's runner keeps <eos>


def _prompts(compiled: CompiledProgram, inputs: Iterable[str] | None, exhaustive: bool,
             samples: int | None, seed: int) -> list[str]:
    if inputs is not None:
        pool = list(inputs)
    elif compiled.domain is not None:
        pool = list(compiled.domain())
    else:
        raise ValueError("give inputs=..., or attach a domain with compiled.with_domain(...)")
    if exhaustive or samples is None or samples >= len(pool):
        return pool
    return random.Random(seed).sample(pool, samples)


def verify(compiled: CompiledProgram, inputs: Iterable[str] | None = None, *,
           exhaustive: bool = False, samples: int | None = None, seed: int = 0,
           backend: str = "hf", oracle: Callable[[str], str] | None = None,
           dtype: torch.dtype = torch.float32) -> VerifyReport:
    """Compare the compiled model's greedy output with the reference on every prompt, run by
    ``backend``: ``"hf"`` (the saved Phi-3 directory through transformers, loaded in
    ``dtype``), ``"runtime"`` (in process, computing in ``dtype`` as transformers' eager Phi-3
    does) or ``"onnx"`` (the torch.onnx export through ONNX Runtime, fp32 only). A build is
    certified for fp32: in float16 or bfloat16 it may well be wrong, and this reports it."""
    oracle = oracle or compiled.oracle
    report = VerifyReport(compiled.fn.__name__, backend, str(dtype).removeprefix("torch."))
    model = _Backend(compiled, backend, dtype)
    vocab = compiled.vocab
    for prompt in _prompts(compiled, inputs, exhaustive, samples, seed):
        ids = vocab.encode(prompt)
        try:
            got_ids: list[int] | None = model.generate(ids)
        except TorchwrightError as e:  # the runtime refuses to go on after a <bos>
            got_ids = None
            got = f"<{e}>"
        want_ids = compiled.reference_ids(ids, draft=got_ids)
        want = vocab.decode(want_ids)
        if got_ids is not None:
            got = vocab.decode(got_ids)
        report.count += 1
        if got != want or (oracle is not None and oracle(prompt) != want):
            report.mismatches.append((prompt, got, want if oracle is None else oracle(prompt)))
        margin = _margin(model.logits(ids + want_ids), len(ids), want_ids + [vocab.eos_id])
        if margin < report.worst_margin:
            report.worst_margin, report.worst_margin_prompt = margin, prompt
    return report


def _margin(logits: torch.Tensor, start: int, targets: list[int]) -> float:
    """Smallest lead of each expected next token over the best other token."""
    worst = float("inf")
    for offset, target in enumerate(targets):
        row = logits[start - 1 + offset].clone()
        if start - 1 + offset >= logits.shape[0]:
            break
        right = float(row[target])
        row[target] = -float("inf")
        lead = right - float(row.max())
        worst = min(worst, -math.inf if math.isnan(lead) else lead)  # NaN logits: no lead
    return worst
