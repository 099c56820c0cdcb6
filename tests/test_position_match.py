"""``select_latest(select(position + c, q, "=="), v, default)`` (RASP's ``Select(indices, f,
EQ)``): one head scoring the square of the distance to the target position, with ``<bos>``
half a gain below a match (families/gather.py ``match_position``), not a class per position:
the same answers as the eager function at every position, and far fewer weights."""

from __future__ import annotations

import random

import pytest
import torch

import torchwright_fx as tw

VOCAB = tw.Vocab("0123456789ab\n")


def _digit(x: torch.Tensor) -> torch.Tensor:
    return tw.lookup(x, {str(i): i for i in range(10)}, default=0)


def back_three(x: torch.Tensor) -> torch.Tensor:  # a shift: nothing before position 1
    pos = tw.position(x)
    return tw.select_latest(tw.select(pos, pos - 3, "=="), tw.code(x), default=tw.token("a"))


def ahead(x: torch.Tensor) -> torch.Tensor:  # never in the past: always the default
    pos = tw.position(x)
    return tw.select_latest(tw.select(pos, pos + 2, "=="), tw.code(x), default=tw.token("b"))


def at_digit(x: torch.Tensor) -> torch.Tensor:  # the token at the position a digit names
    pos = tw.position(x)
    return tw.select_latest(tw.select(pos + 1, _digit(x) + 1, "=="), tw.code(x),
                            default=tw.token("\n"))


def after_newline(x: torch.Tensor) -> torch.Tensor:  # the k-th token after the last newline
    pos = tw.position(x)
    step = tw.steps_since(tw.is_token(x, "\n"))
    start = tw.latch(pos, tw.is_token(x, "\n"))
    return tw.select_latest(tw.select(pos, start + step // 2, "=="), tw.code(x),
                            default=tw.token("a"))


PROGRAMS = [back_three, ahead, at_digit, after_newline]


def _stream(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return VOCAB.encode("".join(rng.choice("0123456789ab\n") for _ in range(n - 1)))


@pytest.mark.parametrize("fn", PROGRAMS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("n", [16, 100, 512])
def test_the_match_is_right_at_every_position(fn, n):
    program = tw.compile(fn, vocab=VOCAB, max_seq_len=n).compile()
    for seed in (1, 2):
        ids = _stream(n if seed == 1 else n // 2 + 3, seed)
        assert torch.equal(program.logits(ids).argmax(-1), program.printed_ids(ids))


def test_no_class_per_position():
    """At d_head 8 and far fewer weights than the classes' build (ReLU keeps the classes)."""
    fast = tw.compile(at_digit, vocab=VOCAB, max_seq_len=100).compile()
    classes = tw.compile(at_digit, vocab=VOCAB, max_seq_len=100, machine="relu").compile()
    assert fast.stats()["d_head"] == 8
    assert 4 * fast.stats()["parameters"] < classes.stats()["parameters"]
    circuit = fast.circuit()
    assert any(n["name"].endswith("at_squared") for n in circuit["nodes"])


def reverse(x: torch.Tensor) -> torch.Tensor:
    """RASP's make_reverse as a new user writes it: Aggregate(Select(indices, opp, EQ))."""
    pos = tw.position(x)
    n = tw.latch(pos, tw.is_token(x, "\n"))  # the input is positions 1 .. n - 1
    step = tw.steps_since(tw.is_token(x, "\n"))
    return tw.aggregate(tw.select(pos, n - 1 - step, "=="), tw.code(x), default=tw.token("b"))


@pytest.mark.parametrize("n", [16, 100])
def test_an_aggregate_of_one_match_is_its_value(n):
    program = tw.compile(reverse, vocab=VOCAB, max_seq_len=n).compile()
    assert program.stats()["d_head"] == 8
    for seed in (3, 4):
        ids = _stream(n, seed)
        assert torch.equal(program.logits(ids).argmax(-1), program.printed_ids(ids))
