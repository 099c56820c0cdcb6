"""fibonacci: ``fibonacci\\n`` -> ``0101020305081321``: the first ``n_terms`` Fibonacci
numbers (default 8), two digits each.

Autoregressive: the model reads its own output. The first two terms (``01 01``) are
constants; every later term is computed from the four digits just printed, the previous two
terms: its tens digit where the term starts, its units digit one step later. Each step is
one comparison-and-add over the last few tokens, so the whole program is 2 layers.

Other prompts (the domain that ``inputs()`` enumerates and the tests check):

- Only the newline is read, not the text before it: ``fib\\n`` prints the same sequence.
- Digits typed after the newline are read back as if the model had printed them, so up to
  four digits seed the sequence: ``fibonacci\\n0307`` -> ``101727447115`` (03, 07, 10, 17,
  ...). Missing seed digits are the defaults: ``fibonacci\\n5`` means the seed ``51 01``.
- Terms are kept to two digits: a term of 100 or more is printed mod 100
  (``fibonacci\\n5050`` -> ``005050005050``).
"""

# report() for the default build (n_terms=8), heuristic scheduler:
#   fibonacci: 2 layers (critical-path bound 2), d_model=48 (peak live width 37), d_head=32,
#   18 heads/layer (18 used), 32 lanes/layer, 233,232 parameters, compiled in 0.1-1.3s
# (the seed: 9 layers at d=512, 7.5M parameters). 15 of the heads are emit's, one per output
# position after the first; they carry one value each, so d_head=8 would do
# (89,024 parameters) where vLLM is not needed.

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from typing import Any

import torch

import torchwright_fx as tw

N_TERMS = 8
SEED = "0101"  # the first two terms, printed as constants
VOCAB = tw.Vocab("0123456789fibonac\n")
DEMOS = ["fibonacci\n", "fibonacci\n0307", "fib\n"]
EDGE_CASES = ["fibonacci\n", "fib\n", "fibonacci\n0101", "fibonacci\n0307", "fibonacci\n99",
              "fibonacci\n9999", "fibonacci\n5050", "fibonacci\n0000", "fibonacci\n5",
              "fibonacci\n123"]


def oracle(prompt: str, n_terms: int = N_TERMS) -> str:
    """Plays the sequence out digit by digit from the digits after the newline."""
    digits = [int(c) for c in prompt.rsplit("\n", 1)[1]]
    start = len(digits)
    while len(digits) < 2 * n_terms:
        m = len(digits)
        if m < len(SEED):
            digits.append(int(SEED[m]))
        else:  # term t = previous two terms mod 100; m = 2t (tens) or 2t + 1 (units)
            t = m // 2
            term = (10 * (digits[2 * t - 2] + digits[2 * t - 4])
                    + digits[2 * t - 1] + digits[2 * t - 3]) % 100
            digits.append(term // 10 if m % 2 == 0 else term % 10)
    return "".join(map(str, digits[start:]))


def inputs() -> Iterator[str]:
    """``fibonacci\\n`` followed by 0..4 seed digits: 11,111 prompts."""
    for count in range(5):
        for seed in itertools.product("0123456789", repeat=count):
            yield "fibonacci\n" + "".join(seed)


def sample(rng: random.Random) -> str:
    return "fibonacci\n" + "".join(rng.choice("0123456789") for _ in range(rng.randint(0, 4)))


def make(n_terms: int = N_TERMS, **options: Any) -> tw.Compiled:

    def fibonacci(x: torch.Tensor) -> torch.Tensor:
        newline = tw.is_token(x, "\n")
        digit = tw.lookup(x, {str(d): d for d in range(10)})
        # Where term t starts (position p), the previous two terms are the last four tokens:
        # x[p-3] x[p-2] are term t-2, x[p-1] x[p] term t-1 (x[p]: the token just printed).
        d0, d1, d2, d3 = digit, tw.shift(digit, 1), tw.shift(digit, 2), tw.shift(digit, 3)
        # tens(t) = (tens sum + carry from the units) mod 10; the wrap is [term sum >= 100].
        tens = (d1 + d3 + (d0 + d2 >= 10).float()
                - 10 * (10 * (d1 + d3) + d0 + d2 >= 100).float())
        # One step later the new tens digit is x[p+1], so both units digits moved one back.
        units = d1 + d3 - 10 * (d1 + d3 >= 10).float()
        zero = tw.token("0")
        computed = [zero + tens, zero + units] * (n_terms - 2)
        return tw.emit(newline, [*SEED, *computed])

    return tw.compile(fibonacci, vocab=VOCAB, **options).with_domain(
        inputs, lambda p: oracle(p, n_terms))


program = make()
