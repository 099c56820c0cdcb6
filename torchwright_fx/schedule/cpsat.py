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

The parts, one module each:

* ``schedule/cpsat_shape.py``: what a schedule costs (``Shape``: layers, heads and lanes per
  layer, live width) and whether it is valid (``precedence_ok``);
* ``schedule/cpsat_model.py``: the CP-SAT model (``build_model``), its variables, constraints
  and objective;
* ``schedule/cpsat_solve.py``: solving it deterministically (``solve_model``) and replaying the
  solution as a Plan that is never worse than the warm plan (``replay``);
* ``schedule/cpsat_cache.py``: results cached on disk (``cache_dir``, or the
  ``TORCHWRIGHT_FX_CACHE`` environment variable), keyed by a hash of everything the model
  depends on.

This module is the entry point (``schedule``): the horizons tried, the automatic width, the
fallback to the warm plan. It re-exports the public names of the parts.
"""

from __future__ import annotations

import os
import warnings

from torchwright_fx.ir.graph import Program
from torchwright_fx.schedule.bounds import critical_path_layers
from torchwright_fx.schedule.columns import MIN_D_MODEL, fitting_width, reserved_columns
from torchwright_fx.schedule.cpsat_cache import (
    CACHE_ENV,
    CACHE_VERSION,
    cache_directory,
    cache_key,
    cache_load,
    cache_store,
)
from torchwright_fx.schedule.cpsat_model import Expr, Model, build_model, stage_windows
from torchwright_fx.schedule.cpsat_shape import (
    Shape,
    d_head_of,
    parity,
    precedence_ok,
    shape,
)
from torchwright_fx.schedule.cpsat_solve import (
    PROBING_LIMIT,
    TIME_LIMITS,
    WALL_FACTOR,
    Solution,
    replay,
    solve_model,
)
from torchwright_fx.schedule.plan import Plan

__all__ = [
    "CACHE_ENV",
    "CACHE_VERSION",
    "PROBING_LIMIT",
    "TIME_LIMITS",
    "WALL_FACTOR",
    "Expr",
    "Model",
    "Shape",
    "Solution",
    "build_model",
    "cache_directory",
    "cache_key",
    "cache_load",
    "cache_store",
    "d_head_of",
    "horizons",
    "parity",
    "precedence_ok",
    "replay",
    "reserved_columns",
    "schedule",
    "shape",
    "solve_model",
    "stage_windows",
]


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
    directory = cache_directory(cache_dir)
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
