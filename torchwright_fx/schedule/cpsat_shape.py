"""Measuring a schedule (producer -> stage) the way the CP-SAT objective and width cap see it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from torchwright_fx.ir.graph import EMBED, Head, Lane, Program
from torchwright_fx.schedule.plan import Plan, layer_of, stage_fits
from torchwright_fx.schedule.plan import parity as parity  # re-exported: cpsat.parity


def d_head_of(prog: Program) -> int:
    """The program's head size: the geometry's, which lowering records; for a hand-built
    program its heads' (0 without heads: the cost's head term is then 0 anyway)."""
    return prog.head_size or max((len(p.q) for p in prog.producers.values()
                                  if isinstance(p, Head)), default=0)


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
        layer = layer_of(stage[p.id])
        if isinstance(p, Head):
            heads[layer] += 1
        else:
            lanes.setdefault(layer, set()).update(p.lanes)
    live = plan.live_peak(prog)
    return Shape(plan.n_layers, max(heads.values(), default=0),
                 max((len(s) for s in lanes.values()), default=0), live)


def precedence_ok(prog: Program, stage: dict[int, int]) -> bool:
    """Every producer at a stage of its parity, after everything it reads."""
    if set(stage) != set(prog.producers):
        return False
    for p in prog.producers.values():
        st = stage[p.id]
        if not stage_fits(p, st):
            return False
        if any(d != EMBED and stage[d] >= st for d in prog.deps(p)):
            return False
    return True
