"""Bounds on a half build's stored numbers (``precision="half"``): every weight an fp16 and bf16
number, and every head's query and key below fp16's 65504 as the runtime computes them. Part
of the certificate (``emit/certify_half.py``), which calls both."""

from __future__ import annotations

import math

import numpy as np
import torch

from torchwright_fx.base.errors import CompileError
from torchwright_fx.base.machines import FP16
from torchwright_fx.base.numerics import SILU_SCALE
from torchwright_fx.emit.half import exact_in_half
from torchwright_fx.emit.machine import Machine
from torchwright_fx.emit.placement import Placement
from torchwright_fx.ir.graph import Head, NodeRecord, Producer, Program, Signal
from torchwright_fx.ir.linear import Lin
from torchwright_fx.schedule.plan import Plan

ADVICE = "compile with precision='fp32' (the default)"


def weights_exact(prog: Program, plan: Plan, m: Machine, placed: Placement) -> None:
    """Refuse a weight fp16 or bf16 does not hold, naming the producer that needs it."""
    for layer, lp in zip(m.layers, placed.layers, strict=True):
        for f in lp.ffns:
            rows = lp.lanes_of(f)
            cols = [plan.columns[s] for s in f.outputs if s in plan.columns]
            parts = (layer.gate_up[rows], layer.gate_up[[r + m.d_ff for r in rows]],
                     layer.down[cols][:, rows])
            if not all(exact_in_half(t) for t in parts):
                worst = next(float(x) for t in parts for x in t.flatten()
                             if not exact_in_half(torch.tensor([float(x)])))
                raise CompileError(f"{f.source}\n  {f.name}: {_weight_refusal(worst, m)}")
        if not exact_in_half(layer.qkv) or not exact_in_half(layer.o):
            raise CompileError(f"an attention weight is not an fp16 and bf16 number (a "
                               f"compiler bug: the half geometry rounds them); {ADVICE}")
    readers = prog.readers()
    for sid in prog.embed_tables:
        if sid in plan.columns and not exact_in_half(m.embed[:, plan.columns[sid]]):
            # a folded column's own source is the token stream's: name the op reading it
            sig = _reader(prog, readers, sid)
            values = sorted({float(v) for v in m.embed[:, plan.columns[sid]]
                             if not exact_in_half(torch.tensor([float(v)]))})
            raise CompileError(
                f"{sig.source}\n  {sig.name}: precision='half' keeps every value in fp16 and "
                f"bf16, and this per-token value takes {values[0]:g}, which bf16 (8 significant "
                "bits: every whole number to 256) or fp16 (11 bits, to 2048) does not hold; "
                f"keep values small, or {ADVICE}")
    if not exact_in_half(m.lm_head) or not exact_in_half(m.final_norm):
        raise CompileError(f"the output decoding needs a weight half cannot hold; {ADVICE}")


def _weight_refusal(worst: float, m: Machine) -> str:
    """Why a lane weight is not a half number, and what to change."""
    if abs(worst) <= FP16.max_finite:
        return (f"precision='half' needs every weight to be an fp16 and bf16 number, and this "
                f"op's lanes need {worst:g} (a step or table entry too fine, or a value beyond "
                "256 that a step reads: half holds whole numbers to 256 in bf16); keep the "
                f"values it reads small (tw.claim the range that occurs), or {ADVICE}")
    scale = m.meta["reader_scale"]  # emit/half.HalfNorm.reader_scale
    most = int(FP16.max_finite // (SILU_SCALE * scale))
    return (f"precision='half' needs every weight below fp16's 65504, and this op's lanes need "
            f"{worst:g}: a step's gate weight is the coefficient of each term it reads times "
            f"its sharpness (at least {SILU_SCALE:g}) times {scale:g} (the norm's reader scale "
            f"for a residual of this energy), so the values a comparison or table reads may carry "
            f"coefficients up to {most}; compare smaller sums (digit by digit, or a few "
            f"columns at a time, not one number weighted by powers of ten), or {ADVICE}")


def _reader(prog: Program, readers: dict[int, list[int]], sid: int
            ) -> Signal | NodeRecord | Producer:
    """What to blame for a per-token column: the first producer reading it, else the last
    node (the output) whose columns read it, else the column itself."""
    if readers.get(sid):
        return prog.producers[readers[sid][0]]
    nodes = [rec for rec in prog.nodes.values() if rec.name != "output"
             and any(sid in lin.signals() for lin in rec.columns)]
    return nodes[-1] if nodes else prog.signals[sid]


def projections(prog: Program, per_token: dict[int, np.ndarray],
                sets: dict[int, np.ndarray], scale: float) -> None:
    """Every head's q and k below fp16's 65504 as the runtime computes them: the norm's reader
    scale R moves from the query to the key (``emit/emitter.py``), so the key is ``R k`` and
    the query ``sqrt(d_head) q / R``. A bound per dim: each term at its largest magnitude
    (the rotary dims' constants are replayed with their rotation at lowering)."""

    def largest(sid: int) -> float:
        held = per_token.get(sid, sets.get(sid))
        assert held is not None, f"signal {prog.signals[sid].name} was never certified"
        return float(np.abs(held).max())

    def top(lin: Lin) -> float:
        return abs(float(lin.const)) + sum(abs(c) * largest(s) for s, c in lin.terms.items())

    for h in prog.producers.values():
        if not isinstance(h, Head):
            continue
        root = math.sqrt(len(h.q))
        worst = max([top(k) * scale for k in h.k] + [top(q) * root / scale for q in h.q])
        if worst >= FP16.max_finite:
            raise CompileError(
                f"{h.source}\n  {h.name}: precision='half' keeps every query and key below "
                f"fp16's 65504, and this head's reach {worst:g} once the norm's scale "
                f"{scale:g} (for a residual this large) moves onto the key; keep fewer or "
                f"smaller values live, or {ADVICE}")
