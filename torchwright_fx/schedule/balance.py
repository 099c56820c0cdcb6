"""Balancing the layers (issue 35): a Phi-3 checkpoint has one shape, every layer as many heads
and lanes as the busiest, so a producer placed as soon as possible can widen every layer.

The pass moves producers within their slack (after every producer they read, before every one
that reads them, in a sublayer of their kind, within the layers the plan has) while that lowers
the parameters, estimated as ``(P + 2) (n (4 d_head H + 3 L) + 2 V)``: P the peak of live
columns (the residual width less the constant and a pin), H heads and L lanes in the busiest
layer of n, V the vocabulary; then the sum of the squared per-layer costs (so that of two
equally busy layers one can be emptied first). A move may raise the peak where the layers'
narrowing pays for it; the layer count never changes. Besides single producers, a producer
and a reader in the very next sublayer move together by the same shift (a head and the lanes
that read it: neither can move alone while the other holds it in place), and a producer of a
busiest layer is pushed later with every reader it would overtake, transitively, each right
after what it reads (a longer chain, which only moves as a whole).
"""

from __future__ import annotations

from collections import Counter

from torchwright_fx.base.numerics import BALANCE_PASSES, PUSH_LAYERS
from torchwright_fx.ir.graph import EMBED, FFN, Head, Program
from torchwright_fx.schedule import kv_groups
from torchwright_fx.schedule.cpsat_shape import d_head_of
from torchwright_fx.schedule.plan import (
    EMBED_STAGE,
    Plan,
    cancel_stage,
    end_stage,
    layer_count,
    layer_of,
    parity,
)


class Occupancy:
    """``Plan.live_peak`` kept up to date as producers move: a count of the columns taken at
    each stage, where moving a producer changes only the spans of the signals it writes and
    reads (a move never changes the layer count, so the output's stage is fixed)."""

    def __init__(self, prog: Program, stage: dict[int, int]):
        self.prog, self.stage = prog, stage
        self.end = end_stage(layer_count(stage.values()))
        self.live = prog.live_signals()
        self.final = prog.final_reads()
        self.readers = prog.readers()
        self.touches = {pid: [s for s in {*p.reads(), *p.outputs} if s in self.live]
                        for pid, p in prog.producers.items()}
        self.count = [0] * (self.end - EMBED_STAGE + 1)
        for s in self.live:
            self._add(s, 1)

    def _span(self, sid: int) -> tuple[int, int]:
        producer = self.prog.signals[sid].producer
        written = EMBED_STAGE if producer == EMBED else self.stage[producer]
        last = self.end if sid in self.final else \
            max([written, *(self.stage[r] for r in self.readers[sid])])
        return written, min(cancel_stage(last), self.end)

    def _add(self, sid: int, sign: int) -> None:
        a, b = self._span(sid)
        for t in range(a - EMBED_STAGE, b - EMBED_STAGE + 1):
            self.count[t] += sign

    def move(self, pid: int, to: int) -> None:
        """Put producer ``pid`` at stage ``to`` (the caller's ``stage`` dict is updated)."""
        for s in self.touches[pid]:
            self._add(s, -1)
        self.stage[pid] = to
        for s in self.touches[pid]:
            self._add(s, 1)

    def peak(self) -> int:
        return max(self.count, default=0)


def estimate(prog: Program, stage: dict[int, int]) -> int:
    """The parameters ``balance`` minimises, for a whole placement."""
    n = layer_count(stage.values())
    heads: Counter[int] = Counter()
    lanes: Counter[int] = Counter()
    for pid, s in stage.items():
        p = prog.producers[pid]
        heads[layer_of(s)] += isinstance(p, Head)
        lanes[layer_of(s)] += len(p.lanes) if isinstance(p, FFN) else 0
    widest = 4 * (d_head_of(prog) or 1) * max(heads.values(), default=0) \
        + 3 * max(lanes.values(), default=0)
    return (Plan(stage=stage).live_peak(prog) + 2) * (n * widest + 2 * len(prog.vocab))


