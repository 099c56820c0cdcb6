"""The lowered program as text: what ``print(compiled.build.program)`` and the dumps show.

One line per producer (the embedding summarised, then each attention head and FFN bank by
id), the output form, one line per fx node record, the ``tw.check``s and approximations.
Signals are ``s<id>``, producers ``%<id>``; an affine read is written as its formula
(``2*s3 + s7 - 1``) and a column's facts in a few words (``[0, 9] int``, ``step 1/2``,
``noise 3e-06``, ``once``). ``docs/ir.md`` shows a printout and how to read it.

``format_plan`` and ``format_placement`` print the later stages' records from the program's
side; they read the objects' fields only, so this module imports nothing above ``ir``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from typing import Any

from torchwright_fx.ir.graph import FFN, Head, NodeRecord, Program
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import EXACT, INEXACT, ONCE, PAIR, Interval

ROUNDING_WORDS = {EXACT: "", ONCE: "once", PAIR: "pair", INEXACT: "inexact"}


# -- small forms ----------------------------------------------------------------------------------


def _num(x: float) -> str:
    """A number in at most six significant digits, whole numbers without ``.0``."""
    if math.isfinite(x) and float(x).is_integer() and abs(x) < 1e15:
        return str(int(x))
    return f"{x:.6g}"


def format_lin(lin: Lin, limit: int | None = 6) -> str:
    """``2*s3 + s7 - 1``: terms by signal id, the constant last; past ``limit`` terms (None:
    no limit) the rest is ``… (+N terms)``."""
    parts: list[str] = []
    items = sorted(lin.terms.items())
    for i, (sid, c) in enumerate(items):
        if i == limit:
            parts.append(f"+ … (+{len(items) - i} terms)")
            break
        term = f"s{sid}" if abs(c) == 1 else f"{_num(abs(c))}*s{sid}"
        parts.append(("-" if c < 0 else "") + term if i == 0 else
                     f"{'-' if c < 0 else '+'} {term}")
    if not parts:
        return _num(lin.const)
    if lin.const:
        parts.append(f"{'-' if lin.const < 0 else '+'} {_num(abs(lin.const))}")
    return " ".join(parts)


def format_interval(iv: Interval) -> str:
    """A column's facts: ``= 3``, ``0/1``, ``[0, 9] int``, ``[0, 4.5] step 1/2``, ``[-1, 1]
    real``, with ``k/n n<=10``, ``~int``, ``noise 3e-06`` and the reference's rounding
    (``once``, ``pair``, ``inexact``; nothing when it holds the value exactly) as they apply."""
    words: list[str] = []
    if iv.lo == iv.hi:
        words.append(f"= {_num(iv.lo)}")
    elif iv.is_bool:
        words.append("0/1")
    else:
        words.append(f"[{_num(iv.lo)}, {_num(iv.hi)}]")
        if iv.step is None:
            words.append("~int" if iv.near_integral else "real")
        elif iv.integral and iv.step == 1:
            words.append("int")
        else:
            words.append(f"step {iv.step}" + (f" + {iv.offset}" if iv.offset else ""))
    if iv.max_den:
        words.append(f"k/n n<={iv.max_den}" + (f" group {iv.den_group}" if iv.den_group else ""))
    if iv.noise:
        words.append(f"noise {iv.noise:.0e}")
    if ROUNDING_WORDS.get(iv.rounding, ""):
        words.append(ROUNDING_WORDS[iv.rounding])
    return " ".join(words)


def short_source(source: str) -> str:
    """``file:line: code`` without the file's directories (the code may hold slashes)."""
    path, sep, rest = source.partition(":")
    return os.path.basename(path) + sep + rest


def _listed(items: Sequence[str], limit: int | None = 6) -> str:
    """``[a, b, … (+N)]``: at most ``limit`` items shown (None: all)."""
    shown = list(items if limit is None else items[:limit])
    if len(shown) < len(items):
        shown.append(f"… (+{len(items) - len(shown)})")
    return "[" + ", ".join(shown) + "]"


def _counts(prog: Program) -> str:
    heads = sum(isinstance(p, Head) for p in prog.producers.values())
    ffns = len(prog.producers) - heads
    return f"{heads} head{'s' * (heads != 1)}, {ffns} ffn{'s' * (ffns != 1)}"


def _signal(prog: Program, sid: int) -> str:
    sig = prog.signals.get(sid)
    return f"s{sid}" if sig is None else f"s{sid} {sig.name}"


