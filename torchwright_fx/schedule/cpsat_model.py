"""The CP-SAT model (``build_model``) of the scheduler in ``schedule/cpsat.py``.

The model (``build_model``), for every producer p (FFN bank or attention head):

* ``layer[p]`` -- an integer; p runs at stage ``2 * layer[p] + parity(p)`` (parity 0 for a
  Head, 1 for an FFN), so the attention/MLP alternation is built in. Its domain runs from the
  critical-path earliest stage (``bounds.earliest_stages``) to the latest stage that still
  leaves room for p's consumers below the horizon (``horizon`` layers: the warm plan's layer
  count, plus slack when a width cap may need more layers).
* ``at[p][L]`` -- boolean "p is in layer L", exactly one true, channelled to ``layer[p]``.

Constraints:

* precedence: p's stage is strictly greater than the stage of every producer it reads
  (the embedding is stage -1, so it never constrains);
* ``n_layers >= layer[p] + 1`` for every p;
* heads: ``sum of at[h][L] over Heads h <= heads_max`` for every layer L;
* lanes: identical ``Lane`` objects in one layer are emitted once, so lanes are grouped by the
  set of FFNs that contain them. A lane owned by one FFN counts through ``at[f][L]``; a group
  shared by several FFNs counts once per layer through ``shared[g][L] >= at[f][L]`` for each
  owner f. ``sum <= lanes_max`` for every layer;
* live width (under a width cap): every live signal takes its column from its producer's
  stage to its cancel stage, both ends included: the first attention stage at or after its
  last read (``2 * cancel >= stage of every reader``), since a column is recycled only once a
  cancel head has zeroed it; a signal the output reads stays to the horizon. This is exactly
  ``Plan.occupancy``. Signals with the same producer, readers and output flag share one
  interval whose demand is their count. A cumulative constraint keeps the live count at every
  stage within ``d_model - 1 - pin_count(d_model)`` (the constant column and RMSNorm pins).

Objective (lexicographic through one weighted sum)::

    W * n_layers + 4 * d_head * heads_max + 3 * lanes_max

The second part is the per-layer parameter count divided by ``d_model`` (Q, K, V, O are
``4 * d * heads * d_head``; gate, up, down are ``3 * d * lanes``). ``W`` is one more than its
largest possible value, so one layer outweighs any width saving."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from torchwright_fx.ir.graph import EMBED, FFN, Head, Lane, Program
from torchwright_fx.schedule.bounds import critical_path_layers, earliest_stages
from torchwright_fx.schedule.columns import reserved_columns
from torchwright_fx.schedule.cpsat_shape import d_head_of, shape
from torchwright_fx.schedule.plan import (
    ATTENTION,
    EMBED_STAGE,
    Plan,
    cancel_stage,
    end_stage,
    last_stage_to,
    layer_of,
    parity,
    stage_of,
)

Expr = cp_model.LinearExprT


@dataclass
class Model:
    """A built CP-SAT model and the handles needed to read a solution back."""

    cp: cp_model.CpModel
    horizon: int  # layers available
    d_head: int
    layer_weight: int  # W in the objective
    parity: dict[int, int]
    layer: dict[int, cp_model.IntVar] = field(default_factory=dict)
    hint: dict[int, int] = field(default_factory=dict)  # producer -> the warm plan's layer

    def stage(self, pid: int) -> Expr:
        """The stage of a producer as an affine expression; the embedding is stage -1."""
        return EMBED_STAGE if pid == EMBED else stage_of(self.layer[pid], self.parity[pid])

    def hinted_stage(self, pid: int) -> int:
        """The stage of a producer in the hint (the warm plan)."""
        return EMBED_STAGE if pid == EMBED else stage_of(self.hint[pid], self.parity[pid])


def stage_windows(prog: Program, horizon: int) -> dict[int, tuple[int, int]]:
    """producer -> (earliest, latest) stage: earliest from the critical path, latest so that
    every consumer still fits at a later stage below ``2 * horizon``."""
    earliest = earliest_stages(prog)
    consumers: dict[int, set[int]] = {pid: set() for pid in prog.producers}
    for p in prog.producers.values():
        for d in prog.deps(p):
            if d != EMBED:
                consumers[d].add(p.id)
    latest: dict[int, int] = {}
    # Consumers have strictly larger earliest stages, so this visits them before their inputs.
    for pid in sorted(prog.producers, key=lambda q: (earliest[q], q), reverse=True):
        limit = min((latest[c] - 1 for c in consumers[pid]), default=end_stage(horizon) - 1)
        latest[pid] = last_stage_to(limit, parity(prog.producers[pid]))
    return {pid: (earliest[pid], latest[pid]) for pid in prog.producers}


def build_model(prog: Program, warm: Plan, horizon: int, d_model: int | None) -> Model:
    """The CP-SAT model described in the module docstring, hinted with ``warm``'s stages."""
    cp = cp_model.CpModel()
    d_head = d_head_of(prog)
    heads = [p for p in prog.producers.values() if isinstance(p, Head)]
    ffns = [p for p in prog.producers.values() if isinstance(p, FFN)]
    all_lanes = {lane for f in ffns for lane in f.lanes}
    weight = 4 * d_head * len(heads) + 3 * len(all_lanes) + 1
    m = Model(cp, horizon, d_head, weight, {pid: parity(p) for pid, p in prog.producers.items()})
    windows = stage_windows(prog, horizon)
    hint = m.hint = {pid: layer_of(warm.stage.get(pid, lo)) for pid, (lo, _) in windows.items()}

    # Layer of each producer, and its one-hot "p is in layer L" indicators.
    at: dict[int, dict[int, cp_model.IntVar]] = {}
    for pid, (lo, hi) in sorted(windows.items()):
        if hi < lo:
            raise ValueError(f"horizon of {horizon} layers leaves no stage for producer {pid}")
        first, last = layer_of(lo), layer_of(hi)
        var = cp.new_int_var(first, last, f"layer_{pid}")
        m.layer[pid] = var
        at[pid] = {L: cp.new_bool_var(f"at_{pid}_{L}") for L in range(first, last + 1)}
        cp.add_exactly_one(at[pid].values())
        cp.add(var == sum(L * b for L, b in at[pid].items()))
        if first <= hint[pid] <= last:
            cp.add_hint(var, hint[pid])
            for L, b in at[pid].items():
                cp.add_hint(b, L == hint[pid])

    # Precedence: a producer runs strictly after every producer whose signals it reads.
    for p in prog.producers.values():
        for d in prog.deps(p):
            if d != EMBED:
                cp.add(m.stage(p.id) >= m.stage(d) + 1)

    # Layer count: every producer's layer is below it.
    n_layers = cp.new_int_var(critical_path_layers(prog), horizon, "n_layers")
    for var in m.layer.values():
        cp.add(n_layers >= var + 1)
    warm_shape = shape(prog, {pid: stage_of(L, m.parity[pid]) for pid, L in hint.items()})
    cp.add_hint(n_layers, max(critical_path_layers(prog), warm_shape.layers))

    # Heads per layer: the number of Heads in it.
    heads_max = cp.new_int_var(0, len(heads), "heads_max")
    for L in range(horizon):
        members = [at[h.id][L] for h in heads if L in at[h.id]]
        if members:
            cp.add(sum(members) <= heads_max)
    cp.add_hint(heads_max, warm_shape.heads)

    # Lanes per layer: distinct Lane objects; a lane shared by several FFNs counts once.
    owners: dict[Lane, set[int]] = {}
    for f in ffns:
        for lane in f.lanes:
            owners.setdefault(lane, set()).add(f.id)
    groups = Counter(frozenset(o) for o in owners.values())
    lanes_max = cp.new_int_var(0, len(all_lanes), "lanes_max")
    per_layer: dict[int, list[Expr]] = {L: [] for L in range(horizon)}
    for group, count in sorted(groups.items(), key=lambda gc: sorted(gc[0])):
        if len(group) == 1:
            (fid,) = group
            for L, b in at[fid].items():
                per_layer[L].append(count * b)
            continue
        for L in sorted({L for fid in group for L in at[fid]}):
            shared = cp.new_bool_var(f"shared_{min(group)}_{len(group)}_{L}")
            for fid in group:
                if L in at[fid]:
                    cp.add_implication(at[fid][L], shared)
            cp.add_hint(shared, any(hint[fid] == L for fid in group))
            per_layer[L].append(count * shared)
    for terms in per_layer.values():
        if terms:
            cp.add(sum(terms) <= lanes_max)
    cp.add_hint(lanes_max, warm_shape.lanes)

    if d_model is not None:
        _add_width(prog, m, d_model)

    cp.minimize(weight * n_layers + 4 * d_head * heads_max + 3 * lanes_max)
    return m


