"""schedule/ alone: the heuristic (as-soon-as-possible) stages, residual column allocation and
the plan's invariant check, on hand-built Programs.

The expected facts are recomputed here from the program, independently of ``Plan.lifetimes``
/ ``Plan.occupancy``: stage 2L is layer L's attention and 2L+1 its MLP (the embedding is -1);
a column holds a signal from the stage that writes it to the cancel (an attention stage at or
after its last read), and the output's signals are held to the end.
"""

from __future__ import annotations

import itertools

import pytest
from conftest import ShapeBuilder

from torchwright_fx.base.errors import CompileError, PlanError, WidthError
from torchwright_fx.ir.graph import EMBED, Head, Program
from torchwright_fx.ir.ranges import Interval
from torchwright_fx.schedule import bounds, columns, heuristic
from torchwright_fx.schedule.columns import pin_count, usable_width
from torchwright_fx.schedule.plan import EMBED_STAGE, Plan

UNIT = Interval(0.0, 1.0)
D_HEAD = 8


def Builder() -> ShapeBuilder:  # noqa: N802  (reads as the class it makes)
    """One lane per FFN; ``live`` set as dce would, the pass itself not run."""
    return ShapeBuilder(d_head=D_HEAD, lanes_per_ffn=1, run_dce=False)


def diamond() -> Program:
    """Heads and FFNs that read the embedding and each other across several depths, so that
    the earliest stage of some producers is set by their deepest input."""
    b = Builder()
    f0 = b.ffn([b.e])  # 1
    h0 = b.head([b.e])  # 0
    h1 = b.head(f0)  # 2
    f1 = b.ffn(h0 + [b.e])  # 1
    f2 = b.ffn(h1 + f1)  # 3
    h2 = b.head(f1 + h0)  # 2
    h3 = b.head(f2)  # 4
    f3 = b.ffn(h2 + h3 + [b.e])  # 5
    return b.finish(f3 + h0)


EXPECTED_DIAMOND = [1, 0, 2, 1, 3, 2, 4, 5]


def blocks(n_blocks: int, width: int) -> Program:
    """e -> FFN (width outputs) -> head (copies them) -> FFN -> ...: each block is read only by
    the next, so columns can be recycled; the output reads the last block."""
    b = Builder()
    x = [b.e]
    for i in range(n_blocks):
        x = b.ffn(x, n_out=width) if i % 2 == 0 else b.head(x)
    return b.finish(x)


def wide(width: int) -> Program:
    """``width`` FFN outputs that the output reads all at once: they are live together."""
    b = Builder()
    return b.finish(b.ffn([b.e], n_out=width))


def signal_stage(prog: Program, plan: Plan, s: int) -> int:
    p = prog.signals[s].producer
    return EMBED_STAGE if p == EMBED else plan.stage[p]


def held(prog: Program, plan: Plan) -> dict[int, tuple[int, int]]:
    """live signal -> (stage written, first attention stage at/after its last read), recomputed
    from the producers' reads."""
    end = 2 * plan.n_layers
    last = {s: signal_stage(prog, plan, s) for s in prog.live}
    for p in prog.producers.values():
        for s in p.reads():
            last[s] = max(last[s], plan.stage[p.id])
    for s in prog.output.signals():
        last[s] = end
    return {s: (signal_stage(prog, plan, s), last[s] + last[s] % 2) for s in prog.live}


def last_read(prog: Program, plan: Plan) -> dict[int, int]:
    """live signal -> the last stage that reads it, recomputed from the producers' reads."""
    last = {s: signal_stage(prog, plan, s) for s in prog.live}
    for p in prog.producers.values():
        for s in p.reads():
            last[s] = max(last[s], plan.stage[p.id])
    return last


def assert_columns_sound(prog: Program, plan: Plan) -> None:
    reserved = {0, *range(1, 1 + pin_count(plan.d_model))}
    assert plan.const_col == 0
    assert plan.pin_cols == list(range(1, 1 + pin_count(plan.d_model)))
    assert set(plan.columns) == prog.live
    for s, col in plan.columns.items():
        assert col not in reserved and 0 <= col < plan.d_model, (s, col)
    spans = held(prog, plan)
    for a, b in itertools.combinations(sorted(prog.live), 2):
        if plan.columns[a] != plan.columns[b]:
            continue
        first, second = sorted((a, b), key=lambda s: spans[s][0])
        # the earlier owner is zeroed (by a cancel head or lanes) at or after its last read (a
        # sublayer reads before it adds) and before the later owner is written
        cancel = plan.cancels.get(first)
        assert cancel is not None, (first, second)
        assert last_read(prog, plan)[first] <= cancel < spans[second][0], (first, second, cancel)
        assert spans[first][1] < spans[second][0]
    for s in plan.cancels:  # a cancel only where the column is taken again
        assert sum(plan.columns[t] == plan.columns[s] for t in prog.live) >= 2


