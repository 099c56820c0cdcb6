"""Diff a compiled model node by node against the eager reference.

The runtime captures the residual after every sublayer; each fx node's value is its affine
form over signals, and each signal is read right after the sublayer that wrote it (the plan
says which). The first node whose compiled value departs from the reference beyond tolerance
is named with its user source line. A live signal's column must also hold still from the
sublayer that writes it to the last one that reads it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from torchwright_fx.backends import runtime
from torchwright_fx.capture.registry import using_vocab
from torchwright_fx.ir.linear import Lin
from torchwright_fx.verify.protocol import CompiledProgram


@dataclass
class NodeDiff:
    name: str
    source: str
    max_error: float
    stage: int


@dataclass
class ProbeReport:
    ids: list[int]
    nodes: list[NodeDiff]
    tolerance: float
    first_bad: NodeDiff | None
    unstable: list[str] = field(default_factory=list)  # signals whose column moved while live
    failed_checks: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.first_bad is None and not self.unstable and not self.failed_checks

    def __str__(self) -> str:
        lines = [f"probe of {len(self.ids)} tokens, tolerance {self.tolerance:g}:"]
        for n in self.nodes:
            flag = "  <-- first beyond tolerance" if n is self.first_bad else ""
            lines.append(f"  {n.name:<28} stage {n.stage:>3}  max err {n.max_error:.3g}{flag}")
        if self.first_bad:
            lines.append(f"first divergence: {self.first_bad.name} at {self.first_bad.source}")
        lines += [f"unstable column: {u}" for u in self.unstable]
        lines += [f"check failed: {c}" for c in self.failed_checks]
        return "\n".join(lines)


class _Recorder(torch.fx.Interpreter):
    def __init__(self, gm: torch.fx.GraphModule):
        super().__init__(gm)
        self.values: dict[str, torch.Tensor] = {}

    def run_node(self, n: torch.fx.Node) -> Any:
        value = super().run_node(n)
        if isinstance(value, torch.Tensor):
            self.values[n.name] = value.detach().reshape(value.shape[0], -1).double()
        return value


def reference_values(compiled: CompiledProgram, ids: Sequence[int]) -> dict[str, torch.Tensor]:
    rec = _Recorder(compiled.traced.graph_module)
    with using_vocab(compiled.vocab), torch.no_grad():
        rec.run(compiled.vocab.one_hot(ids))
    return rec.values


def _read(lin: Lin, compiled: CompiledProgram, states: list[torch.Tensor]
          ) -> tuple[torch.Tensor, int]:
    plan, prog = compiled.build.plan, compiled.build.program
    n = states[0].shape[0]
    value = torch.full((n,), lin.const, dtype=torch.float64)
    stage = -1
    for sid, coef in lin.terms.items():
        st = plan.signal_stage(prog, sid)
        stage = max(stage, st)
        value += coef * states[st + 1][:, plan.columns[sid]].double()
    return value, stage


def _materialised(lin: Lin, compiled: CompiledProgram) -> bool:
    return all(s in compiled.build.plan.columns for s in lin.terms)


def probe(compiled: CompiledProgram, text: str, tolerance: float = 1e-3) -> ProbeReport:
    ids = compiled.vocab.encode(text)
    _, states = runtime.forward(compiled.weights, ids, capture=True)
    want = reference_values(compiled, ids)
    prog = compiled.build.program
    diffs: list[NodeDiff] = []
    first_bad = None
    for name, rec in prog.nodes.items():
        cols = rec.columns
        if name not in want or not all(_materialised(c, compiled) for c in cols):
            continue
        read = [_read(c, compiled, states) for c in cols]
        got = torch.stack([r[0] for r in read], dim=1)
        ref = want[name].expand_as(got) if want[name].shape[1] == 1 else want[name]
        err = float((got - ref).abs().max()) if got.numel() else 0.0
        diff = NodeDiff(name, rec.source, err, max(r[1] for r in read))
        diffs.append(diff)
        if first_bad is None and err > tolerance * max(1.0, float(ref.abs().max())):
            first_bad = diff
    return ProbeReport(ids, diffs, tolerance, first_bad, _unstable(compiled, states),
                       _failed_checks(compiled, states))


def _unstable(compiled: CompiledProgram, states: list[torch.Tensor]) -> list[str]:
    plan, prog = compiled.build.plan, compiled.build.program
    out = []
    for sid, (written, last) in plan.lifetimes(prog).items():
        col = plan.columns[sid]
        first = states[written + 1][:, col]
        # the value must hold through the residual that its last reader sees (states[last])
        for st in range(written + 1, min(last, len(states) - 1)):
            if not torch.equal(states[st + 1][:, col], first):
                out.append(f"{prog.signals[sid].name} ({prog.signals[sid].source}) changed "
                           f"after stage {st}")
                break
    return out


def _failed_checks(compiled: CompiledProgram, states: list[torch.Tensor]) -> list[str]:
    prog = compiled.build.program
    failed = []
    for name, predicate, msg, source in ((c.node, c.predicate, c.message, c.source)
                                         for c in prog.checks):
        rec = prog.nodes.get(name)
        cols = None if rec is None else rec.columns
        if cols is None or not all(_materialised(c, compiled) for c in cols):
            continue
        value = torch.stack([_read(c, compiled, states)[0] for c in cols], dim=1).float()
        ok = torch.as_tensor(predicate(value))
        if not bool(ok.all()):
            bad = torch.nonzero(~ok.reshape(value.shape[0], -1).all(dim=1)).reshape(-1)
            failed.append(f"{msg or name} at {source}: fails at positions {bad.tolist()[:8]}")
    return failed
