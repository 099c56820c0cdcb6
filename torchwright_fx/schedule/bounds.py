"""Lower bounds no schedule can beat: critical path (layers) and peak live width (columns)."""

from __future__ import annotations

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


def peak_live_width(prog: Program, plan: Plan) -> int:
    """Most columns taken at any one stage under this plan's stages (plus the reserved
    columns): no width below it can hold the plan."""
    spans = plan.occupancy(prog)
    peak = 0
    for t in range(-1, 2 * plan.n_layers + 1):
        peak = max(peak, sum(1 for a, b in spans.values() if a <= t <= b))
    return peak + 1 + len(plan.pin_cols)