# -- heuristic stages -----------------------------------------------------------------------------


def test_heuristic_stages_are_the_earliest_with_the_parity_rule() -> None:
    prog = diamond()
    plan = heuristic.schedule(prog)
    assert [plan.stage[p] for p in sorted(prog.producers)] == EXPECTED_DIAMOND
    assert plan.n_layers == 3


@pytest.mark.parametrize("make", [diamond, lambda: blocks(6, 3), lambda: wide(5)])
def test_heuristic_respects_dependencies_and_parity(make) -> None:
    prog = make()
    plan = heuristic.schedule(prog)
    for p in prog.producers.values():
        stage = plan.stage[p.id]
        assert stage % 2 == (0 if isinstance(p, Head) else 1), (p.name, stage)
        inputs = [signal_stage(prog, plan, s) for s in p.reads()]
        assert all(stage > i for i in inputs), (p.name, stage, inputs)
        # as soon as possible: one parity step earlier would read something not yet written
        # (or is before the first stage of its kind)
        earlier = stage - 2
        assert earlier < 0 or max(inputs, default=EMBED_STAGE) >= earlier, (p.name, stage)


def test_a_head_reading_an_ffn_waits_for_the_next_layer() -> None:
    b = Builder()
    f = b.ffn([b.e])
    h = b.head(f)
    prog = b.finish(b.ffn(h))
    assert heuristic.schedule(prog).stage == {0: 1, 1: 2, 2: 3}


# -- columns --------------------------------------------------------------------------------------


@pytest.mark.parametrize("d_model", [16, 32, 64])
def test_columns_of_the_diamond(d_model: int) -> None:
    prog = diamond()
    plan = columns.allocate(prog, heuristic.schedule(prog), d_model)
    assert plan.d_model == d_model
    assert_columns_sound(prog, plan)
    assert plan.cancels == {}  # fresh columns first: no recycling while they last
    plan.check(prog)


def test_allocate_returns_a_new_plan_and_leaves_its_input() -> None:
    prog = diamond()
    staged = heuristic.schedule(prog)
    before = (dict(staged.stage), dict(staged.columns), staged.d_model)
    plan = columns.allocate(prog, staged, 32)
    assert plan is not staged and plan.columns and plan.d_model == 32
    assert (dict(staged.stage), dict(staged.columns), staged.d_model) == before


def test_recycling_when_d_model_runs_out() -> None:
    """6 blocks of 4 signals (25 live with the embedding column) hold at most 11 columns at
    once: at d_model=16 (14 free columns) columns must be reused behind cancel heads."""
    prog = blocks(6, 4)
    plan = columns.allocate(prog, heuristic.schedule(prog), 16)
    assert len(prog.live) == 25
    assert bounds.peak_live_width(prog, heuristic.schedule(prog)) == 11 + 2  # + reserved
    assert plan.d_model == 16 and plan.pin_cols == [1]
    assert plan.cancels, "31 signals in 14 columns without recycling"
    assert_columns_sound(prog, plan)
    plan.check(prog)


def test_recycling_pins_of_an_odd_power() -> None:
    prog = blocks(8, 9)
    plan = columns.allocate(prog, heuristic.schedule(prog), 32)
    assert plan.pin_cols == [1, 2]  # 32 = 2**5: two pins
    assert plan.cancels
    assert_columns_sound(prog, plan)
    plan.check(prog)


