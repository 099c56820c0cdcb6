"""The plan picture (``Compiled.plot_plan``), its text twin and the ``inspect`` command."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import torchwright_fx as tw
from torchwright_fx import cli
from torchwright_fx.backends import plot

CLI = str(Path(sys.executable).with_name("torchwright-fx"))
VOCAB = tw.Vocab("01\n")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SVG_NS = "{http://www.w3.org/2000/svg}"


def flip(x):
    newline = tw.is_token(x, "\n")
    bit = tw.lookup(x, {"0": 0, "1": 1})
    return tw.emit(newline, [tw.token("0") + 1 - tw.shift(bit, 1)])


@pytest.fixture(scope="module")
def program() -> tw.Compiled:
    return tw.compile(flip, vocab=VOCAB, max_seq_len=8).compile()


def svg_texts(svg: str) -> list[str]:
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG_NS}svg"
    return ["".join(t.itertext()) for t in root.iter(f"{SVG_NS}text")]


def test_png_is_written(program, tmp_path):
    out = program.plot_plan(tmp_path / "plan.png")
    assert out == tmp_path / "plan.png"
    data = out.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 2000


def test_svg_names_every_producer(program, tmp_path):
    out = program.plot_plan(tmp_path / "plan.SVG")  # the extension's case does not matter
    texts = svg_texts(out.read_text())
    for name in ("shift", "emit", "lookup: x['1']", "is_token: x['\\n']", "L0 attention",
                 "1.0 (constant)"):
        assert any(name in t for t in texts), (name, texts)


def test_other_extensions_are_refused_before_compiling(tmp_path):
    fresh = tw.compile(flip, vocab=VOCAB, max_seq_len=8)
    for name in ("plan.pdf", "plan"):
        with pytest.raises(ValueError, match=r"PNG or SVG.*\.png or \.svg"):
            fresh.plot_plan(tmp_path / name)
    assert "not compiled yet" in repr(fresh)
    assert list(tmp_path.iterdir()) == []


def test_html_repr_shows_the_plan_inline(program):
    page = program._repr_html_()
    svg = page[page.index("<svg"):page.index("</svg>") + len("</svg>")]
    texts = svg_texts(svg)
    assert any("shift" in t for t in texts) and any("emit" in t for t in texts)


def test_plan_text_names_heads_lanes_columns_and_cancels():
    from examples import binary_increment

    small = binary_increment.make(max_bits=4, max_seq_len=32, d_model=32)  # recycles columns
    b = small.build
    text = plot.plan_text(b.program, b.plan, b.placement, "binary_increment")
    # the cancel moves to layer 1, which has room (columns.spread_cancels): 5 heads in the
    # busiest layer, padded to 6 slots on 3 K/V blocks (schedule/kv_groups.py: 6 + 3 < 5 + 5)
    assert "layer 0 attention: 5 heads" in text and "layer 1 attention: 2 heads + 1 cancel" in text
    assert (b.placement.n_heads, b.placement.kv_heads) == (6, 3) and "6 heads/layer" in text
    assert "head 0: shift -> column" in text and "head 0: latch -> columns" in text
    assert "cancel, zeroes columns" in text and "steps_since.position: lanes" in text
    assert text.splitlines()[-1].startswith("output (lm_head) reads: ")
    # every bar is one producer's consecutive columns, and a recycled column is cancelled
    # before its next value is written
    bars = [x for x in plot.bars(b.program, b.plan) if x.kind != "reserved"]
    by_column: dict[int, list[plot.Bar]] = {}
    for x in bars:
        for c in x.columns:
            by_column.setdefault(c, []).append(x)
    recycled = [sorted(v, key=lambda x: x.written) for v in by_column.values() if len(v) > 1]
    assert recycled
    for first, second in recycled:
        assert first.cancelled is not None and first.cancelled < second.written


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([CLI, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def test_inspect_prints_the_plan_and_draws_it(tmp_path):
    out = _cli("inspect", "examples.adder_1digit", "--plan", str(tmp_path / "p.png"),
               cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "adder_1digit: 3 layers" in out.stdout  # the report
    for needle in ("plan of adder_1digit", "layer 0 attention:", "head 0: shift -> column",
                   "layer 1 MLP:", "lookup_1: lanes", "output (lm_head) reads: emit"):
        assert needle in out.stdout, needle
    assert (tmp_path / "p.png").read_bytes().startswith(PNG_MAGIC)


def test_inspect_nonexistent_module_is_one_line_and_exit_2(tmp_path):
    out = _cli("inspect", "no_such_module_here", cwd=tmp_path)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot import 'no_such_module_here'" in lines[0], out.stderr
    assert out.stdout == ""


def test_inspect_user_errors_in_process(tmp_path, monkeypatch, capsys):
    (tmp_path / "flipmod.py").write_text(
        "import torchwright_fx as tw\n"
        "VOCAB = tw.Vocab('01\\n')\n"
        "def flip(x):\n"
        "    nl = tw.is_token(x, '\\n')\n"
        "    bit = tw.lookup(x, {'0': 0, '1': 1})\n"
        "    return tw.emit(nl, [tw.token('0') + 1 - tw.shift(bit, 1)])\n"
        "NOT_A_PROGRAM = 3\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    for argv, needle in [(["flipmod:flip", "--plan", "p.pdf"], "PNG or SVG"),
                         (["flipmod:flip", "--plan", "no/such/dir/p.svg"], "No such file"),
                         (["flipmod"], "has no 'program'"),
                         (["flipmod:NOT_A_PROGRAM"], "not a tw.Compiled")]:
        assert cli.main(["inspect", *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and needle in err, err
    # a plain function is compiled with the module's VOCAB
    assert cli.main(["inspect", "flipmod:flip", "--max-seq-len", "8", "--plan", "p.svg"]) == 0
    assert "head 0: shift -> column" in capsys.readouterr().out
    assert any("shift" in t for t in svg_texts((tmp_path / "p.svg").read_text()))


# -- the progress display (torchwright_fx/progress.py) ----------------------------------------
class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_silent_when_stderr_is_not_a_terminal(capsys):
    tw.compile(flip, vocab=VOCAB, max_seq_len=8).compile()
    assert capsys.readouterr().err == ""


def test_progress_prints_each_stage_when_asked(capsys):
    tw.compile(flip, vocab=VOCAB, max_seq_len=8, progress=True, optimize=1).compile()
    err = capsys.readouterr().err
    for needle in ("compiling flip: lower", "compiling flip: schedule\n",
                   "compiling flip: schedule: CP-SAT solve (optimize=1)",
                   "compiling flip: emit", "compiled flip in"):
        assert needle in err, err
    tw.Traced(flip, VOCAB).compile(max_seq_len=8, progress=True).compile()  # the same option
    assert "compiled flip in" in capsys.readouterr().err


def test_progress_on_a_terminal_redraws_one_line_unless_ci_or_off(monkeypatch):
    terminal = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.delenv("CI", raising=False)
    tw.compile(flip, vocab=VOCAB, max_seq_len=8).compile()
    shown = terminal.getvalue()
    assert "\r\x1b[Ktorchwright-fx: compiling flip: emit" in shown and "\n" not in shown
    assert shown.endswith("\r\x1b[K")  # erased at the end: a quick compile leaves nothing
    for env, option in [("true", None), (None, False)]:
        terminal.seek(0)
        terminal.truncate()
        if env:
            monkeypatch.setenv("CI", env)
        tw.compile(flip, vocab=VOCAB, max_seq_len=8, progress=option).compile()
        assert terminal.getvalue() == ""
        monkeypatch.delenv("CI", raising=False)


def test_progress_option_is_validated():
    with pytest.raises(tw.CompileError, match="progress='yes'"):
        tw.compile(flip, vocab=VOCAB, progress="yes")
