"""Lookup speculation for greedy decoding (``llama_decode.greedy``): guesses of the next tokens
taken from the context itself, which the model then confirms or rejects in one batch.

An interpreter's trace repeats itself: a loop prints the same targets and next pcs every
iteration, and often the same values. Each n-gram of the context keeps the token that
followed it last and how many times in a row that token came; a run of r predicts the next
with odds (r + 1/2) / (r + 3/2) (Laplace's rule over the run), and a chain of guesses stops
where the product of its odds falls below SURE.

The constants were chosen by timing llama.cpp on 2 cores (the default build, the first
context of each program, 2,900 to 4,000 tokens; the output the same token for token): fib
7.9 s plain, 6.3 s with these (1.26x); primes 14.3 s and 12.4 s (1.16x); sort100, whose
values move every iteration, 11.7 s and 11.0 s (1.07x). Shorter n-grams (4) guess more and are
wrong more: fib 7.6 s. A batch of 2 tokens costs 1.2 to 1.5 passes of one, a batch of 9
about 4 (each pass reads every weight and the whole KV cache), so a guess pays only where
it is likelier right than wrong.
"""

from __future__ import annotations

DRAFT = 8  # the most guesses a pass evaluates
NGRAM = 8  # the tokens a guess follows (a record's length)
SURE = 0.5  # the odds a chain of guesses must keep


class Lookup:
    """Guesses of the next tokens from what followed the same NGRAM tokens earlier in the
    context. Each n-gram keeps its latest successor and how many times in a row that
    successor came; a run of r predicts the next with odds (r + 1/2) / (r + 3/2), and a chain
    of guesses stops where the product of its odds falls below SURE."""

    def __init__(self, seq: list[int]) -> None:
        self.seen = 0
        self.next: dict[tuple[int, ...], list[int]] = {}  # n-gram -> [successor, run]
        self.learn(seq)

    def learn(self, seq: list[int]) -> None:
        for p in range(max(self.seen, NGRAM), len(seq)):
            key = tuple(seq[p - NGRAM:p])
            e = self.next.get(key)
            if e is not None and e[0] == seq[p]:
                e[1] += 1
            else:
                self.next[key] = [seq[p], 1]
        self.seen = len(seq)

    def guess(self, seq: list[int], most: int) -> list[int]:
        out: list[int] = []
        tail = seq[-NGRAM:]
        odds = 1.0
        while len(out) < most:
            e = self.next.get(tuple(tail))
            if e is None:
                break
            odds *= (e[1] + 0.5) / (e[1] + 1.5)
            if odds < SURE:
                break
            out.append(e[0])
            tail = tail[1:] + [e[0]]
        return out
