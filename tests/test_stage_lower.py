"""lower/ alone: a tiny function traced with pipeline.trace and lowered with
pipeline.lower_program (no scheduling, no emission). The facts of every fx node are checked
against brute force: the function's eager value at every position of every token sequence up
to a few tokens (a shift reads one position back, so sequences, not single tokens); and a
CompileError raised while lowering names the user's source line."""

from __future__ import annotations

import inspect
import itertools
from fractions import Fraction

import pytest
import torch
import torch.fx

import torchwright_fx as tw
from torchwright_fx import pipeline
from torchwright_fx.base.errors import CompileError
from torchwright_fx.capture.registry import using_vocab
from torchwright_fx.ir.graph import EMBED, FFN, Head

VOCAB = tw.Vocab("012")
OPTS = pipeline.Options(d_head=16, max_seq_len=8)
MAX_LEN = 4  # <bos> and up to 3 tokens; every sequence over the 6-token vocabulary


def small(x: torch.Tensor) -> torch.Tensor:
    d = tw.lookup(x, {"0": 0, "1": 1, "2": 2})
    one = tw.is_token(x, "1")
    y = 3 * d - 2
    z = y * one
    back = tw.shift(d, 1)
    bigger = torch.where(d > back, d, back)
    total = bigger + z - 2 * one
    return tw.token("0") + torch.clamp(total, 0, 2)


def sequences() -> list[list[int]]:
    tokens = range(len(VOCAB))
    return [[VOCAB.bos_id, *rest] for n in range(MAX_LEN)
            for rest in itertools.product(tokens, repeat=n)]


def node_values(gm: torch.fx.GraphModule) -> dict[str, list[float]]:
    """Every value each single-column node takes, over every position of every sequence."""
    seen: dict[str, list[float]] = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node):
            value = super().run_node(n)
            if n.op == "call_function" and isinstance(value, torch.Tensor) and \
                    value.dim() == 2 and value.shape[1] == 1:
                seen.setdefault(n.name, []).extend(value[:, 0].double().tolist())
            return value

    with using_vocab(VOCAB), torch.no_grad():
        for ids in sequences():
            Recorder(gm).run(VOCAB.one_hot(ids))
    return seen


@pytest.fixture(scope="module")
def lowered():
    gm = pipeline.trace(small, VOCAB)
    return gm, pipeline.lower_program(gm, VOCAB, OPTS)


def test_every_node_has_facts(lowered) -> None:
    gm, prog = lowered
    names = {n.name for n in gm.graph.nodes if n.op == "call_function"}
    values = node_values(gm)
    assert set(values) <= set(prog.nodes)
    assert {"lookup", "is_token", "shift", "where", "clamp"} <= {
        n.rstrip("_0123456789") for n in names}
    for name in values:
        assert len(prog.nodes[name].intervals) == 1, name
        assert prog.nodes[name].source.startswith(f"{__file__}:"), prog.nodes[name].source


def test_facts_hold_every_value_and_are_tight(lowered) -> None:
    gm, prog = lowered
    values = node_values(gm)
    assert len(values) >= 8
    for name, vals in values.items():
        (r,) = prog.nodes[name].intervals
        lo, hi = min(vals), max(vals)
        assert r.lo <= lo and hi <= r.hi, (name, r, lo, hi)
        if r.step is not None:
            for v in set(vals):
                q = Fraction(v) - r.offset
                assert r.step == 0 and q == 0 or r.step and (q / r.step).denominator == 1, (
                    name, v, r.step, r.offset)
        assert r.noise < 1e-20, (name, r.noise)  # only the steps' certified rounding
    # on these integer ops the facts are the exact hull of what the brute force reaches
    for name in ("lookup", "is_token", "mul", "sub", "shift", "where", "clamp"):
        (r,) = prog.nodes[name].intervals
        assert (r.lo, r.hi) == (min(values[name]), max(values[name])), (name, r)
        assert r.integral, name


def test_brute_force_is_not_vacuous(lowered) -> None:
    """The brute force reaches the interesting values (what the facts above are held to)."""
    gm, _ = lowered
    values = node_values(gm)
    assert set(values["mul"]) == {0.0, 3.0, 6.0}  # 3 * d
    assert set(values["sub"]) == {-2.0, 1.0, 4.0}  # 3 * d - 2, on the lattice 1 + 3Z
    assert sorted(set(values["shift"])) == [0.0, 1.0, 2.0]
    assert set(values["clamp"]) == {0.0, 1.0, 2.0}


def test_facts_do_not_track_correlation(lowered) -> None:
    """(3d - 2) * [x == '1'] is only ever 0 or 1 (d is 1 where x is '1'); an interval rule
    sees two independent operands, [-2, 4] * [0, 1]: sound, not tight."""
    gm, prog = lowered
    assert set(node_values(gm)["mul_1"]) == {0.0, 1.0}
    (r,) = prog.nodes["mul_1"].intervals
    assert (r.lo, r.hi) == (-2.0, 4.0)


def test_the_output_is_a_code_and_only_live_parts_remain(lowered) -> None:
    _, prog = lowered
    lo, hi = prog.output_range.lo, prog.output_range.hi
    assert VOCAB["0"] <= lo and hi <= VOCAB["2"] and prog.output_range.integral
    live = prog.live_signals()
    assert live and prog.output.signals() <= live
    assert all(p.reads() <= live for p in prog.producers.values())
    assert any(isinstance(p, Head) for p in prog.producers.values())  # the shift
    assert any(isinstance(p, FFN) for p in prog.producers.values())  # where, clamp, product
    assert set(prog.embed_tables) <= live
    assert all(prog.signals[s].producer == EMBED for s in prog.embed_tables)


def test_lowering_an_unsupported_op_names_the_users_line() -> None:
    def running(x):
        d = tw.lookup(x, {"1": 1, "2": 2})
        total = torch.cumsum(d, 0)  # MARK
        return tw.token("0") + total

    gm = pipeline.trace(running, VOCAB)  # tracing and eager propagation accept it
    with pytest.raises(CompileError) as err:
        pipeline.lower_program(gm, VOCAB, OPTS)
    lines, start = inspect.getsourcelines(running)
    line = start + next(i for i, text in enumerate(lines) if "# MARK" in text)
    msg = str(err.value)
    assert f"{__file__}:{line}:" in msg
    assert "torch.cumsum(d, 0)" in msg
    assert "no lowering for torch.cumsum" in msg and "tw.mean" in msg


def test_an_output_that_is_not_a_code_names_the_users_line() -> None:
    def halves(x):
        d = tw.lookup(x, {"1": 1, "2": 2})
        return tw.token("0") + d * 0.5  # MARK

    gm = pipeline.trace(halves, VOCAB)
    with pytest.raises(CompileError) as err:
        pipeline.lower_program(gm, VOCAB, OPTS)
    lines, start = inspect.getsourcelines(halves)
    line = start + next(i for i, text in enumerate(lines) if "# MARK" in text)
    assert f"{__file__}:{line}:" in str(err.value)
    assert "must be a whole token code" in str(err.value)
