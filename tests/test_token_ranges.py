"""A value that reads only embedding columns is a function of the current token: its range is
its values over the vocabulary, not the sum of its terms' ranges (``lowering.token_ranges``).
Found by the RV32I interpreter (examples/rv32i/GAPS.md 1): bits of a byte token as ``x @ M``."""

from __future__ import annotations

import random

import torch

import torchwright_fx as tw

V = tw.Vocab("0123456789abcdef")
BITS = torch.zeros(len(V), 4)
for _ch in "0123456789abcdef":
    for _i in range(4):
        BITS[V.tokens.index(_ch), _i] = (int(_ch, 16) >> _i) & 1


def nibble(x):
    bits = x @ BITS  # each column: 1 on 8 of the 16 digit tokens
    return bits @ torch.tensor([1.0, 2.0, 4.0, 8.0])


def scaled_compare(x):
    """2**17 * v over v's old range, 8 tokens per bit summed (0..120), needs fp32 to resolve
    1.6e7 steps: refused; over 0..15 it is 2e6 steps, which fp32 resolves."""
    v = nibble(x)[:, None]
    big = 2 ** 17 * v + tw.shift(v, 1)
    return tw.token("0") + (big >= 2 ** 17 * 7 + 3).long()


def nibble_code(x):
    return tw.token("0") + nibble(x)[:, None] % 10


def test_a_table_of_the_token_has_the_tables_range():
    program = tw.compile(nibble_code, vocab=V, max_seq_len=8).compile()
    nodes = program.build.program.nodes
    assert [(r.lo, r.hi) for r in nodes["matmul"].intervals] == [(0.0, 1.0)] * 4
    assert [(r.lo, r.hi) for r in nodes["matmul_1"].intervals] == [(0.0, 15.0)]


def test_a_scaled_comparison_of_a_token_table_compiles_and_is_right():
    program = tw.compile(scaled_compare, vocab=V, max_seq_len=16).compile()
    rng = random.Random(1)
    zero = V.tokens.index("0")
    for _ in range(40):
        digits = [rng.choice("0123456789abcdef") for _ in range(rng.randint(1, 15))]
        ids = [V.bos_id] + [V.tokens.index(d) for d in digits]
        v = [0] + [int(d, 16) for d in digits]  # <bos> has no bits
        oracle = [zero + int(2 ** 17 * v[i] + (v[i - 1] if i else 0) >= 2 ** 17 * 7 + 3)
                  for i in range(len(ids))]
        assert program.printed_ids(ids).tolist() == oracle[:15] + [V.eos_id] * (len(ids) == 16)
        assert program.logits(ids).argmax(-1).tolist() == program.printed_ids(ids).tolist()
