"""The CP-SAT scheduler on small programs whose optimum is known by construction (and checked
by enumeration), plus the two examples end to end."""

from __future__ import annotations

import itertools
import warnings
from pathlib import Path

import pytest
from conftest import ShapeBuilder

from torchwright_fx.emit.emitter import emit
from torchwright_fx.ir.graph import Program
from torchwright_fx.ir.ranges import Interval
from torchwright_fx.ops.attention import Geometry
from torchwright_fx.schedule import columns, cpsat, heuristic
from torchwright_fx.schedule.bounds import earliest_stages
from torchwright_fx.schedule.plan import Plan

D_HEAD = 16
UNIT = Interval(0.0, 1.0)


def Builder() -> ShapeBuilder:  # noqa: N802  (reads as the class it makes)
    return ShapeBuilder(d_head=D_HEAD, lanes_per_ffn=4)


def chain(b: Builder, pairs: int) -> list[int]:
    """e -> FFN -> Head -> FFN -> ... : ``pairs`` FFN->Head steps, then a last FFN."""
    x = [b.e]
    for _ in range(pairs):
        x = b.head(b.ffn(x))
    return b.ffn(x)


def chain_with_free_heads() -> Program:
    """A 4-layer chain (heads in layers 1-3) and 4 heads that only read the embedding: the
    heuristic puts them all in layer 0 (4 heads/layer); 7 heads over 4 layers fit 2 a layer."""
    b = Builder()
    out = chain(b, 3)
    free = [s for _ in range(4) for s in b.head([b.e])]
    return b.finish(out + free)


def fan() -> Program:
    """A 3-layer chain of 4-lane FFNs and 6 independent 4-lane FFNs the output reads: the
    heuristic piles the fan into layer 0 (28 lanes); 36 lanes over 3 layers fit 12 a layer."""
    b = Builder()
    out = chain(b, 2)
    free = [s for _ in range(6) for s in b.ffn([b.e])]
    return b.finish(out + free)


def shared_lanes() -> tuple[Program, int, int]:
    """FFNs A and B carry the same 6 Lane objects (emitted once when they share a layer), C
    has 6 of its own. Best: {F1, C} and {F2, A, B}, 10 lanes a layer; counting lanes per FFN
    instead of per layer would make 16 the best."""
    b = Builder()
    f1 = b.ffn([b.e])
    f2 = b.ffn(b.head(f1))
    common = b.lanes([b.e], 6)
    a = b.ffn([b.e], lanes=common)
    bb = b.ffn([b.e], lanes=list(common))
    c = b.ffn([b.e], n_lanes=6)
    prog = b.finish(f2 + a + bb + c)
    return prog, prog.signals[a[0]].producer, prog.signals[bb[0]].producer


def width_capped() -> Program:
    """Two chains e -> P (7 and 6 signals) -> Q (1 signal). As soon as possible (2 layers) the
    live peak is 15 signals; d_model=16 leaves 14 columns (constant + 1 pin), so the two Q's
    must go to different layers: 3 layers."""
    b = Builder()
    s1 = b.ffn([b.e], n_out=7)
    s2 = b.ffn([b.e], n_out=6)
    return b.finish(b.ffn(s1) + b.ffn(s2))


def enumerate_best(prog: Program, horizon: int, d_model: int | None) -> tuple[int, int]:
    """(layers, parameter proxy) of the best schedule, by trying every placement."""
    windows = cpsat.stage_windows(prog, horizon)
    pids = sorted(windows)
    choices = [range(lo, hi + 1, 2) for lo, hi in (windows[p] for p in pids)]
    best = None
    for stages in itertools.product(*choices):
        stage = dict(zip(pids, stages, strict=True))
        if not cpsat.precedence_ok(prog, stage):
            continue
        sh = cpsat.shape(prog, stage)
        if d_model is not None and sh.live + cpsat.reserved_columns(d_model) > d_model:
            continue
        key = (sh.layers, sh.proxy(D_HEAD))
        best = key if best is None else min(best, key)
    assert best is not None
    return best


