"""The on-disk cache of CP-SAT schedules (``cache_dir``, or the ``TORCHWRIGHT_FX_CACHE``
environment variable), keyed by a hash of everything the model depends on."""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from pathlib import Path

from torchwright_fx.ir.graph import Head, Lane, Program
from torchwright_fx.schedule.cpsat_shape import precedence_ok
from torchwright_fx.schedule.cpsat_solve import TIME_LIMITS
from torchwright_fx.schedule.plan import Plan

CACHE_ENV = "TORCHWRIGHT_FX_CACHE"
CACHE_VERSION = 2  # bump when the model or the objective changes


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
    outputs = prog.final_reads()
    signals = [[s, prog.signals[s].producer, sorted(readers[s]), s in outputs]
               for s in sorted(prog.live_signals())]
    payload = {"version": CACHE_VERSION, "producers": producers, "signals": signals,
               "warm": sorted(warm.stage.items()), "level": level, "d_model": d_model,
               "seed": seed, "workers": workers, "limits": sorted(TIME_LIMITS.items())}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def cache_directory(cache_dir: str | os.PathLike[str] | None) -> Path | None:
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
