"""Solving a CP-SAT scheduling model (``solve_model``) and replaying its solution as a Plan
(``replay``).

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
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from ortools.sat.python import cp_model

from torchwright_fx.ir.graph import Program
from torchwright_fx.schedule.balance import balance, estimate
from torchwright_fx.schedule.bounds import critical_path_layers
from torchwright_fx.schedule.columns import reserved_columns
from torchwright_fx.schedule.cpsat_model import Model
from torchwright_fx.schedule.cpsat_shape import Shape, d_head_of, precedence_ok, shape
from torchwright_fx.schedule.plan import Plan, stage_of

TIME_LIMITS: dict[int, float] = {1: 5.0, 2: 20.0, 3: 60.0}  # deterministic seconds per level
WALL_FACTOR = 3.0  # wall-clock safety cap = WALL_FACTOR * the level's budget
PROBING_LIMIT = 0.2  # deterministic seconds per presolve probing pass (see solve_model)


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
    stage = {pid: stage_of(int(solver.value(var)), m.parity[pid])
             for pid, var in m.layer.items()}
    # obj = W * layers + width with 0 <= width < W, and obj >= bound, so layers >= bound // W.
    bound = math.ceil(solver.best_objective_bound - 1e-6)
    return Solution(name, stage, bound // m.layer_weight, seconds, dtime)


# -- replaying the solution -----------------------------------------------------------------------


def replay(prog: Program, warm: Plan, sol: Solution, d_model: int | None) -> Plan | None:
    """The solution as a Plan, or None when there is none to use.

    Never worse than the warm plan: if the warm plan fits the width cap and is at least as good
    (layers, then the parameter proxy; with the width left to the compiler, the solution is
    balanced first, ``balance.py``, and compared by the estimated parameters, which weigh the
    live peak too), its stages are kept. A plan with more layers than the warm plan only comes
    out of a width cap the warm plan breaks; the status says so."""
    if sol.stage is None or not precedence_ok(prog, sol.stage):
        return None
    d_head = d_head_of(prog)
    solved = sol.stage if d_model is not None else balance(prog, sol.stage)
    new, old = shape(prog, solved), shape(prog, warm.stage)
    warm_fits = d_model is None or old.live + reserved_columns(d_model) <= d_model

    def cost(stage: dict[int, int], s: Shape) -> tuple[int, int]:
        return s.layers, s.proxy(d_head) if d_model is not None else estimate(prog, stage)

    stage, status = solved, "optimal" if sol.status == "OPTIMAL" else "feasible"
    if warm_fits and cost(warm.stage, old) < cost(solved, new):
        stage, new, status = dict(warm.stage), old, "feasible"
    if new.layers > warm.n_layers:
        status += (f" (width-forced: d_model={d_model} needs {new.layers} layers; "
                   f"the warm plan's {warm.n_layers} do not fit)")
    bound = max(critical_path_layers(prog), sol.layer_bound or 0)
    if status.startswith("optimal"):
        bound = new.layers
    return Plan(stage=stage, scheduler="cpsat", status=status, proven_bound=bound,
                solve_seconds=sol.seconds)
