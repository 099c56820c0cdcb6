"""Attention intrinsics are exact at every position of random streams up to max_seq_len,
through the in-process runtime and through the Phi-3 checkpoint loaded from disk."""

from __future__ import annotations

import random

import pytest
import torch
from conftest import lin_value, load_hf

import torchwright_fx as tw
from torchwright_fx.base.errors import GeometryError
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ops.attention import Geometry, check_margins

VOCAB = tw.Vocab("abcde\n")
LENGTHS = [1, 2, 17, 100, 512]
MAX_LEN = 512
SCORES = {"a": 3, "b": 1, "c": 3, "d": 0, "e": 2, "\n": 1}


def _programs() -> dict:
    def code(x):
        return tw.code(x)

    def score(x):
        return tw.lookup(x, SCORES)

    return {
        "shift1": lambda x: tw.shift(code(x), 1),
        "shift7": lambda x: tw.shift(code(x), 7),
        "latch": lambda x: tw.latch(code(x), tw.is_token(x, ["a", "\n"])),
        "argmax": lambda x: tw.argmax(score(x), code(x)),
        "argmin_where": lambda x: tw.argmin(score(x), code(x), where=tw.is_token(x, ["b", "c"])),
        "position": lambda x: tw.position(x),
        "steps_since": lambda x: tw.steps_since(tw.is_token(x, "\n")),
        "gather": lambda x: tw.gather(code(x), tw.position(x) - tw.lookup(x, {"a": 5, "b": 40})),
        "mean": lambda x: torch.where(_mean(x) > 1.0, tw.token("a"), code(x)),
    }


def _mean(x):
    """A non-token value; the program returns a code that depends on it (a program must), and
    the tests read the value itself from its columns."""
    return tw.mean(tw.is_token(x, "a") * 4.0, where=tw.is_token(x, ["a", "b"]))


def _value(program: tw.Compiled, name: str, ids: list[int]) -> torch.Tensor:
    """The exact value the tests compare: the output, or for "mean" the mean itself."""
    if name != "mean":
        return program.traced.run(ids).double()
    with tw.using_vocab(VOCAB):
        return _mean(VOCAB.one_hot(ids)).double().reshape(-1)


def _read(program: tw.Compiled, name: str) -> Lin:
    if name != "mean":
        return program.build.program.output
    (col,) = program.build.program.nodes["mean"].columns
    return col


PROGRAMS = _programs()
# outputs that are token codes, so the checkpoint's greedy choice must equal them everywhere
TOKEN_VALUED = ["shift1", "shift7", "latch", "argmax", "argmin_where", "gather"]


