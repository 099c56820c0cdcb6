"""Fold affine reads of per-token features into single embedding columns.

``x @ W``, ``tw.is_token(x, "0") + tw.is_token(x, "1")`` and the like are functions of the
token alone, so the embedding can hold each one in one column instead of keeping every one-hot
column alive for its readers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from fractions import Fraction

from torchwright_fx.ir.graph import EMBED, FFN, Head, Lane, Program
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import Interval


def fold_embedding(prog: Program) -> Program:
    """A new program whose affine reads of several embedding columns read one folded column."""
    prog = prog.copy()
    cache: dict[tuple, Lin] = {}

    half = prog.precision.half

    def fold(lin: Lin) -> Lin:
        embedded = {s: c for s, c in lin.terms.items() if prog.signals[s].producer == EMBED}
        # half precision folds the embedding part of a mixed read too: a product's or a
        # table's affine part rides in its readers as large multiples of one-hot columns
        # (128 * 18k), which times the norm's reader scale overflow fp16
        if len(embedded) < 2 or (len(embedded) < len(lin.terms) and not half):
            return lin
        rest = Lin({s: c for s, c in lin.terms.items() if s not in embedded}, lin.const)
        key = tuple(sorted(embedded.items()))  # the constant stays outside the table
        # half precision keeps the column's values whole numbers where it can: the power of
        # two common to them (a gate's 128, or an up's 1/128) stays in the reader, so that
        # the column is an fp16/bf16 number, its square small in the RMSNorm identity's
        # energy bound, and no fraction is lost to fp16's subnormals after the norm
        n = len(prog.vocab)
        raw = [sum(c * prog.embed_tables[s][t] for s, c in embedded.items()) for t in range(n)]
        g = _whole_scale(raw, embedded.values()) if half else 1.0
        if key not in cache:
            table = tuple(v / g for v in raw)
            first = prog.signals[next(iter(embedded))]
            rng = Interval(min(table), max(table), all(float(v).is_integer() for v in table))
            cache[key] = prog.embed(table, rng, f"embed({first.name}...)", first.source)
        return cache[key] * g + rest

    rewrite_lins(prog, fold)
    prog.check("fold_embedding")
    return prog


def rewrite_lins(prog: Program, fn: Callable[[Lin], Lin]) -> None:
    """Apply ``fn`` to every affine read of ``prog`` (producers, output, node records): only
    on a program this pass owns (a ``Program.copy``)."""
    for pid, p in list(prog.producers.items()):
        if isinstance(p, FFN):
            prog.producers[pid] = dataclasses.replace(
                p, lanes=[Lane(fn(lane.gate), fn(lane.up)) for lane in p.lanes])
        elif isinstance(p, Head):
            prog.producers[pid] = dataclasses.replace(
                p, q=[fn(x) for x in p.q], k=[fn(x) for x in p.k], v=[fn(x) for x in p.v])
    prog.output = fn(prog.output)
    prog.end_flag = None if prog.end_flag is None else fn(prog.end_flag)
    prog.output_steps = tuple(fn(lin) for lin in prog.output_steps)
    prog.claims = [(fn(lin), rng) for lin, rng in prog.claims]
    prog.nodes = {name: dataclasses.replace(rec, columns=tuple(fn(c) for c in rec.columns))
                  for name, rec in prog.nodes.items()}


def _whole_scale(raw: list[float], coefficients: object) -> float:
    """The power of two g with raw / g whole numbers, their largest odd one, where they stay
    within bf16's whole numbers (256); else the power of two common to the coefficients."""
    g = 2.0 ** min((_twos(v) for v in raw if v), default=0)
    if max((abs(v) for v in raw), default=0.0) / g <= 256:
        return g
    return 2.0 ** max(0, min(_twos(float(c)) for c in coefficients))  # type: ignore[attr-defined]


def _twos(c: float) -> int:
    """The exponent of 2 in ``c`` as an exact binary fraction (12 -> 2, 0.375 -> -3)."""
    f = Fraction(c)
    num, den = f.numerator, f.denominator
    return (abs(num) & -abs(num)).bit_length() - (den & -den).bit_length()
