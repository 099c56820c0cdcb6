"""Measuring a schedule (producer -> stage) the way the CP-SAT objective and width cap see it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from torchwright_fx.ir.graph import EMBED, Head, Lane, Producer, Program
from torchwright_fx.schedule.bounds import peak_overlap
from torchwright_fx.schedule.plan import Plan

DEFAULT_D_HEAD = 16


def parity(p: Producer) -> int:
    """Stage parity: heads run in attention sublayers (even), FFNs in MLP sublayers (odd)."""
    return 0 if isinstance(p, Head) else 1


def d_head_of(prog: Program) -> int:
    return max((len(p.q) for p in prog.producers.values() if isinstance(p, Head)),
               default=DEFAULT_D_HEAD)


@dataclass(frozen=True)
class Shape:
    """What a schedule costs: the quantities the objective and the width cap look at."""

    layers: int
    heads: int  # the most heads in one layer
    lanes: int  # the most distinct lanes in one layer
    live: int  # the most live signals at one stage (reserved columns excluded)

    def proxy(self, d_head: int) -> int:
        """Parameters per layer divided by d_model."""
        return 4 * d_head * self.heads + 3 * self.lanes


def shape(prog: Program, stage: dict[int, int]) -> Shape:
    plan = Plan(stage=dict(stage))
    heads: Counter[int] = Counter()
    lanes: dict[int, set[Lane]] = {}
    for p in prog.producers.values():
        layer = stage[p.id] // 2
        if isinstance(p, Head):
            heads[layer] += 1
        else:
            lanes.setdefault(layer, set()).update(p.lanes)
    live = peak_overlap(plan.occupancy(prog).values(), -1, 2 * plan.n_layers)
    return Shape(plan.n_layers, max(heads.values(), default=0),
                 max((len(s) for s in lanes.values()), default=0), live)


def precedence_ok(prog: Program, stage: dict[int, int]) -> bool:
    """Every producer at a stage of its parity, after everything it reads."""
    if set(stage) != set(prog.producers):
        return False
    for p in prog.producers.values():
        st = stage[p.id]
        if st < 0 or st % 2 != parity(p):
            return False
        if any(d != EMBED and stage[d] >= st for d in prog.deps(p)):
            return False
    return True
