"""Red-team programs for the snapping paths of commit 0505191 ("refusals that help"): a consumer
that needs an exact value (emit's trigger, latch's / mean's ``where``, argmax's score, a
comparison's input, the output code) now snaps a noisy value the reference holds on its
lattice, and a range-only ``tw.claim`` keeps a mean's fractions and near-integrality.

Run:  OMP_NUM_THREADS=1 .venv/bin/python scripts/redteam_snap.py [NAME ...] [--quick] [--hf]

Not a pytest file. For every program, written as a new user would:

1. compile it; a refusal (``tw.CompileError``) is fine and recorded with its first line;
2. teacher-forced: for every test stream (random, and the program's adversarial ones), the
   compiled model's next token at every position (``Compiled.logits``, argmax) equals the
   eager reference's code there (``traced.run``); a stream on which the reference itself
   raises (a ``tw.claim`` it breaks) is skipped and counted;
3. greedy generation: ``generate(prompt) == reference(prompt)`` on prompts that end in the
   program's trigger (and, with ``--hf``, ``verify(backend="hf")`` on a few of them).

The summary table lists program, compiled or refused, streams/prompts checked, mismatches.
``--fuzz N --seed S`` instead draws N random programs aimed at the same paths (means, range
claims, near-whole counts, decoded positions and widths feeding the snapping consumers) and
checks each teacher-forced on random streams.

Findings (working tree of HEAD 648603a..c0e0ebd, with the uncommitted work in
progress then present):

- No program through the new snapping paths (emit's trigger, latch's / mean's ``where``,
  argmax's score, comparisons, the output code) or the range-only claim's kept facts gave a
  wrong answer where the facts themselves were right: every compiled program in the lists
  above that is not marked FOUND matches its reference (runtime, and transformers for a few),
  including teacher-forced streams that fill max_seq_len at 8192 and 16384.
- FOUND (pre-existing, also at 0505191~1): the facts call a sum or product "exact" when fp32
  cannot hold it (beyond 2**24): ``b + 2**24 - 2**24 == 1``, ``b * 4097 * 4097 == 16785408``,
  a lookup's 4097 times another's; the reference rounds, the compiled model folds exactly.
  The new ``rules.reference_on_lattice`` trusts EXACT with no magnitude bound (its ONCE clause
  has one), so such a value is now also snapped: ``big_offset_trigger_snapped`` was refused
  before 0505191 and now compiles and is wrong.
- FOUND (pre-existing): ``tw.claim(v, lo, hi, integral=True)`` accepts any value at
  |v| >= 2**21 (its tolerance 1e-3 + 2**-22 |v| reaches 1/2 there; docs/ops.md says n + 0.5
  is refused), so ``v = 2**22 + 0.3`` is snapped to 2**22 by the reference while the compiled
  model, reading ``v - 2**22`` folded, sees 0.3.
"""

from __future__ import annotations

import random
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

torch.set_num_threads(1)

import torchwright_fx as tw  # noqa: E402
from torchwright_fx.backends import runtime  # noqa: E402

GEN_TOKENS = 24  # greedy generation is checked on this many new tokens at most


@dataclass
class Case:
    name: str
    fn: Callable
    chars: str
    max_len: int = 64
    alphabet: str | None = None  # characters of the random streams (default: chars)
    special: list[str] = field(default_factory=list)  # adversarial streams
    gens: list[str] = field(default_factory=list)  # prompts for greedy generation
    opts: dict = field(default_factory=dict)  # compile options
    n_random: int = 12
    cap: int = 96  # longest random stream
    trigger: str = "\n"  # random prompts for generation end with this
    note: str = ""


CASES: list[Case] = []


def case(chars: str, **kw) -> Callable:
    def deco(fn: Callable) -> Callable:
        CASES.append(Case(fn.__name__, fn, chars, **kw))
        return fn
    return deco


# =================================================================================================
# Programs
# =================================================================================================
AB = "ab\n"
ABC = "abc\n"
DIG = "0123456789\n"
DIGAB = "0123456789ab\n"


def _count_a(x):
    """a running count of 'a': a mean of 0/1 times its count, rounded (near-whole)."""
    return torch.round(tw.mean(tw.is_token(x, "a").float()) * (tw.position(x) + 1))


# -- emit's trigger -------------------------------------------------------------------------------
@case(DIGAB, max_len=64, alphabet="ab", gens=["aab\n", "aaaaaaaaab\n", "aaaaaaaaaab\n", "b\n"])
def trig_latched_count_lt(x):
    """issue 36 case 1: a latched, rounded count compared and joined with & triggers emit."""
    nl = tw.is_token(x, "\n")
    c = tw.latch(tw.mean(tw.is_token(x, "a").float()) * (tw.position(x) + 1), nl)
    c = tw.claim(torch.round(c), 0, 64, integral=True)
    return tw.emit((nl.bool() & (c < 10)).float(), [tw.token("a"), tw.token("b")])


@case(AB, max_len=2048, alphabet="ab", gens=["a\n", "aa\n", "ab\n"], cap=64)
def trig_position_eq(x):
    """trigger at a fixed position far along (position decoded with noise), 2048."""
    return tw.emit(tw.position(x) == 3, [tw.token("a"), tw.token("b")])


@case(AB, max_len=4096, alphabet="ab", gens=["aaaa\n", "a\n"], cap=40,
      special=["ab" * 1000, "a" * 1500 + "\n"])
def trig_position_mod(x):
    """every 7th position triggers (position % 7 == 0), 4096."""
    p = tw.position(x)
    return tw.emit((p % 7 == 0).float(), [tw.token("a")], default="b")


@case(ABC, max_len=64, alphabet="abc", gens=["abc\n", "aaa\n", "\n"])
def trig_claimed_product(x):
    """a 0/1 product of two bools, claimed 0/1 (exact already), as trigger."""
    a, nl = tw.is_token(x, "a"), tw.is_token(x, "\n")
    t = tw.claim(tw.shift(a, 1) * nl, 0, 1, integral=True)
    return tw.emit(t, [tw.token("c")], default="b")


@case(AB, max_len=512, alphabet="ab", gens=["aab\n", "bbbb\n", "ab\n"],
      special=["a" * 200 + "\n", "ab" * 100 + "\n"])
def trig_count_parity(x):
    """the trigger is 'count of a is even' at a newline: a rounded near-whole count, %."""
    nl = tw.is_token(x, "\n")
    c = _count_a(x)
    return tw.emit(nl.bool() & (c % 2 == 0), [tw.token("a")], default="b")


@case(AB, max_len=64, alphabet="ab", gens=["ab\n", "aab\n"])
def trig_mean_ge_half_claimed(x):
    """a comparison of a mean (fractions), claimed 0/1 again (no-op claim) as trigger."""
    m = tw.mean(tw.is_token(x, "a").float())
    t = tw.claim((m >= 0.5).float(), 0, 1, integral=True)
    return tw.emit(t, [tw.token("a")], default="b")


# -- latch's / mean's condition -------------------------------------------------------------------
@case(DIGAB, max_len=1024, alphabet="ab\n", gens=["ab\naab\n", "aaa\n"], cap=80,
      special=["a" * 300 + "\n" + "b" * 300 + "\n"])
def latch_when_count_ge(x):
    """latch the token where the running count of 'a' first reaches 3 or more (noisy count)."""
    c = _count_a(x)
    when = (c >= 3).float() * tw.is_token(x, "a")
    v = tw.latch(tw.position(x) % 10, when)
    return tw.emit(tw.is_token(x, "\n"), [tw.token("0") + v])


@case(DIGAB, max_len=2048, alphabet="0123456789", gens=["123\n", "9\n"], cap=40,
      special=["7" * 900 + "\n"])
def mean_where_selwidth(x):
    """a mean over positions where a histogram count is 1 (first occurrences), 2048."""
    d = tw.lookup(x, {str(k): k for k in range(10)}, default=0)
    first = (tw.selector_width(tw.select(x, x, "==")) == 1).float()
    m = tw.mean(d, where=first)
    return tw.emit(tw.is_token(x, "\n"), [tw.token("0") + torch.round(m)])


@case(AB, max_len=256, alphabet="ab\n", gens=["ab\nab\n", "aaa\n"])
def latch_when_claimed_mean_product(x):
    """latch's `when` is a 0/1 value claimed from mean * count == position + 1 (all a so far)."""
    a = tw.is_token(x, "a").float()
    allofthem = tw.claim(torch.round(tw.mean(a) * (tw.position(x) + 1)), 0, 256, integral=True)
    when = (allofthem == tw.position(x)).float()
    v = tw.latch(tw.position(x) % 2, when)
    return tw.emit(tw.is_token(x, "\n"), [torch.where(v > 0.5, tw.token("a"), tw.token("b"))])


