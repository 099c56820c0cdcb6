"""Where each recycled column is zeroed: by a cancel head or by cancel lanes.

A column is taken again only after its old value is cancelled: some sublayer between the old
value's last read and the new owner's write adds its exact negation. Both sublayers can:

- **attention**: a self head (the recency lobe at distance 0, one-hot weights) reads up to
  ``d_head`` dead values at their own position and writes their negations;
- **MLP**: on the SwiGLU machine one lane per column, ``SiLU(G) * (-v)`` with ``G =
  CANCEL_GATE`` on the constant column (SiLU(G) is exactly G) and a down weight of ``1/G``:
  powers of two, so ``-v`` exactly. On the ReLU machine two lanes, ``relu(v)`` and
  ``relu(-v)`` with down weights -1 and +1: one of them is 0, so again ``-v`` exactly.

A Phi-3 layer has one shape, so a cancel costs nothing where its layer has a spare head or
spare lanes, and otherwise widens every layer: a head ``4 d_head d`` parameters a layer, a
lane ``3 d``. ``spread`` places every cancel within its window to make the per-layer cost
``4 d_head H + 3 F`` (H heads, F lanes, the busiest layer's) least.
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Callable

from torchwright_fx.base.numerics import CANCEL_GATE
from torchwright_fx.ir.graph import FFN, Head, Lane, Program
from torchwright_fx.ir.linear import Lin
from torchwright_fx.schedule.plan import ATTENTION, Plan, layer_of, stage_parity

CANCEL = "cancel"  # the name of the heads and lanes that zero a column once nothing reads it


def is_cancel(p: FFN | Head) -> bool:
    """Whether a placed head or FFN is a cancel's (the program's producers have ids >= 0)."""
    return p.id < 0


def lanes_per_cancel(prog: Program) -> int:
    """MLP lanes that zero one column: 1 on the SwiGLU machine, 2 on the ReLU machine."""
    return 1 if prog.machine.act == "silu" else 2


def cancel_ffn(prog: Program, sigs: list[int]) -> FFN:
    """The lanes that zero ``sigs``' columns in one MLP sublayer (see the module docstring)."""
    lanes: list[Lane] = []
    outputs: dict[int, dict[int, float]] = {}
    for s in sigs:
        if prog.machine.act == "silu":
            outputs[s] = {len(lanes): 1.0 / CANCEL_GATE}
            lanes.append(Lane(Lin.constant(CANCEL_GATE), Lin.of(s, -1.0)))
        else:
            outputs[s] = {len(lanes): -1.0, len(lanes) + 1: 1.0}
            lanes += [Lane(Lin.of(s), Lin.constant(1.0)), Lane(Lin.of(s, -1.0), Lin.constant(1.0))]
    return FFN(-1, lanes, outputs, CANCEL, "<columns>")


def by_layer(plan: Plan, parity: int) -> list[list[int]]:
    """Per layer, the signals whose cancel is in its sublayer ``parity``."""
    out: list[list[int]] = [[] for _ in range(plan.n_layers)]
    for sid, stage in sorted(plan.cancels.items()):
        if stage_parity(stage) == parity:
            out[layer_of(stage)].append(sid)
    return out


def spread(heads: list[int], lanes: list[int], windows: dict[int, tuple[int, int]],
           d_head: int, per_cancel: int | None, rooms: list[int] | None = None
           ) -> dict[int, int]:
    """A stage for every cancel within its window ``(lo, hi)`` (its last read, the stage
    before its column's next owner is written): attention stages hold up to ``d_head`` a
    spare head, MLP stages one cancel per ``per_cancel`` spare lanes (None: heads only).
    Of the head counts H from the program's busiest layer up, and for each the fewest lanes
    F that fit (earliest deadline first is exact for unit jobs in windows), the least
    ``4 d_head H + 3 F``; fewer heads on a tie (a smaller KV cache). A cancel lane identical
    to a program lane of its layer is placed once (``emit/placement.py``), so this counts an
    upper bound on the lanes. ``rooms``: where a layer's heads share one K/V block
    (``schedule/kv_groups.py``), the values each layer's block has left for cancels (its
    attention stage holds no more), and a head costs ``2 d_head`` (its Q and O) beside the
    layer's one block."""
    if not windows:
        return {}
    n = len(heads)
    order = sorted(windows, key=lambda s: (windows[s][0], windows[s][1], s))

    def fill(most_heads: int, most_lanes: int) -> dict[int, int] | None:
        placed: dict[int, int] = {}
        pending: list[tuple[int, int]] = []  # (hi, signal)
        it = 0
        for stage in range(2 * n):
            while it < len(order) and windows[order[it]][0] <= stage:
                heapq.heappush(pending, (windows[order[it]][1], order[it]))
                it += 1
            layer = layer_of(stage)
            if stage_parity(stage) == ATTENTION:
                room = (most_heads - heads[layer]) * d_head
                if rooms is not None:
                    room = min(room, rooms[layer])
            else:
                room = -1 if per_cancel is None else (most_lanes - lanes[layer]) // per_cancel
            while pending and room > 0:
                hi, sid = heapq.heappop(pending)
                if hi < stage:
                    return None
                placed[sid] = stage
                room -= 1
            if pending and pending[0][0] <= stage:
                return None
        return placed if it == len(order) and not pending else None

    least_heads, least_lanes = max([0, *heads]), max([0, *lanes])
    most_heads = least_heads + -(-len(windows) // d_head)
    extra = 0 if per_cancel is None else per_cancel * len(windows)
    best: tuple[int, dict[int, int]] | None = None
    def head_cost(h: int) -> int:  # Q, K, V and O of h heads (a checkpoint has one)
        h = max(h, 1)
        return 2 * d_head * (h + (1 if rooms is not None else h))

    for h in range(least_heads, most_heads + 1):
        if best is not None and head_cost(h) + 3 * max(least_lanes, 1) >= best[0]:
            break  # more heads only cost more from here
        f = _least(functools.partial(_fits, fill, h), least_lanes, least_lanes + extra)
        if f is None:
            continue
        cost = head_cost(h) + 3 * max(f, 1)  # a checkpoint has a head and a lane
        if best is None or cost < best[0]:
            placed = fill(h, f)
            assert placed is not None
            best = (cost, placed)
    if best is None:
        if rooms is not None:  # a window with no stage to spare but a full shared block
            return spread(heads, lanes, windows, d_head, per_cancel)
        raise AssertionError("every cancel fits its window with a head per cancel")
    return best[1]


def _fits(fill: Callable[[int, int], dict[int, int] | None], most_heads: int,
          most_lanes: int) -> bool:
    return fill(most_heads, most_lanes) is not None


def _least(fits: Callable[[int], bool], lo: int, hi: int) -> int | None:
    """The least f in [lo, hi] with ``fits(f)`` (``fits`` monotone), or None."""
    if not fits(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo
