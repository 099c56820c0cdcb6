"""schedule/balance.py alone: producers moved within their slack so that the estimated parameters
(the busiest layer sets every layer's heads and lanes in a Phi-3 checkpoint, the live peak the
width) fall, never adding a layer, every producer still after what it reads and before what
reads it; and the heuristic's two starts (earliest and latest stages)."""

from __future__ import annotations

import random

import pytest
from conftest import ShapeBuilder

from torchwright_fx.ir.graph import EMBED, FFN, Head, Program
from torchwright_fx.schedule import columns, heuristic
from torchwright_fx.schedule.balance import balance, estimate
from torchwright_fx.schedule.bounds import earliest_stages, latest_stages
from torchwright_fx.schedule.plan import Plan, layer_count, layer_of

D_HEAD = 8


def loads(prog: Program, stage: dict[int, int]) -> tuple[int, int]:
    """(heads, lanes) of the busiest layer."""
    n = layer_count(stage.values())
    heads, lanes = [0] * n, [0] * n
    for pid, s in stage.items():
        p = prog.producers[pid]
        if isinstance(p, Head):
            heads[layer_of(s)] += 1
        elif isinstance(p, FFN):
            lanes[layer_of(s)] += len(p.lanes)
    return max(heads), max(lanes)


def cost(prog: Program, stage: dict[int, int]) -> int:
    heads, lanes = loads(prog, stage)
    return 4 * D_HEAD * heads + 3 * lanes


def fan() -> Program:
    """A 3-layer chain and 6 four-lane FFNs reading only the embedding: as soon as possible
    they all sit in layer 0 (28 lanes); the output reads them, so they may go later."""
    b = ShapeBuilder(d_head=D_HEAD, lanes_per_ffn=4)
    x = [b.e]
    for _ in range(2):
        x = b.ffn(b.head(x))
    free = [s for _ in range(6) for s in b.ffn([b.e])]
    return b.finish(x + free)


def random_program(seed: int) -> Program:
    rng = random.Random(seed)
    b = ShapeBuilder(d_head=D_HEAD, lanes_per_ffn=rng.randint(1, 6))
    made = [b.e]
    for _ in range(rng.randint(3, 25)):
        reads = rng.sample(made, k=min(len(made), rng.randint(1, 3)))
        made += b.head(reads) if rng.random() < 0.5 else b.ffn(reads)
    return b.finish(rng.sample(made[1:], k=min(len(made) - 1, rng.randint(1, 4))))


def check_order(prog: Program, stage: dict[int, int]) -> None:
    n = layer_count(stage.values())
    for pid, p in prog.producers.items():
        for d in prog.deps(p):
            assert d == EMBED or stage[d] < stage[pid], (pid, d)
        assert stage[pid] % 2 == (0 if isinstance(p, Head) else 1)
        assert layer_of(stage[pid]) < n


def test_the_fan_is_spread_over_the_chain():
    prog = fan()
    asap = earliest_stages(prog)
    assert loads(prog, asap) == (1, 28)
    stage = balance(prog, asap)
    assert layer_count(stage.values()) == layer_count(asap.values())
    assert loads(prog, stage)[1] < 28 and cost(prog, stage) < cost(prog, asap)
    assert Plan(stage=stage).live_peak(prog) <= Plan(stage=asap).live_peak(prog)
    check_order(prog, stage)
    plan = columns.allocate(prog, Plan(stage=stage), None)
    plan.check(prog)


def test_a_chain_that_only_moves_as_a_whole_is_pushed_off_the_busiest_layer():
    """Lanes S1 and S2 (a side chain: S2 reads S1, S1 the first layer's lanes) sit in layers 1
    and 2 as soon as possible, S1 beside the critical path's lanes of layer 1 (8 lanes). S1
    cannot move while S2 holds it, and S2 alone moving to the empty last layer gains nothing,
    nor are they in neighbouring sublayers; pushing S1 a layer later with S2 gives every
    layer 4 lanes."""
    b = ShapeBuilder(d_head=D_HEAD, lanes_per_ffn=4)
    f = b.ffn(b.head([b.e]))
    side = b.ffn(b.ffn(f))  # S1 -> S2
    main = b.head(b.head(b.ffn(b.head(f))))
    prog = b.finish(main + side)
    asap = earliest_stages(prog)
    assert loads(prog, asap) == (1, 8)
    stage = balance(prog, asap)
    check_order(prog, stage)
    assert layer_count(stage.values()) == layer_count(asap.values())
    assert loads(prog, stage) == (1, 4) and estimate(prog, stage) < estimate(prog, asap)
    columns.allocate(prog, Plan(stage=stage), None).check(prog)


@pytest.mark.parametrize("seed", range(60))
def test_balancing_never_costs_a_layer_or_parameters(seed):
    prog = random_program(seed)
    asap = earliest_stages(prog)
    stage = balance(prog, asap)
    check_order(prog, stage)
    assert layer_count(stage.values()) == layer_count(asap.values())
    assert estimate(prog, stage) <= estimate(prog, asap)
    chosen = heuristic.schedule(prog)  # the better of the two starts, balanced
    check_order(prog, chosen.stage)
    assert layer_count(chosen.stage.values()) == layer_count(asap.values())
    plan = columns.allocate(prog, chosen, None)  # the pipeline's path
    plan.check(prog)
    # the two starts are weighed with their columns allocated (cancel heads included)
    assert columns.parameters(prog, plan) <= columns.parameters(
        prog, columns.allocate(prog, Plan(stage=stage), None))