# -- argmax's score -------------------------------------------------------------------------------
@case(DIGAB, max_len=2048, alphabet="ab", gens=["aab\n", "aaaaab\n", "b\n"], cap=30)
def argmax_rounded_count(x):
    """issue 36 case 2: argmax of a rounded count, 2048."""
    nl = tw.is_token(x, "\n")
    run = tw.mean(tw.is_token(x, "a").float()) * (tw.position(x) + 1)
    run = tw.claim(torch.round(run), 0, 30, integral=True)
    best = tw.argmax(run, run)
    return tw.emit(nl, [tw.lookup(best, {k: str(k % 10) for k in range(31)})])


@case(DIGAB, max_len=512, alphabet="0123", gens=["0123\n", "3333\n", "1\n"], cap=100)
def argmax_hist_mode(x):
    """the most frequent digit so far (ties: most recent), by a histogram count score."""
    d = tw.lookup(x, {str(k): k for k in range(10)}, default=0)
    h = tw.selector_width(tw.select(x, x, "=="))
    mode = tw.argmax(h, d, where=1 - tw.is_token(x, "\n"))
    return tw.emit(tw.is_token(x, "\n"), [tw.token("0") + mode])


@case(DIGAB, max_len=4096, alphabet="ab\n", gens=["ab\naaab\nb\n", "\n"], cap=60,
      special=["a" * 700 + "\n" + "b" * 900 + "\n" + "a\n"])
def argmax_steps_since(x):
    """the longest line so far (argmax of steps_since at newlines), printed mod 10, 4096."""
    nl = tw.is_token(x, "\n")
    gap = tw.shift(tw.steps_since(nl), 1)
    longest = tw.argmax(gap, gap, where=nl)
    return tw.emit(nl, [tw.token("0") + longest % 10])


@case(AB, max_len=8192, alphabet="ab", gens=["ab\n", "b\n"], cap=30,
      special=["ab" * 2000 + "\n"])
def argmin_position(x):
    """argmin of a position-derived score (p % 5) over 'a' positions, 8192."""
    p = tw.position(x)
    s = p % 5
    best = tw.argmin(s, s, where=tw.is_token(x, "a"))
    return tw.emit(tw.is_token(x, "\n"), [torch.where(best > 1.5, tw.token("a"), tw.token("b"))])


# -- comparisons ----------------------------------------------------------------------------------
@case(AB, max_len=16384, alphabet="ab", gens=["a\n", "ab\n"], cap=20,
      special=["ab" * 3000 + "\n"])
def cmp_position_threshold(x):
    """position >= 100, 16384."""
    p = tw.position(x)
    return torch.where(p >= 100, tw.token("a"), tw.token("b"))


@case(DIG, max_len=64, alphabet="0123456789", gens=["1234\n", "9\n"])
def cmp_mean_tenth(x):
    """mean of digits compared with 4.5 (a mean's fraction at a half)."""
    d = tw.lookup(x, {str(k): k for k in range(10)}, default=0)
    m = tw.mean(d)
    return tw.emit(tw.is_token(x, "\n"), [torch.where(m > 4.5, tw.token("1"), tw.token("0"))])


@case(DIG, max_len=128, alphabet="0123456789", gens=["1234\n", "9\n", "55\n"])
def cmp_mean_times_ten_claimed(x):
    """mean * 10 (inexact: 0.1-multiples do not hold) claimed in range, compared with 45."""
    d = tw.lookup(x, {str(k): k for k in range(10)}, default=0)
    m = tw.claim(tw.mean(d) * 10, 0, 90)
    return tw.emit(tw.is_token(x, "\n"), [torch.where(m >= 45, tw.token("1"), tw.token("0"))])


@case(ABC, max_len=32, alphabet="abc", gens=["aab\n", "abc\n"])
def cmp_claimed_range_fp32_edge(x):
    """a range-only claim whose upper end is the double 0.7 (below 7/10), compared at 0.7."""
    m = tw.mean(tw.is_token(x, ["a", "\n"]).float())
    m = tw.claim(m, 0, 0.7)
    return tw.emit(tw.is_token(x, "\n"), [torch.where(m >= 0.7, tw.token("c"), tw.token("b"))])


@case(ABC, max_len=32, alphabet="abc", gens=["aab\n", "abc\n"])
def cmp_claimed_low_fp32_edge(x):
    """a range-only claim with lower end fp32(1/3) (above 1/3), compared there."""
    m = tw.mean(tw.is_token(x, ["a", "\n"]).float())
    m = tw.claim(torch.where(tw.is_token(x, "<bos>").bool(), 0.5, m), 0.3333333432674408, 1)
    return tw.emit(tw.is_token(x, "\n"),
                   [torch.where(m >= 0.3333333432674408, tw.token("c"), tw.token("b"))])


@case(AB, max_len=2048, alphabet="ab", gens=["aab\n", "bbbb\n"], cap=40,
      special=["a" * 1000 + "b" * 1000])
def cmp_count_vs_count(x):
    """two rounded counts compared with each other (noisy near-whole values), 2048."""
    ca = _count_a(x)
    cb = torch.round(tw.mean(tw.is_token(x, "b").float()) * (tw.position(x) + 1))
    return torch.where(ca > cb, tw.token("a"), tw.token("b"))


@case(AB, max_len=1024, alphabet="ab", gens=["ab\n"], cap=60,
      special=["ab" * 400, "a" * 1000])
def cmp_selwidth_eq_position(x):
    """selector_width of 'a' equal to the position (all a so far)."""
    a = tw.is_token(x, "a")
    w = tw.selector_width(tw.select(a, a, lambda k, q: k == 1))
    return torch.where(w == tw.position(x), tw.token("a"), tw.token("b"))


@case(DIG, max_len=64, alphabet="0123456789", gens=["12\n", "99\n"])
def cmp_product_fractions(x):
    """a mean times a decimal constant (0.1), compared: inexact reference."""
    d = tw.lookup(x, {str(k): k for k in range(10)}, default=0)
    v = tw.mean(d) * 0.1
    return tw.emit(tw.is_token(x, "\n"), [torch.where(v > 0.45, tw.token("1"), tw.token("0"))])


@case(DIG, max_len=64, alphabet="0123456789", gens=["12\n", "99\n"])
def cmp_latched_mean_sum(x):
    """latched mean plus a shifted mean, compared: moved means lose their common denominator."""
    d = tw.lookup(x, {str(k): k for k in range(10)}, default=0)
    m = tw.mean(d)
    s = tw.latch(m, tw.is_token(x, "\n")) - tw.shift(m, 1)
    return torch.where(s > 0, tw.token("1"), tw.token("0"))


# -- the output code ------------------------------------------------------------------------------
@case(DIGAB, max_len=512, alphabet="ab", gens=["aab\n", "aaaaaaaab\n"], cap=9,
      note="count claimed under 10: streams are at most 9 long")
def out_count_digit(x):
    """the output is token('0') + a rounded count (noisy whole number), claimed 0..9."""
    c = tw.claim(_count_a(x), 0, 9, integral=True)
    return tw.emit(tw.is_token(x, "\n"), [tw.token("0") + c])


@case(DIGAB, max_len=4096, alphabet="ab", gens=["ab\n", "aaab\n"], cap=40)
def out_position_mod(x):
    """the output is token('0') + position % 10 at every position, 4096."""
    return tw.token("0") + tw.position(x) % 10


@case(DIGAB, max_len=2048, alphabet="0123", gens=["0123\n"], cap=60,
      special=["0" * 9 + "1" * 9])
def out_selwidth_direct(x):
    """the output is token('0') + the count of this token so far, claimed < 10."""
    w = tw.claim(tw.selector_width(tw.select(x, x, "==")), 0, 9, integral=True)
    return tw.token("0") + w


@case(DIGAB, max_len=256, alphabet="0123456789", gens=["12\n", "0\n"])
def out_latched_digit(x):
    """the output is a digit latched at the newline, from a noisy rounded mean."""
    d = tw.lookup(x, {str(k): k for k in range(10)}, default=0)
    r = torch.round(tw.mean(d))
    return tw.emit(tw.is_token(x, "\n"), [tw.token("0") + tw.latch(r, tw.is_token(x, "\n"))])


