"""detect_pattern (tracr ``detect_pattern(tokens, "abc")``): ``abcabc\\n`` -> ``__1001``.

RASP: for each element of the pattern, ``tokens == element`` shifted by its distance from the
pattern's end (``shift_by``: ``Aggregate(Select(indices, indices, q == k + d), ...)``), and
the AND of the shifted detectors: true at the last element of each occurrence, ``None`` at the
first ``len(pattern) - 1`` positions. Causal already; the answer prints the detector for each
input element, ``1``, ``0``, or ``_`` for ``None``, read at each step with ``tw.gather``.

Adapted: the shifts are ``tw.shift`` (``tw.select`` cannot take decoded indices as keys today:
examples/rasp/FINDINGS.md, finding 1); a shift that reaches ``<bos>`` marks ``None``.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import torch

import torchwright_fx as tw
from examples.rasp import _common as c

MAX_LEN = 100
PATTERN = "abc"
ALPHABET = "abc"
NONE = "_"
VOCAB = tw.Vocab(NONE + "01" + ALPHABET + c.TRIGGER)
DEMOS = ["abcabc\n", "aabcc\n", "ab\n"]
EDGE_CASES = ["a\n", "ab\n", "abc\n", "abcabc\n", "cba\n", "abc" * 33 + "a\n", "a" * 100 + "\n",
              "ab" * 50 + "\n"]


def oracle(prompt: str, pattern: str = PATTERN) -> str:
    s, m = c.parse(prompt), len(pattern)
    return "".join(NONE if i < m - 1 else str(int(s[i - m + 1:i + 1] == pattern))
                   for i in range(len(s)))


def inputs(max_len: int = MAX_LEN) -> Iterator[str]:
    return c.all_prompts(ALPHABET, max_len, 6)


def random_input(rng: random.Random, n: int) -> str:
    return c.random_prompt(rng, ALPHABET, n)


def sample(rng: random.Random, max_len: int = MAX_LEN) -> str:
    return random_input(rng, rng.randint(1, max_len))


def make(max_len: int = MAX_LEN, pattern: str = PATTERN, **options: Any) -> tw.Compiled:
    def detect_pattern(x: torch.Tensor) -> torch.Tensor:
        lay = c.layout(x)
        m = len(pattern)
        # detector d: the pattern's element d from the end, d positions back
        found = torch.cat([tw.shift(tw.is_token(x, t), d)
                           for d, t in enumerate(reversed(pattern))], dim=-1)
        found = found.all(dim=-1, keepdim=True).float()
        none = tw.shift(tw.is_token(x, "<bos>"), m - 1)  # 1 at positions 1 .. m - 1
        zero, one = float(tw.token("0")), float(tw.token("1"))
        value = torch.where(none.bool(), float(tw.token(NONE)), zero + (one - zero) * found)
        n = c.length(lay)
        return c.print_tokens(lay, n, c.value_at(value, lay.step))

    options.setdefault("max_seq_len", 2 * max_len + 2)
    return tw.compile(detect_pattern, vocab=VOCAB, **options).with_domain(
        lambda: inputs(max_len), lambda p: oracle(p, pattern))


program = make()
