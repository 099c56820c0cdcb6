"""The IR as text: ``print(compiled.build.program)``, a one-line repr, and the stage dumps
(``dump=`` / ``TORCHWRIGHT_FX_DUMP``), which change nothing in the weights."""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import pytest
import torch

import torchwright_fx as tw
from torchwright_fx import pipeline
from torchwright_fx.base.errors import CompileError
from torchwright_fx.ir.graph import FFN, Head
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.printer import format_interval, format_lin, format_placement, format_plan
from torchwright_fx.ir.ranges import ONCE, Interval

VOCAB = tw.Vocab("ab\n")
DUMPED = ["01-lower.txt", "02-fold_embedding.txt", "03-dce.txt", "04-schedule.txt",
          "05-columns.txt", "06-place.txt"]


def echo_last(x):
    newline = tw.is_token(x, "\n")
    return tw.emit(newline, [tw.latch(tw.shift(tw.code(x), 1), newline)])


def _compiled(**options):
    return tw.compile(echo_last, vocab=VOCAB, max_seq_len=32, progress=False, **options)


@pytest.fixture(scope="module")
def built():
    return _compiled().build


def _tensors(machine):
    out = {"embed": machine.embed, "final_norm": machine.final_norm, "lm_head": machine.lm_head}
    for i, layer in enumerate(machine.layers):
        for f in dataclasses.fields(layer):
            out[f"{i}.{f.name}"] = getattr(layer, f.name)
    return out


def _same_weights(a, b) -> None:
    ta, tb = _tensors(a), _tensors(b)
    assert ta.keys() == tb.keys()
    for name in ta:
        assert ta[name].dtype == tb[name].dtype and torch.equal(ta[name], tb[name]), name
    scalars = [f.name for f in dataclasses.fields(a) if f.name not in ("layers", *ta)]
    assert {n: getattr(a, n) for n in scalars} == {n: getattr(b, n) for n in scalars}


def test_one_line_per_producer_with_the_users_line(built):
    prog = built.program
    text = str(prog)
    lines = text.splitlines()
    for p in prog.producers.values():
        kind = "head" if isinstance(p, Head) else "ffn"
        mine = [ln for ln in lines if ln.startswith(f"%{p.id} {kind} {p.name} ")]
        assert len(mine) == 1, (p.name, text)
        assert "tw.latch(tw.shift(tw.code(x), 1), newline)" in mine[0]  # the user's source line
        assert "test_ir_print.py:" in mine[0] and "reads" in mine[0] and "writes=[" in mine[0]
    assert sum(ln.startswith("%") for ln in lines) == len(prog.producers)
    assert any(ln.startswith("embed  signals=") for ln in lines)
    assert any(ln.startswith("output = ") for ln in lines)
    ffn = next(p for p in prog.producers.values() if isinstance(p, FFN))
    assert f"lanes={len(ffn.lanes)}" in text
    for name in prog.nodes:  # the node records
        assert any(ln.startswith(f"  {name} -> [") for ln in lines), name
    assert 'tw.is_token(x, "\\n")' in text


def test_repr_is_one_short_line(built):
    text = repr(built.program)
    assert "\n" not in text and len(text) < 200
    # 3 of the program, 2 of the end-of-context flag (ops/end.py)
    assert text.startswith("Program(swiglu, 5 producers") and "nodes" in text


def test_plan_and_placement_print(built):
    prog = built.program
    plan_text = format_plan(prog, built.plan)
    for p in prog.producers.values():
        assert f"%{p.id} " in plan_text
    assert f"d_model={built.plan.d_model}" in plan_text and " col " in plan_text
    placed = format_placement(built.placement)
    assert str(built.placement) == placed
    assert len(placed.splitlines()) == 1 + len(built.placement.layers)


def test_short_forms():
    assert format_lin(Lin({3: 2.0, 7: 1.0}, -1.0)) == "2*s3 + s7 - 1"
    assert format_lin(Lin({1: -1.0, 2: 0.5})) == "-s1 + 0.5*s2"
    assert format_lin(Lin.constant(0.0)) == "0"
    long = format_lin(Lin({i: 1.0 for i in range(10)}, 2.0))
    assert long == "s0 + s1 + s2 + s3 + s4 + s5 + … (+4 terms) + 2"
    assert format_interval(Interval(0.0, 9.0, integral=True)) == "[0, 9] int"
    assert format_interval(Interval(0.0, 1.0, integral=True)) == "0/1"
    assert format_interval(Interval(3.0, 3.0)) == "= 3"
    half = Interval(0.0, 4.5, step=Fraction(1, 2), noise=3e-6, rounding=ONCE)
    assert format_interval(half) == "[0, 4.5] step 1/2 noise 3e-06 once"
    assert format_interval(Interval(-1.0, 1.0)) == "[-1, 1] real"


def test_dump_option_writes_every_stage_and_changes_no_weight(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCHWRIGHT_FX_DUMP", raising=False)
    plain = _compiled().weights
    dumped = _compiled(dump=str(tmp_path / "by_option")).weights
    assert sorted(p.name for p in (tmp_path / "by_option").iterdir()) == DUMPED
    for name in DUMPED:
        text = (tmp_path / "by_option" / name).read_text()
        assert text.startswith(f"# echo_last after {name[3:-4]}\n") and len(text) > 60, name
    lower = (tmp_path / "by_option" / "01-lower.txt").read_text()
    assert "lane 0: act(" in lower  # the dumps show every lane
    _same_weights(plain, dumped)


def test_environment_variable_dumps_and_the_option_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHWRIGHT_FX_DUMP", str(tmp_path / "by_env"))
    by_env = _compiled().weights
    assert sorted(p.name for p in (tmp_path / "by_env").iterdir()) == DUMPED
    assert all((tmp_path / "by_env" / n).stat().st_size > 0 for n in DUMPED)
    _compiled(dump=str(tmp_path / "by_option")).compile()
    assert sorted(p.name for p in (tmp_path / "by_option").iterdir()) == DUMPED
    monkeypatch.delenv("TORCHWRIGHT_FX_DUMP")
    _same_weights(by_env, _compiled().weights)


def test_traced_compile_takes_dump(tmp_path):
    tw.trace(echo_last, vocab=VOCAB).compile(max_seq_len=32, progress=False,
                                             dump=tmp_path).compile()
    assert sorted(p.name for p in tmp_path.iterdir()) == DUMPED


def test_a_bad_dump_option_is_refused():
    for bad in (3, ""):
        with pytest.raises(CompileError, match="dump="):
            pipeline.Options(dump=bad)  # type: ignore[arg-type]
