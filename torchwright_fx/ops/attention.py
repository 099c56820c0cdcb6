"""Attention-head constructions and the RoPE geometry they share (docs/design-notes.md §8).

Position enters only through RoPE. Each head has ``geom.rotary`` rotary dims in Phi-3's
``rotate_half`` layout: planes (p, p + rotary/2) turning at Phi-3's frequencies
rope_theta ** (-2p / rotary). Plane 0 (frequency 1) is left at zero. ``rope_theta`` puts the
last, coarse plane's frequency at ``theta = LOBE_SPAN / max_seq_len``. Up to
SINGLE_PLANE_LENGTH there are 4 dims (the coarse plane alone); beyond, 6, and the middle,
fine plane turns at ``sqrt(theta)``, a period of about 3.5 * sqrt(max_seq_len). A query
``A*(cos(f*t), -sin(f*t))`` on a plane of frequency f against the key ``(1, 0)`` gives the logit
``A*cos(f*(i - j - t))`` between positions i and j.

- Recency (``latch``, the head that reads its own position, ``select_latest``): the coarse
  plane alone, phased so that the distances 0..max_seq_len-1 sweep the angles
  [phi, pi - phi] where the cosine falls steadily: every step back in time loses at least
  the margin, with an amplitude that grows linearly in max_seq_len (a lobe peaking at
  distance 0 is flat there and needs an amplitude quadratic in it). A latch adds a content
  term ``C * valid_j`` on the position-free NoPE tail, ``C = 2A + margin``, so every valid
  key beats every invalid one; the BOS row always counts as valid.
- ``shift(v, k)``: a lobe peaking at distance k. The fine plane gives the peak its sharpness
  (a margin from an amplitude that grows linearly in max_seq_len) and the coarse plane lifts
  the fine plane's aliases (distances k + period): used while k is below half the fine period,
  so that for i < k every key sits on the rising side and the nearest one, the BOS row, wins
  (the contract "BOS row when i - k < 0"). Longer shifts use the coarse plane alone.

``check_margins`` bounds the fp32 logit gap over every query position from the rounding of each
step (``ops/lobe_bound.py``, O(max_seq_len)); where that bound falls short of
``ATTENTION_MARGIN`` and max_seq_len is at most REPLAY_LENGTH, it replays the logits in fp32
exactly as Phi-3 computes them (O(max_seq_len**2)), and it refuses a geometry whose gap is
below the margin.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import torch

from torchwright_fx.base.errors import GeometryError
from torchwright_fx.base.numerics import (
    AMPLITUDE_HEADROOM,
    ATTENTION_MARGIN,
    FINE_PLANE,
    FP32_UNIT,
    HALF_POSITION_PLANE,
    HALF_POSITIONS,
    HALF_ROTARY,
    LOBE_SPAN,
    LONG_ROTARY_DIMS,
    MEAN_VALIDITY,
    REPLAY_LENGTH,
    ROTARY_DIMS,
    SCAN_LENGTHS,
    SINGLE_PLANE_LENGTH,
    is_power_of_two,
)
from torchwright_fx.ir.graph import Head, Program
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ops import lobe_bound


@dataclass(frozen=True)
class Geometry:
    d_head: int
    max_seq_len: int
    # precision="half": hierarchical rotary planes at Phi-3's own geometric frequencies
    # (``ops/attention_half.py``) instead of the coarse and fine planes
    half: bool = False

    def __post_init__(self) -> None:
        if self.half and self.max_seq_len > HALF_ROTARY[-1][0]:
            raise GeometryError(
                f"max_seq_len={self.max_seq_len}: precision='half' certifies attention up to "
                f"{HALF_ROTARY[-1][0]} positions",
                f"lower max_seq_len to {HALF_ROTARY[-1][0]}, or compile with precision='fp32'")
        if not is_power_of_two(self.d_head) or self.d_head < 2 * self.rotary:
            raise GeometryError(
                f"d_head={self.d_head}: use a power of two >= {_least_d_head(self.rotary)} (the "
                f"rotary fraction {self.rotary}/d_head must be exact and the NoPE tail non-empty"
                + (f"; max_seq_len > {SINGLE_PLANE_LENGTH} needs {self.rotary} rotary dims)"
                   if self.rotary > ROTARY_DIMS else ")"))
        if self.max_seq_len < 2:
            raise GeometryError(f"max_seq_len={self.max_seq_len}: need at least 2 positions")

    @staticmethod
    def least_d_head(max_seq_len: int) -> int:
        """The smallest head size an fp32 build at ``max_seq_len`` takes: the least power of two
        with a NoPE tail beside the rotary dims (8 up to SINGLE_PLANE_LENGTH, 16 beyond)."""
        rotary = ROTARY_DIMS if max_seq_len <= SINGLE_PLANE_LENGTH else LONG_ROTARY_DIMS
        return _least_d_head(rotary)

    @property
    def partial_rotary_factor(self) -> float:
        return self.rotary / self.d_head

    @property
    def rotary(self) -> int:
        """Rotary dims per head: one usable plane up to SINGLE_PLANE_LENGTH, two beyond (half
        precision: two per hierarchical plane)."""
        if self.half:
            return 2 * self.half_planes[0]
        return ROTARY_DIMS if self.max_seq_len <= SINGLE_PLANE_LENGTH else LONG_ROTARY_DIMS

    @property
    def half_planes(self) -> tuple[int, int]:
        """Half precision: (P, r), P planes turning at r**-p (p = 0 .. P-1)."""
        if self.max_seq_len <= HALF_POSITIONS:  # plane 3 turns 2 pi / HALF_POSITIONS exactly
            return HALF_ROTARY[0][1], (HALF_POSITIONS / (2.0 * math.pi)) ** (
                1.0 / HALF_POSITION_PLANE)
        return next((planes, ratio) for n, planes, ratio in HALF_ROTARY
                    if self.max_seq_len <= n)

    @property
    def coarse_plane(self) -> int:
        return self.rotary // 2 - 1

    @property
    def rope_theta(self) -> float:
        # inv_freq[coarse] = rope_theta ** (-2 * coarse / rotary) = LOBE_SPAN / max_seq_len
        if self.half:  # inv_freq[p] = rope_theta ** (-p / P) = r ** -p
            planes, ratio = self.half_planes
            return float(ratio ** planes)
        return (self.max_seq_len / LOBE_SPAN) ** (self.rotary / (2 * self.coarse_plane))

    def frequency(self, plane: int) -> float:
        """A plane's frequency exactly as Phi-3 computes it (fp32)."""
        return float(_inv_freq(self.rope_theta, self.rotary)[plane])

    @property
    def theta(self) -> float:
        """The coarse plane's frequency."""
        return self.frequency(self.coarse_plane)

    @property
    def amplitude(self) -> float:
        """A coarse lobe's amplitude: its peak leads the neighbouring distances by the margin
        (with headroom)."""
        return AMPLITUDE_HEADROOM * ATTENTION_MARGIN / (1.0 - math.cos(self.theta))

    @property
    def recency_phase(self) -> float:
        """The recency lobe's angle at distance 0: distances 0..n-1 sweep [phi, pi - phi]."""
        return (math.pi - self.theta * (self.max_seq_len - 1)) / 2.0

    @property
    def recency_amplitude(self) -> float:
        """The recency lobe's amplitude: each step back in time, A*(cos(a) - cos(a + theta)) =
        2A sin(theta/2) sin(a + theta/2), loses at least the margin (with headroom); the least
        step is at either end of the sweep."""
        return AMPLITUDE_HEADROOM * ATTENTION_MARGIN / (
            2.0 * math.sin(self.theta / 2.0) * math.sin(self.recency_phase + self.theta / 2.0))

    @property
    def validity(self) -> float:
        """Content gain C that puts every valid key above every invalid one (the recency
        lobe's logits span less than 2A)."""
        return 2.0 * self.recency_amplitude + AMPLITUDE_HEADROOM * ATTENTION_MARGIN

    @property
    def tail(self) -> int:
        """Number of position-free (NoPE) dims per head."""
        return self.d_head - self.rotary


