"""Refusals that help (issue 36): where the reference holds a value on a lattice, the compiler
makes the compiled value exact itself (a snap) instead of asking for a no-op; a claim never
forgets what is known; a refusal names the op that made the noise. Each program below was
refused before, on its first natural spelling; each is checked through transformers against
the eager reference."""

from __future__ import annotations

import random

import pytest
import torch

import torchwright_fx as tw

DIGITS = tw.Vocab("0123456789ab\n")
AB = tw.Vocab("ab\n")


def _prompts(rng: random.Random, alphabet: str, n: int, longest: int) -> list[str]:
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, longest))) + "\n"
            for _ in range(n)]


def _right(compiled: tw.Compiled, prompts: list[str]) -> None:
    report = compiled.verify(prompts, backend="hf")
    assert not report.mismatches, report.mismatches[:3]
    for p in prompts[:4]:  # and in process
        assert compiled.generate(p) == compiled.reference(p), p


def test_a_comparison_joined_with_and_triggers_emit():
    """Case 1: ``(nl & (c < 10)).float()`` with c a latched count was "off 0/1 by 8.13e-06 ...
    make it an exact 0/1 value with a comparison" -- it is one; now it is snapped."""

    def prog(x):
        nl = tw.is_token(x, "\n")
        c = tw.latch(tw.mean(tw.is_token(x, "a").float()) * (tw.position(x) + 1), nl)
        c = tw.claim(torch.round(c), 0, 40, integral=True)
        return tw.emit((nl.bool() & (c < 10)).float(), [tw.token("a"), tw.token("b")])

    compiled = tw.compile(prog, vocab=DIGITS, max_seq_len=64)
    compiled.compile()
    prompts = ["aab\n", "aaaaaaaaaaaab\n", "b\n", "aaaaaaaaab\n", "aaaaaaaaaab\n"]
    _right(compiled, prompts + _prompts(random.Random(1), "ab", 10, 30))


def test_argmax_of_a_rounded_count():
    """Case 2: ``tw.claim(torch.round(run), ...)`` then ``tw.argmax(run, run)`` at 2048: "score
    may be off by 0.0106 ... round the score first" -- it is rounded; now it is snapped."""

    def prog(x):
        nl = tw.is_token(x, "\n")
        run = tw.mean(tw.is_token(x, "a").float()) * (tw.position(x) + 1)
        run = tw.claim(torch.round(run), 0, 30, integral=True)
        best = tw.argmax(run, run)
        return tw.emit(nl, [tw.lookup(best, {k: str(k % 10) for k in range(31)})])

    compiled = tw.compile(prog, vocab=DIGITS, max_seq_len=2048)
    compiled.compile()
    _right(compiled, ["aab\n", "aaaaab\n", "b\n"] + _prompts(random.Random(2), "ab", 5, 25))


def test_a_range_only_claim_keeps_what_is_known():
    """Case 3: a claim narrowing ``mean * (position + 1)`` made the round after it refuse ("a
    step at 0.5 on a value with no lattice"); the claim now keeps the value's facts."""

    def prog(x):
        count = tw.mean(tw.is_token(x, "a").float()) * (tw.position(x) + 1)
        count = tw.claim(count, -1, 41)
        odd = tw.lookup(torch.round(count), {k: k % 2 for k in range(42)})
        return tw.emit(tw.is_token(x, "\n"), [torch.where(odd > 0.5, tw.token("a"),
                                                          tw.token("b"))])

    compiled = tw.compile(prog, vocab=AB, max_seq_len=48)
    compiled.compile()
    _right(compiled, ["aab\n", "aaab\n", "b\n"] + _prompts(random.Random(3), "ab", 10, 40))


def test_a_claim_intersects_and_never_forgets():
    """The claim's facts: the range is met with what is known; fractions and near-whole stay."""

    def prog(x):
        m = tw.mean(tw.is_token(x, "a").float())
        return tw.claim(m * (tw.position(x) + 1), -1, 41)

    facts = tw.compile(prog, vocab=AB, max_seq_len=32, output="value").build.program.nodes
    claimed = facts["claim"].intervals[0]
    assert claimed.near_integral and (claimed.lo, claimed.hi) == (0, 32)  # met with [0, 32]


def test_a_refusal_names_where_the_noise_comes_from():
    """A step on a whole number too noisy to snap (a sum rebuilt from an averaging head's mean
    at 4096 positions) names the op that made the noise and its line."""

    def prog(x):
        d = tw.lookup(tw.code(x), {tw.token(str(k)): 7 * k for k in range(10)}, default=0)
        total = tw.claim(tw.mean(d) * (tw.position(x) + 1), 0, 63 * 4096, integral=True)
        return tw.emit(tw.is_token(x, "\n"), [torch.where(total > 500, tw.token("a"),
                                                          tw.token("b"))])

    with pytest.raises(tw.CompileError) as e:
        tw.compile(prog, vocab=DIGITS, max_seq_len=4096).compile()
    message = str(e.value)
    assert "noise comes from" in message and "mean at " in message, message
    assert "test_refusals_help.py" in message


def test_noisy_whole_numbers_are_snapped_before_they_are_scaled():
    """``100 * count >= 53 * (position + 1)`` at 512: the difference carries 100 times the
    rounded count's noise (1.26, too much to snap), so each noisy whole term is snapped onto its
    integers first (found by the advice audit: no spelling compiled before)."""

    def prog(x):
        count = torch.round(tw.mean(tw.is_token(x, "a").float()) * (tw.position(x) + 1))
        share = 100 * count >= 53 * (tw.position(x) + 1)
        return tw.emit(tw.is_token(x, "\n"), [torch.where(share, tw.token("a"), tw.token("b"))])

    compiled = tw.compile(prog, vocab=AB, max_seq_len=512)
    compiled.compile()
    rng = random.Random(4)
    balanced = ["".join(rng.sample("a" * n + "b" * (2 * n - n), 2 * n)) + "\n" for n in (5, 50)]
    _right(compiled, balanced + _prompts(rng, "ab", 12, 200))


def test_values_the_reference_rounds_beyond_2_24_are_not_snapped():
    """Found by review: ``(b + 2**24) - 2**24`` is 0 in the reference for b = 1, so it must not
    be snapped onto b; ``v + 2**24 == ...`` is rounded by the reference; an integral claim
    cannot be checked from 2**21 on. Each is refused, not compiled wrong."""

    def offset_trigger(x):
        c = torch.round(tw.mean(tw.is_token(x, "a").float()) * (tw.position(x) + 1))
        t = (torch.clamp(c - 1, 0, 1) + 2**24) - 2**24
        return tw.emit(t, [tw.token("a")], default="b")

    def offset_compare(x):
        v = tw.is_token(x, "b") + 2**24
        return torch.where(v - 2**24 == 1, tw.token("a"), tw.token("b"))

    def big_claim(x):
        v = tw.claim(tw.lookup(x, {"a": 0.3}, default=0) + 2**22, 0, 2**23, integral=True)
        return torch.where(v - 2**22 == 0, tw.token("a"), tw.token("b"))

    for prog in (offset_trigger, offset_compare, big_claim):
        with pytest.raises(tw.CompileError):
            tw.compile(prog, vocab=AB, max_seq_len=64).compile()
