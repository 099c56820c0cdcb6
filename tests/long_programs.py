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


# -- programs a new user writes for long inputs (tests/test_long_131072.py) -----------------------
OPS = tw.Vocab("0123456789+-pq=\n")


def running_count(x: torch.Tensor) -> torch.Tensor:
    """The number of '+' so far, mod 10: a mean times its count, declared whole."""
    plus = tw.claim(tw.mean(tw.is_token(x, "+")) * (tw.position(x) + 1), 0, 131072,
                    integral=True)
    return tw.token("0") + torch.remainder(plus, 10)


def more_plus(x: torch.Tensor) -> torch.Tensor:
    """Whether '+' outnumbers '-' so far."""
    return tw.token("0") + (tw.mean(tw.is_token(x, "+")) > tw.mean(tw.is_token(x, "-"))).float()


def registers(x: torch.Tensor) -> torch.Tensor:
    """'p' stores the digit before it in the register named two back; '=' prints the register
    named by the digit before it; anything else echoes its digit."""
    d = _digit(x)
    register = torch.where(tw.is_token(x, "p") > 0, tw.shift(d, 2), torch.full_like(d, 10.0))
    value = tw.select_latest(tw.select(register, tw.shift(d, 1), "=="), tw.shift(d, 1),
                             default=0.0)
    return tw.token("0") + torch.where(tw.is_token(x, "=") > 0, value, d)


def line_echo(x: torch.Tensor) -> torch.Tensor:
    """The digit k back within the line, k the current digit (the line's start if shorter)."""
    d = _digit(x)
    back = torch.minimum(d, tw.steps_since(tw.is_token(x, "\n")))
    return tw.token("0") + tw.gather(d, tw.position(x) - back)


def since_q(x: torch.Tensor) -> torch.Tensor:
    return tw.token("0") + torch.clamp(tw.steps_since(tw.is_token(x, "q")), 0, 9)


def latch_chain(x: torch.Tensor) -> torch.Tensor:
    a = tw.latch(_digit(x), tw.is_token(x, "p"))
    b = tw.latch(tw.shift(a, 5), tw.is_token(x, "q"))
    return tw.token("0") + torch.remainder(a + b, 10)


def best_after_p(x: torch.Tensor) -> torch.Tensor:
    """The digit after the largest digit that follows a 'p' (the latest of ties)."""
    d = _digit(x)
    return tw.token("0") + tw.argmax(d, tw.shift(d, 1), tw.is_token(tw.shift(x, 1), "p"))


def shares(x: torch.Tensor) -> torch.Tensor:
    return tw.token("0") + ((tw.mean(tw.is_token(x, "+")) >= 0.3).float()
                            + (tw.mean(tw.is_token(x, "-")) < 0.125).float())


NEW_USER = [running_count, more_plus, registers, line_echo, since_q, latch_chain, best_after_p,
            shares]


def ops_stream(n: int, seed: int) -> str:
    """Lines of 1-30 or 1-3000 symbols; each line's share of '+' and '-' drawn anew."""
    rng, out = random.Random(seed), []
    while len(out) < n:
        share = rng.random() * 0.6
        for _ in range(rng.choice((rng.randint(1, 30), rng.randint(1, 3000)))):
            out.append(rng.choice("+-") if rng.random() < share else
                       rng.choice("0123456789pq="))
        out.append("\n")
    return "".join(out[:n])


COUNTER = tw.Vocab("abcdABCD?0123\n")


def counter_machine(x: torch.Tensor) -> torch.Tensor:
    """A 4-register counter machine: a-d increment registers 0-3, A-D decrement them, and '?k'
    prints register k mod 10 (clamped to a digit 0-3 of the vocabulary)."""
    regs = []
    for inc, dec in zip("abcd", "ABCD", strict=True):
        ups = tw.selector_width(tw.select(tw.is_token(x, inc), tw.is_token(x, inc) * 0 + 1, "=="))
        downs = tw.selector_width(tw.select(tw.is_token(x, dec), tw.is_token(x, dec) * 0 + 1,
                                            "=="))
        regs.append(ups - downs)
    k = tw.lookup(x, {"0": 0, "1": 1, "2": 2, "3": 3}, default=0)
    value = torch.where(k == 0, regs[0], torch.where(k == 1, regs[1],
                                                      torch.where(k == 2, regs[2], regs[3])))
    printed = tw.token("0") + torch.clamp(torch.remainder(value, 10), 0, 3)
    return torch.where(tw.is_token(tw.shift(x, 1), "?") > 0, printed, tw.token("\n"))


def counter_stream(n: int, seed: int) -> str:
    rng, out = random.Random(seed), []
    while len(out) < n:
        out += ["?", rng.choice("0123")] if rng.random() < 0.05 else \
            [rng.choice("abcdabcdABCD\n")]
    return "".join(out[:n])
