"""Residual-stream columns: the reserved ones (constant 1.0, RMSNorm pins) and one per signal.

Column 0 is the constant; the pins follow (``pin_count``: their count depends on d, see
``emit/rmsnorm.py``). A half build has no pin; it has a second constant column instead where
some constant weight is a number bf16 does not hold (``constant_columns``).

A signal owns its column from the sublayer that writes it until its last
reader. A sublayer can only add, so a column is reused only after its old value is cancelled: a
self-attention head (the shift-by-0 lobe, exact one-hot weights) or an MLP lane adds its exact
negation (``cancels.py``). Cancels may cost heads or lanes, so fresh columns are used first
and a column is recycled only when d runs out.
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import math

import numpy as np

from torchwright_fx.base.errors import WidthError
from torchwright_fx.base.machines import half_holds
from torchwright_fx.base.numerics import VLLM_HEAD_SIZES, WIDTH_MULTIPLE, is_power_of_two
from torchwright_fx.ir.graph import Head, Program
from torchwright_fx.ir.linear import Lin
from torchwright_fx.schedule import kv_groups
from torchwright_fx.schedule.cancels import by_layer, lanes_per_cancel, spread
from torchwright_fx.schedule.cpsat_shape import d_head_of
from torchwright_fx.schedule.plan import (
    ATTENTION,
    MLP,
    Plan,
    end_stage,
    layer_members,
)

# the widths tried when d_model is left to the compiler (the least holds the constant, one pin
# and two signals)
MIN_D_MODEL, MAX_D_MODEL = 4, 1 << 16


@functools.cache
def pin_squares(d_model: int) -> tuple[int, ...]:
    """The RMSNorm pins of a width d, as whole numbers a_i whose squares sum to d (each pin is
    ``a_i * 2**t``, so the pins' squares sum to ``d * 4**t``: ``emit/rmsnorm.py``): as few as
    possible (one for a square, two for a sum of two squares, at most four by Lagrange's
    theorem), and among those the ones whose smallest is largest (the energy the pins absorb
    is set by the smallest). A power of two 2**e gives one pin for e even, two equal ones for
    e odd."""
    if d_model < 1:
        raise ValueError(f"d_model={d_model} must be positive")
    best: tuple[int, ...] = ()

    def search(rest: int, count: int, most: int, chosen: tuple[int, ...]) -> None:
        nonlocal best
        if rest == 0:
            if not best or len(chosen) < len(best) or (
                    len(chosen) == len(best) and min(chosen) > min(best)):
                best = chosen
            return
        if count == 0:
            return
        for a in range(min(most, math.isqrt(rest)), 0, -1):
            if a * a * count < rest:  # the rest cannot be reached with count squares <= a
                break
            search(rest - a * a, count - 1, a, (*chosen, a))

    for count in range(1, 5):
        search(d_model, count, d_model, ())
        if best:
            return best
    raise AssertionError(f"Lagrange: {d_model} is a sum of four squares")


def pin_count(d_model: int) -> int:
    """The RMSNorm pin columns of a width d (``pin_squares``)."""
    return len(pin_squares(d_model))


def exact_width(d_model: int) -> bool:
    """Whether the RMSNorm identity holds at width d in every runtime: the pins' mean of
    squares is exactly ``4**t`` both when a runtime divides the sum by d (exact: the sum is
    ``d * 4**t``) and when it multiplies by fl(1/d) (torch's mean: exact when fp32 rounds
    ``d * fl(1/d)`` to 1, which holds for 1,753 of the widths 16..2048 and every power of
    two)."""
    return d_model >= 1 and float(np.float32(d_model) * (np.float32(1.0) / np.float32(d_model))
                                  ) == 1.0


def usable_width(d_model: int, vllm: bool = True) -> bool:
    """A width every runtime that can load the build takes: ``exact_width``, and for a build
    vLLM can load (``vllm``: its d_head is one of VLLM_HEAD_SIZES) a multiple of
    WIDTH_MULTIPLE (vLLM's CPU kernels)."""
    return (not vllm or d_model % WIDTH_MULTIPLE == 0) and exact_width(d_model)


def vllm_loadable(prog: Program) -> bool:
    """Whether vLLM's attention takes the program's head size (then its width must suit
    vLLM's kernels too): the geometry's, emitted as head_dim even without a head of its own."""
    return d_head_of(prog) in VLLM_HEAD_SIZES


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


def reserved_for(prog: Program, d_model: int, constants: int | None = None) -> int:
    """The reserved columns of ``prog`` at width d: the constant and the pins, or in half
    precision the constant columns (``constants``: ``constant_columns(prog)`` if known)."""
    if not prog.precision.half:
        return reserved_columns(d_model)
    return constant_columns(prog) if constants is None else constants


def assign(prog: Program, plan: Plan, d_model: int,
           spans: dict[int, tuple[int, int]] | None = None, reserved: int | None = None
           ) -> tuple[dict[int, int], dict[int, int], dict[int, int]]:
    """Columns for every live signal, the cancel stage of each recycled signal (the first
    attention stage after its last read), and the latest stage its cancel may move to (the
    stage before its column's next owner is written; ``cancels.spread`` picks the sublayer).
    ``spans``: ``plan.occupancy(prog)`` and ``reserved``: ``reserved_for(prog, d_model)``
    when the caller has them already. In half precision no column is recycled (a cancel head
    is attention, which half does not certify yet)."""
    half = prog.precision.half
    if spans is None:
        spans = plan.occupancy(prog)  # (written, cancel stage: first attention at/after last read)
    end = end_stage(plan.n_layers)  # hoisted: n_layers is a max over every producer
    first = reserved_for(prog, d_model) if reserved is None else reserved
    fresh = iter(range(first, d_model))
    # recyclable columns: (stage after which the column is zero, column, previous owner)
    released: list[tuple[int, int, int]] = []
    holder: dict[int, int] = {}  # column -> current owner
    columns: dict[int, int] = {}
    cancels: dict[int, int] = {}
    latest: dict[int, int] = {}
    for sid in sorted(spans, key=lambda s: (spans[s][0], s)):
        written = spans[sid][0]
        col = next(fresh, None)
        if col is None:
            if half or not released or released[0][0] >= written:
                raise WidthError(f"needs more than d_model={d_model} columns at stage {written}")
            cancel, col, previous = heapq.heappop(released)
            cancels[previous] = cancel
            latest[previous] = written - 1
        columns[sid] = col
        holder[col] = sid
        stage = spans[sid][1]
        if stage < end:  # else never freed: nothing is written after it
            heapq.heappush(released, (stage, col, sid))
    return columns, cancels, latest


class _Cost:
    """A plan's parameter count as the emitter will size it (``emit/placement.py``): every
    layer as wide as the busiest in heads (the program's and the cancel heads, one per d_head
    cancels at its attention stage) and in lanes (the program's and the cancel lanes), plus
    the embedding and lm_head. Where every layer's heads fit one shared K/V block
    (``schedule/kv_groups.py``), a head costs its Q and O and each layer one K and V block;
    ``rooms`` then holds, per layer, the values that block has left for cancel heads (None: a
    block a head)."""

    def __init__(self, prog: Program, plan: Plan):
        self.d_head = d_head_of(prog) or 1
        self.per_cancel = lanes_per_cancel(prog)
        members = layer_members(prog, plan)
        self.heads: list[int] = [len(h) for h, _ in members]
        self.lanes = [len({lane for f in ffns for lane in f.lanes}) for _, ffns in members]
        self.vocab = len(prog.vocab)
        self.rooms: list[int] | None = None
        if prog.share_kv and prog.head_size:
            rooms = [kv_groups.value_room(h, prog.head_size, prog.rotary, prog.self_key)
                     for h, _ in members]
            if all(r is not None for r in rooms):
                self.rooms = rooms  # type: ignore[assignment]

    def __call__(self, plan: Plan) -> float:
        cancelled = by_layer(plan, ATTENTION)
        heads = [h + -(-len(sigs) // self.d_head)
                 for h, sigs in zip(self.heads, cancelled, strict=True)]
        lanes = [n + self.per_cancel * len(sigs)
                 for n, sigs in zip(self.lanes, by_layer(plan, MLP), strict=True)]
        most = max([1, *heads])
        shared = self.rooms is not None and all(
            len(sigs) <= room for sigs, room in zip(cancelled, self.rooms, strict=True))
        blocks = 1 if shared else most
        layer = 2 * (most + blocks) * self.d_head + 3 * max([1, *lanes]) + 2
        return plan.d_model * (len(heads) * layer + 2 * self.vocab + 1)


def parameters(prog: Program, plan: Plan) -> float:
    """An allocated plan's parameters, as the emitter will size it."""
    return _Cost(prog, plan)(plan)


def allocate(prog: Program, plan: Plan, d_model: int | None, at_least: int = 0) -> Plan:
    """A new plan giving every live signal a column (``plan`` itself is left as it was). With
    no d_model, the width of fewest parameters among those every runtime takes
    (``usable_width``), from the live peak up: a tighter width recycles more columns, and each
    recycled column is zeroed by a cancel head (up to d_head columns per head) or a cancel lane,
    which may add a head or lanes to every layer (``_Cost``). A half build keeps the smallest
    power of two: its norm's exponent grows with the mean of squares, energy / d
    (``emit/half.py``), and a narrower residual can push it past what a count's certificate
    assumes (tracr's count_less_freq at length 5 was refused at 48)."""
    half = prog.precision.half
    spans = plan.occupancy(prog)  # the same for every width tried
    vllm = vllm_loadable(prog)

    constants = constant_columns(prog)  # a scan of every reader: once, not per width

    def reserved(d: int) -> int:
        return reserved_for(prog, d, constants)

    cost = _Cost(prog, plan)  # the program's heads and lanes per layer, for every width
    last_read = {s: b for s, (_, b) in plan.lifetimes(prog).items()}
    # half builds recycle no column; a fp32 build may zero one in either sublayer
    per_cancel = None if half else lanes_per_cancel(prog)

    def build(d: int, cols: dict[int, int], cancels: dict[int, int], latest: dict[int, int]
              ) -> Plan:
        cancels = spread(cost.heads, cost.lanes,
                         {s: (last_read[s], latest[s]) for s in cancels}, cost.d_head, per_cancel,
                         cost.rooms)
        return dataclasses.replace(plan, stage=dict(plan.stage), columns=cols, cancels=cancels,
                                   d_model=d, const_col=0,
                                   pin_cols=list(range(1, reserved(d))))

    if d_model is not None:
        if not exact_width(d_model):
            raise WidthError(f"d_model={d_model}: the RMSNorm identity does not hold at this "
                             "width (fp32 does not round d * fl(1/d) to 1); leave d_model unset "
                             "to let the compiler choose, or pick a neighbouring width")
        # (a width that is not a multiple of WIDTH_MULTIPLE is the user's choice: exact,
        # but vLLM's CPU kernels refuse it)
        try:
            cols, cancels, latest = assign(prog, plan, d_model, spans, reserved(d_model))
        except WidthError as e:
            raise WidthError(f"the program does not fit: {e}; leave d_model unset to pick the "
                             "smallest width that fits, or schedule with optimize>=1") from None
        return build(d_model, cols, cancels, latest)
    peak = plan.live_peak(prog)
    error: WidthError | None = None
    best: tuple[float, Plan] | None = None
    d = max(MIN_D_MODEL, peak + 1, at_least)  # at_least: a half build's readers (emit/half)
    while d <= MAX_D_MODEL:
        if not usable_width(d, vllm) or peak + reserved(d) > d or (half and not is_power_of_two(d)):
            d += 1
            continue
        try:
            cols, cancels, latest = assign(prog, plan, d, spans, reserved(d))
        except WidthError as e:
            error = e
        else:
            candidate = build(d, cols, cancels, latest)
            if best is None or cost(candidate) < best[0]:
                best = (cost(candidate), candidate)
            # a wider plan without cancels only costs more; past a power of two, the
            # tightest so far is kept (the search is then no worse than powers of two)
            if not cancels or is_power_of_two(d):
                return best[1]
        d += 1
    raise WidthError(f"the program does not fit: {error}; leave d_model unset to pick the "
                     "smallest width that fits, or schedule with optimize>=1")
