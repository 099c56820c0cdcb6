"""``tw.select(keys, queries, "==")`` on bit vectors: keys and queries of ``w`` columns, each
an exact 0/1 value, and position i selects j where every column agrees. A number that the
program already holds as bits (an address from byte tokens, a register field of an
instruction) is matched by its bits: no staircase splits it into digits, and the head takes
two content dims a bit (one where a column is constant), not one per value.

The construction (docs/attention.md, "Query-dependent selection", "`==` on bit vectors"). Per
column i, two *veto* dims:

- ``q = G [q_i = 1]``, ``k = -[k_i = 0]``: ``-G`` when the query's bit is 1 and the key's 0;
- ``q = G [q_i = 0]``, ``k = -[k_i = 1]``: ``-G`` when the query's bit is 0 and the key's 1.

When every bit agrees each product has a factor that is exactly 0 (a 0/1 column, or 1 minus
one: the norm's gain is the same in every column, so ``1 - 1`` cancels exactly), so the veto
dims add exact zeros in any order of summation and the selected keys keep the bit-identical
logit of the part they are joined to; a key that differs in any bit loses at least ``G``.
The veto dims join the first part of the selection (``selection.content``), or, alone, a part
that holds for every key: they are never a part of their own, so any number of bits costs
no more of the parts' fp32 tie budget (MAX_SELECT_PARTS). Keys are 0 at ``<bos>``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from torchwright_fx.base.numerics import SELECT_FEATURE_NOISE
from torchwright_fx.families import selection
from torchwright_fx.families.selection import Features, Leaf, Side, bos_indicator
from torchwright_fx.ir.linear import Lin
from torchwright_fx.lower.context import LowerCtx
from torchwright_fx.lower.stream import Stream

ADVICE = ("give each side as columns of exact 0/1 values (bits: tw.lookup of tokens, "
          "comparisons, torch.where of 0 and 1, or x[:, i:i + 1] of such a stream)")


def _all_equal(kv: Sequence[float], qv: Sequence[float]) -> bool:
    return all(a == b for a, b in zip(kv, qv, strict=True))


@dataclass(frozen=True, eq=False)
class BitsEqual(Leaf):
    """keys == queries column by column, each column a bit: veto dims, not a part."""

    vetoes = True

    def veto(self, ctx: LowerCtx) -> Features:
        q: list[Lin] = []
        k: list[Lin] = []
        bos = bos_indicator(ctx)
        for ks, qs in zip(self.keys, self.queries, strict=True):
            kc, qc, kb = _bit_column(ctx, ks), _bit_column(ctx, qs), ks.at_bos
            if 1.0 in qs.values and 0.0 in ks.values:  # query 1, key 0
                q.append(qc)
                k.append(kc - 1.0 + (1.0 - kb) * bos)
            if 0.0 in qs.values and 1.0 in ks.values:  # query 0, key 1
                q.append(1.0 - qc)
                k.append(kb * bos - kc)
        return Features(q, k, vetoes=len(q))


def _bit_column(ctx: LowerCtx, side: Side) -> Lin:
    """The bit as a form whose fp32 read is exact: a constant, or a sum of 0/1 signals with
    coefficient 1 (embedding columns of a lookup, a moved bit), else one whole 0/1 column
    (an MLP lane) in its place."""
    col = side.col
    assert col is not None
    if len(side.values) == 1:  # a constant bit
        return Lin.constant(side.values[0])
    if not col.terms or col.const == 0.0 and set(col.terms.values()) == {1.0}:
        return col
    return side.indicator(ctx, [side.values.index(1.0)])


def _bit_sides(ctx: LowerCtx, s: Stream, at_bos: list[float], what: str) -> tuple[Side, ...]:
    sides = []
    for i, (col, rng) in enumerate(zip(s.cols, s.ranges, strict=True)):
        # a bit this close to 0 or 1 (a comparison's SiLU tail) is used as it is: near 1 it
        # is 1.0 in fp32, near 0 the products of all 2w veto dims together stay within the
        # SELECT_FEATURE_NOISE of one column, far below half an ulp of the G * 1 product
        # every selected key carries (docs/attention.md)
        side = selection.stream_side(ctx, col, rng, at_bos[i], f"{what}[{i}]", what,
                                     SELECT_FEATURE_NOISE / (2 * s.width))
        if not set(side.values) <= {0.0, 1.0}:
            raise ctx.error(f"select == on {s.width} columns matches bit vectors, but column {i} "
                            f"of the {what} takes the values {list(side.values)[:6]}, not only "
                            "0 and 1", ADVICE)
        sides.append(side)
    return tuple(sides)


def _widths(k: int, q: int) -> tuple[str, str]:
    return (f"select == on several columns matches bit vectors of one width; the keys have {k} "
            f"columns and the queries {q}", "give both sides the same bits (pad the shorter "
            "with zeros: torch.cat([bits, torch.zeros_like(bits[:, :1])], -1))")


def bits_equal(ctx: LowerCtx, keys: Stream, queries: Stream) -> Leaf:
    """The selector ``keys == queries`` on two bit vectors of the same width."""
    if keys.width != queries.width:
        raise ctx.error(*_widths(keys.width, queries.width))
    ks = _bit_sides(ctx, keys, selection.row_at_bos(ctx, keys, 0, "keys"), "keys")
    qs = _bit_sides(ctx, queries, selection.row_at_bos(ctx, queries, 1, "queries"), "queries")
    return BitsEqual(ks, qs, _all_equal, f"{keys.width} bits ==", "==")


def eager(keys: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
    """The selector of two bit vectors (or any two streams of one width): row i selects
    column j where ``keys[j]`` equals ``queries[i]`` in every column."""
    if keys.shape[1] != queries.shape[1]:
        raise ValueError(": ".join(_widths(keys.shape[1], queries.shape[1])))
    k, q = keys.to(torch.float32), queries.to(torch.float32)
    return (q[:, None, :] == k[None, :, :]).all(dim=-1)