def _least_d_head(rotary: int) -> int:
    """The smallest power of two with a NoPE tail beside ``rotary`` rotary dims."""
    return 1 << (2 * rotary - 1).bit_length()


def _inv_freq(rope_theta: float, rotary: int) -> torch.Tensor:
    # Phi-3's default RoPE initialisation, replayed for the margin check.
    return 1.0 / (rope_theta ** (torch.arange(0, rotary, 2, dtype=torch.float) / rotary))


Lobe = lobe_bound.Lobe  # (plane, amplitude, peak distance) per plane


@lru_cache(maxsize=256)
def lobe(geom: Geometry, offset: int) -> Lobe:
    """The rotary planes of a head reading distance ``offset`` (0: the recency lobe)."""
    if offset == 0:
        return ((geom.coarse_plane, geom.recency_amplitude, -geom.recency_phase / geom.theta),)
    coarse = ((geom.coarse_plane, geom.amplitude, float(offset)),)
    if geom.rotary == ROTARY_DIMS:
        return coarse
    fine = geom.frequency(FINE_PLANE)
    period = 2.0 * math.pi / fine
    if offset <= period / 2.0 - 2.0:  # the BOS row still on the fine plane's rising side
        fine_amp = AMPLITUDE_HEADROOM * ATTENTION_MARGIN / (1.0 - math.cos(fine))
        alias = min(math.pi, geom.theta * (period - 1.0))  # the coarse plane lifts k + period
        coarse_amp = AMPLITUDE_HEADROOM * ATTENTION_MARGIN / (1.0 - math.cos(alias))
        two = ((FINE_PLANE, fine_amp, float(offset)),
               (geom.coarse_plane, coarse_amp, float(offset)))
        if _certified(geom, two, offset, 0, ATTENTION_MARGIN)[0] >= ATTENTION_MARGIN:
            return two
    return coarse


