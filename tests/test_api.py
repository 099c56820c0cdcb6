"""The user's surface: decorators, trace, report, lazy compile, save."""

from __future__ import annotations

import json

import pytest
import torch

import torchwright_fx as tw

VOCAB = tw.Vocab("ab\n")


@tw.compile
def echo_last(x):
    newline = tw.is_token(x, "\n")
    return tw.emit(newline, [tw.latch(tw.shift(tw.code(x), 1), newline)])


def test_bare_decorator_uses_the_module_vocab():
    assert echo_last.vocab is VOCAB
    assert echo_last.generate("ab\n") == echo_last.reference("ab\n") == "b"


def test_decorator_with_arguments_and_call_form_agree():
    def prog(x):
        return tw.emit(tw.is_token(x, "\n"), [tw.shift(tw.code(x), 2)])

    a = tw.compile(vocab=VOCAB, max_seq_len=32)(prog)
    b = tw.compile(prog, vocab=VOCAB, max_seq_len=32)
    assert a.generate("ba\n") == b.generate("ba\n") == "b"


def test_missing_vocab_is_a_clear_error():
    namespace: dict = {}
    exec("def prog(x):\n    return x\n", namespace)
    with pytest.raises(TypeError, match="vocab="):
        tw.compile(namespace["prog"])


def test_trace_shows_the_graph_without_compiling():
    traced = tw.trace(echo_last.fn, vocab=VOCAB)
    text = repr(traced)
    assert "latch" in text and "width=1" in text
    assert isinstance(traced.graph_module, torch.fx.GraphModule)


def test_calling_the_compiled_object_runs_the_eager_function():
    x = VOCAB.one_hot(VOCAB.encode("ab\n"))
    out = echo_last(x)
    assert out.shape == (4, 1)


def test_compile_is_lazy_and_report_has_the_figures(capsys):
    def prog(x):
        return tw.emit(tw.is_token(x, "\n"), [tw.code(x)])

    compiled = tw.compile(prog, vocab=VOCAB, max_seq_len=32)
    assert compiled._build is None
    compiled.report()
    text = capsys.readouterr().out
    assert text.strip() == compiled.summary()
    stats = compiled.stats()
    for key in ("layers", "critical_path_layers", "d_model", "peak_live_width", "heads_per_layer",
                "lanes_per_layer", "parameters", "compile_seconds"):
        assert key in stats
    assert "layers" in text and "critical-path bound" in text and "peak live width" in text
    assert stats["layers"] >= stats["critical_path_layers"]
    assert stats["d_model"] >= stats["peak_live_width"]


def test_save_pretrained_is_atomic_and_replaces(tmp_path):
    target = tmp_path / "model"
    echo_last.save_pretrained(target)
    first = json.loads((target / "config.json").read_text())
    echo_last.save_pretrained(target)  # replaces in place
    assert json.loads((target / "config.json").read_text()) == first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no staging left behind


def test_failed_compile_leaves_no_directory(tmp_path):
    def prog(x):
        return tw.emit(tw.is_token(x, "\n"), [torch.sin(tw.code(x))])

    with pytest.raises(tw.CompileError):
        tw.compile(prog, vocab=VOCAB).save_pretrained(tmp_path / "never")
    assert not (tmp_path / "never").exists()


def test_one_error_hierarchy():
    """Compile-time and prompt errors share tw.TorchwrightError, whatever path raises them."""
    from torchwright_fx.backends import runtime
    from torchwright_fx.backends.onnx import SequenceTooLongError

    assert issubclass(tw.CompileError, tw.TorchwrightError)
    assert issubclass(tw.InputError, tw.TorchwrightError)
    assert issubclass(SequenceTooLongError, tw.InputError)
    with pytest.raises(tw.TorchwrightError):
        tw.compile(echo_last, vocab=VOCAB, d_head=12)
    program = tw.compile(echo_last.fn, vocab=VOCAB, max_seq_len=8)
    with pytest.raises(tw.InputError, match="max_seq_len=8"):
        program.generate("a" * 9)
    with pytest.raises(tw.InputError, match="max_seq_len=8"):
        runtime.forward(program.weights, [0] * 9)


def test_traced_prints_ops_and_source_lines():
    traced = tw.trace(echo_last.fn, vocab=VOCAB)
    text = repr(traced)
    assert "tw.latch" in text and "<function" not in text
    assert "test_api.py:18: return tw.emit(newline, [tw.latch(" in text
    page = traced._repr_html_()
    assert page.count("<tr>") == len(list(traced.graph.nodes)) + 1 and "tw.shift" in page


def test_compiled_repr_and_html():
    program = tw.compile(echo_last.fn, vocab=VOCAB, max_seq_len=16)
    assert "not compiled yet" in repr(program)
    program.compile()
    assert repr(program) == program.summary()
    page = program._repr_html_()
    assert "latch" in page and "shift" in page
    assert page.count("<tr>") == 1 + program.stats()["layers"]


def test_traced_shows_each_nodes_facts_and_whole_source_line():
    def tenths(x):
        d = tw.code(x) / 10
        m = tw.mean(tw.is_token(x, "a"))
        return tw.emit(tw.is_token(x, "\n"), [tw.token("a") + (m > 0.5) + 0 * d])

    t = tw.trace(tenths, vocab=tw.Vocab("ab\n"))
    text = repr(t)
    assert "[0, 5] Z exact" in text  # tw.code
    assert "[0, 0.5] 1/10Z rounded once" in text  # code / 10
    assert "k/n rounded once" in text  # the mean
    assert "d = tw.code(x) / 10" in text  # a slash in the code is not a directory
    assert "<th>facts</th>" in t._repr_html_()


def test_stats_count_the_nonzero_weights_of_the_checkpoint():
    import examples.adder_1digit as example

    compiled = example.make().compile()
    m = compiled.build.machine
    tensors = [m.embed, m.final_norm, m.lm_head,
               *[t for la in m.layers for t in (la.qkv, la.o, la.gate_up, la.down, la.norm_attn,
                                                 la.norm_mlp)]]
    s = compiled.stats()
    assert s["nonzero_weights"] == sum(int(t.count_nonzero()) for t in tensors)
    assert 0 < s["nonzero_weights"] < s["parameters"] == sum(t.numel() for t in tensors)
    assert f"{s['nonzero_weights']:,} nonzero" in compiled.summary()