@pytest.mark.parametrize("seed", range(60))
def test_latest_stages_are_a_valid_placement_at_or_after_the_earliest(seed):
    prog = random_program(seed)
    asap = earliest_stages(prog)
    n = layer_count(asap.values())
    alap = latest_stages(prog, n)
    check_order(prog, alap)
    assert layer_count(alap.values()) == n
    assert all(asap[pid] <= alap[pid] for pid in prog.producers)
    # a producer only the output reads sits in the last sublayer of its kind
    read = {d for p in prog.producers.values() for d in prog.deps(p)}
    final = {prog.signals[s].producer for s in prog.final_reads()} - read
    assert final and all(alap[pid] >= 2 * n - 2 for pid in final)


def test_a_width_raised_by_one_column_pays_for_a_lighter_busiest_layer():
    """The estimate trades the live peak against the layers' shape: the fan spread over the
    chain keeps its outputs live longer, and still costs fewer parameters."""
    prog = fan()
    asap = earliest_stages(prog)
    stage = balance(prog, asap)
    assert estimate(prog, stage) < estimate(prog, asap)
    plan = columns.allocate(prog, Plan(stage=stage), None)
    plan.check(prog)


@pytest.mark.parametrize("seed", range(30))
def test_the_incremental_peak_is_the_plans_after_any_moves(seed):
    """balance.Occupancy follows Plan.live_peak as producers move within their slack."""
    from torchwright_fx.schedule.balance import Occupancy

    prog = random_program(seed)
    stage = earliest_stages(prog)
    late = latest_stages(prog, layer_count(stage.values()))
    occupancy = Occupancy(prog, stage)
    rng = random.Random(seed)
    for pid in rng.sample(sorted(prog.producers), k=len(prog.producers)):
        choices = [s for s in range(stage[pid], late[pid] + 1, 2)]
        occupancy.move(pid, rng.choice(choices))
        assert occupancy.peak() == Plan(stage=stage).live_peak(prog)


def test_cancels_move_within_their_windows_to_the_layer_with_room():
    from torchwright_fx.schedule.cancels import spread

    heads = [5, 2, 2]  # the program's heads per layer; d_head 2: two columns per cancel head
    lanes = [4, 4, 4]
    # every cancel may run from stage 0; up to layer 2's attention, layer 1's, or only layer 0's
    windows = {1: (0, 4), 2: (0, 4), 3: (0, 2), 4: (0, 2), 5: (0, 0)}
    placed = spread(heads, lanes, windows, 2, None)  # heads only (as a half build would)
    per_layer = [sum(1 for s in placed.values() if s // 2 == layer) for layer in range(3)]
    busiest = max(h + -(-c // 2) for h, c in zip(heads, per_layer, strict=True))
    assert busiest == 6  # signal 5 must stay at layer 0: 5 + 1; all at layer 0: 5 + 3 = 8
    assert all(windows[s][0] <= placed[s] <= windows[s][1] and placed[s] % 2 == 0
               for s in placed)
    assert placed[5] == 0


def test_cancels_take_spare_lanes_before_a_head():
    """A lane costs 3 d a layer and a head 4 d_head d: where an MLP stage in a cancel's window
    has spare lanes, the cancel is a lane there and no layer gains a head."""
    from torchwright_fx.schedule.cancels import spread

    heads, lanes = [2, 2, 2], [10, 3, 10]  # layer 1's MLP has 7 spare lanes
    windows = {s: (1, 4) for s in range(1, 8)}  # stages 1..4: MLP stages 1 and 3
    placed = spread(heads, lanes, windows, 8, 1)
    assert sorted(placed.values()) == [3] * 7  # all in layer 1's MLP, heads stay at 2
    windows[8] = (2, 2)  # an attention stage only: it must be a head
    placed = spread(heads, lanes, windows, 8, 1)
    assert placed[8] == 2 and _cancel_cost(heads, lanes, placed, 1) == 4 * 8 * 3 + 3 * 10
    # sixteen more at stage 3 only: lanes (3 d each) are cheaper than two more heads (4 * 8 d
    # each) even on the ReLU machine, where a cancel takes 2 lanes: 3 + 32 lanes in layer 1
    more = {s: (3, 3) for s in range(20, 36)}
    placed = spread(heads, lanes, {**windows, **more}, 8, 2)
    assert all(placed[s] == 3 for s in more)
    assert _cancel_cost(heads, lanes, placed, 2) == 4 * 8 * 3 + 3 * (3 + 2 * 16)
    # ... and on the SwiGLU machine one lane each
    placed = spread(heads, lanes, {**windows, **more}, 8, 1)
    assert _cancel_cost(heads, lanes, placed, 1) == 4 * 8 * 3 + 3 * (3 + 16)


def _cancel_cost(heads, lanes, placed, per_cancel):
    heads_now = max(h + -(-sum(1 for st in placed.values() if st == 2 * i) // 8)
                    for i, h in enumerate(heads))
    lanes_now = max(n + per_cancel * sum(1 for st in placed.values() if st == 2 * i + 1)
                    for i, n in enumerate(lanes))
    return 4 * 8 * heads_now + 3 * lanes_now


