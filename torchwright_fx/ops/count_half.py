"""Counts in half precision: ``tw.selector_width`` (``precision="half"``).

fp32 reads a count w off the ``<bos>`` weight 1/(w + 1) of one averaging head and decodes it
with an MLP. In half precision that weight is rounded to 8 or 11 bits, and an MLP cannot turn a
rounded value back into an exact whole number (SiLU saturates only towards 0). The softmax
does: a head whose ``<bos>`` logit is u and every other key's 0 puts exactly 1 on ``<bos>``
when u >= HALF_ATTENTION_GAP and exactly 0 when u <= -HALF_ATTENTION_GAP (fp32's exponential
underflows; every runtime computes it in fp32). So:

- the averaging head: every selected key and ``<bos>`` tie (logit G m, m the selector's parts),
  every other key trails by G; ``<bos>``'s value is B, so the head outputs y = B / (w + 1),
  which each runtime rounds to one of its format's two neighbours (``outputs``);
- a search tree over w (``plan``): a window [lo, hi] of counts is split by up to
  HALF_COUNT_SLOTS thresholds m, each a head whose ``<bos>`` logit is u = K (t - y), t between
  the outputs for m - 1 and m: exactly [w >= m]. u is computed by one MLP lane per window
  (a select gated by "this window is the active one", so that u = K (t - y) only there), and
  must lie between the gap and fp16's 65504 / sqrt(d_head), with slack for its roundings, for
  every output of every count in the window: that bounds how far apart a window's counts may
  be, so windows of large counts (finely spaced outputs) need a few levels;
- the active window of the next level is an AND of the parent's and the bits (an exact hinge);
  w is the sum of the leaves' counts times their indicators.

Every bound is checked here, at lowering, on every output each runtime can round to
(``plan``): the certificate (``emit/certify_half.py``) takes the averaging head's output and the
u columns as the value sets given here (``Program.inexact``) instead of replaying them. At
``<bos>`` itself every decode head sees only ``<bos>`` (its bits read 1): every window's gate
subtracts the ``<bos>`` indicator, so the decoder is off there and w reads 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

from torchwright_fx.base.errors import GeometryError
from torchwright_fx.base.numerics import (
    HALF_COUNT_CAP,
    HALF_COUNT_GAIN,
    HALF_COUNT_LEAD,
    HALF_COUNT_NORM_EXPONENT,
    HALF_COUNT_OFF,
    HALF_COUNT_SCALE,
    HALF_COUNT_SLOTS,
    HALF_COUNT_VALUE,
    HALF_D_HEAD,
    HALF_KEY_GAIN,
    SILU_SCALE,
)
from torchwright_fx.ir.graph import Program
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import BOOL, Interval
from torchwright_fx.ops.attention import Geometry, heads
from torchwright_fx.ops.lanes import Bank

LEAD, CAP, OFF = HALF_COUNT_LEAD, HALF_COUNT_CAP, HALF_COUNT_OFF  # |u| bounds, unused slots
FORMATS = (torch.float32, torch.float16, torch.bfloat16)
ADVICE = "lower max_seq_len, or compile with precision='fp32'"


def _neighbours(x: float) -> set[float]:
    """The numbers of each format a faithful rounding of x can give, and in fp16 those of
    the grid transformers' norm leaves below fp16's normal numbers (its cast of h * 2**-e:
    multiples of 2**(e - 24) below 2**(e - 14), for e up to HALF_COUNT_NORM_EXPONENT)."""
    out: set[float] = set()
    for dt in FORMATS:
        r = torch.tensor(x, dtype=torch.float64).to(dt)
        if float(r) == x:
            out.add(x)
            continue
        toward = math.inf if float(r) < x else -math.inf
        other = torch.nextafter(r, torch.tensor(toward, dtype=dt))
        out |= {float(r), float(other)}
    e = HALF_COUNT_NORM_EXPONENT
    for e_norm in range(e + 1):  # the grid of each exponent the norm may take
        if x < 2.0 ** (e_norm - 14):
            quantum = 2.0 ** (e_norm - 24)
            out |= {math.floor(x / quantum) * quantum, math.ceil(x / quantum) * quantum}
    return out


@lru_cache(maxsize=16)
def outputs(n: int) -> tuple[np.ndarray, ...]:
    """For each count w < n, every value the averaging head can output (B / (w + 1), rounded
    to a neighbour in fp32, fp16 or bf16), sorted; refused where two counts' sets meet."""
    sets = tuple(np.array(sorted(_neighbours(HALF_COUNT_VALUE / (w + 1)))) for w in range(n))
    for w in range(1, n):
        if sets[w].max() >= sets[w - 1].min():
            raise GeometryError(
                f"precision='half' counts up to {w - 1}: a half format rounds "
                f"{HALF_COUNT_VALUE:g}/{w + 1} and {HALF_COUNT_VALUE:g}/{w} alike, and this "
                f"program may count to {n - 1} (max_seq_len={n})",
                f"lower max_seq_len to {w}, or compile with precision='fp32'")
    return sets


