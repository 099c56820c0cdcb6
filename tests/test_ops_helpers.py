"""Helpers for the op tests (and scripts/measure_noise.py): compile probe programs whose inputs
are arbitrary per-position values, run them through the in-process runtime, and read each op's
compiled value.

Input k of a probe is a per-token table (``tw.lookup`` on the token stream: exact fp32 in the
embedding), moved one position on by ``tw.shift`` (so the op reads one materialised column, as
in a real program, rather than a fold of every one-hot column) and declared with ``tw.claim``.
Token i sits at position i, so one run evaluates every probe at n points (positions 2..n+1).
Many probes share one compiled program; each op's value is its fx node's affine form
(``program.nodes``), every signal read right after the sublayer that writes it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.fx

import torchwright_fx as tw
from torchwright_fx.backends import runtime
from torchwright_fx.ir.graph import EMBED, MachineKind
from torchwright_fx.ir.linear import Lin

FIRST_CHAR = 0x4E00  # a block of single-character tokens, as many as a probe needs


@dataclass(frozen=True)
class Claim:
    lo: float
    hi: float
    integral: bool = False


@dataclass(frozen=True)
class Probe:
    op: Callable[..., torch.Tensor]  # streams -> a [seq, 1] stream
    inputs: Sequence[Sequence[float]]  # one column of n values per argument
    claims: Sequence[Claim]


def vocab_of(n: int) -> tw.Vocab:
    return tw.Vocab([chr(FIRST_CHAR + i) for i in range(n)])


def read_lin(compiled: tw.Compiled, lin: Lin, states: Sequence[torch.Tensor]) -> torch.Tensor:
    """The value of an affine form over signals at every position (float64)."""
    prog, plan = compiled.build.program, compiled.build.plan
    out = torch.full((states[0].shape[0],), lin.const, dtype=torch.float64)
    for sid, coef in lin.terms.items():
        producer = prog.signals[sid].producer
        stage = -1 if producer == EMBED else plan.stage[producer]
        out += coef * states[stage + 1][:, plan.columns[sid]].double()
    return out


def _inputs(x: torch.Tensor, vocab: tw.Vocab, probe: Probe) -> list[torch.Tensor]:
    streams = []
    for col, c in zip(probe.inputs, probe.claims, strict=True):
        table = {vocab.tokens[3 + i]: float(v) for i, v in enumerate(col)}
        value = tw.shift(tw.lookup(x, table, default=float(col[0])), 1)
        streams.append(tw.claim(value, c.lo, c.hi, c.integral))
    return streams


def compile_probes(probes: Sequence[Probe], machine: MachineKind
                   ) -> tuple[tw.Compiled, list[str]]:
    """One program evaluating every probe; returns it with each probe's fx node name. The
    output is the sum of the probes' values, which keeps them all alive (a value, not a token
    code: output="value"). Real-valued steps are among the ops measured: exact=False."""
    n = len(probes[0].inputs[0])
    vocab = vocab_of(n)
    names: list[str] = []

    def probe_program(x: torch.Tensor) -> torch.Tensor:
        names.clear()
        total: torch.Tensor | None = None
        for p in probes:
            value = p.op(*_inputs(x, vocab, p))
            if isinstance(value, torch.fx.Proxy):
                names.append(value.node.name)
            total = value if total is None else total + value
        assert total is not None
        return total

    compiled = tw.compile(probe_program, vocab=vocab, max_seq_len=n + 2, machine=machine,
                          output="value", exact=False)
    return compiled.compile(), list(names)


def run_probes(probes: Sequence[Probe], machine: MachineKind) -> list[torch.Tensor]:
    """Each probe's compiled values at its n points (float64)."""
    compiled, names = compile_probes(probes, machine)
    n = len(probes[0].inputs[0])
    ids = [compiled.vocab.bos_id, *range(3, 3 + n), 3]
    _, states = runtime.forward(compiled.weights, ids, capture=True)
    nodes = compiled.build.program.nodes
    return [read_lin(compiled, nodes[name].columns[0], states)[2:] for name in names]


def fp32(values: Sequence[float]) -> torch.Tensor:
    """The inputs as the program sees them (fp32), in float64 for exact references."""
    return torch.tensor(list(values), dtype=torch.float32).double()


def evaluate(op: Callable[..., torch.Tensor], inputs: Sequence[Sequence[float]],
             claims: Sequence[Claim], machine: MachineKind
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """(compiled values, the fp32 inputs as float64 rows) for one op."""
    (got,) = run_probes([Probe(op, inputs, claims)], machine)
    return got, torch.stack([fp32(c) for c in inputs])
