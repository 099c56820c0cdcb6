"""Long contexts (issue 37): max_seq_len 131072 (Phi-3's long context), certified at compile time
for every intrinsic, with a size close to the 16384 build's.

Beyond REPLAY_LENGTH the lobe heads are certified by their rounding bound (ops/lobe_bound.py),
gather matches the exact position digit by digit with a unique-match head, and a comparison of
counted means compares whole numbers (families/logic.py: _counted_compare). The builds are
checked teacher-forced through transformers on a few thousand tokens here; the 60,000-token run
is `scripts/long/check_long.py` (marked slow below)."""

from __future__ import annotations

import random
import re

import pytest
import torch
from conftest import load_hf
from long_programs import (
    COUNTER,
    NEW_USER,
    OPS,
    VOCAB,
    counter_machine,
    counter_stream,
    memory_lines,
    ops_stream,
    stream,
)

import torchwright_fx as tw

LONG = 131072
DIGITS = tw.Vocab("0123456789ab=\n")


def _d(x: torch.Tensor) -> torch.Tensor:
    return tw.lookup(x, {str(i): i for i in range(10)}, default=0)


INTRINSICS = {
    "shift": lambda x: tw.token("0") + tw.shift(_d(x), 3),
    "latch": lambda x: tw.token("0") + tw.latch(_d(x), tw.is_token(x, "=")),
    "select_latest": lambda x: tw.token("0") + tw.select_latest(
        tw.select(_d(x), _d(x), "=="), tw.shift(_d(x), 1)),
    "aggregate": lambda x: tw.token("0") + (tw.aggregate(
        tw.select(_d(x), _d(x), "=="), tw.is_token(tw.shift(x, 1), "a")) > 0.5).float(),
    "mean_vs_mean": lambda x: tw.token("0") + (
        tw.mean(tw.is_token(x, "a")) >= tw.mean(tw.is_token(x, "b"))).float(),
    "mean_where": lambda x: tw.token("0") + (tw.mean(
        tw.is_token(x, "a"), tw.is_token(x, "a") + tw.is_token(x, "b") > 0) > 0.5).float(),
    "selector_width": lambda x: tw.token("0") + torch.clamp(
        tw.selector_width(tw.select(_d(x), _d(x), "==")), 0, 9),
    "steps_since": lambda x: tw.token("0") + torch.clamp(
        tw.steps_since(tw.is_token(x, "\n")), 0, 9),
    "position_mod": lambda x: tw.token("0") + torch.remainder(tw.position(x), 10),
    "steps_since_mod": lambda x: tw.token("0") + torch.remainder(
        tw.steps_since(tw.is_token(x, "\n")), 7),
    "width_mod": lambda x: tw.token("0") + torch.remainder(
        tw.selector_width(tw.select(_d(x), _d(x), "==")), 10),
    "gather": lambda x: tw.token("0") + tw.gather(
        _d(x), tw.position(x) - tw.steps_since(tw.is_token(x, "\n"))),
    "argmax": lambda x: tw.token("0") + tw.argmax(_d(x), tw.shift(_d(x), 1)),
    "argmin_where": lambda x: tw.token("0") + tw.argmin(_d(x), tw.shift(_d(x), 1),
                                                         tw.is_token(x, "a")),
}


def _digits_stream(n: int, seed: int) -> list[int]:
    rng, out = random.Random(seed), []
    while len(out) < n:
        out += [rng.choice("0123456789ab=") for _ in range(rng.randint(0, 60))] + ["\n"]
    return DIGITS.encode("".join(out[:n]))


def _teacher_forced_wrong(program: tw.Compiled, ids: list[int], tmp_path) -> int:
    model, _ = load_hf(program.save_pretrained(tmp_path / "m"))
    want = program.printed_ids(ids)
    with torch.no_grad():
        got = model(torch.tensor([ids])).logits[0].argmax(-1)
    return int((got != want).sum())


@pytest.mark.parametrize("name", sorted(INTRINSICS))
def test_every_intrinsic_compiles_at_131072_and_is_right(name, tmp_path):
    program = tw.compile(INTRINSICS[name], vocab=DIGITS, max_seq_len=LONG).compile()
    assert program.stats()["max_seq_len"] == LONG
    assert _teacher_forced_wrong(program, _digits_stream(1500, 7), tmp_path) == 0


@pytest.mark.parametrize("fn", NEW_USER, ids=lambda f: f.__name__)
def test_new_user_programs_at_131072_match_the_reference(fn):
    """Through the in-process runtime (transformers' eager arithmetic), two 3,000-token
    streams each."""
    program = tw.compile(fn, vocab=OPS, max_seq_len=LONG).compile()
    for seed in (1, 2):
        ids = OPS.encode(ops_stream(2999, seed))
        assert torch.equal(program.logits(ids).argmax(-1), program.printed_ids(ids)), seed