# -- claims ---------------------------------------------------------------------------------------
@case(AB, max_len=48, alphabet="ab", gens=["aab\n", "b\n"])
def claim_range_round_parity(x):
    """issue 36 case 3: a range-only claim on mean * count, then round and a parity table."""
    count = tw.mean(tw.is_token(x, "a").float()) * (tw.position(x) + 1)
    count = tw.claim(count, -1, 41)
    odd = tw.lookup(torch.round(count), {k: k % 2 for k in range(42)})
    return tw.emit(tw.is_token(x, "\n"), [torch.where(odd > 0.5, tw.token("a"), tw.token("b"))])


@case(DIG, max_len=64, alphabet="0123456789", gens=["12\n", "55\n"])
def claim_integral_mean_times_count_of_digits(x):
    """sum of digits = mean * count claimed integral, mod 10 printed."""
    d = tw.lookup(x, {str(k): k for k in range(10)}, default=0)
    s = tw.claim(tw.mean(d) * (tw.position(x) + 1), 0, 9 * 64, integral=True)
    return tw.emit(tw.is_token(x, "\n"), [tw.token("0") + s % 10])


@case(DIG, max_len=64, alphabet="0123456789", gens=["12\n", "55\n"])
def claim_range_then_floor(x):
    """a range-only claim on mean * count (near-whole) then floor (not round): ties refused?"""
    d = tw.lookup(x, {str(k): k for k in range(10)}, default=0)
    s = tw.claim(tw.mean(d) * (tw.position(x) + 1), 0, 9 * 64)
    return tw.emit(tw.is_token(x, "\n"), [tw.token("0") + torch.floor(s) % 10])


@case(DIG, max_len=64, alphabet="0123456789", gens=["12\n", "55\n"])
def claim_range_mean_half(x):
    """a range-only claim narrowing a mean, then round (half to even at k + 1/2)."""
    d = tw.lookup(x, {str(k): k for k in range(10)}, default=0)
    m = tw.claim(tw.mean(d), 0, 9)
    return tw.emit(tw.is_token(x, "\n"), [tw.token("0") + torch.round(m)])


@case(DIG, max_len=64, alphabet="0123456789", gens=["12\n", "55\n"])
def claim_range_mean_scaled_round(x):
    """a range-only claim on mean * 2 then round: fractions k/n times 2."""
    d = tw.lookup(x, {str(k): k for k in range(10)}, default=0)
    m = tw.claim(tw.mean(d) * 2, 0, 18)
    return tw.emit(tw.is_token(x, "\n"), [tw.token("0") + torch.round(m) % 2])


@case(DIG, max_len=64, alphabet="0123456789", gens=["12\n", "55\n"])
def claim_range_near_integral_scaled(x):
    """mean * count claimed in range, then halved and rounded (near-whole / 2: ties at .5)."""
    d = tw.lookup(x, {str(k): k for k in range(10)}, default=0)
    s = tw.claim(tw.mean(d) * (tw.position(x) + 1), 0, 9 * 64)
    return tw.emit(tw.is_token(x, "\n"), [tw.token("0") + torch.round(s / 2) % 10])


@case(DIG, max_len=64, alphabet="0123456789", gens=["12\n", "55\n"])
def claim_range_near_integral_shift(x):
    """mean * count claimed in range, minus 0.5 then rounded (half-way values: ties)."""
    d = tw.lookup(x, {str(k): k for k in range(10)}, default=0)
    s = tw.claim(tw.mean(d) * (tw.position(x) + 1), 0, 9 * 64)
    return tw.emit(tw.is_token(x, "\n"), [tw.token("0") + torch.round(s - 0.5) % 10])


@case(AB, max_len=64, alphabet="ab", gens=["ab\n", "aab\n"])
def claim_integral_on_third(x):
    """a value that is whole only at some positions claimed integral: count / 3 * 3."""
    c = _count_a(x)
    v = tw.claim(c / 3 * 3, 0, 64, integral=True)
    return tw.emit(tw.is_token(x, "\n"), [torch.where(v % 2 == 0, tw.token("a"), tw.token("b"))])


@case(DIG, max_len=64, alphabet="0123456789", gens=["12\n", "55\n"])
def claim_integral_mean_times_n_where(x):
    """mean over digits (where) times their count (selector_width), claimed integral."""
    isd = tw.is_token(x, [str(k) for k in range(10)])
    d = tw.lookup(x, {str(k): k for k in range(10)}, default=0)
    m = tw.mean(d, where=isd)
    n = tw.selector_width(tw.select(isd, isd, lambda k, q: k == 1))
    s = tw.claim(m * n, 0, 9 * 64, integral=True)
    return tw.emit(tw.is_token(x, "\n"), [tw.token("0") + s % 10])


# -- near-whole values ----------------------------------------------------------------------------
@case(DIG, max_len=2048, alphabet="0123456789", gens=["12\n", "99\n"], cap=40,
      special=["9" * 1200 + "\n", "19" * 700 + "\n"])
def near_integral_sum_digits_long(x):
    """the sum of digits mod 10 by round(mean * (position + 1)), 2048 (counted means)."""
    d = tw.lookup(x, {str(k): k for k in range(10)}, default=0)
    s = torch.round(tw.mean(d) * (tw.position(x) + 1))
    return tw.emit(tw.is_token(x, "\n"), [tw.token("0") + s % 10])


@case(AB, max_len=4096, alphabet="ab", gens=["ab\n"], cap=40,
      special=["a" * 2000 + "\n", "ab" * 1500 + "\n"])
def near_integral_count_compare_half(x):
    """2 * count(a) > position (a majority), from a near-whole count, 4096."""
    c = _count_a(x)
    return torch.where(2 * c > tw.position(x), tw.token("a"), tw.token("b"))


@case(AB, max_len=16384, alphabet="ab", gens=["ab\n"], cap=20,
      special=["a" * 5000 + "\n"])
def near_integral_count_mod_16k(x):
    """count of 'a' mod 2, 16384."""
    c = _count_a(x)
    return torch.where(c % 2 == 1, tw.token("a"), tw.token("b"))


@case(DIG, max_len=256, alphabet="0123456789", gens=["12\n", "99\n"])
def near_integral_times_half(x):
    """sum of digits via a mean of half-digits times count: lattice 1/2, round half to even."""
    d = tw.lookup(x, {str(k): k / 2 for k in range(10)}, default=0)
    s = torch.round(tw.mean(d) * (tw.position(x) + 1))
    return tw.emit(tw.is_token(x, "\n"), [tw.token("0") + s % 10])


# -- booleans from noisy comparisons --------------------------------------------------------------
@case(AB, max_len=2048, alphabet="ab\n", gens=["ab\nb\n", "a\n"], cap=60,
      special=["a" * 800 + "\n" + "b" * 800 + "\n"])
def bool_noisy_and_or(x):
    """(count_a > count_b) | (steps_since(nl) < 2), joined, latched at each newline, 2048."""
    nl = tw.is_token(x, "\n")
    ca = _count_a(x)
    cb = torch.round(tw.mean(tw.is_token(x, "b").float()) * (tw.position(x) + 1))
    t = (ca > cb).bool() | (tw.steps_since(nl) < 2).bool()
    v = tw.latch(t.float(), nl)
    return tw.emit(nl, [torch.where(v > 0.5, tw.token("a"), tw.token("b"))])


@case(AB, max_len=512, alphabet="ab\n", gens=["ab\nb\n", "a\n"])
def bool_where_of_noisy(x):
    """torch.where over a comparison of a mean (fractions), used as mean's where."""
    m = tw.mean(tw.is_token(x, "a").float())
    w = (m > 0.5).float()
    f = tw.mean(tw.is_token(x, "b").float(), where=w)
    return tw.emit(tw.is_token(x, "\n"), [torch.where(f > 0, tw.token("a"), tw.token("b"))])


# -- division, fp32 rounding ----------------------------------------------------------------------
@case(DIG, max_len=64, alphabet="0123456789", gens=["12\n", "99\n"])
def div_count_by_three(x):
    """rounded count of nines / 3, rounded (ties at k + 1/2 never: thirds), printed."""
    c = torch.round(tw.mean(tw.is_token(x, "9").float()) * (tw.position(x) + 1))
    return tw.emit(tw.is_token(x, "\n"), [tw.token("0") + torch.round(c / 3) % 10])


@case(DIG, max_len=64, alphabet="0123456789", gens=["12\n", "99\n"])
def div_count_by_four_floor(x):
    """rounded count of nines / 4, floor: exact quarters."""
    c = torch.round(tw.mean(tw.is_token(x, "9").float()) * (tw.position(x) + 1))
    return tw.emit(tw.is_token(x, "\n"), [tw.token("0") + torch.floor(c / 4) % 10])


