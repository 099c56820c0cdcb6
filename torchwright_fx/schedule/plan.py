"""The layer plan: stage per producer, column per signal, and the invariants every plan keeps.

A *stage* numbers sublayers: stage 2L is layer L's attention, 2L+1 its MLP, and the embedding
is stage -1. A signal is written at its producer's stage and read by later stages only.

Every conversion between stages and layers, and every count of the columns taken at a stage,
is one of the functions below (or a ``Plan`` method); the schedulers, the column allocator and
the emitter call them instead of repeating the arithmetic.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from torchwright_fx.base.errors import PlanError
from torchwright_fx.ir.graph import EMBED, FFN, Head, Producer, Program

EMBED_STAGE = -1
ATTENTION, MLP = 0, 1  # the stage parity of the two sublayers of a layer


# -- stage <-> layer ------------------------------------------------------------------------------


def parity(p: Producer) -> int:
    """The sublayer a producer runs in, as a stage parity: heads run in attention sublayers
    (even stages, ``ATTENTION``), FFNs in MLP sublayers (odd stages, ``MLP``)."""
    return ATTENTION if isinstance(p, Head) else MLP


def stage_parity(stage: int) -> int:
    """``ATTENTION`` (0) for an attention stage 2L, ``MLP`` (1) for an MLP stage 2L+1."""
    return stage % 2


def stage_of(layer: Any, parity: int) -> Any:
    """The stage of layer ``layer``'s sublayer ``parity``: ``2 * layer + parity``. Also used on
    CP-SAT integer variables (``schedule/cpsat_model.py``), hence the untyped ``layer``."""
    return 2 * layer + parity


def layer_of(stage: int) -> int:
    """The layer a stage belongs to: ``stage // 2`` (stages 2L and 2L+1 are layer L)."""
    return stage // 2


def layer_count(stages: Iterable[int]) -> int:
    """Layers needed to hold producers at ``stages``: the last one's layer plus one (1 for
    none)."""
    return max((layer_of(s) + 1 for s in stages), default=1)


def end_stage(n_layers: int) -> int:
    """The first stage past ``n_layers`` layers (``2 * n_layers``): where the output reads."""
    return 2 * n_layers


def first_stage_from(stage: int, parity: int) -> int:
    """The first stage of sublayer ``parity`` at or after ``stage``."""
    return stage if stage_parity(stage) == parity else stage + 1


def last_stage_to(stage: int, parity: int) -> int:
    """The last stage of sublayer ``parity`` at or before ``stage``."""
    return stage if stage_parity(stage) == parity else stage - 1


def stage_fits(p: Producer, stage: int) -> bool:
    """Whether ``p`` may run at ``stage``: a sublayer of its kind, after the embedding."""
    return stage >= 0 and stage_parity(stage) == parity(p)


# -- occupancy: the columns taken at a stage ------------------------------------------------------


def cancel_stage(last_read: int) -> int:
    """Where a column read last at ``last_read`` is zeroed, and free again after: the first
    attention stage at or after that read (a cancel head is an attention head;
    ``columns.assign``)."""
    return first_stage_from(last_read, ATTENTION)


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


@dataclass
class Plan:
    stage: dict[int, int]  # producer id -> stage
    columns: dict[int, int] = field(default_factory=dict)  # live signal id -> residual column
    cancels: dict[int, int] = field(default_factory=dict)  # signal -> stage zeroing it
    d_model: int = 0
    const_col: int = 0
    pin_cols: list[int] = field(default_factory=list)
    scheduler: str = "heuristic"
    status: str = "heuristic"  # heuristic | optimal | feasible | fallback
    proven_bound: int | None = None
    solve_seconds: float = 0.0

    @property
    def n_layers(self) -> int:
        return layer_count(self.stage.values())

    def signal_stage(self, prog: Program, sid: int) -> int:
        p = prog.signals[sid].producer
        return EMBED_STAGE if p == EMBED else self.stage[p]

    def lifetimes(self, prog: Program) -> dict[int, tuple[int, int]]:
        """live signal -> (stage written, last stage that reads it; output: past the end)."""
        end = end_stage(self.n_layers)
        last: dict[int, int] = {s: self.signal_stage(prog, s) for s in prog.live_signals()}
        for p in prog.producers.values():
            for s in p.reads():
                last[s] = max(last[s], self.stage[p.id])
        for s in prog.final_reads():
            last[s] = end
        return {s: (self.signal_stage(prog, s), last[s]) for s in prog.live_signals()}

    def occupancy(self, prog: Program) -> dict[int, tuple[int, int]]:
        """live signal -> the stages its column is taken: from the write to the first
        attention sublayer at or after its last read, where a cancel head can zero it
        (``columns.assign``); a column is free again only after that."""
        return {s: (a, cancel_stage(b)) for s, (a, b) in self.lifetimes(prog).items()}

    def live_peak(self, prog: Program) -> int:
        """The most columns taken by signals at any one stage, embedding to output (reserved
        columns excluded): the peak of ``occupancy``."""
        return peak_overlap(self.occupancy(prog).values(), EMBED_STAGE, end_stage(self.n_layers))

    def check(self, prog: Program) -> None:
        """Raise PlanError unless every invariant holds."""
        for p in prog.producers.values():
            st = self.stage[p.id]
            if not stage_fits(p, st):
                raise PlanError(f"{type(p).__name__} {p.name} at stage {st}")
            for s in p.reads():
                if self.signal_stage(prog, s) >= st:
                    raise PlanError(f"{p.name} at stage {st} reads {prog.signals[s].name} "
                                    f"written at stage {self.signal_stage(prog, s)}")
        reserved = {self.const_col, *self.pin_cols}
        spans = self.lifetimes(prog)
        by_col: dict[int, list[int]] = {}
        for s, col in self.columns.items():
            if col in reserved or not 0 <= col < self.d_model:
                raise PlanError(f"signal {prog.signals[s].name} in column {col}")
            by_col.setdefault(col, []).append(s)
        for col, sigs in by_col.items():
            ordered = sorted(sigs, key=lambda s: spans[s][0])
            for a, b in zip(ordered, ordered[1:], strict=False):
                cancel = self.cancels.get(a)
                # either sublayer may zero it (schedule/cancels.py): after its last read (a
                # sublayer reads before it adds), before the next owner is written
                if cancel is None or cancel < spans[a][1] or cancel >= spans[b][0]:
                    raise PlanError(f"column {col} holds {prog.signals[a].name} and "
                                    f"{prog.signals[b].name} without a cancel between them")
        missing = prog.live_signals() - set(self.columns)
        if missing:
            raise PlanError(f"live signals without a column: {sorted(missing)[:5]}")


def layer_members(prog: Program, plan: Plan) -> list[tuple[list[Head], list[FFN]]]:
    layers: list[tuple[list[Head], list[FFN]]] = [([], []) for _ in range(plan.n_layers)]
    for p in sorted(prog.producers.values(), key=lambda p: p.id):
        heads, ffns = layers[layer_of(plan.stage[p.id])]
        (heads if isinstance(p, Head) else ffns).append(p)  # type: ignore[arg-type]
    return layers
