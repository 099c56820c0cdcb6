"""Red-team programs for the selector intrinsics (tw.select / aggregate / select_latest /
selector_width), written as a RASP / tracr user would, each with a plain-Python oracle.

Run:  OMP_NUM_THREADS=1 .venv/bin/python scripts/redteam_select.py [NAME ...] [--quick] [--no-hf]
      OMP_NUM_THREADS=1 .venv/bin/python scripts/redteam_select.py --fuzz N [--seed S] [--grids]

Not a pytest file. For every program:

1. the eager reference equals the oracle at every position of every test stream (a stream is
   a prompt; because the model is causal, the output at position i is the next token after
   the prefix of length i, so one stream of length n checks n + 1 prompts);
2. compile; a refusal is recorded with its message and whether it names the program's line;
3. the compiled weights, in process (``Compiled.logits``) and through the saved Phi-3
   directory loaded by transformers, give the reference's token at every position of every
   stream; greedy generation (``generate``, ``reference``, transformers ``generate`` with and
   without the KV cache) is compared with the oracle on prompts that end in a trigger.

Streams: random ones at several lengths up to the longest that fits max_seq_len, and
adversarial ones (empty, one token, all equal, sorted, alternating, per-program specials).
Findings are written up in scripts/REDTEAM_SELECT.md.
"""

from __future__ import annotations

import inspect
import itertools
import random
import struct
import sys
import tempfile
import time
import traceback
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import torch

torch.set_num_threads(1)

import torchwright_fx as tw  # noqa: E402

HERE = Path(__file__).resolve()
DIGITS = "0123456789"
LETTERS = "abcdefghijklmnopqrstuvwxyz"


def f32(v: float) -> float:
    """v rounded to fp32 (what the eager reference holds)."""
    return struct.unpack("f", struct.pack("f", v))[0]


# -- registry ------------------------------------------------------------------------------------
@dataclass
class Case:
    name: str
    fn: Callable
    chars: str
    oracle: Callable[[str], list[str]]  # text -> next token at positions 0..len(text)
    max_len: int = 64
    d_head: int = 32
    machine: str | None = None
    alphabet: str | None = None  # characters of the random streams (default: all)
    special: list[str] = field(default_factory=list)
    gens: list[str] = field(default_factory=list)  # prompts for greedy generation
    exhaustive: int = 0  # every string of this length over the alphabet (covers all prefixes)
    expect: str = "compile"  # or "refuse": what a careful reader of the docs would expect
    note: str = ""

    @property
    def vocab(self) -> tw.Vocab:
        return tw.Vocab(self.chars)


CASES: list[Case] = []


def case(chars: str, oracle: Callable, **kw) -> Callable:
    def deco(fn: Callable) -> Callable:
        CASES.append(Case(fn.__name__, fn, chars, oracle, **kw))
        return fn
    return deco


class S:
    """A text as the model sees it: position 0 is <bos>, s[i] the character at i >= 1."""

    def __init__(self, chars: str, text: str):
        v = tw.Vocab(chars)
        self.s = [None] + list(text)
        self.c = [v.bos_id] + [v[ch] for ch in text]
        self.n = len(self.c)
        self.v = v

    def code(self, ch: str) -> int:
        return self.v[ch]

    def latest(self, i: int, cond: Callable[[int], bool]) -> int | None:
        for j in range(i, 0, -1):
            if cond(j):
                return j
        return None

    def latest_trigger(self, i: int, ch: str) -> int | None:
        return self.latest(i, lambda j: self.s[j] == ch)


def emit_oracle(st: S, i: int, trig: str, items: list[Callable[[int], str]],
                default: str = "<eos>") -> str:
    t = st.latest_trigger(i, trig)
    if t is None or i - t >= len(items):
        return default
    return items[i - t](i)


def mean_frac(vals: list) -> Fraction:
    return Fraction(sum(vals), len(vals))


def round_half_even(q: Fraction) -> int:
    return round(q)  # Python rounds a Fraction half to even, as torch.round does


# =================================================================================================
# Programs. Each is followed (above it, in the decorator) by its oracle.
# =================================================================================================

# -- 1. histogram, printed as a digit at every position ------------------------------------------
def o_hist_digit(text):
    st = S("ab" + DIGITS, text)
    return [str(sum(st.c[j] == st.c[i] for j in range(1, i + 1)) % 10) for i in range(st.n)]


@case("ab" + DIGITS, o_hist_digit, max_len=64, alphabet="ab01",
      gens=["", "a", "ab0", "aaaaaaaaaaa"])
def hist_digit(x):
    w = tw.selector_width(tw.select(x, x, "=="))
    return tw.lookup(w % 10, {d: str(d) for d in range(10)})


# -- 2. count of smaller tokens (RASP sort's target position), ReLU, d_head 16 -------------------
def o_count_less(text):
    st = S("abcdefgh", text)
    return ["abcdefgh"[sum(st.c[j] < st.c[i] for j in range(1, i + 1)) % 8] for i in range(st.n)]


@case("abcdefgh", o_count_less, max_len=128, d_head=16, machine="relu",
      gens=["hgfedcba", "a"])
def count_less_relu(x):
    w = tw.selector_width(tw.select(tw.code(x), tw.code(x), "<"))
    return tw.lookup(w, {n: "abcdefgh"[n % 8] for n in range(128)})


# -- 3. running majority by a mean of 0/1 at 512 --------------------------------------------------
def o_majority(text):
    st = S("ab", text)
    out = []
    for i in range(st.n):
        ca = sum(st.s[j] == "a" for j in range(1, i + 1))
        out.append("a" if i > 0 and 2 * ca > i else "b")
    return out


@case("ab", o_majority, max_len=512, special=["ab" * 255 + "a", "a" * 255 + "b" * 256,
                                              "b" * 256 + "a" * 255],
      gens=["ab", "aab"])
def majority_a(x):
    f = tw.aggregate(tw.select(x, x, "true"), tw.is_token(x, "a"))
    return torch.where(f > 0.5, tw.token("a"), tw.token("b"))


# -- 4. a threshold fp32 cannot hold: > 1/3, d_head 64 --------------------------------------------
def o_third(text):
    st = S("ab", text)
    out = []
    for i in range(st.n):
        ca = sum(st.s[j] == "a" for j in range(1, i + 1))
        out.append("a" if i > 0 and 3 * ca > i else "b")
    return out


@case("ab", o_third, max_len=512, d_head=64, special=["abb" * 170, "bba" * 170, "b" * 510 + "a"])
def third_gt(x):
    f = tw.aggregate(tw.select(x, x, "true"), tw.is_token(x, "a"))
    return torch.where(f > 1 / 3, tw.token("a"), tw.token("b"))


# -- 5. rounded mean of digits (torch.round: half to even) ----------------------------------------
def _digits_of(st):
    return [0] + [int(ch) for ch in st.s[1:]]


def o_mean_round(text):
    st = S(DIGITS, text)
    d = _digits_of(st)
    out = []
    for i in range(st.n):
        out.append(str(round_half_even(mean_frac(d[1:i + 1]))) if i else "0")
    return out


@case(DIGITS, o_mean_round, max_len=128,
      special=["05", "14", "0550", "23", "0123456789" * 12, "09" * 63, "1" + "0" * 126],
      gens=["05", "9"])
def mean_round(x):
    d = tw.lookup(x, {ch: int(ch) for ch in DIGITS}, default=0)
    m = tw.aggregate(tw.select(x, x, "true"), d)
    return tw.lookup(torch.round(m), {k: str(k) for k in range(10)})


