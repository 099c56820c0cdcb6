"""The fast scheduler (optimize=0): every producer at its earliest stage, except the
end-of-context flag, then balanced within its slack (``schedule/balance.py``); and the same
from every producer at its latest stage within those layers; the placement of fewer
parameters, with its columns allocated (cancel heads included), is kept (a chain of
producers that only moves as a whole, which one move at a time cannot shift, is at its other
end in the second start). Where a layer holds two heads, each start is balanced a second
time towards every layer's heads sharing one K/V block (``schedule/kv_groups.py``), which
can take moves that cost parameters before the block's saving pays for them.

With no cap on heads or lanes per layer, as-soon-as-possible placement meets the critical-path
bound, so the layer count is optimal for the graph; width is the only thing it does not trade.

The end-of-context flag (ops/end.py: an averaging head, unless it shares the program's position
head, and a two-lane ramp read only by lm_head) depends on nothing the program computes, so
ASAP would put it in layer 0: its head there can add a head to every layer (Phi-3 has one head
count) and its column then lives through every layer. It goes instead where it costs least
within the program's layers: fewest heads per layer, then fewest lanes per layer, then the
lowest peak of live columns, then the latest layer.
"""

from __future__ import annotations

from collections import Counter

from torchwright_fx.ir.graph import FFN, Head, Program
from torchwright_fx.ops.end import NAME as END_NAME
from torchwright_fx.schedule import columns
from torchwright_fx.schedule.balance import balance, estimate
from torchwright_fx.schedule.bounds import earliest_stages, latest_stages
from torchwright_fx.schedule.plan import ATTENTION, MLP, Plan, layer_count, layer_of


def schedule(prog: Program) -> Plan:
    early = earliest_stages(prog)
    starts = [early, latest_stages(prog, layer_count(early.values()))]
    placements = []
    for stage in starts:
        if prog.end_flag is not None:
            stage = _place_end_flag(prog, stage)
        placements.append(balance(prog, stage))  # the busiest layer sets every layer's width
        if _may_share(prog, stage):  # heads on one K/V block a layer, where that is less
            placements.append(balance(prog, stage, share_first=True))
    best = min(placements, key=lambda stage: _parameters(prog, stage))  # the earliest on a tie
    return Plan(stage=best, scheduler="heuristic", status="heuristic")


def _may_share(prog: Program, stage: dict[int, int]) -> bool:
    """Whether some layer holds two heads, which one shared K/V block might serve (never in
    half precision: schedule/kv_groups.py). The second balancing runs even where the first
    shares already: putting no more query heads first finds fewer parameters on some programs
    (tracr's hist: 70,876 against 89,581)."""
    if not prog.share_kv or not prog.head_size:
        return False
    heads = Counter(layer_of(s) for pid, s in stage.items()
                    if isinstance(prog.producers[pid], Head))
    return max(heads.values(), default=0) > 1


def _parameters(prog: Program, stage: dict[int, int]) -> float:
    """A placement's parameters with the columns allocated at the width of fewest (a half
    build's width also depends on its readers: the estimate stands in for it there)."""
    if prog.precision.half:
        return estimate(prog, stage)
    return columns.parameters(prog, columns.allocate(prog, Plan(stage=stage), None))


def _place_end_flag(prog: Program, stage: dict[int, int]) -> dict[int, int]:
    """``stage`` with the flag's own head and ramp moved to their cheapest layers."""
    own = [p for p in prog.producers.values() if f".{END_NAME}" in p.name]
    head = next((p for p in own if isinstance(p, Head)), None)
    ramp = next(p for p in own if isinstance(p, FFN))
    rest = {pid: s for pid, s in stage.items() if pid not in {p.id for p in own}}
    n = layer_count(stage.values())
    heads = Counter(layer_of(s) for pid, s in rest.items()
                    if isinstance(prog.producers[pid], Head))
    lanes: Counter[int] = Counter()
    for pid, s in rest.items():
        p = prog.producers[pid]
        if isinstance(p, FFN):
            lanes[layer_of(s)] += len(p.lanes)
    # the head's layer (-1: it is the program's shared position head, not moved) and the
    # ramp's: in the head's layer or in the last one
    first = layer_of(stage[ramp.id]) if head is None else 0
    pairs = [(h, r) for h in (range(n) if head is not None else [-1])
             for r in sorted({max(h, first), n - 1})]
    best: tuple[int, ...] | None = None
    choice = stage
    for h, r in pairs:
        trial = dict(rest)
        if head is not None:
            trial[head.id] = 2 * h + ATTENTION
        trial[ramp.id] = 2 * r + MLP
        n_heads = max(heads[k] + (k == h) for k in range(n))
        n_lanes = max(lanes[k] + len(ramp.lanes) * (k == r) for k in range(n))
        cost = (n_heads, n_lanes, Plan(stage=trial).live_peak(prog), -r, -h)
        if best is None or cost < best:
            best, choice = cost, trial
    return choice
