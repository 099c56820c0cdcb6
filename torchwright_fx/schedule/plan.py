"""The layer plan: stage per producer, column per signal, and the invariants every plan keeps.

A *stage* numbers sublayers: stage 2L is layer L's attention, 2L+1 its MLP, and the embedding
is stage -1. A signal is written at its producer's stage and read by later stages only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torchwright_fx.ir.graph import EMBED, FFN, Head, Program


class PlanError(AssertionError):
    """A plan that breaks an invariant: a compiler bug, never a user error."""


EMBED_STAGE = -1


@dataclass
class Plan:
    stage: dict[int, int]  # producer id -> stage
    columns: dict[int, int] = field(default_factory=dict)  # live signal id -> residual column
    cancels: dict[int, int] = field(default_factory=dict)  # signal -> attention stage zeroing it
    d_model: int = 0
    const_col: int = 0
    pin_cols: list[int] = field(default_factory=list)
    scheduler: str = "heuristic"
    status: str = "heuristic"  # heuristic | optimal | feasible | fallback
    proven_bound: int | None = None
    solve_seconds: float = 0.0

    @property
    def n_layers(self) -> int:
        return max((s // 2 + 1 for s in self.stage.values()), default=1)

    def signal_stage(self, prog: Program, sid: int) -> int:
        p = prog.signals[sid].producer
        return EMBED_STAGE if p == EMBED else self.stage[p]

    def lifetimes(self, prog: Program) -> dict[int, tuple[int, int]]:
        """live signal -> (stage written, last stage that reads it; output: past the end)."""
        end = 2 * self.n_layers
        last: dict[int, int] = {s: self.signal_stage(prog, s) for s in prog.live}
        for p in prog.producers.values():
            for s in p.reads():
                last[s] = max(last[s], self.stage[p.id])
        for s in prog.output.signals():
            last[s] = end
        return {s: (self.signal_stage(prog, s), last[s]) for s in prog.live}

    def occupancy(self, prog: Program) -> dict[int, tuple[int, int]]:
        """live signal -> the stages its column is taken: from the write to the first
        attention sublayer at or after its last read, where a cancel head can zero it
        (``columns.assign``); a column is free again only after that."""
        return {s: (a, b + b % 2) for s, (a, b) in self.lifetimes(prog).items()}

    def check(self, prog: Program) -> None:
        """Raise PlanError unless every invariant holds."""
        for p in prog.producers.values():
            st = self.stage[p.id]
            want = 0 if isinstance(p, Head) else 1
            if st < 0 or st % 2 != want:
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
                if cancel is None or cancel < spans[a][1] or cancel % 2 or cancel >= spans[b][0]:
                    raise PlanError(f"column {col} holds {prog.signals[a].name} and "
                                    f"{prog.signals[b].name} without a cancel between them")
        missing = prog.live - set(self.columns)
        if missing:
            raise PlanError(f"live signals without a column: {sorted(missing)[:5]}")


def layer_members(prog: Program, plan: Plan) -> list[tuple[list[Head], list[FFN]]]:
    layers: list[tuple[list[Head], list[FFN]]] = [([], []) for _ in range(plan.n_layers)]
    for p in sorted(prog.producers.values(), key=lambda p: p.id):
        heads, ffns = layers[plan.stage[p.id] // 2]
        (heads if isinstance(p, Head) else ffns).append(p)  # type: ignore[arg-type]
    return layers
