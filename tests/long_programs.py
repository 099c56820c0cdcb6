"""Long-context programs (issue 37), written as a new user would, and their input streams: shared
by tests/test_long_131072.py, scripts/long/check_long.py and scripts/bench_long.py."""

from __future__ import annotations

import random

import torch

import torchwright_fx as tw

VOCAB = tw.Vocab("0123456789abw=\n")


def _digit(x: torch.Tensor) -> torch.Tensor:
    return tw.lookup(x, {str(i): i for i in range(10)}, default=0)


def memory_lines(x: torch.Tensor) -> torch.Tensor:
    """At every position, as a digit, mod 10: the digit before (shift), the value last written
    to the address given by the current digit ('w' after address and value digits writes;
    select_latest keyed by a computed address), the digit before the latest '=' (latch), the
    first digit of the current line (gather at the line's start, from steps_since), whether the
    line started under 3 tokens ago, and whether over a quarter of the context is 'a' (a
    whole-context mean compared with a threshold)."""
    d = _digit(x)
    prev = tw.shift(d, 1)
    is_w = tw.is_token(x, "w")
    address = torch.where(is_w > 0, tw.shift(d, 1), torch.full_like(d, 10.0))
    read = tw.select_latest(tw.select(address, d, "=="), tw.shift(d, 2), default=0.0)
    at_eq = tw.latch(prev, tw.is_token(x, "="))
    since = tw.steps_since(tw.is_token(x, "\n"))
    fresh = (since < 3).float()
    first = tw.gather(d, tw.position(x) - since + 1)
    many_a = (tw.mean(tw.is_token(x, "a")) > 0.25).float()
    return tw.token("0") + torch.remainder(prev + read + at_eq + first + fresh + many_a, 10)


def stream(n: int, seed: int) -> str:
    """n characters: lines of 1 to n/4 symbols (digits, 'w', '=', 'a', 'b'), the share of 'a'
    drifting across 1/4 so that the mean's comparison changes along the stream."""
    rng, out = random.Random(seed), []
    while len(out) < n:
        length = rng.choice((rng.randint(1, 40), rng.randint(1, max(1, n // 4))))
        for _ in range(length):
            p_a = 0.25 + 0.2 * (1 if (len(out) // 5000) % 2 else -1) * rng.random()
            r = rng.random()
            out.append("a" if r < p_a else rng.choice("0123456789" * 3 + "wwb="))
        out.append("\n")
    return "".join(out[:n])