@dataclass(frozen=True)
class Window:
    """Counts lo..hi, split at the thresholds ``cuts`` (m, t_high, t_low, K): bit [w >= m] is
    the sign of K (t - y), t = t_high + t_low. ``parent``: its index at the level before (-1:
    the root); ``child``: which of the parent's children it is (0: below the parent's first
    threshold)."""

    lo: int
    hi: int
    cuts: tuple[tuple[int, float, float, float], ...]
    parent: int
    child: int


def _bf16(x: float) -> float:
    return float(torch.tensor(x, dtype=torch.float64).to(torch.bfloat16))


def _between(a: float, b: float, parts: int) -> tuple[float, float] | None:
    """A number strictly between a < b, near their middle, as (high, low): one bf16 number
    (low = 0), or with parts 2 the sum of two (low is stored on the parent's indicator)."""
    mid = (a + b) / 2.0
    high, low = _bf16(mid), 0.0
    if parts == 2 and not a < high < b:
        low = _bf16(mid - high)
    return (high, low) if a < high + low < b else None


def _cut(sets: tuple[np.ndarray, ...], lo: int, hi: int, m: int, parts: int
         ) -> tuple[int, float, float, float] | None:
    """Threshold m of window [lo, hi] as (m, t_high, t_low, K): t = t_high + t_low, K a power
    of two with |K (t - y)| within [LEAD, CAP] for every output y of every count in the
    window; None if there is none."""
    split = _between(float(sets[m].max()), float(sets[m - 1].min()), parts)
    if split is None:
        return None
    t = split[0] + split[1]
    y = np.concatenate(sets[lo:hi + 1])
    near, far = float(np.abs(t - y).min()), float(np.abs(t - y).max())
    k = 2.0 ** math.ceil(math.log2(LEAD / near))
    return (m, split[0], split[1], k) if k * far <= CAP else None


def _nearest(cuts: list[tuple[int, float, float, float]], x: int
             ) -> tuple[int, float, float, float]:
    return min(cuts, key=lambda c: abs(c[0] - x))


@lru_cache(maxsize=16)
def plan(n: int) -> tuple[tuple[tuple[Window, ...], ...], tuple[Window, ...]]:
    """The levels of the search tree over counts 0..n-1 and its leaves (one count each)."""
    sets = outputs(n)
    levels: list[tuple[Window, ...]] = []
    spans: list[tuple[int, int, int, int]] = [(0, n - 1, -1, 0)]  # lo, hi, parent, child
    while any(lo < hi for lo, hi, _, _ in spans):
        level, nxt = [], []
        for index, (lo, hi, parent, child) in enumerate(spans):
            parts = 1 if parent < 0 else 2  # the root has no indicator column
            feasible = [c for m in range(lo + 1, hi + 1)
                        if (c := _cut(sets, lo, hi, m, parts))]
            if lo < hi and not feasible:
                raise GeometryError(
                    f"precision='half' cannot split counts {lo}..{hi} into exact comparisons "
                    f"(max_seq_len={n})", ADVICE)
            chosen: list[tuple[int, float, float, float]] = []
            if feasible:  # spread the thresholds over the feasible ones, the last the farthest
                top = feasible[-1][0]
                marks = [lo + round((top - lo) * s / HALF_COUNT_SLOTS)
                         for s in range(1, HALF_COUNT_SLOTS + 1)]
                chosen = sorted({_nearest(feasible, x) for x in marks})
            level.append(Window(lo, hi, tuple(chosen), parent, child))
            edges = [lo] + [c[0] for c in chosen] + [hi + 1]
            nxt += [(edges[i], edges[i + 1] - 1, index, i) for i in range(len(edges) - 1)]
        levels.append(tuple(level))
        spans = nxt
    leaves = tuple(Window(lo, hi, (), parent, child) for lo, hi, parent, child in spans)
    return tuple(levels), leaves


def u_values(n: int, level: int, slot: int) -> np.ndarray:
    """Every value a decode column (u / HALF_COUNT_SCALE) can hold: each window's u on each of
    its counts' outputs, the unused slots' -OFF, and 0 at ``<bos>``."""
    sets = outputs(n)
    vals = [np.array([0.0, -OFF])]
    for win in plan(n)[0][level]:
        if slot < len(win.cuts):
            _, high, low, k = win.cuts[slot]
            vals.append(k * (high + low - np.concatenate(sets[win.lo:win.hi + 1])))
    return np.unique(np.concatenate(vals)) / HALF_COUNT_SCALE