@case(DIG, max_len=64, alphabet="0123456789", gens=["12\n", "99\n"])
def div_times_decimal_floor(x):
    """count * 0.1 floor (an inexact constant: refused at ties?)."""
    c = torch.round(tw.mean(tw.is_token(x, "9").float()) * (tw.position(x) + 1))
    return tw.emit(tw.is_token(x, "\n"), [tw.token("0") + torch.floor(c * 0.1) % 10])


@case(DIG, max_len=64, alphabet="0123456789", gens=["12\n", "99\n"])
def div_reciprocal_count(x):
    """1 / (count + 1) compared with 0.25 (a table of 1/x, exact on integers)."""
    c = torch.round(tw.mean(tw.is_token(x, "9").float()) * (tw.position(x) + 1))
    r = 1 / (c + 1)
    return tw.emit(tw.is_token(x, "\n"), [torch.where(r >= 0.25, tw.token("1"), tw.token("0"))])


@case(DIGAB, max_len=4096, alphabet="ab", gens=["ab\n"], cap=40, special=["a" * 3000 + "\n"])
def div_position_by_seven_floor(x):
    """floor(position / 7) % 10 at 4096 (noisy position; lattice 1/7)."""
    return tw.token("0") + torch.floor(tw.position(x) / 7) % 10


@case(AB, max_len=4096, alphabet="ab", gens=["ab\n"], cap=40, special=["a" * 3000 + "\n"])
def position_times_tenth_round(x):
    """round(position * 0.1) % 2 at 4096 (inexact scaling of a noisy whole number)."""
    return torch.where(torch.round(tw.position(x) * 0.1) % 2 == 0, tw.token("a"), tw.token("b"))


# -- refusal advice, followed ---------------------------------------------------------------------
@case(DIGAB, max_len=512, alphabet="0123", gens=["0123\n", "3333\n", "1\n"], cap=100,
      opts={"d_head": 64}, note="argmax_hist_mode's refusal said: compile with d_head=64")
def advice_argmax_hist_mode_dhead64(x):
    d = tw.lookup(x, {str(k): k for k in range(10)}, default=0)
    h = tw.selector_width(tw.select(x, x, "=="))
    mode = tw.argmax(h, d, where=1 - tw.is_token(x, "\n"))
    return tw.emit(tw.is_token(x, "\n"), [tw.token("0") + mode])


@case(DIGAB, max_len=4096, alphabet="ab\n", gens=["ab\naaab\nb\n", "\n"], cap=60,
      special=["a" * 700 + "\n" + "b" * 30 + "\n" + "a\n"],
      note="argmax_steps_since's refusal said: narrow the score (clamp): a span of 40")
def advice_argmax_steps_since_clamped(x):
    nl = tw.is_token(x, "\n")
    gap = torch.clamp(tw.shift(tw.steps_since(nl), 1), 0, 39)
    longest = tw.argmax(gap, gap, where=nl)
    return tw.emit(nl, [tw.token("0") + longest % 10])


@case(DIG, max_len=128, alphabet="0123456789", gens=["1234\n", "9\n", "55\n"],
      note="cmp_mean_times_ten_claimed's refusal said: scale before averaging")
def advice_scale_before_mean(x):
    d = tw.lookup(x, {str(k): k for k in range(10)}, default=0)
    m = tw.mean(d * 10)
    return tw.emit(tw.is_token(x, "\n"), [torch.where(m >= 45, tw.token("1"), tw.token("0"))])


@case(DIG, max_len=64, alphabet="0123456789", gens=["12\n", "55\n"],
      note="claim_range_then_floor's refusal: declare it whole (claim integral)")
def advice_claim_integral_then_floor(x):
    d = tw.lookup(x, {str(k): k for k in range(10)}, default=0)
    s = tw.claim(tw.mean(d) * (tw.position(x) + 1), 0, 9 * 64, integral=True)
    return tw.emit(tw.is_token(x, "\n"), [tw.token("0") + torch.floor(s / 2) % 10])


@case(DIG, max_len=64, alphabet="0123456789", gens=["12\n", "55\n"],
      note="the round refusal of a near-whole value halved: round first, then halve")
def advice_round_then_halve(x):
    d = tw.lookup(x, {str(k): k for k in range(10)}, default=0)
    s = torch.round(tw.mean(d) * (tw.position(x) + 1))
    return tw.emit(tw.is_token(x, "\n"), [tw.token("0") + torch.round(s / 2) % 10])


@case(AB, max_len=4096, alphabet="ab", gens=["ab\n"], cap=40, special=["a" * 3000 + "\n"],
      note="position_times_tenth_round's refusal: compute with whole numbers / divide, not * 0.1")
def advice_position_div_ten_round(x):
    return torch.where(torch.round(tw.position(x) / 10) % 2 == 0, tw.token("a"), tw.token("b"))


@case(DIG, max_len=128, alphabet="0123456789\n", gens=["12\n34\n", "9\n"],
      note="moved_pair_of_means refused (a step at 0 on a value with no lattice): compare, "
           "then latch the 0/1 result, and scale before averaging (the tie refusal's advice)")
def advice_compare_then_latch(x):
    d = tw.lookup(x, {str(k): k for k in range(10)}, default=0)
    big = (d > 4).float()
    above = (tw.mean(d) > tw.mean(5 * big)).float()
    old = tw.latch(above, tw.is_token(x, "\n"))
    return torch.where(old > 0.5, tw.token("1"), tw.token("0"))


# -- <bos> rows and defaults ----------------------------------------------------------------------
@case(DIGAB, max_len=2048, alphabet="b\n", gens=["bbb\n", "\n"], cap=60, special=["b" * 900])
def bos_latch_never_fires(x):
    """latch of a noisy position-derived value whose `when` never fires: the <bos> row."""
    when = (tw.steps_since(tw.is_token(x, "a")) == 0).float()
    v = tw.latch(tw.position(x) % 10, when)
    return tw.token("0") + v


@case(DIGAB, max_len=1024, alphabet="ab", gens=["bbb\n", "a\n"], cap=60)
def bos_argmin_none_selected(x):
    """argmin over positions where a count is over 500 (never in short prompts): <bos> row."""
    c = _count_a(x)
    best = tw.argmin(tw.position(x) % 7, tw.position(x) % 10, where=(c > 500).float())
    return tw.token("0") + best


@case(DIGAB, max_len=512, alphabet="ab", gens=["ab\n"], cap=60)
def bos_mean_where_empty(x):
    """a mean whose `where` (a noisy comparison) has not fired: the <bos> row (0)."""
    c = _count_a(x)
    m = tw.mean(tw.position(x) % 3, where=(c >= 4).float())
    return tw.token("0") + torch.round(m)


@case(AB, max_len=256, alphabet="ab", gens=["ab\n", "\n"])
def bos_claim_at_bos(x):
    """a claim with a <bos> default, as the claim's message advises."""
    c = _count_a(x)
    v = torch.where(tw.is_token(x, "<bos>").bool(), 1.0, c)
    v = tw.claim(v, 0, 255, integral=True)
    return torch.where(v % 2 == 1, tw.token("a"), tw.token("b"))


# -- moved and combined values --------------------------------------------------------------------
@case(ABC, max_len=64, alphabet="abc\n", gens=["abc\naab\n", "\n"])
def moved_bool_trigger(x):
    """emit's trigger is a comparison latched at the last newline and shifted once."""
    nl = tw.is_token(x, "\n")
    m = tw.mean(tw.is_token(x, "a").float())
    t = tw.shift(tw.latch((m > 0.25).float(), nl), 1) * nl
    return tw.emit(t, [tw.token("c")], default="b")


@case(DIG, max_len=128, alphabet="0123456789\n", gens=["12\n34\n", "9\n"])
def moved_claimed_mean_compare(x):
    """a range-claimed mean latched at the newline compared with the current mean."""
    d = tw.lookup(x, {str(k): k for k in range(10)}, default=0)
    m = tw.claim(tw.mean(d), 0, 9)
    old = tw.latch(m, tw.is_token(x, "\n"))
    return torch.where(old > 4.5, tw.token("1"), tw.token("0"))


