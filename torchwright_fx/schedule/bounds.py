"""Lower bounds no schedule can beat: critical path (layers) and peak live width (columns)."""

from __future__ import annotations

from torchwright_fx.ir.graph import EMBED, Program
from torchwright_fx.schedule.plan import (
    EMBED_STAGE,
    Plan,
    first_stage_from,
    layer_count,
    parity,
)


def earliest_stages(prog: Program) -> dict[int, int]:
    """The earliest stage of every producer with unlimited width: the critical path."""
    stage: dict[int, int] = {}

    def visit(pid: int) -> int:
        if pid == EMBED:
            return EMBED_STAGE
        if pid not in stage:
            p = prog.producers[pid]
            after = max((visit(d) for d in prog.deps(p)), default=EMBED_STAGE)
            stage[pid] = first_stage_from(after + 1, parity(p))
        return stage[pid]

    for pid in sorted(prog.producers):
        visit(pid)
    return stage


def critical_path_layers(prog: Program) -> int:
    return layer_count(earliest_stages(prog).values())


def peak_live_width(prog: Program, plan: Plan) -> int:
    """Most columns taken at any one stage under this plan's stages (plus the reserved
    columns): no width below it can hold the plan."""
    return plan.live_peak(prog) + 1 + len(plan.pin_cols)
