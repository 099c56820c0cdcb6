"""Residual-stream columns: the reserved ones (constant 1.0, RMSNorm pins) and one per signal.

Column 0 is the constant; the pins follow (``pin_count``: their count depends on d, see
``emit/rmsnorm.py``). A half build has no pin; it has a second constant column instead where
some constant weight is a number bf16 does not hold (``constant_columns``).

A signal owns its column from the sublayer that writes it until its last
reader. A sublayer can only add, so a column is reused only after its old value is cancelled:
a self-attention head (the shift-by-0 lobe, exact one-hot weights) reads the dead value and
writes its negation, leaving exact zeros. Cancels cost heads, so fresh columns are used first
and a column is recycled only when d runs out.
"""

from __future__ import annotations

import dataclasses
import heapq
import math

from torchwright_fx.base.errors import WidthError
from torchwright_fx.base.machines import half_holds
from torchwright_fx.base.numerics import is_power_of_two
from torchwright_fx.ir.graph import Head, Program
from torchwright_fx.ir.linear import Lin
from torchwright_fx.schedule.plan import Plan, end_stage

MIN_D_MODEL, MAX_D_MODEL = 16, 1 << 16  # the widths tried when d_model is left to the compiler


def pin_count(d_model: int) -> int:
    """The RMSNorm pin columns of a width d = 2**e: one pin for e even, two for e odd (the
    pins' squares must sum to d * 4**m; ``emit/rmsnorm.py`` chooses their value)."""
    if not is_power_of_two(d_model):
        raise ValueError(f"d_model={d_model} must be a power of two")
    return 1 if int(math.log2(d_model)) % 2 == 0 else 2


def reserved_columns(d_model: int, pins: bool = True) -> int:
    """Columns no signal may use: the constant 1.0 and the RMSNorm pins (none in half
    precision, whose RMSNorm identity needs no pin: ``emit/half.py``)."""
    return 1 + (pin_count(d_model) if pins else 0)


def constant_columns(prog: Program) -> int:
    """1, or 2 in a half build where a reader's constant is not a number fp16 and bf16 hold:
    the emitter then writes it as two that are, one on each constant column
    (``base.machines.half_parts``; every reader scale is a power of two, which keeps
    whether a number is held). Half builds reserve the second column in the pins' place, as
    ``Plan.pin_cols``."""
    if not prog.precision.half:
        return 1
    lins: list[Lin] = [prog.output, *prog.output_steps]
    for p in prog.producers.values():
        if isinstance(p, Head):
            lins += [*p.q, *p.k, *p.v]
        else:
            lins += [x for lane in p.lanes for x in (lane.gate, lane.up)]
    return 1 if all(half_holds(lin.const) for lin in lins) else 2


def fitting_width(live: int) -> int:
    """The smallest power-of-two d_model with room for ``live`` signals beside the reserved
    columns (what ``allocate`` picks when every dead column can be recycled in time)."""
    d = MIN_D_MODEL
    while live + reserved_columns(d) > d:
        d *= 2
    return d


def assign(prog: Program, plan: Plan, d_model: int,
           spans: dict[int, tuple[int, int]] | None = None
           ) -> tuple[dict[int, int], dict[int, int]]:
    """Columns for every live signal, and the cancel stage of each recycled signal.
    ``spans``: ``plan.occupancy(prog)`` when the caller has it already. In half precision no
    column is recycled (a cancel head is attention, which half does not certify yet)."""
    half = prog.precision.half
    if spans is None:
        spans = plan.occupancy(prog)  # (written, cancel stage: first attention at/after last read)
    end = end_stage(plan.n_layers)  # hoisted: n_layers is a max over every producer
    first = reserved_columns(d_model, pins=False) + constant_columns(prog) - 1 if half else \
        reserved_columns(d_model)
    fresh = iter(range(first, d_model))
    # recyclable columns: (stage after which the column is zero, column, previous owner)
    released: list[tuple[int, int, int]] = []
    holder: dict[int, int] = {}  # column -> current owner
    columns: dict[int, int] = {}
    cancels: dict[int, int] = {}
    for sid in sorted(spans, key=lambda s: (spans[s][0], s)):
        written = spans[sid][0]
        col = next(fresh, None)
        if col is None:
            if half or not released or released[0][0] >= written:
                raise WidthError(f"needs more than d_model={d_model} columns at stage {written}")
            cancel, col, previous = heapq.heappop(released)
            cancels[previous] = cancel
        columns[sid] = col
        holder[col] = sid
        stage = spans[sid][1]
        if stage < end:  # else never freed: nothing is written after it
            heapq.heappush(released, (stage, col, sid))
    return columns, cancels


def allocate(prog: Program, plan: Plan, d_model: int | None) -> Plan:
    """A new plan giving every live signal a column (``plan`` itself is left as it was); with
    no d_model, the smallest power of two that fits."""
    if d_model is not None:
        if not is_power_of_two(d_model):
            raise WidthError(f"d_model={d_model}: the RMSNorm identity needs a power-of-two width")
        candidates = [d_model]
    else:
        candidates = [1 << k for k in range(MIN_D_MODEL.bit_length() - 1,
                                           MAX_D_MODEL.bit_length())]
    error: WidthError | None = None
    spans = plan.occupancy(prog)  # the same for every width tried
    for d in candidates:
        try:
            cols, cancels = assign(prog, plan, d, spans)
        except WidthError as e:
            error = e
            continue
        return dataclasses.replace(plan, stage=dict(plan.stage), columns=cols, cancels=cancels,
                                   d_model=d, const_col=0,
                                   pin_cols=list(range(1, constant_columns(prog) if
                                                       prog.precision.half else
                                                       reserved_columns(d))))
    raise WidthError(f"the program does not fit: {error}; leave d_model unset to pick the "
                     "smallest width that fits, or schedule with optimize>=1")