def _decoder_lanes(program: tw.Compiled) -> int:
    """MLP lanes of the selector widths' count decoders (their nodes are ``*.width*``)."""
    return sum(len(m["lanes"]) for n in program.circuit()["nodes"] if ".width" in n["name"]
               for m in n["mlp"])


def test_a_counter_machine_at_131072_costs_little_more_and_matches():
    """Registers as selector widths: exact counts beyond 32768 (decoded and snapped): no more
    layers than 1.5 times, nor decoder lanes than twice, the build at 16384. (Its parameters
    grow more: ``torch.remainder``'s table spans the longer range, 1,286 lanes at 131072.)"""
    short = tw.compile(counter_machine, vocab=COUNTER, max_seq_len=16384, d_head=32).compile()
    program = tw.compile(counter_machine, vocab=COUNTER, max_seq_len=LONG, d_head=32).compile()
    assert program.stats()["layers"] <= 1.5 * short.stats()["layers"]
    assert 0 < _decoder_lanes(program) <= 2 * _decoder_lanes(short)
    ids = COUNTER.encode(counter_stream(2999, 1))
    assert torch.equal(program.logits(ids).argmax(-1), program.printed_ids(ids))


def test_the_acceptance_program_costs_little_more_at_131072_than_at_16384(tmp_path):
    short = tw.compile(memory_lines, vocab=VOCAB, max_seq_len=16384).compile().stats()
    program = tw.compile(memory_lines, vocab=VOCAB, max_seq_len=LONG).compile()
    long = program.stats()
    assert long["layers"] <= 1.5 * short["layers"]
    assert long["parameters"] <= 2 * short["parameters"]
    ids = VOCAB.encode(stream(2999, 3))
    assert _teacher_forced_wrong(program, ids, tmp_path) == 0


@pytest.mark.slow
def test_the_acceptance_program_is_right_on_60000_tokens_through_transformers(tmp_path):
    """About 3 minutes on 2 cores: the eager reference (30 s) and one sdpa forward (2 min)."""
    program = tw.compile(memory_lines, vocab=VOCAB, max_seq_len=LONG).compile()
    assert _teacher_forced_wrong(program, VOCAB.encode(stream(59999, 1)), tmp_path) == 0


def _two_parts(x: torch.Tensor) -> torch.Tensor:
    d = _d(x)
    both = tw.select(d, d, "==") & tw.select(tw.shift(d, 1), tw.shift(d, 1), "==")
    return tw.token("0") + tw.select_latest(both, tw.shift(d, 2))


def _one_part(x: torch.Tensor) -> torch.Tensor:
    """_two_parts as the refusal advises: one key stream of 100 values (10 * a + b)."""
    d = _d(x)
    key = 10 * tw.shift(d, 1) + d
    return tw.token("0") + tw.select_latest(tw.select(key, key, "=="), tw.shift(d, 2))


def test_a_two_part_selection_refused_at_131072_compiles_as_its_advice_says():
    with pytest.raises(tw.CompileError, match="select on one part") as refusal:
        tw.compile(_two_parts, vocab=DIGITS, max_seq_len=LONG).compile()
    works = int(re.search(r"max_seq_len=(\d+) works", str(refusal.value)).group(1))
    ids = _digits_stream(1500, 5)
    for program in (tw.compile(_one_part, vocab=DIGITS, max_seq_len=LONG, d_head=128).compile(),
                    tw.compile(_two_parts, vocab=DIGITS, max_seq_len=works).compile()):
        assert torch.equal(program.logits(ids).argmax(-1), program.printed_ids(ids))


def test_a_wide_argmax_at_131072_compiles_at_the_d_head_a_refusal_names():
    def best(x):
        d = _d(x)
        return tw.token("0") + tw.argmax(tw.shift(d, 1) * 10 + d, d)

    with pytest.raises(tw.CompileError, match="d_head=128"):
        tw.compile(best, vocab=DIGITS, max_seq_len=LONG, d_head=64).compile()
    for d_head in (128, None):  # None: the compiler retries where the digit split is refused
        program = tw.compile(best, vocab=DIGITS, max_seq_len=LONG, d_head=d_head).compile()
        assert program.stats()["d_head"] == 128
        ids = _digits_stream(1500, 6)
        assert torch.equal(program.logits(ids).argmax(-1), program.printed_ids(ids))
    assert "split into digits to fit the head was refused" in program.summary()
