"""shuffle_dyck (tracr ``make_shuffle_dyck(pairs=["()"])``): ``(()())\\n`` -> ``1``,
``())(\\n`` -> ``0``.

RASP, per pair: ``balance = pair_balance(tokens, open, close)`` (two numerical aggregates);
``any_negative = balance < 0``; ``has_neg = Aggregate(Select(indices, indices, TRUE),
any_negative)``; ``all_zero = balance == 0``; ``last_zero = Aggregate(Select(indices,
length - 1, EQ), all_zero)``; the answer ``last_zero & ~has_neg``, the same at every position.

Here the balances and ``any_negative`` are computed at every input position (causal already);
at the trigger ``has_neg`` is the same aggregate over every position so far (the trigger's
own balance equals the last input position's), and the answer is printed once, ``1`` or
``0``.

Adapted: ``Select(indices, length - 1, EQ)`` picks the last input position; ``tw.select``
cannot take decoded indices as keys today (examples/rasp/FINDINGS.md, finding 1), and at the
trigger the last input position is one step back: ``tw.shift(all_zero, 1)``.

``make(pairs)`` takes any list of bracket pairs; ``shuffle_dyck2`` is ``["()", "{}"]``.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from typing import Any

import torch

import torchwright_fx as tw
from examples.rasp import _common as c

MAX_LEN = 100
PAIRS = ["()"]
VOCAB = tw.Vocab("01" + "".join(PAIRS) + c.TRIGGER)
DEMOS = ["(()())\n", "())(\n", "(\n"]
EDGE_CASES = ["(\n", ")\n", "()\n", ")(\n", "(())\n", "(()\n", "())\n", "()()()\n",
              "(" * 50 + ")" * 50 + "\n", "()" * 50 + "\n", "(" * 100 + "\n",
              "(" * 49 + ")" * 50 + "(\n", ")" + "(" * 50 + ")" * 49 + "\n"]


def is_balanced(s: str, pairs: Sequence[str]) -> bool:
    for o, cl in pairs:
        depth = 0
        for t in s:
            depth += (t == o) - (t == cl)
            if depth < 0:
                return False
        if depth != 0:
            return False
    return True


def oracle(prompt: str, pairs: Sequence[str] = PAIRS) -> str:
    return str(int(is_balanced(c.parse(prompt), pairs)))


def inputs(max_len: int = MAX_LEN, pairs: Sequence[str] = PAIRS) -> Iterator[str]:
    return c.all_prompts("".join(pairs), max_len, 10 if len(pairs) == 1 else 6)


def balanced_word(rng: random.Random, n_pairs: int, o: str, cl: str) -> list[str]:
    out, opens = [], 0
    while len(out) < 2 * n_pairs:
        closes = len(out) - opens
        if opens < n_pairs and (closes == opens or rng.random() < 0.5):
            out.append(o)
            opens += 1
        else:
            out.append(cl)
    return out


def random_input(rng: random.Random, n: int, pairs: Sequence[str] = PAIRS) -> str:
    """Half uniform, half shuffle-balanced (each pair balanced, interleaved at random; odd n
    gets one random bracket at the end), as tracr's side of the benchmark draws them."""
    alphabet = "".join(pairs)
    if rng.random() < 0.5:
        return c.random_prompt(rng, alphabet, n)
    counts = [0] * len(pairs)
    for _ in range(n // 2):
        counts[rng.randrange(len(pairs))] += 1
    words = [balanced_word(rng, k, p[0], p[1]) for k, p in zip(counts, pairs, strict=True)]
    slots = [i for i, w in enumerate(words) for _ in w]
    rng.shuffle(slots)
    out = "".join(words[i].pop(0) for i in slots)
    return out + (rng.choice(alphabet) if n % 2 else "") + c.TRIGGER


def sample(rng: random.Random, max_len: int = MAX_LEN) -> str:
    return random_input(rng, rng.randint(1, max_len))


def make(max_len: int = MAX_LEN, pairs: Sequence[str] = PAIRS, vocab: tw.Vocab = VOCAB,
         **options: Any) -> tw.Compiled:
    def shuffle_dyck(x: torch.Tensor) -> torch.Tensor:
        lay = c.layout(x)
        prevs = tw.select(x, x, "true")  # j <= i
        negative, zero = [], []
        for o, cl in pairs:
            # pair_balance: frac_prevs(open) - frac_prevs(close), as one aggregate of the two
            # columns: its means share their denominator, so their difference compares with
            # 0 exactly (two tw.aggregate calls would not: FINDINGS.md, finding 2)
            fracs = tw.aggregate(prevs, torch.cat([tw.is_token(x, o), tw.is_token(x, cl)], -1))
            balance = fracs[:, 0:1] - fracs[:, 1:2]
            negative.append((balance < 0).float())
            zero.append((balance == 0).float())
        # any_negative and all_zero as counts over the pairs (no step of their own: the steps
        # after the aggregate and the shift read them, "> 0" and "== number of pairs")
        any_negative = sum(negative, torch.zeros_like(negative[0]))
        all_zero = sum(zero, torch.zeros_like(zero[0]))
        has_neg = (tw.aggregate(prevs, any_negative) > 0).float()
        last_zero = (tw.shift(all_zero, 1) >= len(pairs)).float()
        # last_zero & ~has_neg, read by the printing table: 2 * last_zero + has_neg is 2
        # exactly when the brackets balance
        return c.print_one(x, lay, 2 * last_zero + has_neg, 0, 3,
                           lambda v: "1" if v == 2 else "0")

    options.setdefault("max_seq_len", max_len + 3)
    return tw.compile(shuffle_dyck, vocab=vocab, **options).with_domain(
        lambda: inputs(max_len, pairs), lambda p: oracle(p, pairs))


program = make()