def solve(prog: Program, **kw: object) -> Plan:
    kw.setdefault("cache_dir", "")
    plan = cpsat.schedule(prog, heuristic.schedule(prog), 1, **kw)  # type: ignore[arg-type]
    checked = columns.allocate(prog, Plan(stage=dict(plan.stage)), None)
    checked.check(prog)
    return plan


def emitted_widths(prog: Program, plan: Plan) -> tuple[int, int, int]:
    """(layers, heads per layer, lanes per layer) of the machine the emitter builds."""
    m = emit(prog, columns.allocate(prog, Plan(stage=dict(plan.stage)), None),
             Geometry(D_HEAD, 64))
    return m.n_layers, m.n_heads, m.d_ff


# -- known optima ---------------------------------------------------------------------------------


def test_chain_spreads_free_heads() -> None:
    prog = chain_with_free_heads()
    warm = heuristic.schedule(prog)
    assert cpsat.shape(prog, earliest_stages(prog)).heads == 4  # as soon as possible
    # the heuristic's latest-stage start, balanced (heuristic.py, balance.py), finds CP-SAT's 2
    assert cpsat.shape(prog, warm.stage).heads == 2
    plan = solve(prog)
    assert plan.status == "optimal" and plan.scheduler == "cpsat"
    assert plan.n_layers == plan.proven_bound == 4
    got = cpsat.shape(prog, plan.stage)
    assert (got.layers, got.heads, got.lanes) == (4, 2, 4)
    assert emitted_widths(prog, plan) == (4, 2, 4)
    assert (got.layers, got.proxy(D_HEAD)) == enumerate_best(prog, 4, None)


def test_fan_spreads_lanes_over_the_critical_path() -> None:
    prog = fan()
    assert cpsat.shape(prog, earliest_stages(prog)).lanes == 28  # as soon as possible
    assert cpsat.shape(prog, heuristic.schedule(prog).stage).lanes <= 28
    plan = solve(prog)
    assert plan.status == "optimal" and plan.n_layers == plan.proven_bound == 3
    got = cpsat.shape(prog, plan.stage)
    assert (got.heads, got.lanes) == (1, 12)
    # the emitter's width recycles two columns behind two cancel lanes in the busiest layer:
    # d 13 and 14 lanes cost fewer parameters (4,355) than d 16 and 12 lanes (5,072)
    assert emitted_widths(prog, plan) == (3, 1, 14)
    assert (got.layers, got.proxy(D_HEAD)) == enumerate_best(prog, 3, None)


def test_identical_lanes_counted_once_per_layer() -> None:
    prog, a, b = shared_lanes()
    plan = solve(prog)
    assert plan.status == "optimal"
    assert plan.stage[a] == plan.stage[b]
    assert cpsat.shape(prog, plan.stage).lanes == 10
    assert emitted_widths(prog, plan)[2] == 10
    assert (2, cpsat.shape(prog, plan.stage).proxy(D_HEAD)) == enumerate_best(prog, 2, None)


def test_width_cap_forces_an_extra_layer() -> None:
    prog = width_capped()
    assert heuristic.schedule(prog).n_layers == 2
    assert solve(prog).n_layers == 2  # no cap: the critical path
    plan = solve(prog, d_model=16)
    assert plan.n_layers == plan.proven_bound == 3
    assert plan.status.startswith("optimal") and "width-forced" in plan.status
    got = cpsat.shape(prog, plan.stage)
    assert got.live + cpsat.reserved_columns(16) <= 16
    assert (3, got.proxy(D_HEAD)) == enumerate_best(prog, 4, 16)


def test_width_cap_that_nothing_meets_falls_back() -> None:
    prog = width_capped()
    warm = heuristic.schedule(prog)
    with pytest.warns(UserWarning, match="d_model=8"):
        plan = cpsat.schedule(prog, warm, 1, d_model=8, cache_dir="")
    assert plan.status == "fallback" and plan.stage == warm.stage