@case(DIG, max_len=128, alphabet="0123456789\n", gens=["12\n34\n", "9\n"])
def moved_pair_of_means(x):
    """two means latched by one head (one width-2 stream) compared with each other."""
    d = tw.lookup(x, {str(k): k for k in range(10)}, default=0)
    big = (d > 4).float()
    m2 = torch.cat([tw.mean(d), 5 * tw.mean(big)], dim=-1)
    old = tw.latch(m2, tw.is_token(x, "\n"))
    return torch.where(old[:, 0] > old[:, 1], tw.token("1"), tw.token("0"))[:, None]


@case(AB, max_len=2048, alphabet="ab", gens=["ab\n"], cap=40, special=["ab" * 700])
def offset_lattice_half(x):
    """a noisy count plus 1/2 (lattice Z + 1/2) compared with 3, 2048."""
    v = _count_a(x) + 0.5 + tw.steps_since(tw.is_token(x, "b"))
    return torch.where(v > 3, tw.token("a"), tw.token("b"))


@case(AB, max_len=2048, alphabet="ab", gens=["ab\n"], cap=40, special=["ab" * 700])
def dyadic_half_count(x):
    """half a noisy count compared with 1.25 (lattice 1/2), 2048."""
    v = _count_a(x) * 0.5
    return torch.where(v >= 1.25, tw.token("a"), tw.token("b"))


@case(AB, max_len=4096, alphabet="ab", gens=["ab\n"], cap=40, special=["ab" * 1500])
def sum_of_noisy_integers(x):
    """count(a) * 3 + steps_since(b) + selector_width(b) == 10: several noisy terms, 4096."""
    b = tw.is_token(x, "b")
    w = tw.selector_width(tw.select(b, b, lambda k, q: k == 1))
    v = _count_a(x) * 3 + tw.steps_since(b) + w
    return torch.where(v == 10, tw.token("a"), tw.token("b"))


@case(AB, max_len=2048, alphabet="ab", gens=["ab\n"], cap=60, special=["a" * 20 + "b" * 40])
def count_ratio_eq(x):
    """3 * count(a) == 2 * count(b): two rounded counts, integers compared for equality."""
    ca = _count_a(x)
    cb = torch.round(tw.mean(tw.is_token(x, "b").float()) * (tw.position(x) + 1))
    return torch.where(3 * ca == 2 * cb, tw.token("a"), tw.token("b"))


@case(DIGAB, max_len=4096, alphabet="ab", gens=["ab\n"], cap=40, special=["ab" * 1500])
def lookup_of_noisy_count(x):
    """a table on a rounded count mod 16 (a lookup on a noisy whole number), 4096."""
    c = _count_a(x) % 16
    return tw.lookup(c, {k: "0123456789ab"[k % 12] for k in range(16)})


@case(DIGAB, max_len=2048, alphabet="ab", gens=["ab\n"], cap=40, special=["ab" * 700])
def equals_noisy(x):
    """tw.equals on [count(a) % 4, position % 3] (noisy whole numbers), 2048."""
    v = torch.cat([_count_a(x) % 4, tw.position(x) % 3], dim=-1)
    return torch.where(tw.equals(v, [1, 2]).bool(), tw.token("a"), tw.token("b"))


@case(AB, max_len=2048, alphabet="ab", gens=["ab\n"], cap=40, special=["ab" * 700])
def where_cond_noisy_bool(x):
    """torch.where's condition is a comparison result shifted by one (a moved bool)."""
    c = (_count_a(x) % 3 == 0)
    return torch.where(tw.shift(c.float(), 1).bool(), tw.token("a"), tw.token("b"))


@case(AB, max_len=2048, alphabet="ab", gens=["ab\n"], cap=40, special=["ab" * 700])
def abs_diff_counts(x):
    """|count(a) - count(b)| <= 2 (abs of a noisy whole number), 2048."""
    ca = _count_a(x)
    cb = torch.round(tw.mean(tw.is_token(x, "b").float()) * (tw.position(x) + 1))
    return torch.where(torch.abs(ca - cb) <= 2, tw.token("a"), tw.token("b"))


@case(AB, max_len=2048, alphabet="ab", gens=["ab\n"], cap=40, special=["ab" * 700])
def sign_diff_counts(x):
    """torch.sign(count(a) - count(b)) as a token offset."""
    ca = _count_a(x)
    cb = torch.round(tw.mean(tw.is_token(x, "b").float()) * (tw.position(x) + 1))
    s = torch.sign(ca - cb)
    return torch.where(s > 0, tw.token("a"), tw.token("b"))


@case(AB, max_len=2048, alphabet="ab", gens=["ab\n"], cap=40, special=["ab" * 700])
def minmax_counts(x):
    """min(count(a), count(b)) == max(...) - 1, 2048."""
    ca = _count_a(x)
    cb = torch.round(tw.mean(tw.is_token(x, "b").float()) * (tw.position(x) + 1))
    return torch.where(torch.minimum(ca, cb) == torch.maximum(ca, cb) - 1,
                       tw.token("a"), tw.token("b"))