def _written(prog: Program, sid: int) -> str:
    sig = prog.signals[sid]
    dead = prog.live is not None and sid not in prog.live
    return f"s{sid} {sig.name}: {format_interval(sig.range)}" + (" (dead)" if dead else "")


def _reads(prog: Program, lins: Iterable[Lin]) -> list[str]:
    sids: set[int] = set()
    for lin in lins:
        sids |= lin.signals()
    return [_signal(prog, s) for s in sorted(sids)]


# -- the program ----------------------------------------------------------------------------------


def format_producer(prog: Program, p: FFN | Head, detail: bool = False) -> str:
    """One line for a producer; ``detail``: every read and write listed, then its lanes
    (``act(gate) * (up) -> {signal: down weight}``) or its non-zero q/k/v dims."""
    limit = None if detail else 6
    writes = _listed([_written(prog, s) for s in p.outputs], limit)
    where = f"  @ {short_source(p.source)}"
    if isinstance(p, FFN):
        reads = _listed(_reads(prog, (x for ln in p.lanes for x in (ln.gate, ln.up))), limit)
        lines = [f"%{p.id} ffn {p.name}  lanes={len(p.lanes)}  reads={reads}  "
                 f"writes={writes}{where}"]
        if detail:
            for i, lane in enumerate(p.lanes):
                down = ", ".join(f"s{s}: {_num(w[i])}" for s, w in p.outputs.items() if i in w)
                lines.append(f"    lane {i}: act({format_lin(lane.gate, None)}) * "
                             f"({format_lin(lane.up, None)}) -> {{{down}}}")
        return "\n".join(lines)
    roles = (("q", p.q), ("k", p.k), ("v", p.v))
    used = [sum(not (lin.is_const and lin.const == 0) for lin in m) for m in (p.q, p.k)]
    reads = " ".join(f"{role}={_listed(_reads(prog, lins), limit)}" for role, lins in roles
                     if any(lin.terms for lin in lins)) or "=[]"
    lines = [f"%{p.id} head {p.name}  q/k={len(p.q)} dims ({used[0]}/{used[1]} non-zero)  "
             f"v={len(p.v)}  reads {reads}  writes={writes}{where}"]
    if detail:
        lines += [f"    {role}[{i}] = {format_lin(lin, None)}" for role, lins in roles
                  for i, lin in enumerate(lins) if not (lin.is_const and lin.const == 0)]
    return "\n".join(lines)


def format_embedding(prog: Program, limit: int | None = 8) -> str:
    """One line: the embedding's signals (one per distinct per-token table) and their facts."""
    items = [f"s{s} {prog.signals[s].name}: {format_interval(prog.signals[s].range)}"
             for s in sorted(prog.embed_tables)]
    return f"embed  signals={len(items)}  {_listed(items, limit)}"


def format_node(rec: NodeRecord, limit: int | None = 6) -> str:
    """``name -> [columns]  facts  @ source``: one fx node's record (identical facts of
    several columns as ``N x facts``)."""
    cols = _listed([format_lin(c, limit) for c in rec.columns], limit)
    facts = [format_interval(iv) for iv in rec.intervals]
    shown = f"{len(facts)} x {facts[0]}" if len(facts) > 1 and len(set(facts)) == 1 else \
        _listed(facts, limit)[1:-1]
    bound = "" if rec.error_bound is None else f"  approx ±{rec.error_bound:.1g}"
    return f"  {rec.name} -> {cols}  {shown}{bound}  @ {short_source(rec.source)}"


def format_program(prog: Program, detail: bool = False) -> str:
    """The program, one line per producer (``Program.__str__``); ``detail`` (the dumps) lists
    everything in full and adds every lane and head dim."""
    limit = None if detail else 6
    live = "" if prog.live is None else f" ({len(prog.live)} live)"
    lines = [f"program  machine={prog.machine}  vocab={len(prog.vocab)}  "
             f"signals={len(prog.signals)}{live}  producers={len(prog.producers)} "
             f"({_counts(prog)})  nodes={len(prog.nodes)}",
             format_embedding(prog, None if detail else 8)]
    lines += [format_producer(prog, prog.producers[pid], detail)
              for pid in sorted(prog.producers)]
    lines.append(f"output = {format_lin(prog.output, limit)}  "
                 f"{format_interval(prog.output_range)}")
    if prog.end_flag is not None:
        lines.append(f"<eos> logit += {prog.end_gain:.6g} * ({format_lin(prog.end_flag, limit)})"
                     "  (1 at position max_seq_len - 1, else exactly 0)")
    if prog.nodes:
        lines.append("nodes:")
        lines += [format_node(rec, limit) for rec in prog.nodes.values()]
    if prog.checks:
        lines.append("checks:")
        lines += [f"  {c.node}: {c.message}  @ {short_source(c.source)}" for c in prog.checks]
    if prog.approximations:
        lines.append("approximations:")
        lines += [f"  {a}" for a in prog.approximations]
    return "\n".join(lines)