def _query_rotary(geom: Geometry, planes: Lobe) -> dict[int, float]:
    """The query's rotary dims: plane p at (p, p + rotary // 2)."""
    q = {}
    for plane, amp, peak in planes:
        f = geom.frequency(plane)
        q[plane], q[plane + geom.rotary // 2] = amp * math.cos(f * peak), -amp * math.sin(f * peak)
    return q


# -- margin check ------------------------------------------------------------------------------
def measured_gap(geom: Geometry, offset: int, with_validity: bool | int,
                 stop_below: float = -math.inf) -> tuple[float, int]:
    """Smallest fp32 logit gap over all query positions, and the query position where it
    occurs, replaying Phi-3's RoPE and dot product in fp32: for a shift, the target minus the
    runner-up; for the recency lobe (offset 0), every key minus the one before it (so the most
    recent of any set of keys wins). With ``stop_below``, returns as soon as a gap below it is
    found (a pass/fail question). The bound of ``ops/lobe_bound.py`` decides first (O(n));
    where it does not reach the margin, lengths up to REPLAY_LENGTH are replayed."""
    return _certified(geom, lobe(geom, offset), offset, int(with_validity), stop_below)


@lru_cache(maxsize=256)
def _certified(geom: Geometry, planes: Lobe, offset: int, with_validity: int,
               stop_below: float = -math.inf) -> tuple[float, int]:
    freqs = {plane: geom.frequency(plane) for plane, _, _ in planes}
    bound = lobe_bound.gap_bound(geom.max_seq_len, planes, freqs, offset, geom.validity,
                                 with_validity)
    if bound[0] >= max(ATTENTION_MARGIN, stop_below) or geom.max_seq_len > REPLAY_LENGTH:
        return bound
    return _gap(geom, planes, offset, with_validity, stop_below)  # cached


@lru_cache(maxsize=256)
def _gap(geom: Geometry, planes: Lobe, offset: int, with_validity: bool | int,
         stop_below: float = -math.inf) -> tuple[float, int]:
    n = geom.max_seq_len
    pos = torch.arange(n, dtype=torch.float)
    rd = geom.rotary
    freqs = pos[:, None] * _inv_freq(geom.rope_theta, rd)[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
    cos, sin = emb.cos(), emb.sin()

    def rotate(x: torch.Tensor) -> torch.Tensor:
        half = torch.cat([-x[..., rd // 2 :], x[..., : rd // 2]], dim=-1)
        return x * cos + half * sin

    q = torch.zeros(n, rd)
    for dim, value in _query_rotary(geom, planes).items():
        q[:, dim] = value
    k = torch.zeros(n, rd)
    for plane, _, _ in planes:
        k[:, plane] = 1.0
    rq, rk = rotate(q), rotate(k)
    # with_validity: how many units of the validity gain every key carries (a selection of m
    # parts carries m; the rounding of the large sum is what the replay measures)
    validity = torch.tensor(geom.validity * int(with_validity), dtype=torch.float)
    worst_gap, worst_at = math.inf, 0
    chunk = max(1, (1 << 22) // n)  # query rows per chunk: memory stays O(4M logits)
    for start in range(1, n, chunk):
        rows = torch.arange(start, min(n, start + chunk))
        logits = ((rq[rows] @ rk.T) + validity).double()
        if offset == 0:  # each key above the one before it, among keys j <= i
            steps = logits[:, 1:] - logits[:, :-1]
            steps = steps.masked_fill(torch.arange(1, n)[None, :] > rows[:, None], math.inf)
            gap = steps.min(dim=1).values
        else:
            logits = logits.masked_fill(torch.arange(n)[None, :] > rows[:, None], -math.inf)
            target = (rows - offset).clamp(min=0)
            local = torch.arange(len(rows))
            best = logits[local, target]
            logits[local, target] = -math.inf
            gap = best - logits.max(dim=1).values
        i = int(torch.argmin(gap))
        if float(gap[i]) < worst_gap:
            worst_gap, worst_at = float(gap[i]), int(rows[i])
        if worst_gap < stop_below:
            break
    return worst_gap, worst_at


def check_margins(geom: Geometry, offset: int, *, with_validity: bool | int = False) -> float:
    """Raise GeometryError unless the head selects its key exactly at every position."""
    if offset >= geom.max_seq_len:
        raise GeometryError(f"shift by {offset} >= max_seq_len={geom.max_seq_len}",
                            f"raise max_seq_len above {offset}, or shift by less")
    gap, where = measured_gap(geom, offset, with_validity)
    if gap < ATTENTION_MARGIN:
        ok = largest_working_length(geom.d_head, offset, with_validity, geom.max_seq_len)
        scanned = ok >= geom.max_seq_len - 1 - SCAN_LENGTHS
        raise GeometryError(
            f"attention margin too small: offset {offset} at max_seq_len={geom.max_seq_len} "
            f"leaves an fp32 logit gap of {gap:.1f} at position {where} (< {ATTENTION_MARGIN}); "
            + (f"the largest max_seq_len that works for this construction is {ok}" if scanned
               else f"the largest max_seq_len that works for this construction is below "
                    f"{geom.max_seq_len - SCAN_LENGTHS}; max_seq_len={ok} works")
        )
    return gap


def largest_working_length(d_head: int, offset: int, with_validity: bool | int,
                           failing: int = 1 << 14, scan: int | None = None) -> int:
    """The largest max_seq_len below ``failing`` whose margins hold, by the same check. The
    gap is not monotone in the length (fp32 quantises the large logits), so the lengths are
    tried downwards one by one; beyond ``scan`` tries, a bisection (each answer still
    checked) gives a length that works, not necessarily the largest."""
    def works(n: int) -> bool:
        geom = Geometry(d_head, n)
        return measured_gap(geom, offset, with_validity, ATTENTION_MARGIN)[0] >= ATTENTION_MARGIN

    scan = SCAN_LENGTHS if scan is None else scan
    first = max(offset + 1, 2)
    for n in range(failing - 1, max(first, failing - 1 - scan) - 1, -1):
        if works(n):
            return n
    lo, hi = first, failing - 1 - scan
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if works(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


# -- fp32 rounding of content logits ------------------------------------------------------------


def logit_rounding(products: list[float]) -> float:
    """A bound on |fl(q . k) - q . k| for one logit whose nonzero products q_r k_r have at most
    these magnitudes: each product and each partial sum rounds once (relative 2**-24 of at most
    the sum of magnitudes), and an attention implementation that scales q and k by
    sqrt(1/sqrt(d_head)) before the product rounds each factor once more."""
    return (len(products) + 3) * FP32_UNIT * sum(abs(p) for p in products)


# -- head builders -----------------------------------------------------------------------------
def positional_qk(geom: Geometry, offset: int) -> tuple[list[Lin], list[Lin]]:
    """Q/K of the lobe reading distance ``offset`` (0: the most recent key wins)."""
    q = [Lin() for _ in range(geom.d_head)]
    k = [Lin() for _ in range(geom.d_head)]
    planes = lobe(geom, offset)
    for dim, value in _query_rotary(geom, planes).items():
        q[dim] = Lin.constant(value)
    for plane, _, _ in planes:
        k[plane] = Lin.constant(1.0)
    return q, k


def self_qk(geom: Geometry) -> tuple[list[Lin], list[Lin]]:
    """Q/K of a head that attends exactly to its own position (the recency lobe)."""
    check_margins(geom, 0)
    return positional_qk(geom, 0)


def heads(
    prog: Program,
    geom: Geometry,
    q: list[Lin],
    k: list[Lin],
    values: list[Lin],
    ranges: list,
    name: str,
    source: str,
    half: bool = False,
) -> list[Lin]:
    """Heads with the given Q/K copying ``values`` (split across heads of d_head values).
    ``half``: the head's pattern is certified in half precision (``ops/attention_half.py``)."""
    if prog.precision.half and not half:
        raise GeometryError(
            "precision='half' does not certify this op's head: half holds tw.shift and "
            "tw.emit (to 16384 positions), tw.latch, tw.position, tw.steps_since, "
            "tw.select_latest, tw.gather and tw.argmax (to 128), and tw.selector_width (to "
            "97); a mean (tw.mean, tw.aggregate) is a fraction k/n, which fp16 and bf16 do "
            "not hold (docs/half-precision.md)",
            "compile with precision='fp32' (the default), or express it with the ops half "
            "holds")
    out: list[Lin] = []
    for start in range(0, len(values), geom.d_head):
        chunk = values[start : start + geom.d_head]
        hid = prog.next_producer_id()
        sigs = [
            prog.new_signal(hid, ranges[start + c], f"{name}[{start + c}]", source)
            for c in range(len(chunk))
        ]
        prog.add(Head(hid, list(q), list(k), list(chunk), sigs, name, source))
        out.extend(Lin.of(s) for s in sigs)
    return out


def shift(prog: Program, geom: Geometry, values: list[Lin], ranges: list, offset: int,
          name: str, source: str) -> list[Lin]:
    """Each value at position i - offset (the BOS row when i < offset). A shift longer than
    the two-plane lobe reaches (``lobe``), where one coarse plane is not certified either, is
    a chain of shorter ones, a head each: shifting the BOS row's value keeps it for i < offset."""
    try:
        check_margins(geom, offset)
        hops = [offset]
    except GeometryError:
        reach = _two_plane_reach(geom)
        if reach is None or offset <= reach:
            raise
        count = -(-offset // reach)
        hops = [offset // count + (1 if h < offset % count else 0) for h in range(count)]
        for hop in set(hops):
            check_margins(geom, hop)
    for hop in hops:
        q, k = positional_qk(geom, hop)
        values = heads(prog, geom, q, k, values, ranges, name, source)
    return values


def _two_plane_reach(geom: Geometry) -> int | None:
    """The longest shift the two-plane lobe takes (None: the head has one plane)."""
    if geom.rotary == ROTARY_DIMS:
        return None
    period = 2.0 * math.pi / geom.frequency(FINE_PLANE)
    return int(math.floor(period / 2.0 - 2.0))


def latch(prog: Program, geom: Geometry, values: list[Lin], ranges: list, valid: Lin,
          name: str, source: str) -> list[Lin]:
    """Each value at the most recent position j <= i with ``valid_j`` = 1 (0/1 signal)."""
    check_margins(geom, 0, with_validity=True)
    q, k = positional_qk(geom, 0)
    q[geom.rotary] = Lin.constant(geom.validity)
    k[geom.rotary] = valid
    return heads(prog, geom, q, k, values, ranges, name, source)


# -- content heads (no positional term) --------------------------------------------------------


def mean(prog: Program, geom: Geometry, values: list[Lin], ranges: list, valid: Lin,
         name: str, source: str) -> list[Lin]:
    """Each value averaged over the positions j <= i whose ``valid_j`` is 1 (``valid`` also
    carries the BOS fallback at weight 1/2): equal logits give equal softmax weights."""
    q = [Lin() for _ in range(geom.d_head)]
    k = [Lin() for _ in range(geom.d_head)]
    q[geom.rotary] = Lin.constant(MEAN_VALIDITY)
    k[geom.rotary] = valid
    return heads(prog, geom, q, k, values, ranges, name, source)


def scored(prog: Program, geom: Geometry, values: list[Lin], ranges: list,
           key_terms: list[tuple[float, Lin]], name: str, source: str) -> list[Lin]:
    """A head whose logit is ``sum(gain * key_lin_j)`` over the NoPE tail: the query is the
    constant gains, the key the per-position terms. Used by argmax and gather."""
    if len(key_terms) > geom.tail:
        raise GeometryError(f"{len(key_terms)} key terms need d_head >= "
                            f"{geom.rotary + len(key_terms)}")
    q = [Lin() for _ in range(geom.d_head)]
    k = [Lin() for _ in range(geom.d_head)]
    for r, (gain, lin) in enumerate(key_terms):
        q[geom.rotary + r] = Lin.constant(gain)
        k[geom.rotary + r] = lin
    return heads(prog, geom, q, k, values, ranges, name, source)


def query_scored(prog: Program, geom: Geometry, values: list[Lin], ranges: list,
                 terms: list[tuple[Lin, Lin]], name: str, source: str) -> list[Lin]:
    """A head whose logit is ``sum(query_lin_i * key_lin_j)`` over the NoPE tail."""
    if len(terms) > geom.tail:
        raise GeometryError(f"{len(terms)} key terms need d_head >= {geom.rotary + len(terms)}")
    q = [Lin() for _ in range(geom.d_head)]
    k = [Lin() for _ in range(geom.d_head)]
    for r, (ql, kl) in enumerate(terms):
        q[geom.rotary + r] = ql
        k[geom.rotary + r] = kl
    return heads(prog, geom, q, k, values, ranges, name, source)
