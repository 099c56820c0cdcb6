"""The smallest checkpoint (issue 35): the least head size the geometry takes by default, any
width the RMSNorm identity holds at unless vLLM can load the build, the cheaper of splitting a
selection into digits and a larger head, and a parameter bound no build goes under. Every build
is compared with the eager reference through the saved Phi-3 directory."""

from __future__ import annotations

import importlib
import random

import pytest
import torch
from conftest import load_hf

import examples
import torchwright_fx as tw
from torchwright_fx.base.numerics import VLLM_HEAD_SIZES, WIDTH_MULTIPLE

VOCAB = tw.Vocab("abcdefghijklmnopqrst\n")


def latch_and_shift(x):
    code = tw.code(x)
    held = tw.latch(code, tw.is_token(x, ["a", "b"]))
    return torch.where(tw.shift(code, 2) > held, tw.token("t"), tw.token("s"))


def many_values(x):
    """The token after the last earlier occurrence of this one: a selection on as many classes
    as token values, split into digits where they and the <bos> dims do not fit the head."""
    code = tw.code(x)
    return tw.select_latest(tw.select(tw.shift(code, 1), code, "=="), code,
                            default=tw.token("a"))


def _stream(vocab: tw.Vocab, n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    letters = [t for t in vocab.tokens if len(t) == 1]
    return vocab.encode("".join(rng.choice(letters) for _ in range(n)))


def _same_everywhere(program: tw.Compiled, tmp_path, name: str) -> None:
    model, _ = load_hf(program.save_pretrained(tmp_path / name))
    for n, seed in ((1, 0), (17, 1), (program.weights.max_seq_len - 1, 2)):
        ids = _stream(program.vocab, n, seed)
        want = program.printed_ids(ids)
        assert torch.equal(program.logits(ids).argmax(-1), want)
        with torch.no_grad():
            assert torch.equal(model(torch.tensor([ids])).logits[0].argmax(-1), want)


@pytest.mark.parametrize(("max_seq_len", "least"), [(64, 8), (4096, 16)])
def test_the_default_head_size_is_the_least_the_geometry_takes(max_seq_len, least, tmp_path):
    small = tw.compile(latch_and_shift, vocab=VOCAB, max_seq_len=max_seq_len).compile()
    portable = tw.compile(latch_and_shift, vocab=VOCAB, max_seq_len=max_seq_len,
                          d_head=32).compile()
    s, p = small.stats(), portable.stats()
    assert s["d_head"] == least and p["d_head"] == 32 in VLLM_HEAD_SIZES
    assert s["layers"] == p["layers"]
    assert s["parameters"] < p["parameters"]
    # vLLM's kernels need a multiple of 16; a build it cannot load takes the tightest width
    assert p["d_model"] % WIDTH_MULTIPLE == 0
    assert s["d_model"] <= p["d_model"]
    if max_seq_len <= 64:
        _same_everywhere(small, tmp_path, "small")
        _same_everywhere(portable, tmp_path, "portable")


def test_a_split_selection_is_kept_only_where_it_costs_less(tmp_path):
    """d_head=None lowers at 16 (the least at 4096 positions), where the selection's 12 classes
    are split into two digits, and at 32, which splits nothing, and keeps the build of fewer
    layers, then fewer parameters: here the split one."""
    vocab = tw.Vocab("abcdefghijk\n")
    chosen = tw.compile(many_values, vocab=vocab, max_seq_len=4096).compile()
    split = tw.compile(many_values, vocab=vocab, max_seq_len=4096, d_head=16).compile()
    whole = tw.compile(many_values, vocab=vocab, max_seq_len=4096, d_head=32).compile()

    def cost(c: tw.Compiled) -> tuple[int, int]:
        return c.stats()["layers"], c.stats()["parameters"]

    assert cost(chosen) == cost(split) < cost(whole)
    assert chosen.build.program.shared.split_d_head == 32
    _same_everywhere(chosen, tmp_path, "chosen")


def test_a_selection_that_splits_into_nothing_that_fits_raises_the_head_size():
    """21 classes do not fit a head of 16 even split into digits: d_head 32, and why."""
    chosen = tw.compile(many_values, vocab=VOCAB, max_seq_len=4096).compile()
    assert chosen.stats()["d_head"] == 32
    assert "(chosen: at 16, select_latest needs" in chosen.summary()


def _builds() -> list[tuple[str, tw.Compiled]]:
    out = [(name, importlib.import_module(f"examples.{name}").program)
           for name in examples.NAMES]
    out += [(f"rasp.{name}", importlib.import_module(f"examples.rasp.{name}").make(max_len=20))
            for name in ("length", "hist", "frac_prevs", "sort_freq")]
    return out


@pytest.mark.parametrize(("name", "program"), _builds(), ids=lambda v: v if isinstance(v, str)
                         else "")
def test_no_build_is_under_its_parameter_bound_and_none_spends_a_layer(name, program):
    s = program.compile().stats()
    assert s["parameter_bound"] <= s["parameters"]
    assert f"has under {s['parameter_bound']:,}" in program.summary()
    # the heuristic's placement (either start, balanced) meets the critical-path bound
    assert s["layers"] == s["critical_path_layers"]


def test_a_program_without_heads_asked_for_vllm_gets_a_width_vllm_takes(tmp_path):
    """The emitted head_dim is the geometry's even where the program has no head of its own:
    at d_head=32 vLLM loads the build, so its width is a multiple of 16 as well."""
    def value(x):
        return tw.lookup(x, {"a": 1.0, "b": 2.0, "c": 3.0})

    small = tw.compile(value, vocab=VOCAB, output="value").compile().stats()
    portable = tw.compile(value, vocab=VOCAB, output="value", d_head=32).compile().stats()
    assert small["d_head"] == 8 and portable["d_head"] == 32
    assert portable["d_model"] % WIDTH_MULTIPLE == 0
    assert small["d_model"] < portable["d_model"]