def summary(prog: Program) -> str:
    """``Program.__repr__``: one line of counts."""
    live = "" if prog.live is None else f" ({len(prog.live)} live)"
    return (f"Program({prog.machine}, {len(prog.producers)} producers ({_counts(prog)}), "
            f"{len(prog.signals)} signals{live}, {len(prog.nodes)} nodes)")


# -- later stages, seen from the program ----------------------------------------------------------


def format_plan(prog: Program, plan: Any) -> str:
    """A ``schedule.plan.Plan``: per stage (2L is layer L's attention, 2L+1 its MLP) the
    producers there and the signals they write; once columns are allocated, each signal's
    column, the stages it is live (written to last read) and where a cancel head zeroes it."""
    cols = plan.columns
    spans = plan.lifetimes(prog) if cols else {}
    lines = [f"plan  layers={plan.n_layers}  stages 2L: layer L attention, 2L+1: its MLP  "
             f"scheduler={plan.scheduler} [{plan.status}]"
             + (f"  d_model={plan.d_model}  const_col={plan.const_col}  pin_cols={plan.pin_cols}"
                if cols else "  (no columns yet)")]

    def where(sid: int) -> str:
        col = f" col {cols[sid]} stages {spans[sid][0]}..{spans[sid][1]}" if sid in cols else ""
        cancel = f" (cancelled at {plan.cancels[sid]})" if sid in plan.cancels else ""
        return f"s{sid} {prog.signals[sid].name}{col}{cancel}"

    embed = [where(s) for s in sorted(prog.embed_tables)]
    lines.append(f"stage -1 embed: {_listed(embed, None)}")
    by_stage: dict[int, list[int]] = {}
    for pid, st in plan.stage.items():
        by_stage.setdefault(st, []).append(pid)
    for st in sorted(by_stage):
        lines.append(f"stage {st}:")
        for pid in sorted(by_stage[st]):
            p = prog.producers[pid]
            kind = "head" if isinstance(p, Head) else "ffn"
            lines.append(f"  %{pid} {kind} {p.name}  writes="
                         f"{_listed([where(s) for s in p.outputs], None)}")
    lines.append(f"output reads {_listed([where(s) for s in sorted(prog.output.signals())], None)}")
    return "\n".join(lines)


def _ranges(indices: list[int]) -> str:
    """[0, 1, 2, 5] -> ``0-2,5``."""
    runs: list[list[int]] = []
    for i in sorted(indices):
        if runs and runs[-1][1] == i - 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


def format_placement(placement: Any) -> str:
    """An ``emit.placement.Placement``: per layer, its heads in head-index order, the cancel
    heads after them (with the signals whose columns they zero) and each FFN bank's lane
    indices (identical lanes of two banks share one)."""
    lines = [f"placement  layers={len(placement.layers)}  heads/layer={placement.n_heads}  "
             + (f"kv_heads={placement.kv_heads}  " if placement.kv_heads < placement.n_heads
                else "") + f"lanes/layer={placement.d_ff}"]
    for i, la in enumerate(placement.layers):
        program_heads = la.heads[:len(la.heads) - la.n_cancel]
        heads = [f"{h}:%{p.id} {p.name}" for h, p in enumerate(program_heads)]
        zeroed = [f"s{s}" for h in la.heads[len(program_heads):] for s in h.outputs]
        cancel = f" + {la.n_cancel} cancel {_listed(zeroed, None)}" if la.n_cancel else ""
        lanes = [f"%{f.id} {f.name} {_ranges(la.lanes_of(f))}"
                 + (f" zeroes {_listed([f's{s}' for s in f.outputs], None)}" if f.id < 0 else "")
                 for f in la.ffns]
        lines.append(f"layer {i}: heads {_listed(heads, None)}{cancel}  "
                     f"lanes={len(la.lane_index)} {_listed(lanes, None)}")
    return "\n".join(lines)