# -- 6. first decimal of a mean: floor(m * 10) (m * 10 is rounded twice) --------------------------
def o_mean_floor10(text):
    st = S(DIGITS, text)
    d = _digits_of(st)
    return [str((10 * sum(d[1:i + 1]) // i) % 10) if i else "0" for i in range(st.n)]


@case(DIGITS, o_mean_floor10, max_len=64, special=["0000001", "01", "0000000007" * 6])
def mean_floor10(x):
    d = tw.lookup(x, {ch: int(ch) for ch in DIGITS}, default=0)
    m = tw.aggregate(tw.select(x, x, "true"), d)
    return tw.lookup(torch.floor(m * 10) % 10, {k: str(k) for k in range(10)})


# -- 7. two means over the same selection, compared -----------------------------------------------
def o_two_means(text):
    st = S("abc", text)
    out = []
    for i in range(st.n):
        ca = sum(st.s[j] == "a" for j in range(1, i + 1))
        cb = sum(st.s[j] == "b" for j in range(1, i + 1))
        out.append("a" if ca > cb else "b" if ca < cb else "c")
    return out


@case("abc", o_two_means, max_len=512, special=["ab" * 255, "c" * 511, "abc" * 170],
      gens=["abcab"])
def two_means_cmp(x):
    every = tw.select(x, x, "true")
    fa = tw.aggregate(every, tw.is_token(x, "a"))
    fb = tw.aggregate(every, tw.is_token(x, "b"))
    return torch.where(fa > fb, tw.token("a"), torch.where(fa < fb, tw.token("b"), tw.token("c")))


# -- 8. means over different selections (different denominators), compared ----------------------
def o_diff_means(text):
    st = S("abc", text)
    out = []
    for i in range(st.n):
        if i == 0:
            out.append("b")
            continue
        same = [j for j in range(1, i + 1) if st.c[j] == st.c[i]]
        m1 = Fraction(sum(st.s[j - 1] == "a" for j in same), len(same))
        m2 = Fraction(sum(st.s[j] == "a" for j in range(1, i + 1)), i)
        out.append("a" if m1 > m2 else "b")
    return out


@case("abc", o_diff_means, max_len=512, special=["ab" * 255, "abc" * 170, "a" * 300 + "b" * 211])
def diff_sel_means(x):
    is_a = tw.is_token(x, "a")
    m1 = tw.aggregate(tw.select(x, x, "=="), tw.shift(is_a, 1))
    m2 = tw.aggregate(tw.select(x, x, "true"), is_a)
    return torch.where(m1 > m2, tw.token("a"), tw.token("b"))


# -- 9. key-value memory (letter, digit pairs; '?' letter '\n' prints the digit), d_head 16 -------
KV = "abcdefgh0123?\n"


def o_kv_memory(text):
    st = S(KV, text)

    def letter(j):
        return "abcdefgh".index(st.s[j]) if j >= 1 and st.s[j] in "abcdefgh" else -1

    def asked(i):
        p = st.latest(i, lambda p: p >= 2 and st.s[p - 1] == "?")
        return letter(p) if p is not None else letter(0)

    def value(i):
        a = asked(i)
        j = st.latest(i, lambda j: st.s[j] in "0123" and letter(j - 1) == a)
        return st.s[j] if j is not None else "?"

    return [emit_oracle(st, i, "\n", [value]) for i in range(st.n)]


def _kv_prompts(rng, n, letters="abcdefgh"):
    body = "".join(rng.choice(letters) + rng.choice("0123") for _ in range(n))
    return body + "?" + rng.choice(letters) + "\n"


_r = random.Random(9)
@case(KV, o_kv_memory, max_len=128, d_head=16,
      special=["a1?a\n", "?a\n", "a1a2a3?a\n", "1?\n", "?\n", "a1?b\n" * 20, "\n\n\n"]
      + [_kv_prompts(_r, n) for n in (1, 3, 20, 60)],
      gens=["a3c1b2?c\n", "a1?b\n", "?a\n", "a1a2a3?a\n", "3?\n"]
      + [_kv_prompts(_r, n) for n in (5, 30, 62)])
def kv_memory(x):
    letter = tw.lookup(x, {ch: i for i, ch in enumerate("abcdefgh")}, default=-1)
    is_digit = tw.is_token(x, list("0123"))
    key = tw.shift(letter, 1)
    asked = tw.latch(letter, tw.shift(tw.is_token(x, "?"), 1))
    sel = tw.select(key, asked, "==") & tw.select(is_digit, is_digit, lambda k, q: k == 1)
    return tw.emit(tw.is_token(x, "\n"), [tw.select_latest(sel, tw.code(x), default="?")])


# -- 10. induction head: the token after the previous occurrence of the current one -------------
def o_induction(text, chars="abcdefghij"):
    st = S(chars, text)
    out = []
    for i in range(st.n):
        j = st.latest(i, lambda j: st.c[j - 1] == st.c[i]) if i else None  # noqa: B023
        out.append(st.s[j] if j is not None else "<eos>")
    return out


@case("abcdefghij", o_induction, max_len=256, gens=["abcab", "abcdefghij" * 3 + "a", "aa", "ab"])
def induction(x):
    return tw.select_latest(tw.select(tw.shift(tw.code(x), 1), tw.code(x), "=="), tw.code(x),
                            default="<eos>")


# -- 11. nearest smaller value to the left (a stack), ReLU ----------------------------------------
def o_nearest_smaller(text):
    st = S(DIGITS + "-", text)
    out = []
    for i in range(st.n):
        j = st.latest(i, lambda j: st.c[j] < st.c[i]) if i else None  # noqa: B023
        out.append(st.s[j] if j is not None else "-")
    return out


@case(DIGITS + "-", o_nearest_smaller, max_len=64, machine="relu", gens=["9876543210", "5"])
def nearest_smaller_relu(x):
    return tw.select_latest(tw.select(tw.code(x), tw.code(x), "<"), tw.code(x), default="-")


# -- 12. the latest token different from the current one (~), d_head 16 ---------------------------
def o_latest_diff(text):
    st = S("abc", text)
    out = []
    for i in range(st.n):
        j = st.latest(i, lambda j: st.c[j] != st.c[i]) if i else None  # noqa: B023
        out.append(st.s[j] if j is not None else "<eos>")
    return out


@case("abc", o_latest_diff, max_len=32, d_head=16, gens=["aaa", "ab", ""])
def latest_different(x):
    return tw.select_latest(~tw.select(x, x, "=="), tw.code(x), default="<eos>")


# -- 13. the latest digit in the same letter section (latch as key, & with a key-only part) ------
def o_section_digit(text):
    st = S("abcd0123", text)

    def sec(i):
        p = st.latest(i, lambda p: st.s[p] in "abcd")
        return st.c[p] if p is not None else st.c[0]

    out = []
    for i in range(st.n):
        j = st.latest(i, lambda j: st.s[j] in "0123" and sec(j) == sec(i)) if i else None  # noqa: B023
        out.append(st.s[j] if j is not None else "0")
    return out


@case("abcd0123", o_section_digit, max_len=64, special=["123a1b2a", "a" * 63, "3" * 63])
def section_digit(x):
    code = tw.code(x)
    is_digit = tw.is_token(x, list("0123"))
    section = tw.latch(code, tw.is_token(x, list("abcd")))
    sel = tw.select(section, section, "==") & tw.select(is_digit, is_digit, lambda k, q: k == 1)
    return tw.select_latest(sel, code, default="0")


# -- 14. "<" | "==" (is "<=") ---------------------------------------------------------------------
def o_or_le(text):
    st = S("abcde", text)
    return ["abcde"[sum(st.c[j] <= st.c[i] for j in range(1, i + 1)) % 5] for i in range(st.n)]


@case("abcde", o_or_le, max_len=64)
def or_le(x):
    sel = tw.select(tw.code(x), tw.code(x), "<") | tw.select(x, x, "==")
    return tw.lookup(tw.selector_width(sel), {n: "abcde"[n % 5] for n in range(64)})


# -- 15/16. bigram counts: two equalities joined by & ---------------------------------------------
def _o_bigram(chars):
    def oracle(text):
        st = S(chars, text)
        out = []
        for i in range(st.n):
            w = sum(st.c[j] == st.c[i] and st.c[j - 1] == st.c[i - 1] for j in range(1, i + 1))
            out.append(chars[w % len(chars)])
        return out
    return oracle


@case(LETTERS[:20], _o_bigram(LETTERS[:20]), max_len=128, alphabet="abcd",
      note="two == on 23 values each")
def bigram_20(x):
    prev = tw.shift(tw.code(x), 1)
    w = tw.selector_width(tw.select(x, x, "==") & tw.select(prev, prev, "=="))
    return tw.lookup(w, {n: LETTERS[:20][n % 20] for n in range(128)})


@case("abcd", _o_bigram("abcd"), max_len=128, special=["ab" * 63, "a" * 127])
def bigram_4(x):
    prev = tw.shift(tw.code(x), 1)
    w = tw.selector_width(tw.select(x, x, "==") & tw.select(prev, prev, "=="))
    return tw.lookup(w, {n: "abcd"[n % 4] for n in range(128)})


# -- 17. a callable predicate, mean of codes, rounded, ReLU ---------------------------------------
def o_mod3(text):
    st = S("abcdefg", text)
    out = []
    for i in range(st.n):
        sel = [st.c[j] for j in range(1, i + 1) if (st.c[j] + st.c[i]) % 3 == 0]
        r = round_half_even(mean_frac(sel)) if sel else 0
        out.append("abcdefg"[r % 7])
    return out


@case("abcdefg", o_mod3, max_len=64, machine="relu")
def callable_mod3_relu(x):
    code = tw.code(x)
    m = tw.aggregate(tw.select(code, code, lambda k, q: (k + q) % 3 == 0), code)
    return tw.lookup(torch.round(m), {c: "abcdefg"[c % 7] for c in range(10)})


# -- 18. |k - q| <= 1 on digits -------------------------------------------------------------------
def o_abs_diff(text):
    st = S(DIGITS, text)
    d = _digits_of(st)
    return [str(sum(abs(d[j] - d[i]) <= 1 for j in range(1, i + 1)) % 10) for i in range(st.n)]


@case(DIGITS, o_abs_diff, max_len=64)
def abs_diff_le1(x):
    d = tw.lookup(x, {ch: int(ch) for ch in DIGITS}, default=0)
    w = tw.selector_width(tw.select(d, d, lambda k, q: abs(k - q) <= 1))
    return tw.lookup(w % 10, {k: str(k) for k in range(10)})


# -- 19. parity vote: keys are (digit % 2), ~, widths compared, d_head 16 -------------------------
def o_parity(text):
    st = S(DIGITS + "eo", text)
    d = [0] + [int(ch) if ch in DIGITS else 0 for ch in st.s[1:]]
    out = []
    for i in range(st.n):
        same = sum(d[j] % 2 == d[i] % 2 for j in range(1, i + 1))
        out.append("e" if same > i - same else "o")
    return out


@case(DIGITS + "eo", o_parity, max_len=128, d_head=16)
def parity_vote(x):
    d = tw.lookup(x, {ch: int(ch) for ch in DIGITS}, default=0)
    par = d % 2
    same = tw.selector_width(tw.select(par, par, "=="))
    diff = tw.selector_width(~tw.select(par, par, "=="))
    return torch.where(same > diff, tw.token("e"), tw.token("o"))


# -- 20. shifted keys against a latched query, printed after the trigger --------------------------
def o_shift2_latch(text):
    st = S("abcde\n", text)

    def c_at(j):
        return st.c[j] if j >= 0 else st.c[0]

    def q(i):
        p = st.latest_trigger(i, "\n")
        return c_at(p - 1) if p is not None else st.c[0]

    def item(i):
        return "abcde"[sum(c_at(j - 2) == q(i) for j in range(1, i + 1)) % 5]

    return [emit_oracle(st, i, "\n", [item]) for i in range(st.n)]


@case("abcde\n", o_shift2_latch, max_len=64, special=["\n", "a\n", "aa\n", "ab\nab\n"],
      gens=["abcabc\n", "\n", "a\n", "aaaa\n"])
def shift2_latch(x):
    nl = tw.is_token(x, "\n")
    q = tw.latch(tw.shift(tw.code(x), 1), nl)
    w = tw.selector_width(tw.select(tw.shift(tw.code(x), 2), q, "=="))
    return tw.emit(nl, [tw.lookup(w, {n: "abcde"[n % 5] for n in range(64)})])


# -- 21. keys and queries by arithmetic on codes (mod 4) ------------------------------------------
P16 = LETTERS[:16]


def o_mod4(text):
    st = S(P16, text)
    out = []
    for i in range(st.n):
        sel = [j for j in range(1, i + 1) if st.c[j] % 4 == (st.c[i] + 1) % 4]
        m = mean_frac([st.s[j] in "aeim" for j in sel]) if sel else Fraction(0)
        out.append("a" if m > Fraction(1, 4) else "b")
    return out


@case(P16, o_mod4, max_len=256)
def mod4_keys(x):
    code = tw.code(x)
    m = tw.aggregate(tw.select(code % 4, (code + 1) % 4, "=="), tw.is_token(x, list("aeim")))
    return torch.where(m > 0.25, tw.token("a"), tw.token("b"))


# -- 22. comparison (bool) keys & != --------------------------------------------------------------
def o_bool_keys(text):
    st = S(DIGITS, text)
    five = st.code("5")
    return [str(sum((st.c[j] < five) == (st.c[i] < five) and st.c[j] != st.c[i]
                    for j in range(1, i + 1)) % 10) for i in range(st.n)]


@case(DIGITS, o_bool_keys, max_len=64)
def bool_keys(x):
    lt = tw.code(x) < tw.token("5")
    sel = tw.select(lt, lt, "==") & tw.select(x, x, "!=")
    return tw.lookup(tw.selector_width(sel) % 10, {k: str(k) for k in range(10)})


# -- 23. "false": the default path only, returned directly ----------------------------------------
@case("abc", lambda text: ["b"] * (len(text) + 1), max_len=16, gens=["", "abc"])
def false_default(x):
    return tw.aggregate(tw.select(x, x, "false"), tw.code(x), default="b")


# -- 24. majority by two widths ("true" and "==") at 512 ------------------------------------------
def o_majority_width(text):
    st = S("ab", text)
    return ["a" if 2 * sum(st.c[j] == st.c[i] for j in range(1, i + 1)) > i else "b"
            for i in range(st.n)]


@case("ab", o_majority_width, max_len=512, special=["ab" * 255, "a" * 256 + "b" * 255])
def majority_width(x):
    w_all = tw.selector_width(tw.select(x, x, "true"))
    w_eq = tw.selector_width(tw.select(x, x, "=="))
    return torch.where(2 * w_eq > w_all, tw.token("a"), tw.token("b"))


# -- 25. double negation, mean with a token default -----------------------------------------------
def o_double_not(text):
    st = S("abc", text)
    out = []
    for i in range(st.n):
        sel = [st.c[j] for j in range(1, i + 1) if st.c[j] < st.c[i]]
        r = round_half_even(mean_frac(sel)) if sel else st.code("a")
        out.append("abc"[r % 3])
    return out


@case("abc", o_double_not, max_len=64)
def double_not(x):
    m = tw.aggregate(~~tw.select(tw.code(x), tw.code(x), "<"), tw.code(x), default="a")
    return tw.lookup(torch.round(m), {n: "abc"[n % 3] for n in range(6)})


# -- 26. sel & ~sel (never) and sel | ~sel (always) -----------------------------------------------
@case("abc", lambda text: ["abc"[i % 3] for i in range(len(text) + 1)], max_len=32)
def contradiction(x):
    sel = tw.select(x, x, "<")
    a = tw.aggregate(sel & ~sel, tw.code(x), default="c")
    w = tw.selector_width(sel | ~sel)
    return torch.where(a == tw.token("c"), tw.lookup(w, {n: "abc"[n % 3] for n in range(32)}),
                       tw.token("a"))


# -- 27-29. predicates on decimal keys (lookup to 0.1 .. 0.4, code / 10) --------------------------
# The eager reference passes the keys' fp32 values to the predicate (as Python floats), so the
# oracle does the same: 0.2 is 0.20000000298..., and 0.2 + 0.2 > 0.4 holds.
DEC = {"a": 0.1, "b": 0.2, "c": 0.3, "d": 0.4}


def o_dec_sum(text):
    st = S("abcd", text)
    k = [0.0] + [f32(DEC[ch]) for ch in st.s[1:]]
    return ["abcd"[sum(k[j] + k[i] > 0.4 for j in range(1, i + 1)) % 4] for i in range(st.n)]


@case("abcd", o_dec_sum, max_len=16, exhaustive=5)
def dec_lookup_sum(x):
    k = tw.lookup(x, DEC)
    w = tw.selector_width(tw.select(k, k, lambda k, q: k + q > 0.4))
    return tw.lookup(w, {n: "abcd"[n % 4] for n in range(16)})


def o_dec_eq(text):
    st = S("ab", text)
    k = [0.0] + [f32({"a": 0.1, "b": 0.2}[ch]) for ch in st.s[1:]]
    return ["ab"[sum(k[j] == 0.2 for j in range(1, i + 1)) % 2] for i in range(st.n)]


@case("ab", o_dec_eq, max_len=16, exhaustive=8)
def dec_eq_const(x):
    k = tw.lookup(x, {"a": 0.1, "b": 0.2})
    w = tw.selector_width(tw.select(k, k, lambda k, q: k == 0.2))
    return tw.lookup(w, {n: "ab"[n % 2] for n in range(16)})


def o_div10(text):
    st = S("abcd", text)
    k = [f32(c / 10) for c in st.c]
    return ["abcd"[sum(k[j] + k[i] > 1.1 for j in range(1, i + 1)) % 4] for i in range(st.n)]


@case("abcd", o_div10, max_len=16, exhaustive=5)
def div10_keys(x):
    k = tw.code(x) / 10
    w = tw.selector_width(tw.select(k, k, lambda k, q: k + q > 1.1))
    return tw.lookup(w, {n: "abcd"[n % 4] for n in range(16)})


# -- 30-32. refusals a new user meets -------------------------------------------------------------
def _never(text):
    return ["a"] * (len(text) + 1)


def o_position_key(text):
    return ["ab"[max(i - 1, 0) % 2] for i in range(len(text) + 1)]


def o_width_key(text):
    st = S("ab", text)
    w = [sum(st.c[k] == st.c[j] for k in range(1, j + 1)) for j in range(st.n)]
    return ["ab"[sum(w[j] == w[i] for j in range(1, i + 1)) % 2] for i in range(st.n)]


@case("ab", o_position_key, max_len=32, expect="refuse")
def position_key(x):
    pos = tw.position(x)
    w = tw.selector_width(tw.select(pos, pos, "<"))  # RASP's Select(indices, indices, LT)
    return tw.lookup(w, {n: "ab"[n % 2] for n in range(32)})


@case("ab", o_width_key, max_len=32, expect="refuse")
def width_key(x):
    w = tw.selector_width(tw.select(x, x, "=="))
    w2 = tw.selector_width(tw.select(w, w, "=="))  # select on a SelectorWidth
    return tw.lookup(w2, {n: "ab"[n % 2] for n in range(32)})


@case("ab", _never, max_len=32, expect="refuse")
def python_and(x):
    sel = tw.select(x, x, "==") and tw.select(x, x, "<")  # `and` instead of `&`
    return tw.lookup(tw.selector_width(sel), {n: "ab"[n % 2] for n in range(32)})


# -- 33. histogram over 40 characters at 512 (== split into digits) -------------------------------
C40 = LETTERS + "0123456789+-*/"


def o_hist40(text):
    st = S(C40, text)
    return [C40[sum(st.c[j] == st.c[i] for j in range(1, i + 1)) % 40] for i in range(st.n)]


def _o_hist_n(chars):
    def oracle(text):
        st = S(chars, text)
        return [chars[sum(st.c[j] == st.c[i] for j in range(1, i + 1)) % len(chars)]
                for i in range(st.n)]
    return oracle


@case(C40, o_hist40, max_len=512, special=["a" * 511, C40 * 12], gens=["hello"])
def big_hist_40(x):
    w = tw.selector_width(tw.select(x, x, "=="))
    return tw.lookup(w, {n: C40[n % 40] for n in range(512)})


# -- 34/35. induction over 40 characters: d_head 16 (too small) and 64 ----------------------------
@case(C40, lambda t: o_induction(t, C40), max_len=128, d_head=16, expect="refuse")
def big_induction_d16(x):
    return tw.select_latest(tw.select(tw.shift(tw.code(x), 1), tw.code(x), "=="), tw.code(x),
                            default="<eos>")


@case(C40, lambda t: o_induction(t, C40), max_len=512, d_head=64,
      gens=["the cat sat on the mat the c".replace(" ", "+"), "abcdefghijklmnopqrstuvwxyz0123a"])
def big_induction_d64(x):
    return tw.select_latest(tw.select(tw.shift(tw.code(x), 1), tw.code(x), "=="), tw.code(x),
                            default="<eos>")


# -- 36. key-value memory printing two digits after the trigger (three & parts) -------------------
KV2 = "abcd0123?\n"


def o_kv_two(text):
    st = S(KV2, text)

    def c_at(j):
        return st.c[j] if j >= 0 else st.c[0]

    def asked(i):
        p = st.latest(i, lambda p: p >= 2 and st.s[p - 1] == "?")
        return st.c[p] if p is not None else st.c[0]

    def in_input(j):
        return st.latest(j, lambda p: st.s[p] == "?") is None

    def item(k):
        def f(i):
            a = asked(i)
            j = st.latest(i, lambda j: c_at(j - k - 1) == a and in_input(j) and st.s[j] in "0123")
            return st.s[j] if j is not None else "?"
        return f

    return [emit_oracle(st, i, "\n", [item(0), item(1)]) for i in range(st.n)]


def _kv2_prompt(rng, n):
    return "".join(rng.choice("abcd") + rng.choice("0123") + rng.choice("0123")
                   for _ in range(n)) + "?" + rng.choice("abcd") + "\n"


_r = random.Random(36)
@case(KV2, o_kv_two, max_len=64,
      special=["a12?a\n", "a12b30?b\n", "?a\n", "a1?a\n"] + [_kv2_prompt(_r, n) for n in (3, 19)],
      gens=["a12b30?b\n", "a12?a\n", "?a\n", "a12a33?a\n", "a1?a\n"]
      + [_kv2_prompt(_r, n) for n in (2, 10, 19)])
def kv_two_digits(x):
    code = tw.code(x)
    is_digit = tw.is_token(x, list("0123"))
    is_q = tw.is_token(x, "?")
    in_input = 1 - tw.latch(is_q, is_q)
    asked = tw.latch(code, tw.shift(is_q, 1))
    items = []
    for k in range(2):
        sel = (tw.select(tw.shift(code, k + 1), asked, "==")
               & tw.select(in_input, in_input, lambda a, b: a == 1)
               & tw.select(is_digit, is_digit, lambda a, b: a == 1))
        items.append(tw.select_latest(sel, code, default="?"))
    return tw.emit(tw.is_token(x, "\n"), items)


# -- 37. count of 'a' printed as two digits after the trigger -------------------------------------
CA = "ab\n" + DIGITS


def o_count_a(text):
    st = S(CA, text)

    def n(i):
        return sum(st.s[j] == "a" for j in range(1, i + 1))

    return [emit_oracle(st, i, "\n", [lambda i: str(n(i) // 10 % 10), lambda i: str(n(i) % 10)])
            for i in range(st.n)]


@case(CA, o_count_a, max_len=128, alphabet="ab\n",
      special=["a" * 99 + "\n", "a" * 100 + "\n", "a" * 125 + "\n", "\n", "b" * 120 + "\n"],
      gens=["aab\n", "\n", "a" * 99 + "\n", "a" * 100 + "\n", "ab" * 60 + "\n"])
def count_a_2digits(x):
    n = tw.selector_width(tw.select(x, x, lambda k, q: k == tw.token("a")))
    first = tw.lookup(n // 10 % 10, {d: str(d) for d in range(10)})
    second = tw.lookup(n % 10, {d: str(d) for d in range(10)})
    return tw.emit(tw.is_token(x, "\n"), [first, second])


# -- 38. a width as a gather index ----------------------------------------------------------------
def o_width_gather(text):
    st = S("abcd#", text)
    out = []
    for i in range(st.n):
        k = sum(st.s[j] == "#" for j in range(1, i + 1))
        idx = min(k + 1, i)
        out.append("a" if idx == 0 else st.s[idx])
    return out


@case("abcd#", o_width_gather, max_len=64, special=["#" * 63, "abcd" * 15, "#a#b#c#d" * 7])
def width_gather(x):
    k = tw.selector_width(tw.select(x, x, lambda k, q: k == tw.token("#")))
    g = tw.gather(tw.code(x), k + 1)
    return torch.where(g == tw.token("<bos>"), tw.token("a"), g)


# -- 39. width == 0 and width % 2, ReLU -----------------------------------------------------------
def o_width_parity(text):
    st = S("xyz", text)
    out = []
    for i in range(st.n):
        w = sum(st.c[j] > st.c[i] for j in range(1, i + 1))
        out.append("x" if w == 0 else "y" if w % 2 == 1 else "z")
    return out


@case("xyz", o_width_parity, max_len=256, machine="relu", special=["zyx" * 85, "x" * 255])
def width_parity_relu(x):
    w = tw.selector_width(tw.select(tw.code(x), tw.code(x), ">"))
    return torch.where(w == 0, tw.token("x"), torch.where(w % 2 == 1, tw.token("y"),
                                                          tw.token("z")))


# -- 40. distance to the previous occurrence: widths moved by select_latest, subtracted ----------
def o_dist_prev(text):
    st = S("abcd", text)
    out = []
    for i in range(st.n):
        j = st.latest(i, lambda j: st.c[j - 1] == st.c[i]) if i else None  # noqa: B023
        out.append("abcd"[(i - (j or 0)) % 4])
    return out


@case("abcd", o_dist_prev, max_len=128, special=["a" * 127, "abcd" * 31])
def dist_prev_occurrence(x):
    pos = tw.selector_width(tw.select(x, x, "true"))
    prev = tw.select_latest(tw.select(tw.shift(tw.code(x), 1), tw.code(x), "=="), pos, default=0)
    return tw.lookup((pos - prev) % 4, {n: "abcd"[n] for n in range(4)})


# -- 41. aggregate of two columns at once ---------------------------------------------------------
def o_agg_2col(text):
    st = S("abcd", text)
    out = []
    for i in range(st.n):
        sel = [j for j in range(1, i + 1) if st.c[j] <= st.c[i]]
        a = sum(st.s[j] == "a" for j in sel)
        b = sum(st.s[j] == "b" for j in sel)
        out.append("a" if a > b else "b" if a < b else "c")
    return out


@case("abcd", o_agg_2col, max_len=64)
def agg_2col(x):
    both = torch.cat([tw.is_token(x, "a"), tw.is_token(x, "b")], dim=-1)
    m = tw.aggregate(tw.select(tw.code(x), tw.code(x), "<="), both)
    fa, fb = m[:, 0:1], m[:, 1:2]
    return torch.where(fa > fb, tw.token("a"), torch.where(fa < fb, tw.token("b"), tw.token("c")))


# -- 42. negative values and a negative default ---------------------------------------------------
def o_agg_neg(text):
    st = S(DIGITS, text)
    d = _digits_of(st)
    out = []
    for i in range(st.n):
        sel = [2 - d[j] for j in range(1, i + 1) if d[j] >= d[i]]
        m = mean_frac(sel) if sel else Fraction(-3)
        out.append("1" if m > Fraction(-3, 2) else "0")
    return out


@case(DIGITS, o_agg_neg, max_len=128)
def agg_negative(x):
    d = tw.lookup(x, {ch: int(ch) for ch in DIGITS}, default=0)
    m = tw.aggregate(tw.select(d, d, ">="), 2 - d, default=-3)
    return torch.where(m > -1.5, tw.token("1"), tw.token("0"))


# -- 43. max_seq_len 8, exhaustive ----------------------------------------------------------------
def o_tiny(text):
    st = S("ab", text)
    out = []
    for i in range(st.n):
        w = sum(st.c[j] == st.c[i] for j in range(1, i + 1))
        other = [st.s[j] == "a" for j in range(1, i + 1) if st.c[j] != st.c[i]]
        m = mean_frac(other) if other else Fraction(0)
        out.append("a" if w % 2 == 1 and m < Fraction(1, 2) else "b")
    return out


@case("ab", o_tiny, max_len=8, exhaustive=7)
def tiny_exhaustive(x):
    w = tw.selector_width(tw.select(x, x, "=="))
    m = tw.aggregate(tw.select(x, x, "!="), tw.is_token(x, "a"))
    return torch.where((w % 2 == 1) & (m < 0.5), tw.token("a"), tw.token("b"))


# -- 44. induction variant on ReLU with d_head 64 at 512 ------------------------------------------
@case("abcde", lambda t: [c if c != "<eos>" else "e" for c in o_induction(t, "abcde")],
      max_len=512, machine="relu", d_head=64, gens=["abcab"])
def latest_shifted_relu(x):
    return tw.select_latest(tw.select(tw.shift(tw.code(x), 1), tw.code(x), "=="), tw.code(x),
                            default="e")


# -- 45. aggregate of a width (a noisy value) -----------------------------------------------------
def o_agg_width(text):
    st = S("ab", text)
    v = [sum(st.c[k] == st.c[j] for k in range(1, j + 1)) for j in range(st.n)]
    out = []
    for i in range(st.n):
        m = mean_frac(v[1:i + 1]) if i else Fraction(0)
        out.append("a" if m > 2 else "b")
    return out


@case("ab", o_agg_width, max_len=256, special=["ab" * 127, "aaab" * 63, "aaaaab"])
def agg_of_width(x):
    v = tw.selector_width(tw.select(x, x, "=="))
    m = tw.aggregate(tw.select(x, x, "true"), v)
    return torch.where(m > 2, tw.token("a"), tw.token("b"))


# -- 46. a select_latest result as the query of another select ------------------------------------
def o_nested_query(text):
    st = S("abcd", text)
    out = []
    for i in range(st.n):
        j = st.latest(i, lambda j: st.c[j] != st.c[i]) if i else None  # noqa: B023
        q = st.c[j] if j is not None else st.code("a")
        out.append("abcd"[sum(st.c[k] == q for k in range(1, i + 1)) % 4])
    return out


@case("abcd", o_nested_query, max_len=128)
def nested_query(x):
    q = tw.select_latest(~tw.select(x, x, "=="), tw.code(x), default="a")
    w = tw.selector_width(tw.select(x, q, "=="))
    return tw.lookup(w, {n: "abcd"[n % 4] for n in range(128)})


# -- 47. == & ~(shifted ==) -----------------------------------------------------------------------
def o_and_not(text):
    st = S("abc", text)
    out = []
    for i in range(st.n):
        w = sum(st.c[j] == st.c[i] and not st.c[j - 1] == st.c[i - 1] for j in range(1, i + 1))
        out.append("abc"[w % 3])
    return out


@case("abc", o_and_not, max_len=64)
def and_not(x):
    prev = tw.shift(tw.code(x), 1)
    sel = tw.select(x, x, "==") & ~tw.select(prev, prev, "==")
    return tw.lookup(tw.selector_width(sel), {n: "abc"[n % 3] for n in range(64)})


# -- 48. key-only and query-only predicates -------------------------------------------------------
def o_key_query_only(text):
    st = S("abcdefgh", text)
    d = st.code("d")
    out = []
    for i in range(st.n):
        w1 = sum(st.c[j] > d for j in range(1, i + 1))
        w2 = i if st.c[i] > d else 0
        out.append("abcdefgh"[(w1 + 2 * w2) % 8])
    return out


@case("abcdefgh", o_key_query_only, max_len=64)
def key_query_only(x):
    code = tw.code(x)
    d = tw.token("d")
    w1 = tw.selector_width(tw.select(code, code, lambda k, q: k > d))
    w2 = tw.selector_width(tw.select(code, code, lambda k, q: q > d))
    return tw.lookup((w1 + 2 * w2) % 8, {n: "abcdefgh"[n] for n in range(8)})


# -- 49. `in` a list of vowels, 26 letters, d_head 16 ---------------------------------------------
def o_vowel(text):
    st = S(LETTERS, text)
    out = []
    for i in range(st.n):
        w = sum((st.s[j] in "aeiou") == (st.s[i] in "aeiou") for j in range(1, i + 1)) \
            if i else 0
        out.append(LETTERS[w % 26])
    return out


@case(LETTERS, o_vowel, max_len=256, d_head=16)
def vowel_class(x):
    vowels = [tw.token(ch) for ch in "aeiou"]
    w = tw.selector_width(tw.select(x, x, lambda k, q: (k in vowels) == (q in vowels)))
    return tw.lookup(w, {n: LETTERS[n % 26] for n in range(256)})


# -- 50. counting every position on ReLU at 512 ---------------------------------------------------
@case(DIGITS, lambda t: [str(i % 10) for i in range(len(t) + 1)], max_len=512, machine="relu",
      gens=["", "123"])
def count_all_relu(x):
    w = tw.selector_width(tw.select(x, x, "true"))
    return tw.lookup(w % 10, {k: str(k) for k in range(10)})


# -- 51. keys and queries on a half-integer grid --------------------------------------------------
def o_half_grid(text):
    st = S("abcdef", text)
    return ["abcdef"[sum(st.c[j] / 2 <= st.c[i] / 2 + 0.5 for j in range(1, i + 1)) % 6]
            for i in range(st.n)]


@case("abcdef", o_half_grid, max_len=64)
def half_grid(x):
    k = tw.code(x) / 2
    w = tw.selector_width(tw.select(k, k + 0.5, "<="))
    return tw.lookup(w, {n: "abcdef"[n % 6] for n in range(64)})


# -- 52. a mean of digits close to 4.5 at 512 -----------------------------------------------------
def o_near_half(text):
    st = S(DIGITS, text)
    d = _digits_of(st)
    out, s = [], 0
    for i in range(st.n):
        s += d[i] if i else 0
        out.append("1" if i and Fraction(s, i) >= Fraction(9, 2) else "0")
    return out


def _near(n, target):
    """n digits whose running mean hugs target from below and above."""
    out, s = [], 0
    for i in range(1, n + 1):
        d = max(0, min(9, int(target * i - s + (1 if i % 2 else 0))))
        out.append(str(d))
        s += d
    return "".join(out)


@case(DIGITS, o_near_half, max_len=512,
      special=["45" * 255, "54" * 255, _near(511, 4.5), "9" * 255 + "0" * 256, "4" * 510 + "9"])
def mean_near_half(x):
    d = tw.lookup(x, {ch: int(ch) for ch in DIGITS}, default=0)
    m = tw.aggregate(tw.select(x, x, "true"), d)
    return torch.where(m >= 4.5, tw.token("1"), tw.token("0"))


# -- 53. the epsilon idiom: > 0.5 - 1e-9 (fp32 holds it as 0.5) -----------------------------------
def o_eps(text):
    st = S("ab", text)
    out = []
    for i in range(st.n):
        ca = sum(st.s[j] == "a" for j in range(1, i + 1))
        # the reference compares in fp32: f32(0.5 - 1e-9) is 0.5
        out.append("a" if i and f32(ca / i) > f32(0.5 - 1e-9) else "b")
    return out


@case("ab", o_eps, max_len=64, special=["ab" * 31, "ba" * 31])
def eps_threshold(x):
    f = tw.aggregate(tw.select(x, x, "true"), tw.is_token(x, "a"))
    return torch.where(f > 0.5 - 1e-9, tw.token("a"), tw.token("b"))


# -- 54. select_latest through `|` ----------------------------------------------------------------
def o_latest_or(text):
    st = S("abcd", text)
    d = st.code("d")
    out = []
    for i in range(st.n):
        j = st.latest(i, lambda j: st.c[j - 1] == st.c[i] or st.c[j - 1] == d) if i else None  # noqa: B023
        out.append(st.s[j] if j is not None else "<eos>")
    return out


@case("abcd", o_latest_or, max_len=64, gens=["abca", "d", "ab"])
def latest_or(x):
    prev = tw.shift(tw.code(x), 1)
    sel = tw.select(prev, tw.code(x), "==") | tw.select(prev, tw.code(x),
                                                       lambda k, q: k == tw.token("d"))
    return tw.select_latest(sel, tw.code(x), default="<eos>")


# -- 55. three & parts, one of them an == on 39 token codes (digits) ------------------------------
C36 = LETTERS + DIGITS


def o_and3_big(text):
    st = S(C36, text)
    i_code = st.code("i")
    vow = set(st.code(ch) for ch in "aeiou")

    def c_at(j):
        return st.c[j] if j >= 0 else st.c[0]

    out = []
    for i in range(st.n):
        w = sum(st.c[j] == st.c[i] and (st.c[j] < i_code) >= (st.c[i] < i_code)
                and (c_at(j - 1) in vow) == (c_at(i - 1) in vow) for j in range(1, i + 1))
        out.append(C36[w % 36])
    return out


@case(C36, o_and3_big, max_len=256)
def and3_big(x):
    code = tw.code(x)
    small = code < tw.token("i")
    pv = tw.shift(tw.is_token(x, list("aeiou")), 1)
    sel = tw.select(x, x, "==") & tw.select(small, small, ">=") & tw.select(pv, pv, "==")
    return tw.lookup(tw.selector_width(sel), {n: C36[n % 36] for n in range(256)})


# -- 56. selector width followed by arithmetic then a select on the token stream ------------------
def o_rank_letter(text):
    st = S("abcdef\n", text)

    out = []
    for i in range(st.n):
        t = st.latest_trigger(i, "\n")
        if t is None or t != i:
            out.append("<eos>")
            continue
        n = sum(st.s[j] != "\n" for j in range(1, i + 1))
        out.append("abcdef"[(3 * n + 1) % 6])
    return out


@case("abcdef\n", o_rank_letter, max_len=128, gens=["abc\n", "\n", "a" * 100 + "\n"])
def width_arith_emit(x):
    n = tw.selector_width(tw.select(x, x, lambda k, q: k != tw.token("\n")))
    return tw.emit(tw.is_token(x, "\n"),
                   [tw.lookup((3 * n + 1) % 6, {k: "abcdef"[k] for k in range(6)})])


# -- 57. select_latest of a two-column value, latched, one column printed per step ----------------
BANG = {0: "a", 1: "a", 2: "a", 3: "a", 4: "b", 5: "c", 6: "c"}  # codes of <bos>.. '!' -> a letter


def o_latest_pair(text):
    st = S("abc!", text)

    def c_at(j):
        return st.c[j] if j >= 0 else st.c[0]

    def item(k):
        def f(i):
            t = st.latest_trigger(i, "!")
            j = st.latest(t, lambda j: j >= 2 and st.s[j - 1] == "!")
            if j is None:
                return "b"
            return BANG[c_at(j - 3 + k)]
        return f

    return [emit_oracle(st, i, "!", [item(0), item(1)]) for i in range(st.n)]


@case("abc!", o_latest_pair, max_len=64, special=["ab!c!", "!!!", "a!b!c!"],
      gens=["ab!c!", "!", "ab!", "abc!bc!", "!!", "c!a!"])
def latest_pair(x):
    code = tw.code(x)
    is_bang = tw.is_token(x, "!")
    before = torch.cat([tw.lookup(tw.shift(code, 3), BANG), tw.lookup(tw.shift(code, 2), BANG)],
                       dim=-1)
    after_bang = tw.shift(is_bang, 1)
    last = tw.select_latest(tw.select(after_bang, after_bang, lambda k, q: k == 1), before,
                            default="b")
    held = tw.latch(last, is_bang)  # emit reads item k at t + k: hold the trigger's value
    return tw.emit(is_bang, [held[:, 0:1], held[:, 1:2]])


# -- 58. "<" | "==" over the same stream, with the d_head it needs (128) --------------------------
@case("abcde", o_or_le, max_len=64, d_head=128, note="or_le refused at 32 and 64")
def or_le_d128(x):
    sel = tw.select(tw.code(x), tw.code(x), "<") | tw.select(x, x, "==")
    return tw.lookup(tw.selector_width(sel), {n: "abcde"[n % 5] for n in range(64)})


# -- 59. a predicate that fails only on the <bos> row's value -------------------------------------
def o_divides(text):
    st = S("abcd", text)
    d = [0] + [" abcd".index(ch) for ch in st.s[1:]]
    return ["abcd"[sum(d[i] % d[j] == 0 for j in range(1, i + 1)) % 4] for i in range(st.n)]


@case("abcd", o_divides, max_len=16, expect="compile",
      note="every token maps to 1..4; only the implicit <bos> row holds 0")
def divides(x):
    d = tw.lookup(x, {"a": 1, "b": 2, "c": 3, "d": 4})
    w = tw.selector_width(tw.select(d, d, lambda k, q: q % k == 0))
    return tw.lookup(w, {n: "abcd"[n % 4] for n in range(16)})


# -- 60-62. more refusals: a moved token stream, a rounded mean, an unknown predicate -------------
def o_moved_keys(text):
    st = S("abcd", text)
    return ["abcd"[sum(st.c[j - 1] == st.c[i] for j in range(1, i + 1)) % 4] for i in range(st.n)]


@case("abcd", o_moved_keys, max_len=16, expect="refuse")
def moved_token_keys(x):
    w = tw.selector_width(tw.select(tw.shift(x, 1), x, "=="))
    return tw.lookup(w, {n: "abcd"[n % 4] for n in range(16)})


def o_round_mean_key(text):
    st = S("abcd", text)
    out = []
    for i in range(st.n):
        def m(j):
            same = [k for k in range(1, j + 1) if st.c[k] == st.c[j]]
            return round_half_even(mean_frac([st.c[k - 1] for k in same])) if same else 0
        out.append("abcd"[sum(m(j) == st.c[i] for j in range(1, i + 1)) % 4])
    return out


@case("abcd", o_round_mean_key, max_len=16, expect="refuse")
def round_mean_key(x):
    m = torch.round(tw.aggregate(tw.select(x, x, "=="), tw.shift(tw.code(x), 1)))
    w = tw.selector_width(tw.select(m, tw.code(x), "=="))  # RASP: select on an aggregate
    return tw.lookup(w, {n: "abcd"[n % 4] for n in range(16)})


@case("abcd", _never, max_len=16, expect="refuse")
def unknown_predicate(x):
    w = tw.selector_width(tw.select(x, x, "="))
    return tw.lookup(w, {n: "abcd"[n % 4] for n in range(16)})


# -- 63. select_latest of the token stream itself (a one-hot value), then tw.code -----------------
def o_onehot_latest(text):
    return [t if t != "<eos>" else "<bos>" for t in o_induction(text, "abcd")]


@case("abcd", o_onehot_latest, max_len=64, gens=["abcab", "aa"])
def onehot_latest(x):
    v = tw.select_latest(tw.select(tw.shift(tw.code(x), 1), tw.code(x), "=="), x)
    return tw.code(v)


# -- 64/65. a constant query, a constant key ------------------------------------------------------
def o_const_query(text):
    st = S("abcd", text)
    return ["abcd"[sum(st.c[j] < 5 for j in range(1, i + 1)) % 4] for i in range(st.n)]


@case("abcd", o_const_query, max_len=32)
def const_query(x):
    c = tw.code(x)
    w = tw.selector_width(tw.select(c, torch.full_like(c, 5.0), "<"))
    return tw.lookup(w, {n: "abcd"[n % 4] for n in range(32)})


def o_const_key(text):
    st = S("abcd", text)
    return ["abcd"[(i if 5 < st.c[i] else 0) % 4] for i in range(st.n)]


@case("abcd", o_const_key, max_len=32)
def const_key(x):
    c = tw.code(x)
    w = tw.selector_width(tw.select(torch.full_like(c, 5.0), c, "<"))
    return tw.lookup(w, {n: "abcd"[n % 4] for n in range(32)})


# -- 66. mean of digits against 4.49 at 128 (attainable means 1/12800 apart) ----------------------
def o_gt_449(text):
    st = S(DIGITS, text)
    d = _digits_of(st)
    out, tot = [], 0
    for i in range(st.n):
        tot += d[i] if i else 0
        out.append("1" if i and Fraction(tot, i) > Fraction(449, 100) else "0")
    return out


def _hug(n, num, den, up):
    """n digits (4s and 5s) whose mean is the fraction with denominator n just above/below
    num/den."""
    k = (num * n) // den + (1 if up else 0)
    if (num * n) % den == 0 and not up:
        k -= 1
    digs = [4] * n
    for i in range(k - 4 * n):
        digs[i] += 1
    random.Random(n).shuffle(digs)
    return "".join(map(str, digs))


@case(DIGITS, o_gt_449, max_len=128,
      special=[_hug(n, 449, 100, up) for n in (100, 101, 109, 117, 126, 127) for up in (0, 1)])
def agg_gt_449(x):
    d = tw.lookup(x, {ch: int(ch) for ch in DIGITS}, default=0)
    m = tw.aggregate(tw.select(x, x, "true"), d)
    return torch.where(m > 4.49, tw.token("1"), tw.token("0"))


# -- 67. induction over 40 characters at d_head 32 and 512: select_latest with == split into digits
@case(C40, lambda t: o_induction(t, C40), max_len=512,
      special=["ab" + "c" * 508 + "a", "a" * 511, "ab" * 255 + "a"],
      gens=["the+cat+sat+on+the+mat+the+c", "ab" + "c" * 400 + "a"])
def big_induction_d32(x):
    return tw.select_latest(tw.select(tw.shift(tw.code(x), 1), tw.code(x), "=="), tw.code(x),
                            default="<eos>")


# -- 68. selector_width with three & parts at 512 (the <bos> tie of three products) ---------------
def o_and3_width(text):
    st = S("abcd01", text)

    def c_at(j):
        return st.c[j] if j >= 0 else st.c[0]

    out = []
    for i in range(st.n):
        w = sum(st.c[j] == st.c[i] and c_at(j - 1) == c_at(i - 1)
                and (st.s[j] in "01") == (st.s[i] in "01") for j in range(1, i + 1)) if i else 0
        out.append("abcd01"[w % 6])
    return out


@case("abcd01", o_and3_width, max_len=512, special=["a" * 511, "ab" * 255, "a0" * 255])
def and3_width_512(x):
    prev = tw.shift(tw.code(x), 1)
    dig = tw.is_token(x, list("01"))
    sel = tw.select(x, x, "==") & tw.select(prev, prev, "==") & tw.select(dig, dig, "==")
    return tw.lookup(tw.selector_width(sel), {n: "abcd01"[n % 6] for n in range(512)})


# -- 69. aggregate over == on 40 characters at 512 (digit split), compared ------------------------
def o_agg40(text):
    st = S(C40, text)
    out = []
    for i in range(st.n):
        same = [j for j in range(1, i + 1) if st.c[j] == st.c[i]]
        m = mean_frac([(st.s[j - 1] or "#") in "aeiou" for j in same]) if same else Fraction(0)
        out.append("y" if m > Fraction(1, 2) else "n")
    return out


@case(C40, o_agg40, max_len=512, alphabet="abeinoy+", special=["ab" * 255, "ea" * 255])
def agg_split_40(x):
    m = tw.aggregate(tw.select(x, x, "=="), tw.shift(tw.is_token(x, list("aeiou")), 1))
    return torch.where(m > 0.5, tw.token("y"), tw.token("n"))


# -- 70. keys from select_latest (a moved value) --------------------------------------------------
def o_keys_latest(text):
    st = S("abcd", text)
    k = []
    for j in range(st.n):
        p = st.latest(j, lambda p: st.c[p] != st.c[j]) if j else None  # noqa: B023
        k.append(st.c[p] if p is not None else st.code("a"))
    return ["abcd"[sum(k[j] == st.c[i] for j in range(1, i + 1)) % 4] for i in range(st.n)]


@case("abcd", o_keys_latest, max_len=128)
def keys_from_latest(x):
    k = tw.select_latest(~tw.select(x, x, "=="), tw.code(x), default="a")
    w = tw.selector_width(tw.select(k, tw.code(x), "=="))
    return tw.lookup(w, {n: "abcd"[n % 4] for n in range(128)})


# -- 71. d_head 8 (4 content dims) ----------------------------------------------------------------
def o_dhead8(text):
    st = S("ab", text)
    return ["ab"[sum((st.s[j] == "a") == (st.s[i] == "a") for j in range(1, i + 1)) % 2]
            if i else "a" for i in range(st.n)]


@case("ab", o_dhead8, max_len=64, d_head=8)
def dhead8(x):
    a = tw.is_token(x, "a")
    return tw.lookup(tw.selector_width(tw.select(a, a, "==")), {n: "ab"[n % 2] for n in range(64)})


# -- 72/73. the class limit: 24 characters (27 codes, fits d_head 32) and 25 (split) at 512 -------
@case(LETTERS[:24], _o_hist_n(LETTERS[:24]), max_len=512)
def hist_24(x):
    w = tw.selector_width(tw.select(x, x, "=="))
    return tw.lookup(w, {n: LETTERS[:24][n % 24] for n in range(512)})


@case(LETTERS[:25], _o_hist_n(LETTERS[:25]), max_len=512)
def hist_25(x):
    w = tw.selector_width(tw.select(x, x, "=="))
    return tw.lookup(w, {n: LETTERS[:25][n % 25] for n in range(512)})


# -- 74. max_seq_len that is not a power of two (100), ReLU, select_latest of a width -------------
def o_last_count(text):
    st = S("abc\n", text)

    def item(t):
        q = st.c[t - 1]
        n = sum(st.c[j] == q for j in range(1, t + 1))
        j = st.latest(t, lambda j: st.c[j] == q)
        return "abc"[(n + (j or 0)) % 3]

    return [emit_oracle(st, i, "\n", [item]) for i in range(st.n)]


@case("abc\n", o_last_count, max_len=100, machine="relu",
      special=["\n", "\n\n", "a\n\n", "abc" * 32 + "\n"],
      gens=["abca\n", "\n", "aaaa\n", "abcabc\n", "\n\n"])
def last_count_100(x):
    nl = tw.is_token(x, "\n")
    prev = tw.shift(tw.code(x), 1)
    same = tw.select(x, prev, "==")  # at the trigger: the positions holding the last input token
    n = tw.selector_width(same)
    pos = tw.selector_width(tw.select(x, x, "true"))
    j = tw.select_latest(same, pos, default=0)  # the latest of them (a width, moved)
    return tw.emit(nl, [tw.lookup((n + j) % 3, {k: "abc"[k] for k in range(3)})])


# -- 75. select_latest of "true" (the current position): a shift by one ---------------------------
def o_true_latest(text):
    st = S("abcd", text)
    out = []
    for i in range(st.n):
        if i == 0:
            out.append("a")
        else:
            out.append(st.s[i - 1] if i >= 2 else "<bos>")
    return out


@case("abcd", o_true_latest, max_len=64, gens=["ab"])
def true_latest(x):
    prev = tw.shift(tw.code(x), 1)
    prev = torch.where(prev == tw.token("<bos>"), tw.token("<bos>"), prev)
    return tw.select_latest(tw.select(x, x, "true"), prev, default="a")


# -- 76. induction at d_head 16 and 512 over 4 tokens ---------------------------------------------
@case("abcd", lambda t: o_induction(t, "abcd"), max_len=512, d_head=16,
      special=["ab" + "c" * 508 + "a", "abcd" * 127 + "a"], gens=["abcab"])
def induction_d16_512(x):
    return tw.select_latest(tw.select(tw.shift(tw.code(x), 1), tw.code(x), "=="), tw.code(x),
                            default="<eos>")


# -- 77/78. refusals: a lookup with sparse values as keys, aggregate of a Python number -----------
def o_sparse(text):
    st = S("abcd", text)
    return ["abcd"[sum(st.c[j] == st.c[i] for j in range(1, i + 1)) % 4] for i in range(st.n)]


@case("abcd", o_sparse, max_len=16, note="4 values, read as a grid of 1001")
def sparse_lookup_keys(x):
    k = tw.lookup(x, {"a": 0, "b": 1000, "c": 1, "d": 2})
    w = tw.selector_width(tw.select(k, k, "=="))
    return tw.lookup(w, {n: "abcd"[n % 4] for n in range(16)})


def o_frac_less(text):
    st = S("abcd", text)
    out = []
    for i in range(st.n):
        w = sum(st.c[j] < st.c[i] for j in range(1, i + 1))
        out.append("a" if w > 0 else "b")
    return out


@case("abcd", o_frac_less, max_len=16, note="a user writes tw.aggregate(sel, 1)")
def aggregate_number(x):
    m = tw.aggregate(tw.select(x, x, "<"), 1)  # 1 where anything is selected
    return torch.where(m > 0.5, tw.token("a"), tw.token("b"))


# -- 79. the same comparison with two separate (identical) tw.select calls ------------------------
@case("abc", o_two_means, max_len=512, special=["ab" * 255, "c" * 511],
      note="two_means_cmp with the selector written twice")
def two_selects_means(x):
    fa = tw.aggregate(tw.select(x, x, "true"), tw.is_token(x, "a"))
    fb = tw.aggregate(tw.select(x, x, "true"), tw.is_token(x, "b"))
    return torch.where(fa > fb, tw.token("a"), torch.where(fa < fb, tw.token("b"), tw.token("c")))


# -- 80. an integer combination of two aggregates of one selector (shared denominator), ReLU ------
def o_combo(text):
    st = S("abcd", text)
    out = []
    for i in range(st.n):
        sel = [j for j in range(1, i + 1) if st.c[j] <= st.c[i]]
        if sel:
            fa = mean_frac([st.s[j] == "a" for j in sel])
            fd = mean_frac([st.s[j] == "d" for j in sel])
        else:
            fa, fd = Fraction(0), Fraction(1)
        out.append("a" if 2 * fa - fd > 0 else "b")
    return out


@case("abcd", o_combo, max_len=256, machine="relu",
      special=["abcd" * 63, "dcba" * 63, "a" * 255, "ddddddda" * 31, "adad" * 63, "dad" * 85])
def combo_means(x):
    s = tw.select(tw.code(x), tw.code(x), "<=")
    fa = tw.aggregate(s, tw.is_token(x, "a"))
    fd = tw.aggregate(s, tw.is_token(x, "d"), default=1)
    return torch.where(2 * fa - fd > 0, tw.token("a"), tw.token("b"))


CASE_ORDER = [c.name for c in CASES]


# =================================================================================================
# The harness
# =================================================================================================
@dataclass
class Result:
    name: str
    status: str = "?"  # compiled | refused | crash | eager-error
    streams: int = 0
    positions: int = 0
    gens: int = 0
    ref_vs_oracle: int = 0
    rt_vs_ref: int = 0
    hf_vs_ref: int = 0
    gen_bad: int = 0
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0


def streams_of(c: Case, rng: random.Random, quick: bool) -> list[str]:
    alpha = c.alphabet or c.chars
    L = c.max_len - 1  # characters that fit with <bos>
    out: list[str] = []
    if c.exhaustive:
        n = min(c.exhaustive, L)
        out += ["".join(t) for t in itertools.product(alpha, repeat=n)]
    lengths = sorted({0, 1, 2, 3, 5, 8, L // 4, L // 2, L})
    for n in lengths:
        for _ in range(1 if quick or n < 4 else 2):
            out.append("".join(rng.choice(alpha) for _ in range(min(n, L))))
    out += [ch * L for ch in alpha[:3]]
    out.append((alpha * L)[:L])
    out.append((alpha[::-1] * L)[:L])
    out.append("".join(rng.choice(alpha[:2]) for _ in range(L)))
    out += [s[:L] for s in c.special]
    out += [g[:L] for g in c.gens]
    return list(dict.fromkeys(out))


def _codes(v: tw.Vocab, toks: list[str]) -> list[int]:
    return [v[t] for t in toks]


def _names_line(c: Case, msg: str) -> bool:
    lines, start = inspect.getsourcelines(c.fn)
    return any(f"{HERE.name}:{n}" in msg for n in range(start, start + len(lines)))


def _gen_check(c, st_oracle, prompt, got, max_len) -> str | None:
    """got is a correct greedy answer for prompt: every token is the oracle's next token, and
    it ends at <eos> or at max_len."""
    full = prompt + got
    want = st_oracle(full)
    for k, ch in enumerate(got):
        if want[len(prompt) + k] != ch:
            return f"token {k}: got {ch!r}, oracle {want[len(prompt) + k]!r}"
    if 1 + len(full) < max_len and want[len(full)] != "<eos>":
        return f"stopped after {len(got)} tokens, oracle continues with {want[len(full)]!r}"
    return None


def check(c: Case, quick: bool = False, hf: bool = True, log=print) -> Result:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.time()
    r = Result(c.name)
    v = c.vocab
    rng = random.Random(zlib.crc32(c.name.encode()))  # the same streams in every run
    streams = streams_of(c, rng, quick)
    opts = {"max_seq_len": c.max_len, "d_head": c.d_head, "progress": False}
    if c.machine:
        opts["machine"] = c.machine
    program = tw.compile(c.fn, vocab=v, **opts)

    # (1) the eager reference against the oracle
    refs: dict[str, list[int]] = {}
    for s in streams:
        ids = v.encode(s)
        try:
            out = program.traced.run(ids).reshape(-1)
        except tw.CompileError as e:  # raised while tracing: a refusal
            r.status = "refused"
            msg = str(e)
            named = "names line: " if _names_line(c, msg) else "DOES NOT NAME LINE: "
            r.notes.append("at trace, " + named + msg.replace("\n", " | ")[:600])
            break
        except Exception as e:  # noqa: BLE001
            r.status = "eager-error"
            r.notes.append(f"eager run raised on {s[:40]!r}: {type(e).__name__}: {e}")
            break
        ref = [round(float(o)) for o in out]
        refs[s] = ref
        want = _codes(v, c.oracle(s))
        bad = [i for i in range(len(ids)) if ref[i] != want[i]]
        r.streams += 1
        r.positions += len(ids)
        if bad:
            r.ref_vs_oracle += len(bad)
            if r.ref_vs_oracle == len(bad):
                i = bad[0]
                r.notes.append(f"reference != oracle: prompt {s[:i]!r}: reference "
                               f"{v.tokens[ref[i]]!r}, oracle {v.tokens[want[i]]!r}")
    if r.status in ("eager-error", "refused"):
        r.seconds = time.time() - t0
        return r

    # (2) compile
    try:
        program.compile()
    except tw.CompileError as e:
        r.status = "refused"
        msg = str(e)
        r.notes.append(("names line: " if _names_line(c, msg) else "DOES NOT NAME LINE: ")
                       + msg.replace("\n", " | ")[:600])
        r.seconds = time.time() - t0
        return r
    except Exception as e:  # noqa: BLE001
        r.status = "crash"
        r.notes.append(f"{type(e).__name__}: {e} | " +
                       traceback.format_exc().strip().splitlines()[-3].strip())
        r.seconds = time.time() - t0
        return r
    r.status = "compiled"

    # (3) compiled weights at every position: in process, then through transformers
    model = tok = eager = None
    tmp = tempfile.TemporaryDirectory()
    if hf:
        d = program.save_pretrained(Path(tmp.name) / c.name)
        model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
        tok = AutoTokenizer.from_pretrained(d)
        if c.max_len >= 256:  # the long programs also through the eager attention kernel
            eager = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32,
                                                         attn_implementation="eager").eval()
    for s in streams:
        ids = v.encode(s)
        ref = refs[s]
        got = program.logits(ids).argmax(-1).tolist()
        bad = [i for i in range(len(ids)) if got[i] != ref[i]]
        if bad:
            r.rt_vs_ref += len(bad)
            if len(r.notes) < 6:
                i = bad[0]
                r.notes.append(f"RUNTIME != reference: prompt {s[:i]!r} (len {i}): compiled "
                               f"{v.tokens[got[i]]!r}, reference {v.tokens[ref[i]]!r} "
                               f"[{len(bad)} positions of {len(ids)}]")
        for kind, m in (("HF", model), ("HF eager attention", eager)):
            if m is None:
                continue
            with torch.no_grad():
                hgot = m(torch.tensor([ids])).logits[0].argmax(-1).tolist()
            bad = [i for i in range(len(ids)) if hgot[i] != ref[i]]
            if bad:
                r.hf_vs_ref += len(bad)
                if len(r.notes) < 6:
                    i = bad[0]
                    r.notes.append(f"{kind} != reference: prompt {s[:i]!r} (len {i}): "
                                   f"{v.tokens[hgot[i]]!r}, reference {v.tokens[ref[i]]!r}")

    # greedy generation: reference, in-process and transformers (cache on and off)
    for n_gen, p in enumerate(c.gens):
        if len(p) + 1 > c.max_len:
            continue
        ref_g = program.reference(p)
        rt_g = program.generate(p)
        outs = {"reference": ref_g, "generate": rt_g}
        if model is not None and len(p) + 1 < c.max_len:
            enc = tok(p, return_tensors="pt")
            for cache in ((True, False) if n_gen == 0 else (True,)):
                with torch.no_grad():
                    o = model.generate(**enc, do_sample=False, use_cache=cache,
                                       max_new_tokens=c.max_len - enc["input_ids"].shape[1])
                outs[f"hf(cache={cache})"] = tok.decode(o[0, enc["input_ids"].shape[1]:],
                                                         skip_special_tokens=True)
        r.gens += 1
        for who, g in outs.items():
            why = _gen_check(c, c.oracle, p, g, c.max_len)
            if why or g != ref_g:
                r.gen_bad += 1
                if len(r.notes) < 8:
                    r.notes.append(f"generation {who} on {p[:40]!r}: {g[:40]!r} vs reference "
                                   f"{ref_g[:40]!r} ({why or 'differs from reference'})")
    tmp.cleanup()
    r.seconds = time.time() - t0
    return r


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    no_hf = "--no-hf" in argv
    names = [a for a in argv if not a.startswith("--")]
    cases = [c for c in CASES if not names or c.name in names]
    results = []
    for c in cases:
        try:
            res = check(c, quick=quick, hf=not no_hf)
        except Exception as e:  # noqa: BLE001  (a bug in the harness or the library)
            res = Result(c.name, status="crash",
                         notes=[f"harness: {type(e).__name__}: {e} | "
                                + " / ".join(traceback.format_exc().strip().splitlines()[-4:])])
        results.append(res)
        flag = "" if not (res.rt_vs_ref or res.hf_vs_ref or res.gen_bad or res.ref_vs_oracle) \
            else "  <-- MISMATCH"
        print(f"{c.name:24s} {res.status:10s} streams={res.streams:4d} "
              f"positions={res.positions:6d} gens={res.gens:2d} ref!=oracle={res.ref_vs_oracle} "
              f"compiled!=ref={res.rt_vs_ref} hf!=ref={res.hf_vs_ref} gen_bad={res.gen_bad} "
              f"({res.seconds:.1f}s){flag}", flush=True)
        for n in res.notes:
            print("    " + n, flush=True)

    print()
    print("| program | machine | d_head | max_len | status | streams | prompts (positions) | "
          "generations | ref != oracle | compiled != ref | HF != ref | bad generations |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for c, res in zip(cases, results, strict=True):
        print(f"| {c.name} | {c.machine or 'swiglu'} | {c.d_head} | {c.max_len} | {res.status} | "
              f"{res.streams} | {res.positions} | {res.gens} | {res.ref_vs_oracle} | "
              f"{res.rt_vs_ref} | {res.hf_vs_ref} | {res.gen_bad} |")
    n_comp = sum(r.status == "compiled" for r in results)
    n_ref = sum(r.status == "refused" for r in results)
    n_crash = sum(r.status in ("crash", "eager-error") for r in results)
    wrong = [r.name for r in results if r.rt_vs_ref or r.hf_vs_ref or r.gen_bad]
    print(f"\n{len(results)} programs: {n_comp} compiled, {n_ref} refused, {n_crash} crashed; "
          f"{sum(r.positions for r in results)} prompts (stream positions) and "
          f"{sum(r.gens for r in results)} generations checked; "
          f"silent wrong answers in: {', '.join(wrong) or 'none'}")
    return 1 if wrong else 0


# =================================================================================================
# A small differential fuzzer over selector programs (--fuzz N [--seed S]): random keys/queries,
# predicates, & | ~ trees and readers, at random vocab sizes, d_head, machines and lengths; the
# compiled model (in process) must equal the reference at every position of random streams.
# =================================================================================================
SIDE_FORMS = ["x", "code", "code % {m}", "lut", "tw.shift(code, {k})", "latch", "code < {t}",
              "is_set", "shift(is_set, {k})"]
PREDS = ["'=='", "'!='", "'<'", "'<='", "'>'", "'>='", "'true'", "'false'",
         "lambda k, q: (k + q) % 3 == 0", "lambda k, q: abs(k - q) <= 1",
         "lambda k, q: k == 1", "lambda k, q: q > k + 1", "lambda k, q: (k * q) % 2 == 1",
         "lambda k, q: k + q >= 1"]


GRID_FORMS = ["code / 10", "code / 4", "code / 3", "lut10"]


def fuzz_program(rng: random.Random, grids: bool = False):
    n_chars = rng.randint(2, 12)
    chars = (LETTERS + DIGITS)[:n_chars]
    src = ["def prog(x):", "    code = tw.code(x)"]

    def side():
        form = rng.choice(SIDE_FORMS + (GRID_FORMS * 3 if grids else []))
        if form == "lut10":
            table = {ch: rng.randint(0, 4) / 10 for ch in chars}
            return f"tw.lookup(x, {table!r})"
        if form == "lut":
            table = {ch: rng.randint(0, 4) for ch in chars}
            return f"tw.lookup(x, {table!r}, default={rng.randint(0, 4)})"
        if form == "latch":
            return f"tw.latch(code, tw.is_token(x, {rng.choice(chars)!r}))"
        if form in ("is_set", "shift(is_set, {k})"):
            sub = rng.sample(chars, rng.randint(1, len(chars)))
            e = f"tw.is_token(x, {sub!r})"
            return e if form == "is_set" else f"tw.shift({e}, {rng.randint(1, 3)})"
        return form.format(m=rng.randint(2, 5), k=rng.randint(1, 3),
                           t=rng.randint(3, 3 + n_chars))

    def selector(depth=0):
        if depth < 2 and rng.random() < 0.35:
            op = rng.choice("&|~")
            if op == "~":
                return f"~{selector(depth + 1)}"
            return f"({selector(depth + 1)} {op} {selector(depth + 1)})"
        return f"tw.select({side()}, {side()}, {rng.choice(PREDS)})"

    reader = rng.choice(["width", "agg01", "aggcode", "latest"])
    sel = selector()
    if reader == "width":
        src.append(f"    w = tw.selector_width({sel})")
        src.append(f"    return tw.lookup(w % {n_chars}, "
                   f"{{n: {chars!r}[n] for n in range({n_chars})}})")
    elif reader == "agg01":
        t = rng.choice(["0.5", "0", "1 / 3", "0.25"])
        op = rng.choice([">", ">=", "<"])
        src.append(f"    m = tw.aggregate({sel}, tw.is_token(x, {rng.choice(chars)!r}))")
        src.append(f"    return torch.where(m {op} {t}, tw.token({chars[0]!r}), "
                   f"tw.token({chars[-1]!r}))")
    elif reader == "aggcode":
        src.append(f"    m = tw.aggregate({sel}, code, default={rng.randint(0, n_chars + 2)})")
        src.append("    r = torch.round(m)")
        src.append(f"    return tw.lookup(r, {{n: {chars!r}[n % {n_chars}] "
                   f"for n in range({n_chars + 3})}})")
    else:
        src.append(f"    return tw.select_latest({sel}, code, default={rng.choice(chars)!r})")
    opts = {"max_seq_len": rng.choice([8, 16, 32, 64, 100, 128, 256, 512]),
            "d_head": rng.choice([8, 16, 32, 32, 64]),
            "machine": rng.choice(["swiglu", "relu"]), "progress": False}
    return chars, "\n".join(src), opts


def fuzz(n: int, seed: int, grids: bool = False) -> int:
    rng = random.Random(seed)
    counts = {"compiled": 0, "refused": 0, "eager-refused": 0, "crash": 0, "wrong": 0}
    positions = 0
    for k in range(n):
        chars, src, opts = fuzz_program(rng, grids)
        ns: dict = {"tw": tw, "torch": torch}
        exec(compile(src, f"<fuzz {k}>", "exec"), ns)
        program = tw.compile(ns["prog"], vocab=tw.Vocab(chars), **opts)
        v = program.vocab
        L = opts["max_seq_len"] - 1
        streams = ["".join(rng.choice(chars) for _ in range(m)) for m in (0, 1, 3, L // 2, L, L)]
        streams.append(chars[0] * L)
        try:
            refs = {s: [round(float(o)) for o in program.traced.run(v.encode(s)).reshape(-1)]
                    for s in streams}
        except Exception as e:  # noqa: BLE001  (a predicate failing at <bos>, a non-code output)
            counts["eager-refused"] += 1
            if "-v" in sys.argv:
                print(f"eager: {type(e).__name__}: {str(e)[:200]}")
            continue
        try:
            program.compile()
        except tw.CompileError:
            counts["refused"] += 1
            continue
        except Exception as e:  # noqa: BLE001
            counts["crash"] += 1
            print(f"CRASH {type(e).__name__}: {e}\n{src}\n{opts}")
            continue
        counts["compiled"] += 1
        for s in streams:
            got = program.logits(v.encode(s)).argmax(-1).tolist()
            positions += len(got)
            bad = [i for i, (a, b) in enumerate(zip(got, refs[s], strict=True)) if a != b]
            if bad:
                counts["wrong"] += 1
                print(f"WRONG at prompt {s[:bad[0]]!r}: compiled {v.tokens[got[bad[0]]]!r}, "
                      f"reference {v.tokens[refs[s][bad[0]]]!r}\n{src}\n{opts}")
                break
    print(f"fuzz: {n} programs, {counts}, {positions} positions compared")
    return 1 if counts["wrong"] or counts["crash"] else 0


if __name__ == "__main__":
    if "--fuzz" in sys.argv:
        args = sys.argv[1:]
        n = int(args[args.index("--fuzz") + 1])
        seed = int(args[args.index("--seed") + 1]) if "--seed" in args else 0
        sys.exit(fuzz(n, seed, grids="--grids" in args))
    sys.exit(main(sys.argv[1:]))