def balance(prog: Program, stage: dict[int, int], share_first: bool = False
            ) -> dict[int, int]:
    """``stage`` with producers moved within their slack to lower the busiest layer's cost.
    ``share_first``: first towards every layer's heads fitting one shared K/V block
    (``schedule/kv_groups.py``), which a move that costs parameters on the way may reach
    where the plain order stops short of it (the caller keeps the cheaper result)."""
    n = layer_count(stage.values())
    if n <= 1 or not prog.producers:
        return stage
    stage = dict(stage)
    head_cost, lane_cost = 4 * (d_head_of(prog) or 1), 3
    deps = {pid: {d for d in prog.deps(p) if d != EMBED} for pid, p in prog.producers.items()}
    readers: dict[int, set[int]] = {pid: set() for pid in prog.producers}
    for pid, ds in deps.items():
        for d in ds:
            readers[d].add(pid)
    final = {prog.signals[s].producer for s in prog.final_reads()}
    heads: Counter[int] = Counter()
    lanes: Counter[int] = Counter()
    # heads sharing one K/V block a layer (schedule/kv_groups.py): per layer its heads and whether
    # they fit one block (a misfit keeps a block a head in every layer)
    sharing = prog.share_kv and bool(prog.head_size)
    in_layer: dict[int, set[int]] = {k: set() for k in range(n)}
    fits_cache: dict[frozenset[int], bool] = {}
    misfit = [False] * n

    def refit(k: int) -> None:
        key = frozenset(in_layer[k])
        if key not in fits_cache:
            fits_cache[key] = len(key) < 2 or kv_groups.merge(
                [prog.producers[pid] for pid in sorted(key)],  # type: ignore[misc]
                prog.head_size, prog.rotary) is not None
        misfit[k] = not fits_cache[key]

    def load(pid: int) -> tuple[int, int]:
        p = prog.producers[pid]
        return (1, 0) if isinstance(p, Head) else (0, len(p.lanes)) if isinstance(p, FFN) \
            else (0, 0)

    for pid, s in stage.items():
        h, lanes_of = load(pid)
        heads[layer_of(s)] += h
        lanes[layer_of(s)] += lanes_of
        if h and sharing:
            in_layer[layer_of(s)].add(pid)
    if sharing:
        for k in range(n):
            refit(k)

    vocab = 2 * len(prog.vocab)

    def layer_cost() -> tuple[int, int, int, int, int]:
        per = [head_cost * heads[k] + lane_cost * lanes[k] for k in range(n)]
        most_heads = max(heads[k] for k in range(n))
        most_lanes = max(lanes[k] for k in range(n))
        # (the layers at the most heads or lanes: a move that empties one of them is a step
        # towards a narrower shape even while another layer still holds as many)
        at_most = sum(head_cost * (heads[k] == most_heads) + lane_cost * (lanes[k] == most_lanes)
                      for k in range(n))
        misfits = sum(misfit)
        # Q and O a head, K and V a block: one a layer where every layer's heads share one
        blocks = 1 if sharing and not misfits else most_heads
        widest = head_cost // 2 * (most_heads + blocks) + lane_cost * most_lanes
        return widest, most_heads, at_most, misfits, sum(c * c for c in per)

    def cost(peak: int) -> tuple[int, int, int, int, int]:
        # of equal parameters, fewer query heads (a runtime scores each against every
        # position), then the steps towards a narrower shape, then fewer layers whose heads
        # keep the blocks unshared; ``share_first``: no more query heads, then every layer's
        # heads on one block, then the parameters
        widest, most_heads, at_most, misfits, spread = layer_cost()
        params = (peak + 2) * (n * widest + vocab)
        if share_first:
            return most_heads, misfits, params, at_most, spread
        return params, most_heads, at_most, misfits, spread

    occupancy = Occupancy(prog, stage)
    peak = occupancy.peak()
    last = end_stage(n) - 1  # the last MLP stage

    def shift(moves: list[tuple[int, int]]) -> None:
        """Put each (producer, stage) of ``moves`` there, in order."""
        for pid, to in moves:
            h, lanes_of = load(pid)
            was, now = layer_of(stage[pid]), layer_of(to)
            heads[was] -= h
            lanes[was] -= lanes_of
            heads[now] += h
            lanes[now] += lanes_of
            occupancy.move(pid, to)
            if h and sharing and was != now:
                in_layer[was].discard(pid)
                in_layer[now].add(pid)
                refit(was)
                refit(now)

    def window(pid: int, apart: int | None = None) -> tuple[int, int]:
        """The stages ``pid`` may take with everything else fixed (``apart``: one of its
        readers or deps that moves with it, by the same shift)."""
        lo = max((stage[d] for d in deps[pid] if d != apart), default=-1) + 1
        hi = min((stage[r] for r in readers[pid] if r != apart), default=last + 1) - 1
        return lo, min(hi, last)

    def best_move(groups: list[list[tuple[int, int]]]) -> list[tuple[int, int]] | None:
        """Of the candidate moves (each a list of (producer, stage)), the one that lowers the
        cost most, or None."""
        nonlocal peak
        best, choice, best_peak = cost(peak), None, peak
        for moves in groups:
            back = [(pid, stage[pid]) for pid, _ in moves]
            shift(moves)
            trial_peak = occupancy.peak()
            trial = cost(trial_peak)
            shift(back[::-1])
            if trial < best:
                best, choice, best_peak = trial, moves, trial_peak
        if choice is not None:
            shift(choice)
            peak = best_peak
        return choice

    def pushed(pid: int, to: int) -> list[tuple[int, int]] | None:
        """``pid`` at stage ``to`` and every reader it would overtake (transitively) right
        after what it reads, or None where that passes the last stage."""
        new = {pid: to}
        queue = [pid]
        while queue:
            for r in sorted(readers[queue.pop(0)]):
                need = max(new.get(d, stage[d]) for d in deps[r]) + 1
                if new.get(r, stage[r]) >= need:
                    continue
                to_r = need + (need - parity(prog.producers[r])) % 2
                if to_r > last:
                    return None
                new[r] = to_r
                queue.append(r)
        return list(new.items())

    movable = [pid for pid in sorted(prog.producers) if pid in final or readers[pid]]
    for _ in range(BALANCE_PASSES):
        moved = False
        for pid in movable:  # (a producer read by nothing is gone: dead-code elimination)
            lo, hi = window(pid)
            par, here = parity(prog.producers[pid]), stage[pid]
            moved |= best_move([[(pid, s)] for s in range(lo, hi + 1)
                                if s % 2 == par and s != here]) is not None
        # a producer and a reader right after it (a head and the lanes that read it) move
        # together: neither can move alone while the other holds it in place
        for pid in movable:
            for r in sorted(readers[pid]):
                if stage[r] != stage[pid] + 1:
                    continue
                lo, hi = window(pid, r)
                r_lo, r_hi = window(r, pid)
                here = stage[pid]
                shifts = [t for t in range(max(lo, r_lo - 1), min(hi, r_hi - 1) + 1)
                          if (t - here) % 2 == 0 and t != here]
                moved |= best_move([[(pid, t), (r, t + 1)] for t in shifts]) is not None
        # a producer pushed later together with every reader it would overtake (and theirs),
        # each right after what it reads: a chain that only moves as a whole (a head, its
        # ramp and the step that reads it), tried from the busiest layers only
        busiest_heads, busiest_lanes = max(heads.values()), max(lanes.values())
        for pid in movable:
            here = stage[pid]
            layer = layer_of(here)
            h, lanes_of = load(pid)
            if not (h and heads[layer] == busiest_heads
                    or lanes_of and lanes[layer] == busiest_lanes):
                continue
            groups = [g for t in range(here + 2, min(here + 2 * PUSH_LAYERS, last) + 1, 2)
                      if (g := pushed(pid, t)) is not None and len(g) > 1]
            moved |= best_move(groups) is not None
            busiest_heads, busiest_lanes = max(heads.values()), max(lanes.values())
        if not moved:
            break
    return stage
