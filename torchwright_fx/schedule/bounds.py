"""Lower bounds no schedule can beat: critical path (layers) and peak live width (columns)."""

from __future__ import annotations

from collections.abc import Iterable

from torchwright_fx.ir.graph import EMBED, Head, Program
from torchwright_fx.schedule.plan import EMBED_STAGE, Plan


def earliest_stages(prog: Program) -> dict[int, int]:
    """The earliest stage of every producer with unlimited width: the critical path."""
    stage: dict[int, int] = {}

    def visit(pid: int) -> int:
        if pid == EMBED:
            return EMBED_STAGE
        if pid not in stage:
            p = prog.producers[pid]
            after = max((visit(d) for d in prog.deps(p)), default=EMBED_STAGE)
            parity = 0 if isinstance(p, Head) else 1
            s = after + 1
            stage[pid] = s if s % 2 == parity else s + 1
        return stage[pid]

    for pid in sorted(prog.producers):
        visit(pid)
    return stage


def critical_path_layers(prog: Program) -> int:
    stages = earliest_stages(prog).values()
    return max((s // 2 + 1 for s in stages), default=1)


def peak_overlap(spans: Iterable[tuple[int, int]], lo: int, hi: int) -> int:
    """The most spans (a, b), ends included, that hold one stage t in [lo, hi] (0 if none):
    one sweep over the stages, instead of counting every span at every stage."""
    change = [0] * (hi - lo + 2)
    for a, b in spans:
        a, b = max(a, lo), min(b, hi)
        if a <= b:
            change[a - lo] += 1
            change[b - lo + 1] -= 1
    peak = live = 0
    for c in change[:-1]:
        live += c
        peak = max(peak, live)
    return peak


def peak_live_width(prog: Program, plan: Plan) -> int:
    """Most columns taken at any one stage under this plan's stages (plus the reserved
    columns): no width below it can hold the plan."""
    peak = peak_overlap(plan.occupancy(prog).values(), -1, 2 * plan.n_layers)
    return peak + 1 + len(plan.pin_cols)
