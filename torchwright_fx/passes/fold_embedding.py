"""Fold affine reads of per-token features into single embedding columns.

``x @ W``, ``tw.is_token(x, "0") + tw.is_token(x, "1")`` and the like are functions of the
token alone, so the embedding can hold each one in one column instead of keeping every one-hot
column alive for its readers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from torchwright_fx.ir.graph import EMBED, FFN, Head, Lane, Program
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import Interval


def fold_embedding(prog: Program) -> Program:
    """A new program whose affine reads of several embedding columns read one folded column."""
    prog = prog.copy()
    cache: dict[tuple, Lin] = {}

    def fold(lin: Lin) -> Lin:
        if len(lin.terms) < 2 or any(prog.signals[s].producer != EMBED for s in lin.terms):
            return lin
        key = tuple(sorted(lin.terms.items()))  # the constant stays outside the table
        if key not in cache:
            n = len(prog.vocab)
            table = tuple(sum(c * prog.embed_tables[s][t] for s, c in lin.terms.items())
                          for t in range(n))
            first = prog.signals[next(iter(lin.terms))]
            rng = Interval(min(table), max(table), all(float(v).is_integer() for v in table))
            cache[key] = prog.embed(table, rng, f"embed({first.name}...)", first.source)
        return cache[key] + lin.const

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
    prog.nodes = {name: dataclasses.replace(rec, columns=tuple(fn(c) for c in rec.columns))
                  for name, rec in prog.nodes.items()}
