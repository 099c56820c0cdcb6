"""Lower bounds no schedule can beat: critical path (layers), peak live width (columns), and
parameters."""

from __future__ import annotations

from torchwright_fx.ir.graph import EMBED, FFN, Head, Program
from torchwright_fx.schedule.columns import reserved_for, usable_width, vllm_loadable
from torchwright_fx.schedule.cpsat_shape import d_head_of
from torchwright_fx.schedule.plan import (
    EMBED_STAGE,
    Plan,
    end_stage,
    first_stage_from,
    last_stage_to,
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


def latest_stages(prog: Program, n_layers: int) -> dict[int, int]:
    """The latest stage of every producer within ``n_layers`` layers: before every producer
    that reads it, and for one the output reads (or nothing does), in the last sublayer of its
    kind. Every stage is at or after ``earliest_stages``' when n_layers is at least the
    critical path."""
    readers: dict[int, list[int]] = {pid: [] for pid in prog.producers}
    for pid, p in prog.producers.items():
        for d in prog.deps(p):
            if d != EMBED:
                readers[d].append(pid)
    stage: dict[int, int] = {}
    end = end_stage(n_layers)

    def visit(pid: int) -> int:
        if pid not in stage:
            before = min((visit(r) for r in readers[pid]), default=end)
            stage[pid] = last_stage_to(before - 1, parity(prog.producers[pid]))
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


def live_bound(prog: Program) -> int:
    """Columns some stage holds in every schedule: the embedding's live signals together (all
    written at the embedding), or one producer's reads and live writes together (its inputs
    are live at its stage, and a column freed there is reused only after it)."""
    live = prog.live if prog.live is not None else set(prog.signals)
    most = len([s for s in prog.embed_tables if s in live])
    for p in prog.producers.values():
        writes = set(p.outputs)  # a head's list, an FFN's dict: its signals either way
        most = max(most, len(p.reads() | (writes & live)))
    return most


def parameter_bound(prog: Program) -> int:
    """Parameters no Phi-3 checkpoint of this program's heads (at its head size) and lanes
    goes under, at any layer count from the critical path up: the heads and lanes in all (n
    layers of ceil(total / n) each hold at least the total), at the narrowest width that takes
    ``live_bound`` beside the reserved columns (a half build: one constant column; a multiple
    of 16 where vLLM takes the head size), plus the norms, the embedding and lm_head. The
    emitted build exceeds it by the layers' one shape, the cancels (heads or lanes) and the
    width its schedule needs."""
    d_head, vllm = d_head_of(prog), vllm_loadable(prog)
    heads = sum(isinstance(p, Head) for p in prog.producers.values())
    lanes = len({lane for p in prog.producers.values() if isinstance(p, FFN)
                 for lane in p.lanes})
    live = live_bound(prog)
    d = next(d for d in range(max(4, live + 1), 1 << 17) if usable_width(d, vllm)
             and live + (reserved_for(prog, d, 1) if prog.precision.half else
                         reserved_for(prog, d)) <= d)
    n = critical_path_layers(prog)
    # Q and O a head; K and V a head in half precision, else one block at least (the heads of
    # a layer may share it: schedule/kv_groups.py)
    kv = heads if prog.precision.half else min(heads, 1)
    per_layer = 2 * d_head * (heads + kv) + 3 * lanes + 2 * n  # the norms: two a layer
    return d * (per_layer + 2 * len(prog.vocab) + 1)
