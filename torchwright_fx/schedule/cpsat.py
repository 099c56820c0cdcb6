"""The CP-SAT scheduler (``optimize=1..3``): fewest layers, then the narrowest layers.

The heuristic (``optimize=0``) puts every producer at its earliest stage. That already meets the
critical-path layer bound, but it piles independent producers into the first layers, and the
widest layer sets ``num_attention_heads`` and ``intermediate_size`` for *every* layer. This
module keeps the layer count minimal and spreads the producers so the per-layer maxima of
heads and MLP lanes -- hence the parameter count -- are as small as possible. When the caller
fixes ``d_model`` it also keeps the live residual width within it, which may cost layers.
When the compiler picks ``d_model`` (the default), spreading producers must not push the live
width past the next power of two: the width is capped at the warm plan's d, then half of it
is tried at the same layer count (``_auto_width``).

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
largest possible value, so one layer outweighs any width saving.

Solving (``solve_model``): warm-started from the given plan (a hint on every variable); a
deterministic-time budget per level (``TIME_LIMITS``, shared by the horizons tried) with a
wall-clock cap of ``WALL_FACTOR`` times it as a safety net; ``num_workers`` and
``random_seed`` fixed and ``interleave_search`` on, which makes the multi-worker search
deterministic. A run that stops on an optimality proof or on the deterministic budget returns
the same plan every time (for one OR-Tools build); only a run cut by the wall-clock cap, on a
heavily loaded machine, can differ.

Replaying (``replay``): layer values become stages; the result is never worse than the warm
plan (layers, then the parameter proxy) unless the warm plan breaks the width cap, and the
status says when the cap cost layers.

Results can be cached on disk (``cache_dir``, or the ``TORCHWRIGHT_FX_CACHE`` environment
variable), keyed by a hash of everything the model depends on.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ortools.sat.python import cp_model

from torchwright_fx.ir.graph import EMBED, FFN, Head, Lane, Producer, Program
from torchwright_fx.schedule.bounds import critical_path_layers, earliest_stages, peak_overlap
from torchwright_fx.schedule.columns import MIN_D_MODEL, fitting_width, reserved_columns
from torchwright_fx.schedule.plan import Plan

TIME_LIMITS: dict[int, float] = {1: 5.0, 2: 20.0, 3: 60.0}  # deterministic seconds per level
WALL_FACTOR = 3.0  # wall-clock safety cap = WALL_FACTOR * the level's budget
PROBING_LIMIT = 0.2  # deterministic seconds per presolve probing pass (see solve_model)
CACHE_ENV = "TORCHWRIGHT_FX_CACHE"
CACHE_VERSION = 2  # bump when the model or the objective changes
DEFAULT_D_HEAD = 16

Expr = cp_model.LinearExprT


# -- measuring a schedule -------------------------------------------------------------------------


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


# -- the model ------------------------------------------------------------------------------------


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
        return -1 if pid == EMBED else 2 * self.layer[pid] + self.parity[pid]

    def hinted_stage(self, pid: int) -> int:
        """The stage of a producer in the hint (the warm plan)."""
        return -1 if pid == EMBED else 2 * self.hint[pid] + self.parity[pid]


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
        limit = min((latest[c] - 1 for c in consumers[pid]), default=2 * horizon - 1)
        par = parity(prog.producers[pid])
        latest[pid] = limit if limit % 2 == par else limit - 1
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
    hint = m.hint = {pid: warm.stage.get(pid, lo) // 2 for pid, (lo, _) in windows.items()}

    # Layer of each producer, and its one-hot "p is in layer L" indicators.
    at: dict[int, dict[int, cp_model.IntVar]] = {}
    for pid, (lo, hi) in sorted(windows.items()):
        if hi < lo:
            raise ValueError(f"horizon of {horizon} layers leaves no stage for producer {pid}")
        var = cp.new_int_var(lo // 2, hi // 2, f"layer_{pid}")
        m.layer[pid] = var
        at[pid] = {L: cp.new_bool_var(f"at_{pid}_{L}") for L in range(lo // 2, hi // 2 + 1)}
        cp.add_exactly_one(at[pid].values())
        cp.add(var == sum(L * b for L, b in at[pid].items()))
        if lo // 2 <= hint[pid] <= hi // 2:
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
    warm_shape = shape(prog, {pid: 2 * L + m.parity[pid] for pid, L in hint.items()})
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
    outputs = prog.output.signals()
    groups = Counter((prog.signals[s].producer, frozenset(readers[s]), s in outputs)
                     for s in prog.live)
    end_of_time = 2 * m.horizon + 2  # one past the shifted horizon stage 2 * horizon
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
                cp.add(2 * cancel >= m.stage(r))
            end = 2 * cancel + 2
            hint_cancel = (max(m.hinted_stage(r) for r in reads) + 1) // 2
            cp.add_hint(cancel, hint_cancel)
            hint_end = 2 * hint_cancel + 2
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


# -- solving --------------------------------------------------------------------------------------


@dataclass
class Solution:
    status: str  # the CP-SAT status name: OPTIMAL, FEASIBLE, INFEASIBLE, UNKNOWN, MODEL_INVALID
    stage: dict[int, int] | None  # producer -> stage, when a solution was found
    layer_bound: int | None  # a proven lower bound on n_layers
    seconds: float  # wall clock
    dtime: float = 0.0  # CP-SAT deterministic time spent


def solve_model(m: Model, budget: float, seed: int, workers: int) -> Solution:
    """Run CP-SAT for at most ``budget`` deterministic seconds (wall-clock cap ``WALL_FACTOR``
    times that), deterministically: see the module docstring."""
    solver = cp_model.CpSolver()
    params = solver.parameters
    params.max_deterministic_time = budget
    params.max_time_in_seconds = WALL_FACTOR * budget
    params.num_workers = workers  # the current name of num_search_workers
    params.interleave_search = True  # deterministic whatever the number of workers
    params.random_seed = seed
    # Presolve probes up to this many deterministic seconds per pass (3 passes; default 1.0
    # each). Small models finish probing far below it; on a 1300-producer program the probing
    # took 3 of level 1's 5 seconds, and with them the time to find any solution.
    params.probing_deterministic_time_limit = PROBING_LIMIT
    start = time.perf_counter()
    status = solver.solve(m.cp)
    seconds, dtime = time.perf_counter() - start, solver.deterministic_time
    name = solver.status_name(status)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return Solution(name, None, None, seconds, dtime)
    stage = {pid: 2 * int(solver.value(var)) + m.parity[pid] for pid, var in m.layer.items()}
    # obj = W * layers + width with 0 <= width < W, and obj >= bound, so layers >= bound // W.
    bound = math.ceil(solver.best_objective_bound - 1e-6)
    return Solution(name, stage, bound // m.layer_weight, seconds, dtime)


# -- replaying the solution -----------------------------------------------------------------------


def replay(prog: Program, warm: Plan, sol: Solution, d_model: int | None) -> Plan | None:
    """The solution as a Plan, or None when there is none to use.

    Never worse than the warm plan: if the warm plan fits the width cap and is at least as good
    (layers, then the parameter proxy), its stages are kept. A plan with more layers than the
    warm plan only comes out of a width cap the warm plan breaks; the status says so."""
    if sol.stage is None or not precedence_ok(prog, sol.stage):
        return None
    d_head = d_head_of(prog)
    new, old = shape(prog, sol.stage), shape(prog, warm.stage)
    warm_fits = d_model is None or old.live + reserved_columns(d_model) <= d_model
    stage, status = sol.stage, "optimal" if sol.status == "OPTIMAL" else "feasible"
    if warm_fits and (old.layers, old.proxy(d_head)) < (new.layers, new.proxy(d_head)):
        stage, new, status = dict(warm.stage), old, "feasible"
    if new.layers > warm.n_layers:
        status += (f" (width-forced: d_model={d_model} needs {new.layers} layers; "
                   f"the warm plan's {warm.n_layers} do not fit)")
    bound = max(critical_path_layers(prog), sol.layer_bound or 0)
    if status.startswith("optimal"):
        bound = new.layers
    return Plan(stage=stage, scheduler="cpsat", status=status, proven_bound=bound,
                solve_seconds=sol.seconds)


# -- the cache ------------------------------------------------------------------------------------


def cache_key(prog: Program, warm: Plan, level: int, d_model: int | None, seed: int,
              workers: int) -> str:
    """A hash of everything the model depends on: producer kinds and dependency edges, each
    FFN's lanes (numbered by first appearance, so sharing is captured), each live signal's
    producer and readers and whether the output reads it, d_head, the warm stages, the level,
    d_model and the solver settings."""
    lane_ids: dict[Lane, int] = {}
    producers = []
    for pid in sorted(prog.producers):
        p = prog.producers[pid]
        deps = sorted(prog.deps(p))
        if isinstance(p, Head):
            producers.append(["head", pid, deps, len(p.q)])
        else:
            ids = sorted({lane_ids.setdefault(lane, len(lane_ids)) for lane in p.lanes})
            producers.append(["ffn", pid, deps, ids])
    readers = prog.readers()
    outputs = prog.output.signals()
    signals = [[s, prog.signals[s].producer, sorted(readers[s]), s in outputs]
               for s in sorted(prog.live)]
    payload = {"version": CACHE_VERSION, "producers": producers, "signals": signals,
               "warm": sorted(warm.stage.items()), "level": level, "d_model": d_model,
               "seed": seed, "workers": workers, "limits": sorted(TIME_LIMITS.items())}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def _cache_path(cache_dir: str | os.PathLike[str] | None) -> Path | None:
    if cache_dir is None:
        cache_dir = os.environ.get(CACHE_ENV) or None
    return Path(cache_dir) if cache_dir else None


def cache_load(directory: Path, key: str, prog: Program) -> Plan | None:
    """A cached plan (``scheduler="cpsat (cached)"``, ``solve_seconds=0``), or None."""
    try:
        data = json.loads((directory / f"{key}.json").read_text())
        stage = {int(pid): int(s) for pid, s in data["stage"].items()}
        status, bound = str(data["status"]), data["proven_bound"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if not precedence_ok(prog, stage):
        return None
    return Plan(stage=stage, scheduler="cpsat (cached)", status=status,
                proven_bound=None if bound is None else int(bound), solve_seconds=0.0)


def cache_store(directory: Path, key: str, plan: Plan) -> None:
    data = {"stage": {str(pid): s for pid, s in sorted(plan.stage.items())},
            "status": plan.status, "proven_bound": plan.proven_bound}
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tmp = directory / f"{key}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, directory / f"{key}.json")
    except OSError as e:
        warnings.warn(f"schedule cache {directory} not written: {e}", stacklevel=3)


# -- the entry point ------------------------------------------------------------------------------


def horizons(prog: Program, warm: Plan, d_model: int | None) -> list[int]:
    """Layer horizons to try, in order. Without a width cap more layers never help, so the
    warm plan's count is enough. With one, first allow twice the warm plan's layers (at least
    two more); if that is proven infeasible, one layer per producer, which is always enough
    (layers with no producer in them never lower the live width)."""
    base = max(warm.n_layers, critical_path_layers(prog))
    if d_model is None:
        return [base]
    first = base + max(2, base)
    complete = max(base, len(prog.producers))
    return [first] if complete <= first else [first, complete]


def _fallback(warm: Plan, why: str) -> Plan:
    warnings.warn(f"CP-SAT scheduling fell back to the warm plan: {why}", stacklevel=3)
    return Plan(stage=dict(warm.stage), scheduler=warm.scheduler, status="fallback",
                proven_bound=warm.proven_bound, solve_seconds=warm.solve_seconds)


def _solve(prog: Program, warm: Plan, level: int, budget: float, d_model: int | None,
           tries: list[int], seed: int, workers: int) -> tuple[Plan | None, str, float, float]:
    """Solve over the horizons ``tries`` in turn (later ones get what budget is left): the
    replayed plan or None, why there is none, and the deterministic and wall time spent."""
    seconds, spent, sol, horizon = 0.0, 0.0, None, 0
    for horizon in tries:
        sol = solve_model(build_model(prog, warm, horizon, d_model), budget - spent, seed,
                          workers)
        seconds, spent = seconds + sol.seconds, spent + sol.dtime
        if sol.status != "INFEASIBLE" or spent >= budget:
            break
    assert sol is not None
    sol.seconds = seconds
    why = {"INFEASIBLE": f"no schedule of at most {horizon} layers keeps the live width "
                         f"within d_model={d_model}",
           "UNKNOWN": f"no solution of at most {horizon} layers within the level-{level} "
                      "time limit"}.get(sol.status, f"solver status {sol.status}")
    return replay(prog, warm, sol, d_model), why, spent, seconds


def _auto_width(prog: Program, warm: Plan, level: int, budget: float, seed: int,
                workers: int) -> tuple[Plan | None, str]:
    """No d_model given: layers first, then the width d_model, then heads and lanes. d_model is
    a power of two, so a narrower layer only pays when the live width crosses one; the solver
    keeps the live width within the warm plan's d (so it is never wider than the heuristic)
    and then tries half of it at the same layer count, keeping the cheaper plan (d_model times
    the per-layer proxy)."""
    d_warm = fitting_width(shape(prog, warm.stage).live)
    base = [max(warm.n_layers, critical_path_layers(prog))]
    plan, why, spent, seconds = _solve(prog, warm, level, budget, d_warm, base, seed, workers)
    narrower = d_warm // 2
    if plan is None or narrower < MIN_D_MODEL or spent >= budget:
        return plan, why
    slim, _, _, more = _solve(prog, warm, level, budget - spent, narrower, base, seed, workers)
    d_head = d_head_of(prog)
    if slim is not None and narrower * shape(prog, slim.stage).proxy(d_head) < \
            d_warm * shape(prog, plan.stage).proxy(d_head):
        plan = slim
    plan.solve_seconds = seconds + more
    return plan, why


def schedule(prog: Program, warm: Plan, level: int, *, d_model: int | None = None,
             seed: int = 0, workers: int = 2,
             cache_dir: str | os.PathLike[str] | None = None) -> Plan:
    """Place every producer (stages only; columns are ``columns.allocate``'s job).

    ``level`` (1-3) picks the time budget (``TIME_LIMITS``). ``d_model``, when given, caps the
    live width (more layers are allowed if the cap needs them); when None, the narrowest
    power-of-two width at the fewest layers is sought (``_auto_width``). ``cache_dir``
    defaults to ``$TORCHWRIGHT_FX_CACHE``; ``""`` turns the cache off. Returns a plan with
    status ``optimal`` or ``feasible`` (plus a width-forced note when the cap costs layers), or
    the warm plan with status ``fallback`` and a warning when no solution was found."""
    if level < 1:
        raise ValueError(f"optimize level {level}: CP-SAT levels are 1-3")
    directory = _cache_path(cache_dir)
    key = cache_key(prog, warm, level, d_model, seed, workers) if directory else ""
    if directory:
        cached = cache_load(directory, key, prog)
        if cached is not None:
            return cached
    if not prog.producers:
        return Plan(stage={}, scheduler="cpsat", status="optimal", proven_bound=1)

    budget = TIME_LIMITS.get(level, TIME_LIMITS[max(TIME_LIMITS)])
    if d_model is None:
        plan, why = _auto_width(prog, warm, level, budget, seed, workers)
    else:
        plan, why, _, _ = _solve(prog, warm, level, budget, d_model,
                              horizons(prog, warm, d_model), seed, workers)
    if plan is None:
        return _fallback(warm, why)
    if directory:
        cache_store(directory, key, plan)
    return plan
