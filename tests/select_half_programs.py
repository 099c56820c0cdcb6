"""Programs that select by content in half precision (``tw.select_latest``, ``tw.gather``) and
count (``tw.selector_width``), written as a user would: ``tests/test_select_half.py`` runs them
through transformers in every dtype, ``scripts/half/llama_selection.py`` through llama.cpp at
its defaults."""

from __future__ import annotations

import random

import torch

import torchwright_fx as tw

V = tw.Vocab("abcde01234 ;")
D = {str(i): i for i in range(5)}


def digit_after_last_same_token(x: torch.Tensor) -> torch.Tensor:
    """The digit that followed the latest earlier occurrence of this token (0 if none)."""
    d = tw.lookup(x, D, default=0)
    same = tw.select(tw.code(x), tw.code(x), "==")
    return tw.token("0") + tw.select_latest(same, tw.shift(d, 1), default=0)


def latest_smaller_digit(x: torch.Tensor) -> torch.Tensor:
    """The latest digit smaller than this one (4 if none): a predicate, not an equality."""
    d = tw.lookup(x, D, default=0)
    return tw.token("0") + tw.select_latest(tw.select(d, d, "<"), d, default=4)


def two_conditions(x: torch.Tensor) -> torch.Tensor:
    """Two selectors joined with &: same digit value and same letter-ness."""
    d = tw.lookup(x, D, default=0)
    letter = tw.is_token(x, list("abcde")).float()
    sel = tw.select(d, d, "==") & tw.select(letter, letter, "==")
    return tw.token("0") + tw.select_latest(sel, tw.shift(d, 1), default=3)


def latest_of_any(x: torch.Tensor) -> torch.Tensor:
    """The "true" selector: the latest key is the current position itself."""
    d = tw.lookup(x, D, default=0)
    return tw.token("0") + tw.select_latest(tw.select(d, d, "true"), d, default=2)


def halfway_back(x: torch.Tensor) -> torch.Tensor:
    """The digit at position i // 2."""
    return tw.token("0") + tw.gather(tw.lookup(x, D, default=0), tw.position(x) // 2)


def clamped_reads(x: torch.Tensor) -> torch.Tensor:
    """gather clamps its position to [0, i]: before the start reads <bos>, ahead reads i."""
    d = tw.lookup(x, D, default=0)
    p = tw.position(x)
    back = tw.gather(d, p - 3)
    ahead = tw.gather(d, p + 2)
    return tw.token("0") + (back + ahead) % 5


def digit_at_latched_position(x: torch.Tensor) -> torch.Tensor:
    """The digit two places after the latest ';' (gather at a latched position)."""
    semi = tw.is_token(x, ";")
    start = tw.latch(tw.position(x), semi)
    return tw.token("0") + tw.gather(tw.lookup(x, D, default=0), start + 2)


def count_same_token(x: torch.Tensor) -> torch.Tensor:
    """How many earlier tokens equal this one, mod 5."""
    return tw.token("0") + tw.selector_width(tw.select(tw.code(x), tw.code(x), "==")) % 5


def digits_so_far(x: torch.Tensor) -> torch.Tensor:
    """How many digits so far, capped at 4 (a selector on the keys alone)."""
    d = tw.is_token(x, list("01234")).float()
    return tw.token("0") + torch.clamp(tw.selector_width(tw.select(d, d, lambda k, q: k == 1)),
                                       0, 4)


def length_mod5(x: torch.Tensor) -> torch.Tensor:
    """The number of tokens so far (the "true" selector), mod 5."""
    return tw.token("0") + tw.selector_width(tw.select(tw.code(x), tw.code(x), "true")) % 5


def smaller_of_same_kind(x: torch.Tensor) -> torch.Tensor:
    """Earlier tokens of the same kind (letter or not) with a value <= this one's, mod 5."""
    d = tw.lookup(x, D, default=0)
    letter = tw.is_token(x, list("abcde")).float()
    sel = tw.select(d, d, "<=") & tw.select(letter, letter, "==")
    return tw.token("0") + tw.selector_width(sel) % 5


def _bits(x: torch.Tensor) -> torch.Tensor:
    """Three bits of each token's index in the vocabulary (tw.lookup: embedding columns)."""
    return torch.cat([tw.lookup(x, {t: V.tokens.index(t) >> b & 1 for t in V.tokens
                                    if t not in tw.vocab.SPECIALS}) for b in range(3)], -1)


def digit_after_last_same_bits(x: torch.Tensor) -> torch.Tensor:
    """The digit at the latest position whose previous token has this token's low three
    index bits: == on two bit vectors (families/bit_select.py), which half refuses in
    select_latest (tests/test_select_half.py)."""
    d = tw.lookup(x, D, default=0)
    return tw.token("0") + tw.select_latest(tw.select(tw.shift(_bits(x), 1), _bits(x), "=="),
                                            d, default=0)


def count_same_bits(x: torch.Tensor) -> torch.Tensor:
    """How many earlier tokens share this one's low three index bits, mod 5."""
    return tw.token("0") + tw.selector_width(tw.select(_bits(x), _bits(x), "==")) % 5


COUNT_PROGRAMS = [count_same_token, digits_so_far, length_mod5, smaller_of_same_kind,
                  count_same_bits]
COUNT_LENGTH = 64  # counts hold to 97 positions in half (ops/count_half.py)


PROGRAMS = [digit_after_last_same_token, latest_smaller_digit, two_conditions, latest_of_any,
            halfway_back, clamped_reads, digit_at_latched_position]


def streams(seed: str, n: int = 128) -> list[list[int]]:
    """Streams of n tokens: uniform tokens, few distinct ones (many selected keys), and one
    token repeated (every key selected: the largest counts)."""
    rng = random.Random(seed)
    few = [V[t] for t in "ab01;"]
    return [[V.bos_id] + [rng.randrange(3, len(V)) for _ in range(n - 1)],
            [V.bos_id] + [rng.choice(few) for _ in range(n - 1)],
            [V.bos_id] + [V["a"]] * (n - 1)]


def best_digit_so_far(x: torch.Tensor) -> torch.Tensor:
    """The letter (as a digit code) after the largest digit so far, ties to the latest."""
    d = tw.lookup(x, D, default=0)
    return tw.token("0") + tw.argmax(d, tw.shift(d, 1))


def smallest_digit_where_letter_before(x: torch.Tensor) -> torch.Tensor:
    """argmin with `where`: among digits that follow a letter."""
    d = tw.lookup(x, D, default=4)
    after_letter = tw.shift(tw.is_token(x, list("abcde")), 1)
    return tw.token("0") + tw.argmin(d, d, where=after_letter)


ARGMAX_PROGRAMS = [best_digit_so_far, smallest_digit_where_letter_before]