def width(prog: Program, geom: Geometry, parts: list[list[tuple[Lin, Lin]]], bos: Lin,
          name: str, source: str) -> Lin:
    """The number of keys 1 <= j <= i that every part selects (module docstring)."""
    n, m = geom.max_seq_len, len(parts)
    levels, leaves = plan(n)
    pairs = [pair for part in parts for pair in part]
    if len(pairs) + 1 > geom.tail or math.sqrt(geom.d_head) != math.sqrt(HALF_D_HEAD):
        raise GeometryError(
            f"precision='half' counts with {len(pairs)} content dims and 1 for <bos> in a head "
            f"of d_head={HALF_D_HEAD} (this one: {geom.tail} of d_head={geom.d_head})",
            "select on streams with fewer distinct values (map them first with tw.lookup), "
            "or compile with precision='fp32'")
    # the averaging head: selected keys and <bos> at G m, the others at most G (m - 1)
    gain = HALF_COUNT_GAIN / HALF_KEY_GAIN  # the key carries HALF_KEY_GAIN (a power of two)
    q = [Lin() for _ in range(geom.d_head)]
    k = [Lin() for _ in range(geom.d_head)]
    for r, (qf, kf) in enumerate(pairs):
        q[geom.rotary + r], k[geom.rotary + r] = qf * gain, kf * HALF_KEY_GAIN
    q[geom.rotary + len(pairs)] = Lin.constant(gain * m)
    k[geom.rotary + len(pairs)] = bos * HALF_KEY_GAIN
    (y,) = heads(prog, geom, q, k, [bos * HALF_COUNT_VALUE],
                 [Interval(HALF_COUNT_VALUE / n, HALF_COUNT_VALUE)], f"{name}.width", source,
                 half=True)
    # its values: every rounding of B / (w + 1); fp16's must keep their bits through the norm
    prog.inexact[_signal(y)] = (np.unique(np.concatenate(outputs(n))), True)

    s = SILU_SCALE
    parents: tuple[Window, ...] = ()
    ind: list[Lin] = []  # the parents' indicators
    bits: list[Lin] = []  # the parents' threshold bits, per slot

    def active(win: Window) -> Lin:
        """2 where ``win`` is the active window (never at <bos>), at most 1 elsewhere: its
        parent's indicator and the parent's bits saying w is between its thresholds."""
        if win.parent < 0:
            return 2.0 - bos
        n_cuts = len(parents[win.parent].cuts)
        above = bits[win.child - 1] if win.child > 0 else Lin.constant(1.0)
        below = bits[win.child] if win.child < n_cuts else Lin()
        return ind[win.parent] + above - below - bos

    for level, wins in enumerate(levels):
        acts = [active(win) for win in wins]
        slots = max(len(win.cuts) for win in wins)  # the heads this level needs
        decode = Bank(prog.machine, slots)
        scale = HALF_COUNT_SCALE * s
        for win, act in zip(wins, acts, strict=True):
            gate = act * (2.0 * s) - 3.0 * s  # S where active, <= -S elsewhere: a select
            for slot in range(slots):
                if slot < len(win.cuts):
                    _, high, low, gain_k = win.cuts[slot]  # low: on the parent's indicator
                    up = Lin.constant(gain_k * high / scale) - y * (gain_k / scale)
                    if low:
                        up = up + ind[win.parent] * (gain_k * low / scale)
                else:
                    up = Lin.constant(-OFF / scale)
                decode.lane(slot, gate, up)
        bound = CAP / HALF_COUNT_SCALE
        us = decode.finish(prog, [Interval(-bound, bound)] * slots,
                           f"{name}.count_decode{level}", source)
        for slot, u in enumerate(us):
            prog.inexact[_signal(u)] = (u_values(n, level, slot), False)  # margins
        state = Bank(prog.machine, len(wins))  # this level's indicators, for the next
        for o, act in enumerate(acts):
            state.hinge(o, act - 1.0)
        new_ind = state.finish(prog, [BOOL] * len(wins), f"{name}.count_window{level}", source)
        prog.by_lane |= {_signal(i) for i in new_ind}  # each lane reads 4 signals
        new_bits = []
        for slot, u in enumerate(us):
            hq = [Lin() for _ in range(geom.d_head)]
            hk = [Lin() for _ in range(geom.d_head)]
            hq[geom.rotary] = u * (HALF_COUNT_SCALE / HALF_KEY_GAIN)  # the logit is u
            hk[geom.rotary] = bos * HALF_KEY_GAIN
            (b,) = heads(prog, geom, hq, hk, [bos], [BOOL], f"{name}.count_bit{level}_{slot}",
                         source, half=True)
            new_bits.append(b)
        parents, ind, bits = wins, new_ind, new_bits
    total = Bank(prog.machine, 1)
    for leaf in leaves:
        if leaf.lo:
            total.hinge(0, active(leaf) - 1.0, float(leaf.lo))
    (w,) = total.finish(prog, [Interval(0, n - 1, True)], f"{name}.count", source)
    prog.by_lane.add(_signal(w))
    # one leaf is active: the sum of the leaves' terms is one of them (taken apart, the
    # certificate would add them all)
    prog.claims.append((w, Interval(0, n - 1, True)))
    return w


def _signal(lin: Lin) -> int:
    (sid,) = lin.terms
    return sid