def _stream(length: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [VOCAB.bos_id] + [rng.randrange(3, len(VOCAB)) for _ in range(length - 1)]


@pytest.fixture(scope="module")
def compiled():
    out = {}
    for name, fn in PROGRAMS.items():
        fn.__name__ = name
        out[name] = tw.compile(fn, vocab=VOCAB, max_seq_len=MAX_LEN).compile()
    return out


def _final_residual_value(program: tw.Compiled, residual: torch.Tensor, name: str = ""
                          ) -> torch.Tensor:
    return lin_value(_read(program, name), program.build.plan, residual)


def _written(program: tw.Compiled, name: str) -> int:
    """The stage after which the compared value is in the residual: the output's last stage,
    or the mean's own (its column may be recycled once it is read)."""
    plan, prog = program.build.plan, program.build.program
    if name != "mean":
        return 2 * plan.n_layers - 1
    return max(plan.signal_stage(prog, sid) for sid in _read(program, name).terms)


@pytest.mark.parametrize("name", list(PROGRAMS))
@pytest.mark.parametrize("length", LENGTHS)
def test_runtime_equals_reference_at_every_position(compiled, name, length):
    program = compiled[name]
    ids = _stream(length, seed=length)
    want = _value(program, name, ids)
    _, states = tw.backends.runtime.forward(program.weights, ids, capture=True)
    got = _final_residual_value(program, states[_written(program, name) + 1], name)
    if name == "mean":
        assert torch.allclose(got, want, atol=1e-5), (got - want).abs().max()
    else:
        assert torch.equal(got.round(), want), torch.nonzero(got.round() != want)[:5]
        assert (got - want).abs().max() < 0.05


@pytest.mark.parametrize("name", TOKEN_VALUED)
def test_checkpoint_greedy_token_equals_reference_everywhere(compiled, name, tmp_path):
    program = compiled[name]
    model, _ = load_hf(program.save_pretrained(tmp_path / name))
    for length in LENGTHS:
        ids = _stream(length, seed=100 + length)
        want = program.printed_ids(ids)
        with torch.no_grad():
            got = model(torch.tensor([ids])).logits[0].argmax(-1)
        assert torch.equal(got, want), (length, torch.nonzero(got != want)[:5])


def test_geometry_too_long_is_rejected_with_the_length_that_works():
    # beyond half the fine plane's period (278 positions at 4096) a shift has the coarse plane
    # alone, whose peak needs logits quadratic in the length
    with pytest.raises(GeometryError, match="largest max_seq_len that works"):
        check_margins(Geometry(16, 4096), 200)


def test_short_shifts_and_recency_hold_at_long_lengths():
    for length in (4096, 16384):
        geom = Geometry(16, length)
        assert geom.rotary == 6
        for offset in (0, 1, 2, 7, 60):
            assert check_margins(geom, offset) >= 120
        assert check_margins(geom, 0, with_validity=2) >= 120


def test_too_long_geometry_names_the_users_line():
    """Two parts of validity on every key are not certified at 131072 (docs/attention.md,
    "Long contexts"): the refusal names the line and the length that works."""
    def prog(x):
        c = tw.code(x)
        both = tw.select(c, c, "==") & tw.select(tw.shift(c, 1), tw.shift(c, 1), "==")
        return tw.select_latest(both, c)  # MARK

    with pytest.raises(tw.CompileError, match="(?s)MARK.*max_seq_len=[0-9]+ works"):
        tw.compile(prog, vocab=VOCAB, max_seq_len=131072).compile()


def test_a_shift_beyond_the_fine_planes_reach_is_a_chain_of_heads():
    """At 4096 the two-plane lobe reaches 139 positions: a shift by 200 takes two heads."""
    program = tw.compile(lambda x: tw.shift(tw.code(x), 200), vocab=VOCAB,
                         max_seq_len=4096).compile()
    assert program.stats()["layers"] == 2
    ids = VOCAB.encode("".join(random.Random(3).choice("ab") for _ in range(999)))
    assert torch.equal(program.logits(ids).argmax(-1), program.printed_ids(ids))


def test_margins_hold_at_default_length():
    geom = Geometry(16, 512)
    for offset in (0, 1, 5, 100, 511):
        assert check_margins(geom, offset) >= 120


def _residual_after(model, ids: list[int], stage: int) -> torch.Tensor:
    """transformers' residual stream right after sublayer ``stage`` (an attention stage: the
    input of the layer's post-attention norm; an MLP stage: the layer's output). A column may
    be zeroed by the next sublayer once nothing reads it (schedule/cancels.py)."""
    layer = model.model.layers[stage // 2]
    seen: list[torch.Tensor] = []
    if stage % 2 == 0:
        hook = layer.post_attention_layernorm.register_forward_pre_hook(
            lambda _m, args: seen.append(args[0][0].detach()))
    else:
        hook = layer.register_forward_hook(
            lambda _m, _i, o: seen.append((o[0] if isinstance(o, tuple) else o)[0].detach()))
    try:
        with torch.no_grad():
            model(torch.tensor([ids]))
    finally:
        hook.remove()
    return seen[0]


@pytest.mark.parametrize("name", ["position", "steps_since", "mean"])
def test_checkpoint_hidden_state_values_equal_reference(compiled, name, tmp_path):
    """Non-token values, read from the checkpoint's residual stream: right after the sublayer
    that wrote the value, its column holds it."""
    program = compiled[name]
    model, _ = load_hf(program.save_pretrained(tmp_path / name))
    for length in LENGTHS:
        ids = _stream(length, seed=200 + length)
        want = _value(program, name, ids)
        hidden = _residual_after(model, ids, _written(program, name))
        got = _final_residual_value(program, hidden, name)
        tolerance = 1e-5 if name == "mean" else 0.05
        assert (got - want).abs().max() <= tolerance, (length, (got - want).abs().max())


# -- fp32 rounding of content logits (argmax's tie-break, gather's square) -------------------------
WIDE = {"a": 1000, "b": 999, "c": 0, "d": 500, "e": 1000}


def _argmax_wide(x):
    return tw.argmax(tw.lookup(x, WIDE), tw.code(x))  # MARK-WIDE


def test_argmax_whose_tie_break_fp32_cannot_resolve_is_refused():
    """Was certified and wrong at 12 positions of 3 streams of 2048 (scores 0..1000): the
    logits reach 2e8, where fp32's spacing is 16 against a recency step of 180. One head is
    refused; two heads (the best score, then its latest position) need d_head 64 here and
    are right on those streams."""
    with pytest.raises(tw.CompileError, match=r"MARK-WIDE(.|\n)*d_head=64(.|\n)*a span of "
                                              r"\d+ works"):
        tw.compile(_argmax_wide, vocab=VOCAB, max_seq_len=2048, d_head=32).compile()
    program = tw.compile(_argmax_wide, vocab=VOCAB, max_seq_len=2048, d_head=64).compile()
    for seed in (1, 2, 3):
        ids = _stream(2048, seed=seed)
        _, states = tw.backends.runtime.forward(program.weights, ids, capture=True)
        got = _final_residual_value(program, states[-1])
        assert torch.equal(got.round(), program.traced.run(ids).double().reshape(-1)), seed


def test_argmax_over_a_narrower_score_at_2048_is_right():
    def narrow(x):
        return tw.argmax(tw.lookup(x, {"a": 100, "b": 99, "c": 0, "d": 50, "e": 100}),
                         tw.code(x))

    program = tw.compile(narrow, vocab=VOCAB, max_seq_len=2048).compile()
    ids = _stream(2048, seed=5)
    _, states = tw.backends.runtime.forward(program.weights, ids, capture=True)
    got = _final_residual_value(program, states[-1])
    assert torch.equal(got.round(), program.traced.run(ids).double().reshape(-1))