def _add_width(prog: Program, m: Model, d_model: int) -> None:
    """Live signals at every stage <= d_model minus the reserved columns (a cumulative over
    stage intervals, times shifted by +1 so the embedding's stage -1 becomes 0)."""
    cp = m.cp
    readers = prog.readers()
    outputs = prog.final_reads()
    groups = Counter((prog.signals[s].producer, frozenset(readers[s]), s in outputs)
                     for s in prog.live_signals())
    end_of_time = end_stage(m.horizon) + 2  # one past the shifted horizon stage 2 * horizon
    intervals: list[cp_model.IntervalVar] = []
    demands: list[int] = []
    for (pid, reads, is_output), count in sorted(groups.items(),
                                                 key=lambda g: (g[0][0], sorted(g[0][1]), g[0][2])):
        start = m.stage(pid) + 1
        # the hint, completed here: the warm plan's interval (Plan.occupancy, shifted by +1)
        hint_start = m.hinted_stage(pid) + 1
        if is_output:
            end: Expr = end_of_time
            hint_end = end_of_time
        elif reads:
            # the column is freed at the first attention stage at or after the last read
            cancel = cp.new_int_var(0, m.horizon, f"cancel_{pid}_{min(reads)}")
            for r in reads:
                cp.add(stage_of(cancel, ATTENTION) >= m.stage(r))
            end = stage_of(cancel, ATTENTION) + 2
            hint_cancel = layer_of(cancel_stage(max(m.hinted_stage(r) for r in reads)))
            cp.add_hint(cancel, hint_cancel)
            hint_end = stage_of(hint_cancel, ATTENTION) + 2
        else:
            end = start + 1
            hint_end = hint_start + 1
        size = cp.new_int_var(1, end_of_time + 1, f"live_{pid}_{len(intervals)}")
        cp.add_hint(size, hint_end - hint_start)
        intervals.append(cp.new_interval_var(start, size, end, f"span_{pid}_{len(intervals)}"))
        demands.append(count)
    capacity = d_model - reserved_columns(d_model)
    if capacity < 0:
        cp.add_bool_or([])  # nothing fits: make the model infeasible
    elif intervals:
        cp.add_cumulative(intervals, demands, capacity)