def test_no_d_model_picks_the_tightest_width_that_fits() -> None:
    # no heads: no vLLM head size, so any width the RMSNorm identity holds at
    assert columns.allocate(wide(13), heuristic.schedule(wide(13)), None).d_model == 16
    # 14 signals + the embedding column (held until the FFN reading it is done, so it cannot
    # be recycled for them) + constant + pins: 15 + 1 + 2 = 18 = 3**2 + 3**2
    prog = wide(14)
    plan = columns.allocate(prog, heuristic.schedule(prog), None)
    assert plan.d_model == 18 and plan.pin_cols == [1, 2]
    assert_columns_sound(prog, plan)
    prog = wide(40)
    plan = columns.allocate(prog, heuristic.schedule(prog), None)
    tightest = min(d for d in range(16, 128) if usable_width(d, vllm=False)
                   and 41 + 1 + pin_count(d) <= d)
    assert plan.d_model == tightest
    assert_columns_sound(prog, plan)
    plan.check(prog)
    # a build vLLM can load takes multiples of 16 only: 41 live columns then take 48 =
    # 3 * 4**2 (three pins), not 64
    assert min(d for d in range(16, 128) if usable_width(d) and 41 + 1 + pin_count(d) <= d) \
        == 48 and pin_count(48) == 3
    assert columns.fitting_width(14) == 16 and columns.fitting_width(15) == 32
    assert columns.fitting_width(29) == 32 and columns.fitting_width(30) == 64


def test_too_small_a_d_model_is_refused_with_a_message() -> None:
    prog = wide(14)  # 15 live signals, the 14 FFN outputs live together to the end
    with pytest.raises(CompileError, match=r"d_model=16") as err:
        columns.allocate(prog, heuristic.schedule(prog), 16)
    assert isinstance(err.value, WidthError)
    assert "does not fit" in str(err.value) and "leave d_model unset" in str(err.value)


def test_a_d_model_the_rmsnorm_identity_does_not_hold_at_is_refused() -> None:
    prog = wide(2)
    with pytest.raises(CompileError, match=r"d_model=41: the RMSNorm identity"):
        columns.allocate(prog, heuristic.schedule(prog), 41)
    plan = columns.allocate(prog, heuristic.schedule(prog), 24)  # 24 = 4**2 + 2**2 + 2**2
    assert plan.d_model == 24 and plan.pin_cols == [1, 2, 3]
    plan.check(prog)


def test_reserved_columns() -> None:
    assert columns.reserved_columns(16) == 2 and columns.reserved_columns(32) == 3
    assert columns.reserved_columns(4096) == 2 and columns.reserved_columns(2048) == 3


# -- the invariant check --------------------------------------------------------------------------


def test_a_block_cannot_reuse_a_column_cancelled_in_its_own_sublayer() -> None:
    """With 5 signals a block, stage 4 writes block 3 while blocks 1 and 2 are cancelled in
    that same attention sublayer: 15 columns at once, one more than d_model=16 leaves."""
    prog = blocks(6, 5)
    with pytest.raises(WidthError, match="at stage 4"):
        columns.allocate(prog, heuristic.schedule(prog), 16)
    plan = columns.allocate(prog, heuristic.schedule(prog), 32)
    assert_columns_sound(prog, plan)


def test_check_catches_a_shared_column_without_a_cancel() -> None:
    prog = diamond()
    plan = columns.allocate(prog, heuristic.schedule(prog), 32)
    a, b = sorted(prog.live)[:2]
    plan.columns[b] = plan.columns[a]
    with pytest.raises(PlanError, match="without a cancel"):
        plan.check(prog)


def test_check_catches_a_reserved_column() -> None:
    prog = diamond()
    plan = columns.allocate(prog, heuristic.schedule(prog), 32)
    plan.columns[next(iter(prog.live))] = plan.pin_cols[-1]
    with pytest.raises(PlanError, match="in column"):
        plan.check(prog)


def test_check_catches_a_read_before_the_write_and_a_wrong_parity() -> None:
    prog = diamond()
    plan = columns.allocate(prog, heuristic.schedule(prog), 32)
    plan.stage[2] = 0  # h1 reads f0, written at stage 1
    with pytest.raises(PlanError, match="reads"):
        plan.check(prog)
    plan = columns.allocate(prog, heuristic.schedule(prog), 32)
    plan.stage[0] = 2  # an FFN at an attention stage
    with pytest.raises(PlanError, match="FFN f0 at stage 2"):
        plan.check(prog)


def test_check_catches_a_live_signal_without_a_column() -> None:
    prog = diamond()
    plan = columns.allocate(prog, heuristic.schedule(prog), 32)
    del plan.columns[max(prog.live)]
    with pytest.raises(PlanError, match="without a column"):
        plan.check(prog)
