"""sort_freq (tracr ``make_sort_freq(max_seq_len)``): ``2421\\n`` -> ``2241``.

RASP: ``hist = -SelectorWidth(Select(tokens, tokens, EQ))``, then ``make_sort(tokens, hist)``:
the tokens sorted by how often they occur, most frequent first, ties (equal counts) in input
order: ``target_pos`` counts the positions whose (key, position) comes first, and
``Aggregate(Select(target_pos, indices, EQ), tokens)`` fetches position p's token. Tokens are
the digits 1-4 with repeats (tracr's test).

Adapted. The answer is printed one step at a time; at each step, for each token b:

- its count up to here, ``SelectorWidth(Select(tokens, tokens, k == b))``: at the trigger
  (``tw.latch``) the input's count ``in_b`` (RASP's hist), since then plus the printed copies,
  ``printed_b``;
- the position of its next unprinted occurrence, number ``printed_b + 1``: "the position j
  whose running count equals m".

The next token is, among the b not yet printed ``in_b`` times, the one with the largest
``in_b``, ties to the earliest next occurrence: exactly RASP's order (equal counts are one
level of the sort, in input order, and each token's occurrences come in order).

The second point is where RASP would select on a count (``Select(running count, m, EQ)``),
which ``tw.select`` refuses today: counts are decoded from positions, not bit-exact
(examples/rasp/FINDINGS.md, finding 1). It is found instead by a two-round search with
``tw.gather``: the running counts are read at the block ends B, 2B, ... (which block holds
occurrence m), then at each place of that block. At length 100, B = 5: 19 heads in the first
round (all tokens at once), 4 x 4 in the second, where the select would be one head per token.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from typing import Any

import torch

import torchwright_fx as tw
from examples.rasp import _common as c

MAX_LEN = 100
ALPHABET = "1234"
VOCAB = tw.Vocab(ALPHABET + c.TRIGGER)
DEMOS = ["2421\n", "1234\n", "1122334\n"]
EDGE_CASES = ["1\n", "21\n", "2421\n", "1234\n", "4321\n", "1212\n", "2121\n", "1122\n",
              "4" * 100 + "\n", "1234" * 25 + "\n", "4321" * 25 + "\n", "1" + "2" * 99 + "\n",
              "12" * 49 + "34\n", "3" + "4" * 33 + "1" * 33 + "2" * 33 + "\n",
              "1" * 10 + "2" * 10 + "3" * 10 + "4" * 10 + "\n", "2" * 10 + "1" * 11 + "\n"]


def oracle(prompt: str) -> str:
    s = c.parse(prompt)
    order = sorted(range(len(s)), key=lambda i: (-s.count(s[i]), i))
    return "".join(s[i] for i in order)


def inputs(max_len: int = MAX_LEN) -> Iterator[str]:
    return c.all_prompts(ALPHABET, max_len, 5)


def random_input(rng: random.Random, n: int) -> str:
    # half uniform; half from a few digits with planted ties in their counts
    if rng.random() < 0.5:
        return c.random_prompt(rng, ALPHABET, n)
    pool = rng.sample(ALPHABET, rng.randint(2, 4))
    s = [pool[k % len(pool)] for k in range(n)]
    rng.shuffle(s)
    return "".join(s) + c.TRIGGER


def sample(rng: random.Random, max_len: int = MAX_LEN) -> str:
    return random_input(rng, rng.randint(1, max_len))


def make(max_len: int = MAX_LEN, **options: Any) -> tw.Compiled:
    # block size: round 1 reads the running counts at the block ends (one head each, all
    # tokens at once), round 2 the positions inside one block (one head per token and place)
    block = min(range(2, max_len + 1),
                key=lambda b: max(math.ceil(max_len / b) - 1, len(ALPHABET) * (b - 1)))
    ends = range(block, max_len, block)
    far = max_len + block  # beyond any difference of two positions the search returns
    codes = [VOCAB[b] for b in ALPHABET]

    def sort_freq(x: torch.Tensor) -> torch.Tensor:
        lay = c.layout(x)
        n = c.length(lay)
        k = len(ALPHABET)
        # RASP's hist, per token: its count up to each position (on the input: the running
        # count; later it also counts the printed copies) ...
        running = torch.cat([tw.selector_width(tw.select(x, x, lambda kk, q, b=b: kk == b))
                             for b in codes], dim=-1)
        # ... which at the trigger is the input's count, in_b, and since then the printed ones
        counts = tw.latch(running, lay.trigger)
        printed = running - counts
        # round 1: which block holds occurrence m_b = printed_b + 1 of b. Past the input the
        # running counts only grow, so the search never stops there for a token not yet
        # printed in full (the others are never chosen)
        at_ends = [tw.gather(running, torch.full_like(n, float(e))) for e in ends]
        positions = []
        for t in range(k):
            m = printed[:, t:t + 1] + 1
            blk = sum(((g[:, t:t + 1] < m).float() for g in at_ends), torch.zeros_like(m))
            # round 2: the places of that block before occurrence m
            start = block * blk
            offset = sum(((tw.gather(running[:, t:t + 1], start + r) < m).float()
                          for r in range(1, block)), torch.zeros_like(m))
            positions.append(start + offset + 1)
        # b is next when it is not printed in full, no such token has a larger count (top),
        # and among those with the same count its next occurrence comes first. Each "not
        # printed in full" / "same count" test is folded into one comparison as a large
        # offset, so that the order takes one comparison after the search (and none on
        # count * weight - position: the weight would scale the count's decoding noise).
        left = [(printed[:, t:t + 1] - counts[:, t:t + 1] < 0).float() for t in range(k)]
        # the answer is a sum of 0/1 choices, no select after them: <eos> once n tokens are
        # printed (then no token wins), else the one token that wins
        done = c.answered(lay, n)
        token = float(tw.token("<eos>")) * done
        for t in range(k):
            others = [u for u in range(k) if u != t]
            ct = counts[:, t:t + 1]
            top = [(ct - counts[:, u:u + 1] + far * (1 - left[u]) >= 0).float() for u in others]
            first = [(positions[t] - positions[u]
                      - far * (2 - left[u] - (ct == counts[:, u:u + 1]).float()) < 0).float()
                     for u in others]
            wins = (sum(top + first, 2 * left[t] - 2 * done) >= 2 * k).float()
            token = token + float(tw.token(ALPHABET[t])) * wins
        return token

    options.setdefault("max_seq_len", 2 * max_len + 2)
    return tw.compile(sort_freq, vocab=VOCAB, **options).with_domain(
        lambda: inputs(max_len), oracle)


program = make()