def test_no_solution_in_time_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    prog = fan()
    warm = heuristic.schedule(prog)
    monkeypatch.setattr(cpsat, "solve_model",
                        lambda *a, **k: cpsat.Solution("UNKNOWN", None, None, 0.1, 0.1))
    with pytest.warns(UserWarning, match="time limit"):
        plan = cpsat.schedule(prog, warm, 1, cache_dir="")
    assert plan.status == "fallback" and plan.stage == warm.stage


def test_never_more_layers_than_warm_without_a_cap() -> None:
    for prog in (chain_with_free_heads(), fan(), shared_lanes()[0], width_capped()):
        assert solve(prog).n_layers <= heuristic.schedule(prog).n_layers


# -- determinism and the cache --------------------------------------------------------------------


def test_deterministic() -> None:
    for workers in (1, 4):
        plans = [solve(fan(), workers=workers, seed=3) for _ in range(2)]
        assert plans[0].stage == plans[1].stage


def test_cache_hit(tmp_path: Path) -> None:
    prog = fan()
    first = solve(prog, cache_dir=tmp_path)
    assert first.scheduler == "cpsat" and len(list(tmp_path.glob("*.json"))) == 1
    again = solve(fan(), cache_dir=tmp_path)
    assert again.scheduler == "cpsat (cached)" and again.solve_seconds == 0.0
    assert (again.stage, again.status, again.proven_bound) == (
        first.stage, first.status, first.proven_bound)
    # A different level or width is a different entry.
    solve(prog, cache_dir=tmp_path, d_model=64)
    assert len(list(tmp_path.glob("*.json"))) == 2


def test_cache_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cpsat.CACHE_ENV, str(tmp_path))
    prog = fan()
    warm = heuristic.schedule(prog)
    assert cpsat.schedule(prog, warm, 1).scheduler == "cpsat"
    assert cpsat.schedule(prog, warm, 1).scheduler == "cpsat (cached)"
    assert cpsat.schedule(prog, warm, 1, cache_dir="").scheduler == "cpsat"  # "" disables


def test_corrupt_cache_entry_is_ignored(tmp_path: Path) -> None:
    prog = fan()
    solve(prog, cache_dir=tmp_path)
    (entry,) = tmp_path.glob("*.json")
    entry.write_text('{"stage": {"0": 0}, "status": "optimal", "proven_bound": 3}')
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plan = solve(prog, cache_dir=tmp_path)
    assert plan.scheduler == "cpsat" and plan.status == "optimal"


def test_key_tracks_graph_structure() -> None:
    a, b = fan(), chain_with_free_heads()
    warm_a, warm_b = heuristic.schedule(a), heuristic.schedule(b)
    assert cpsat.cache_key(a, warm_a, 1, None, 0, 2) == cpsat.cache_key(fan(), warm_a, 1, None,
                                                                        0, 2)
    assert cpsat.cache_key(a, warm_a, 1, None, 0, 2) != cpsat.cache_key(b, warm_b, 1, None, 0, 2)
    assert cpsat.cache_key(a, warm_a, 1, None, 0, 2) != cpsat.cache_key(a, warm_a, 2, None, 0, 2)


# -- the examples end to end ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["binary_increment", "adder_1digit"])
def test_example_end_to_end(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    monkeypatch.delenv(cpsat.CACHE_ENV, raising=False)
    module = importlib.import_module(f"examples.{name}")
    base = module.make().compile()
    opt = module.make(optimize=1).compile()
    s0, s1 = base.stats(), opt.stats()
    assert s1["scheduler"] == "cpsat" and s1["status"] == "optimal"
    assert s1["layers"] <= s0["layers"]
    assert s1["parameters"] <= s0["parameters"]
    assert s1["proven_bound"] == s1["layers"]
    for prompt in module.inputs():
        assert opt.generate(prompt) == module.oracle(prompt), prompt