@case(DIGAB, max_len=2048, alphabet="ab", gens=["ab\n"], cap=40, special=["a" * 700])
def floordiv_noisy_count(x):
    """count(a) // 3 % 10 as a digit, 2048."""
    return tw.token("0") + (_count_a(x) // 3) % 10


@case(AB, max_len=1024, alphabet="ab", gens=["ab\n"], cap=60)
def xor_any_all(x):
    """xor, any, all over comparison results of noisy counts."""
    ca = _count_a(x)
    p = tw.position(x)
    bits = torch.cat([(ca > 2).float(), (p % 2 == 0).float(), (ca % 2 == 1).float()], dim=-1)
    t = bits.any(-1, keepdim=True).bool() ^ bits.all(-1, keepdim=True).bool()
    return torch.where(t, tw.token("a"), tw.token("b"))


# -- fp32 thresholds ------------------------------------------------------------------------------
@case(AB, max_len=64, alphabet="ab", gens=["ab\n"])
def thr_count_over_ten(x):
    """count / 10 >= 0.3 (rounded once; 0.3 is not an fp32 number)."""
    return torch.where(_count_a(x) / 10 >= 0.3, tw.token("a"), tw.token("b"))


@case(AB, max_len=64, alphabet="ab", gens=["ab\n"])
def thr_count_times_tenth(x):
    """count * 0.1 >= 0.3 (inexact: a tie the reference may break)."""
    return torch.where(_count_a(x) * 0.1 >= 0.3, tw.token("a"), tw.token("b"))


@case(AB, max_len=64, alphabet="ab", gens=["ab\n"])
def thr_count_third(x):
    """count / 3 > 1/3 and count / 3 >= 1/3."""
    v = _count_a(x) / 3
    return torch.where((v > 1 / 3).bool() & (v >= 1 / 3).bool(), tw.token("a"), tw.token("b"))


@case(AB, max_len=64, alphabet="ab", gens=["ab\n"])
def thr_mean_third(x):
    """mean(a) > 1/3 (documented as refused)."""
    return torch.where(tw.mean(tw.is_token(x, "a").float()) > 1 / 3, tw.token("a"),
                       tw.token("b"))


@case(AB, max_len=64, alphabet="ab", gens=["ab\n"])
def thr_mean_fp32_third(x):
    """mean(a) < fl(1/3) (documented as refused: the mean 1/3 lands on it)."""
    return torch.where(tw.mean(tw.is_token(x, "a").float()) < 0.3333333432674408,
                       tw.token("a"), tw.token("b"))


@case(AB, max_len=64, alphabet="ab", gens=["ab\n"])
def thr_claimed_mean_two_thirds(x):
    """a range-claimed mean (keeps fractions) compared at 2/3 (fp32 rounds 2/3 up)."""
    m = tw.claim(tw.mean(tw.is_token(x, "a").float()), 0, 1)
    return torch.where(m >= 2 / 3, tw.token("a"), tw.token("b"))


@case(ABC, max_len=32, alphabet="abc", gens=["aab\n", "abc\n"])
def thr_claimed_mean_held_edge(x):
    """a range-claimed mean whose upper end is fp32(0.7), compared with > fp32(0.7)."""
    m = tw.mean(tw.is_token(x, ["a", "\n"]).float())
    m = tw.claim(m, 0, 0.699999988079071)
    return tw.emit(tw.is_token(x, "\n"),
                   [torch.where(m > 0.699999988079071, tw.token("c"), tw.token("b"))])


@case(ABC, max_len=32, alphabet="abc", gens=["aab\n", "abc\n"])
def thr_claimed_mean_held_edge_ge(x):
    """the same claim, compared with >= fp32(0.7) (the mean 7/10 lands on it)."""
    m = tw.mean(tw.is_token(x, ["a", "\n"]).float())
    m = tw.claim(m, 0, 0.699999988079071)
    return tw.emit(tw.is_token(x, "\n"),
                   [torch.where(m >= 0.699999988079071, tw.token("c"), tw.token("b"))])


@case(DIG, max_len=64, alphabet="0123456789", gens=["12\n"])
def thr_mean_where_claimed(x):
    """a mean over digits (where) claimed to [0, 9] compared with 4.5 and with 3."""
    isd = 1 - tw.is_token(x, "\n")
    d = tw.lookup(x, {str(k): k for k in range(10)}, default=0)
    m = tw.claim(tw.mean(d, where=isd), 0, 9)
    t = (m > 4.5).bool() | (m == 3).bool()
    return torch.where(t, tw.token("1"), tw.token("0"))


@case(DIG, max_len=64, alphabet="0123456789", gens=["12\n"])
def claim_mean_then_times_count(x):
    """a range-claimed mean times (position + 1), rounded: near-whole kept through the claim."""
    d = tw.lookup(x, {str(k): k for k in range(10)}, default=0)
    m = tw.claim(tw.mean(d), 0, 9)
    s = torch.round(m * (tw.position(x) + 1))
    return tw.token("0") + s % 10


@case(DIG, max_len=64, alphabet="0123456789", gens=["12\n"])
def claim_shifted_mean_times_count(x):
    """a shifted mean times (position + 1) is not whole: must be refused, or right."""
    d = tw.lookup(x, {str(k): k for k in range(10)}, default=0)
    m = tw.claim(tw.shift(tw.mean(d), 1), 0, 9)
    s = torch.round(m * (tw.position(x) + 1))
    return tw.token("0") + s % 10


@case(DIG, max_len=64, alphabet="0123456789", gens=["12\n"])
def claim_mean_plus_one_times_count(x):
    """(mean + 1) * (position + 1) rounded: whole (sum + count)."""
    d = tw.lookup(x, {str(k): k for k in range(10)}, default=0)
    m = tw.claim(tw.mean(d) + 1, 1, 10)
    s = torch.round(m * (tw.position(x) + 1))
    return tw.token("0") + s % 10


@case(DIG, max_len=64, alphabet="0123456789", gens=["12\n"])
def claim_mean_times_position(x):
    """mean * position (not position + 1) rounded: not whole, ties at .5 possible."""
    d = tw.lookup(x, {str(k): k for k in range(10)}, default=0)
    m = tw.claim(tw.mean(d), 0, 9)
    s = torch.round(m * tw.position(x))
    return tw.token("0") + s % 10


@case(DIG, max_len=64, alphabet="0123456789", gens=["12\n"])
def claim_mean_times_count_shifted(x):
    """shift(mean * (position + 1), 1) rounded: a moved near-whole value."""
    d = tw.lookup(x, {str(k): k for k in range(10)}, default=0)
    s = tw.shift(tw.claim(tw.mean(d) * (tw.position(x) + 1), 0, 9 * 64), 1)
    return tw.token("0") + torch.round(s) % 10


# -- outputs read straight from decoded whole numbers ---------------------------------------------
LETTERS = "abcdefghijklmnopqrstuvwxyz0123456789\n"


@case(DIGAB, max_len=4096, alphabet="ab", gens=["ab\n"], cap=40, special=["ab" * 1200])
def out_clamped_position(x):
    """the output is token('0') + clamp(position, 0, 9): a decoded position as the code, 4096."""
    return tw.token("0") + torch.clamp(tw.position(x), 0, 9)


@case(LETTERS, max_len=8192, alphabet="ab", gens=["ab\n"], cap=40, special=["ab" * 1200])
def out_clamped_steps_wide_vocab(x):
    """token('a') + clamp(steps_since(b), 0, 25) over a 40-token vocabulary, 8192."""
    return tw.token("a") + torch.clamp(tw.steps_since(tw.is_token(x, "b")), 0, 25)


@case(LETTERS, max_len=2048, alphabet="abc", gens=["abc\n"], cap=60, special=["abc" * 300])
def out_selwidth_letters(x):
    """token('a') + count of this token so far, clamped to 25, 2048."""
    w = tw.selector_width(tw.select(x, x, "=="))
    return tw.token("a") + torch.clamp(w, 0, 25)


@case(DIGAB, max_len=64, alphabet="ab", gens=["ab\n"])
def out_near_whole_unrounded(x):
    """token('0') + clamp(mean * count, 0, 9) without a round: not whole in the facts."""
    return tw.token("0") + torch.clamp(tw.mean(tw.is_token(x, "a").float()) * (tw.position(x) + 1),
                                       0, 9)


@case(DIGAB, max_len=64, alphabet="ab", gens=["ab\n"],
      note="out_near_whole_unrounded's refusal advice: torch.round over a declared range")
def advice_out_near_whole_rounded(x):
    c = torch.round(tw.mean(tw.is_token(x, "a").float()) * (tw.position(x) + 1))
    return tw.token("0") + torch.clamp(c, 0, 9)


@case(DIGAB, max_len=512, alphabet="ab9", gens=["ab9\n"], cap=100)
def argmax_ties_rounded_counts(x):
    """argmax over count(a) - count(b) (many ties), the winner's position mod 10."""
    ca = _count_a(x)
    cb = torch.round(tw.mean(tw.is_token(x, "b").float()) * (tw.position(x) + 1))
    s = torch.clamp(ca - cb, -8, 8)
    return tw.token("0") + tw.argmax(s, tw.position(x) % 10)


@case(DIGAB, max_len=2048, alphabet="ab9", gens=["ab9\n"], cap=60, special=["ab" * 600])
def argmin_ties_selwidth(x):
    """argmin of a histogram count clamped to 0..7 (ties to the most recent), 2048."""
    h = torch.clamp(tw.selector_width(tw.select(x, x, "==")), 0, 7)
    return tw.token("0") + tw.argmin(h, tw.position(x) % 10)


@case(DIG, max_len=256, alphabet="0123456789", gens=["123\n"])
def mean_of_claimed_counts(x):
    """a mean of rounded counts (integral, noisy) times the count, rounded, mod 10."""
    c = tw.claim(_count_digit(x, "7"), 0, 255, integral=True)
    s = torch.round(tw.mean(c) * (tw.position(x) + 1))
    return tw.emit(tw.is_token(x, "\n"), [tw.token("0") + s % 10])


def _count_digit(x, ch):
    return torch.round(tw.mean(tw.is_token(x, ch).float()) * (tw.position(x) + 1))


# -- the same programs on the ReLU machine, at d_head 16, and with CP-SAT -------------------------
def _variant(base: Callable, suffix: str, **opts) -> None:
    c = next(k for k in CASES if k.fn is base)
    CASES.append(Case(f"{c.name}__{suffix}", c.fn, c.chars, c.max_len, c.alphabet, c.special,
                      c.gens, {**c.opts, **opts}, c.n_random, c.cap, c.trigger,
                      f"{c.name} compiled with {opts}"))


for _base in (trig_latched_count_lt, argmax_rounded_count, out_count_digit, count_ratio_eq,
              latch_when_claimed_mean_product, claim_range_round_parity, moved_bool_trigger,
              thr_mean_where_claimed):
    _variant(_base, "relu", machine="relu")
for _base in (trig_count_parity, mean_where_selwidth, bool_noisy_and_or):
    _variant(_base, "dhead16", d_head=16)
for _base in (trig_latched_count_lt, out_latched_digit):
    _variant(_base, "opt1", optimize=1)


# -- fp32 facts beyond 2**24, and claims of values that are not whole (found while red-teaming) ---
@case(AB, max_len=16, alphabet="ab", gens=["ab", "b"],
      note="FOUND (pre-existing): b + 2**24 is 2**24 in fp32; the facts call the sum exact")
def big_offset_cancelled(x):
    v = tw.is_token(x, "b") + 2**24
    return torch.where(v - 2**24 == 1, tw.token("a"), tw.token("b"))


@case(AB, max_len=16, alphabet="ab", gens=["ab", "b"],
      note="FOUND (pre-existing): 4097 * 4097 = 16785409 is 16785408 in fp32; facts: exact")
def big_product_scaled(x):
    v = tw.is_token(x, "b") * 4097 * 4097
    return torch.where(v == 16785408, tw.token("a"), tw.token("b"))


@case(AB, max_len=16, alphabet="ab", gens=["ab", "b"],
      note="FOUND (pre-existing): two streams' product over 2**24 (a lookup times a shift)")
def big_product_streams(x):
    a = tw.lookup(x, {"a": 4097, "b": 0}, default=0)
    b = tw.lookup(x, {"a": 4097, "b": 4097}, default=0)
    return torch.where(a * tw.shift(b, 1) == 16785408, tw.token("a"), tw.token("b"))


@case(AB, max_len=64, alphabet="ab", gens=["aab", "ab", "b"],
      note="FOUND (new path): refused before 0505191 (trigger off 0/1 by 0.000474), now "
           "snapped onto 0/1 because the facts call (b + 2**24) - 2**24 exact; fp32 makes it 0")
def big_offset_trigger_snapped(x):
    c = torch.round(tw.mean(tw.is_token(x, "a").float()) * (tw.position(x) + 1))
    b = torch.clamp(c - 1, 0, 1)  # at least two 'a' so far, 0/1 (noisy: a decoded count)
    t = (b + 2**24) - 2**24  # the facts: b; fp32: 2**24 + 1 is 2**24, so 0
    return tw.emit(t, [tw.token("a")], default="b")


@case(AB, max_len=16, alphabet="ab", gens=["a", "ab"],
      note="FOUND (pre-existing): claim(integral=True) accepts 2**22 + 0.3 (tolerance 2**-22 |v|)")
def claim_integral_not_whole_big(x):
    v = tw.lookup(x, {"a": 0.3}, default=0) + 2**22
    v = tw.claim(v, 0, 2**23, integral=True)
    return torch.where(v - 2**22 == 0, tw.token("a"), tw.token("b"))


# =================================================================================================
# Harness
# =================================================================================================
def streams_for(c: Case, rng: random.Random, quick: bool) -> list[str]:
    alpha = c.alphabet or c.chars
    longest = min(c.max_len - 1, c.cap)
    lengths = sorted({1, 2, 3, 5, 8, 13, longest // 4, longest // 2, longest})
    out = [""]
    for n in lengths:
        if n > 0:
            out.append("".join(rng.choice(alpha) for _ in range(n)))
    for _ in range(0 if quick else c.n_random):
        n = rng.randint(1, max(1, longest))
        out.append("".join(rng.choice(alpha) for _ in range(n)))
    for ch in alpha[:3]:
        out.append(ch * longest)
    out += [s for s in c.special if len(s) < c.max_len]
    if c.max_len >= 1024:  # one stream that fills max_seq_len (teacher-forced: one pass)
        out.append("".join(rng.choice(alpha) for _ in range(c.max_len - 1)))
    return out


@dataclass
class Result:
    name: str
    status: str = "?"
    message: str = ""
    streams: int = 0
    positions: int = 0
    skipped: int = 0
    prompts: int = 0
    mismatches: list = field(default_factory=list)
    seconds: float = 0.0


def check_case(c: Case, quick: bool = False, hf: bool = False) -> Result:
    res = Result(c.name)
    t0 = time.time()
    vocab = tw.Vocab(c.chars)
    compiled = tw.compile(c.fn, vocab=vocab, max_seq_len=c.max_len, progress=False, **c.opts)
    try:
        compiled.compile()
    except tw.CompileError as e:
        res.status = "refused"
        res.message = str(e).strip().splitlines()[-1][:200]
        res.seconds = time.time() - t0
        return res
    res.status = "compiled"
    rng = random.Random(hash(c.name) & 0xFFFF)
    for text in streams_for(c, rng, quick):
        ids = vocab.encode(text)
        try:
            want = compiled.traced.run(ids)
        except AssertionError:
            res.skipped += 1
            continue
        got = compiled.logits(ids).argmax(-1)
        res.streams += 1
        res.positions += len(ids)
        for i in range(len(ids)):
            w = round(float(want[i]))
            if int(got[i]) != w:
                res.mismatches.append(("stream", text[:i], f"compiled id {int(got[i])}",
                                       f"reference code {float(want[i])}"))
                break
    prompts = list(c.gens)
    alpha = c.alphabet or c.chars
    for _ in range(0 if quick else 6):
        n = rng.randint(0, min(c.cap, c.max_len - 4))
        prompts.append("".join(rng.choice(alpha.replace(c.trigger, "") or alpha)
                               for _ in range(n)) + c.trigger)
    for p in prompts:
        ids = vocab.encode(p)
        if len(ids) > c.max_len:
            continue
        try:  # greedy, at most GEN_TOKENS new tokens (the eager reference reruns per token)
            want_ids = compiled.reference_ids(ids, max_new_tokens=GEN_TOKENS)
        except (AssertionError, ValueError):
            res.skipped += 1
            continue
        try:
            got_ids = runtime.generate(compiled.weights, ids, max_new_tokens=GEN_TOKENS)
        except tw.InputError as e:  # the model generated <bos>
            got_ids = [f"InputError: {e}"]
        res.prompts += 1
        if got_ids != want_ids:
            res.mismatches.append(("generate", p, vocab.decode([i for i in got_ids
                                                                if isinstance(i, int)]),
                                   vocab.decode(want_ids)))
    if hf:
        ok = [p for p in prompts[:4] if len(vocab.encode(p)) <= c.max_len]
        try:
            rep = compiled.verify(ok, backend="hf")
            res.prompts += rep.count
            res.mismatches += [("hf",) + tuple(m) for m in rep.mismatches]
        except AssertionError:
            pass
    res.seconds = time.time() - t0
    return res


# -- a small generator aimed at the snapping paths ------------------------------------------------
# Random programs over means (with and without `where`), range-only and integral claims of them,
# near-whole counts, decoded positions and widths, whose comparisons feed the consumers that now
# snap (emit's trigger, latch's `when`, mean's `where`, argmax's score, the output code).
FUZZ_CHARS = "0123456789ab\n"


def _fuzz_source(rng: random.Random) -> tuple[str, int]:
    L = rng.choice((16, 24, 32, 64, 64, 128, 512, 2048, 4096))
    lines = ["def prog(x):",
             "    d = tw.lookup(x, {str(k): k for k in range(10)}, default=0)",
             "    a = tw.is_token(x, 'a').float()",
             "    nl = tw.is_token(x, '\\n')",
             "    p = tw.position(x)"]
    ints: list[tuple[str, int, int]] = [("d", 0, 9), ("p", 0, L - 1)]  # name, lo, hi
    reals: list[tuple[str, float, float]] = []
    bools: list[str] = ["a", "nl"]
    n = 0

    def new(expr: str) -> str:
        nonlocal n
        n += 1
        lines.append(f"    v{n} = {expr}")
        return f"v{n}"

    def thr_real(lo: float, hi: float) -> str:
        q = rng.randint(1, 12)
        k = rng.randint(int(lo * q) - 1, int(hi * q) + 1)
        form = rng.random()
        if form < 0.5:
            return repr(k / q)
        if form < 0.7:
            return repr(float(torch.tensor(k / q, dtype=torch.float32)))  # its fp32 value
        return repr(round(k / q, 1))  # a decimal

    for _ in range(rng.randint(3, 7)):
        kind = rng.random()
        if kind < 0.22:  # a mean, perhaps over `where`, perhaps range-claimed
            src, lo, hi = rng.choice([("d", 0, 9), ("a", 0, 1), ("d % 3", 0, 2)])
            where = rng.choice([None, None, rng.choice(bools)])
            m = new(f"tw.mean({src}" + (f", where={where})" if where else ")"))
            if rng.random() < 0.5:
                edge = rng.choice(["", "", "fp32hi", "dbl"])
                chi = {"": hi, "fp32hi": float(torch.tensor(hi - 0.3, dtype=torch.float32)) + 0.3,
                       "dbl": hi}[edge]
                m = new(f"tw.claim({m}, {lo}, {chi})")
            reals.append((m, lo, hi))
            if where is None and rng.random() < 0.6:  # its running sum: near-whole
                c = new(f"{m} * (p + 1)")
                r = rng.random()
                if r < 0.3:
                    c = new(f"tw.claim({c}, 0, {hi * L})")
                    c = new(f"torch.round({c})")
                elif r < 0.6:
                    c = new(f"tw.claim({c}, 0, {hi * L}, integral=True)")
                else:
                    c = new(f"torch.round({c})")
                ints.append((c, 0, hi * L))
        elif kind < 0.34:  # decoded whole numbers
            r = rng.random()
            if r < 0.4:
                b = rng.choice(bools)
                ints.append((new(f"tw.steps_since({b})"), 0, L - 1))
            elif r < 0.7:
                ints.append((new("tw.selector_width(tw.select(x, x, '=='))"), 0, L - 1))
            else:
                b = rng.choice(bools)
                ints.append((new(f"tw.shift({b}, {rng.randint(1, 3)}) * p"), 0, L - 1))
        elif kind < 0.55:  # integer arithmetic
            (e1, l1, h1), (e2, l2, h2) = rng.choice(ints), rng.choice(ints)
            op = rng.choice(["+", "-", "%", "//", "min", "max", "abs", "*c", "clamp", "latch"])
            if op == "+":
                ints.append((new(f"{e1} + {e2}"), l1 + l2, h1 + h2))
            elif op == "-":
                ints.append((new(f"{e1} - {e2}"), l1 - h2, h1 - l2))
            elif op == "%":
                k = rng.randint(2, 10)
                ints.append((new(f"{e1} % {k}"), 0, k - 1))
            elif op == "//":
                k = rng.randint(2, 7)
                ints.append((new(f"{e1} // {k}"), l1 // k, h1 // k))
            elif op == "min":
                ints.append((new(f"torch.minimum({e1}, {e2})"), min(l1, l2), min(h1, h2)))
            elif op == "max":
                ints.append((new(f"torch.maximum({e1}, {e2})"), max(l1, l2), max(h1, h2)))
            elif op == "abs":
                ints.append((new(f"torch.abs({e1} - {e2})"), 0, max(abs(l1 - h2), abs(h1 - l2))))
            elif op == "*c":
                k = rng.choice([2, 3, -1, 5])
                lo_, hi_ = sorted((l1 * k, h1 * k))
                ints.append((new(f"{e1} * {k}"), lo_, hi_))
            elif op == "clamp":
                ints.append((new(f"torch.clamp({e1}, 0, 15)"), max(0, min(l1, 15)),
                             max(0, min(h1, 15))))
            else:
                ints.append((new(f"tw.latch({e1}, {rng.choice(bools)})"), l1, h1))
        elif kind < 0.80:  # comparisons -> bools
            r = rng.random()
            if r < 0.4 and reals:
                m, lo, hi = rng.choice(reals)
                op = rng.choice([">", ">=", "<", "<=", "=="])
                bools.append(new(f"({m} {op} {thr_real(lo, hi)}).float()"))
            elif r < 0.7:
                e, lo, hi = rng.choice(ints)
                op = rng.choice([">", ">=", "<", "<=", "==", "!="])
                t = rng.randint(int(lo), int(hi)) + rng.choice([0, 0, 0.5])
                bools.append(new(f"({e} {op} {t}).float()"))
            else:
                (e1, *_), (e2, *_) = rng.choice(ints), rng.choice(ints)
                op = rng.choice([">", ">=", "==", "!="])
                bools.append(new(f"({e1} {op} {e2}).float()"))
        else:  # logic and moved bools
            b1, b2 = rng.choice(bools), rng.choice(bools)
            r = rng.random()
            if r < 0.4:
                bools.append(new(f"({b1}.bool() & {b2}.bool()).float()"))
            elif r < 0.6:
                bools.append(new(f"({b1}.bool() | {b2}.bool()).float()"))
            elif r < 0.8:
                bools.append(new(f"tw.shift({b1}, {rng.randint(1, 2)})"))
            else:
                bools.append(new(f"tw.latch({b1}, {b2})"))
    # consumers that snap: of the latest values, mostly (so that what was built is used)
    e, lo, hi = ints[-1] if rng.random() < 0.7 else rng.choice(ints)
    b = bools[-1] if rng.random() < 0.7 else rng.choice(bools)
    if len(bools) > 3 and rng.random() < 0.5:
        b = new(f"({b}.bool() {rng.choice('&|^')} {bools[-2]}.bool()).float()")
    r = rng.random()
    if r < 0.25:
        out = f"tw.emit({b}, [tw.token('0') + {e} % 10, tw.token('a')], default='b')"
    elif r < 0.45:
        out = f"tw.token('0') + tw.latch({e} % 10, {b})"
    elif r < 0.65:
        m = new(f"tw.mean(d, where={b})")
        out = f"tw.token('0') + torch.where({m} > 4.5, 1, 0)"
    elif r < 0.85:
        s = new(f"torch.clamp({e}, 0, 15)")
        e2 = rng.choice(ints)[0]
        out = f"tw.token('0') + tw.argmax({s}, {e2} % 10, where={b})"
    else:
        out = f"torch.where({b}.bool(), tw.token('0') + {e} % 10, tw.token('a'))"
    lines.append(f"    return {out}")
    return "\n".join(lines) + "\n", L


def fuzz(n: int, seed: int) -> int:
    import linecache

    rng = random.Random(seed)
    vocab = tw.Vocab(FUZZ_CHARS)
    counts = {"refused": 0, "compiled": 0, "mismatch": 0, "crash": 0, "streams": 0}
    for i in range(n):
        src, L = _fuzz_source(rng)
        fname = f"<redteam_snap fuzz {seed}:{i}>"
        linecache.cache[fname] = (len(src), None, src.splitlines(True), fname)
        scope: dict = {"tw": tw, "torch": torch}
        exec(compile(src, fname, "exec"), scope)
        compiled = tw.compile(scope["prog"], vocab=vocab, max_seq_len=L, progress=False)
        try:
            compiled.compile()
        except tw.CompileError:
            counts["refused"] += 1
            continue
        except Exception as e:  # noqa: BLE001
            counts["crash"] += 1
            print(f"CRASH {i}: {type(e).__name__}: {e}\n{src}", flush=True)
            continue
        counts["compiled"] += 1
        srng = random.Random(i)
        texts = ["".join(srng.choice("0123456789ab\n" if k % 2 else "ab\n9")
                         for _ in range(srng.randint(1, min(L - 1, 40)))) for k in range(6)]
        if L >= 512:
            texts.append("".join(srng.choice("ab9\n") for _ in range(min(L - 1, 700))))
        bad = None
        for text in texts:
            ids = vocab.encode(text)
            try:
                want = compiled.traced.run(ids)
            except (AssertionError, ValueError):
                continue
            counts["streams"] += 1
            got = compiled.logits(ids).argmax(-1)
            for j in range(len(ids)):
                if int(got[j]) != round(float(want[j])):
                    bad = (text[:j], int(got[j]), float(want[j]))
                    break
            if bad:
                break
        if bad:
            counts["mismatch"] += 1
            print(f"MISMATCH {i} (max_seq_len={L}) after {bad[0]!r}: compiled id {bad[1]}, "
                  f"reference code {bad[2]}\n{src}", flush=True)
    print(f"fuzz seed {seed}: {n} programs, {counts}")
    return 1 if counts["mismatch"] else 0


def main(argv: list[str]) -> int:
    if "--fuzz" in argv:
        k = argv.index("--fuzz")
        seed = int(argv[argv.index("--seed") + 1]) if "--seed" in argv else 0
        return fuzz(int(argv[k + 1]), seed)
    quick = "--quick" in argv
    hf = "--hf" in argv
    names = [a for a in argv if not a.startswith("--")]
    cases = [c for c in CASES if not names or c.name in names or
             any(c.name.startswith(n.rstrip("*")) for n in names if n.endswith("*"))]
    results = []
    for c in cases:
        try:
            r = check_case(c, quick, hf)
        except Exception as e:  # a crash is a finding too
            r = Result(c.name, "crash", f"{type(e).__name__}: {e}"[:200])
            traceback.print_exc()
        results.append(r)
        print(f"{r.name:42s} {r.status:9s} streams={r.streams:3d} pos={r.positions:6d} "
              f"prompts={r.prompts:3d} skipped={r.skipped:3d} mism={len(r.mismatches)} "
              f"{r.seconds:6.1f}s {r.message[:110]}", flush=True)
        for m in r.mismatches[:3]:
            print("    MISMATCH", repr(m)[:300], flush=True)
    print()
    print(f"{'program':42s} {'status':9s} {'checked':>8s} {'mismatches':>10s}")
    for r in results:
        print(f"{r.name:42s} {r.status:9s} {r.streams + r.prompts:8d} {len(r.mismatches):10d}")
    n_comp = sum(r.status == "compiled" for r in results)
    n_mis = sum(bool(r.mismatches) for r in results)
    print(f"\n{len(results)} programs, {n_comp} compiled, "
          f"{sum(r.status == 'refused' for r in results)} refused, "
          f"{sum(r.status == 'crash' for r in results)} crashed, {n_mis} with mismatches")
    return 1 if n_mis else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
