"""Attention-head constructions and the RoPE geometry they share (DESIGN §5).

Position enters only through RoPE. Each head has ``ROTARY_DIMS`` = 4 rotary dims in Phi-3's
``rotate_half`` layout: plane (0, 2) turns at frequency 1 and is left at zero, plane (1, 3)
turns at ``theta = pi / max_seq_len`` (set through ``rope_theta``). A query ``A*(cos(theta*k),
-sin(theta*k))`` against the key ``(1, 0)`` gives the logit ``A*cos(theta*(i - j - k))`` between
positions i and j: a single cosine lobe that peaks at distance k and falls monotonically on
both sides over the whole context, because ``theta * max_seq_len <= pi``. With amplitude
``A = margin / (1 - cos theta)`` the winner leads every other key by at least ``margin``, so
its softmax weight is exactly 1.0 in fp32 and every other weight exactly 0.0.

- ``shift(v, k)``: the lobe at distance k. For i < k every key is on the rising side and the
  one nearest distance k is the BOS row: the contract "BOS row when i - k < 0" for free.
- ``latch(v, when)``: the lobe at distance 0 (most recent wins) plus a content term
  ``C * valid_j`` on the position-free NoPE tail, with ``C = 2A + margin`` so every valid key
  beats every invalid one. The BOS row always counts as valid, the fallback when no earlier
  position has ``when``.

``check_margins`` replays the logits in fp32 exactly as Phi-3 computes them, for every query
position up to ``max_seq_len``, and refuses a geometry whose measured gap is below
``ATTENTION_MARGIN``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import torch

from torchwright_fx.capture.errors import CompileError
from torchwright_fx.ir.graph import Head, Program
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ops.numerics import ATTENTION_MARGIN, ROTARY_DIMS, is_power_of_two

# The amplitude is sized for this multiple of the margin in exact arithmetic; the rest is
# headroom for fp32 rounding of the rotary tables and the dot products, which check_margins
# measures rather than assumes.
AMPLITUDE_HEADROOM = 1.5
LOW_PLANE = (1, 3)
# The margin search tries this many lengths below a failing one, one by one (each fails fast).
SCAN_LENGTHS = 64  # (a, b) dims of the low-frequency rotary plane in rotate_half layout


class GeometryError(CompileError, ValueError):
    """The chosen d_head / max_seq_len cannot host the attention constructions exactly."""


@dataclass(frozen=True)
class Geometry:
    d_head: int
    max_seq_len: int

    def __post_init__(self) -> None:
        if not is_power_of_two(self.d_head) or self.d_head < 2 * ROTARY_DIMS:
            raise GeometryError(
                f"d_head={self.d_head}: use a power of two >= {2 * ROTARY_DIMS} (the rotary "
                f"fraction {ROTARY_DIMS}/d_head must be exact and the NoPE tail non-empty)"
            )
        if self.max_seq_len < 2:
            raise GeometryError(f"max_seq_len={self.max_seq_len}: need at least 2 positions")

    @property
    def partial_rotary_factor(self) -> float:
        return ROTARY_DIMS / self.d_head

    @property
    def rope_theta(self) -> float:
        # inv_freq[1] = rope_theta ** (-2/4) = pi / max_seq_len
        return (self.max_seq_len / math.pi) ** 2

    @property
    def theta(self) -> float:
        """The low plane's frequency exactly as Phi-3 computes it (fp32)."""
        return float(_inv_freq(self.rope_theta)[1])

    @property
    def amplitude(self) -> float:
        return AMPLITUDE_HEADROOM * ATTENTION_MARGIN / (1.0 - math.cos(self.theta))

    @property
    def validity(self) -> float:
        """Content gain C that puts every valid key above every invalid one."""
        return 2.0 * self.amplitude + AMPLITUDE_HEADROOM * ATTENTION_MARGIN

    @property
    def tail(self) -> int:
        """Number of position-free (NoPE) dims per head."""
        return self.d_head - ROTARY_DIMS


def _inv_freq(rope_theta: float) -> torch.Tensor:
    # Phi-3's default RoPE initialisation, replayed for the margin check.
    return 1.0 / (rope_theta ** (torch.arange(0, ROTARY_DIMS, 2, dtype=torch.float) / ROTARY_DIMS))


def _query_rotary(geom: Geometry, offset: int) -> tuple[float, float]:
    a = geom.amplitude
    return a * math.cos(geom.theta * offset), -a * math.sin(geom.theta * offset)


# -- margin check ------------------------------------------------------------------------------
@lru_cache(maxsize=256)
def measured_gap(geom: Geometry, offset: int, with_validity: bool | int,
                 stop_below: float = -math.inf) -> tuple[float, int]:
    """Smallest fp32 logit gap (winner minus runner-up) over all query positions, and the
    query position where it occurs, replaying Phi-3's RoPE and dot product in fp32. With
    ``stop_below``, returns as soon as a gap below it is found (a pass/fail question)."""
    n = geom.max_seq_len
    pos = torch.arange(n, dtype=torch.float)
    freqs = pos[:, None] * _inv_freq(geom.rope_theta)[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
    cos, sin = emb.cos(), emb.sin()

    def rotate(x: torch.Tensor) -> torch.Tensor:
        half = torch.cat([-x[..., ROTARY_DIMS // 2 :], x[..., : ROTARY_DIMS // 2]], dim=-1)
        return x * cos + half * sin

    q = torch.zeros(n, ROTARY_DIMS)
    qa, qb = _query_rotary(geom, offset)
    q[:, LOW_PLANE[0]], q[:, LOW_PLANE[1]] = qa, qb
    k = torch.zeros(n, ROTARY_DIMS)
    k[:, LOW_PLANE[0]] = 1.0
    rq, rk = rotate(q), rotate(k)
    # with_validity: how many units of the validity gain every key carries (a selection of m
    # parts carries m; the rounding of the large sum is what the replay measures)
    validity = torch.tensor(geom.validity * int(with_validity), dtype=torch.float)
    worst_gap, worst_at = math.inf, 0
    for start in range(1, n, 256):  # query rows in chunks: memory stays O(256 * n)
        rows = torch.arange(start, min(n, start + 256))
        logits = ((rq[rows] @ rk.T) + validity).double()
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
        raise GeometryError(f"shift by {offset} >= max_seq_len={geom.max_seq_len}")
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
FP32_UNIT = 2.0 ** -24  # unit roundoff of fp32


def logit_rounding(products: list[float]) -> float:
    """A bound on |fl(q . k) - q . k| for one logit whose nonzero products q_r k_r have at most
    these magnitudes: each product and each partial sum rounds once (relative 2**-24 of at most
    the sum of magnitudes), and an attention implementation that scales q and k by
    sqrt(1/sqrt(d_head)) before the product rounds each factor once more."""
    return (len(products) + 3) * FP32_UNIT * sum(abs(p) for p in products)


# -- head builders -----------------------------------------------------------------------------
def _positional_qk(geom: Geometry, offset: int) -> tuple[list[Lin], list[Lin]]:
    q = [Lin() for _ in range(geom.d_head)]
    k = [Lin() for _ in range(geom.d_head)]
    qa, qb = _query_rotary(geom, offset)
    q[LOW_PLANE[0]], q[LOW_PLANE[1]] = Lin.constant(qa), Lin.constant(qb)
    k[LOW_PLANE[0]] = Lin.constant(1.0)
    return q, k


def self_qk(geom: Geometry) -> tuple[list[Lin], list[Lin]]:
    """Q/K of a head that attends exactly to its own position (the lobe at distance 0)."""
    check_margins(geom, 0)
    return _positional_qk(geom, 0)


def _heads(
    prog: Program,
    geom: Geometry,
    q: list[Lin],
    k: list[Lin],
    values: list[Lin],
    ranges: list,
    name: str,
    source: str,
) -> list[Lin]:
    """Heads with the given Q/K copying ``values`` (split across heads of d_head values)."""
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
    """Each value at position i - offset (the BOS row when i < offset)."""
    check_margins(geom, offset)
    q, k = _positional_qk(geom, offset)
    return _heads(prog, geom, q, k, values, ranges, name, source)


def latch(prog: Program, geom: Geometry, values: list[Lin], ranges: list, valid: Lin,
          name: str, source: str) -> list[Lin]:
    """Each value at the most recent position j <= i with ``valid_j`` = 1 (0/1 signal)."""
    check_margins(geom, 0, with_validity=True)
    q, k = _positional_qk(geom, 0)
    q[ROTARY_DIMS] = Lin.constant(geom.validity)
    k[ROTARY_DIMS] = valid
    return _heads(prog, geom, q, k, values, ranges, name, source)


# -- content heads (no positional term) --------------------------------------------------------
# Validity gain of a mean head: valid keys C, the BOS fallback C/2, everything else 0; the
# fallback then trails a valid key by C/2 = AMPLITUDE_HEADROOM * ATTENTION_MARGIN.
MEAN_VALIDITY = 2.0 * AMPLITUDE_HEADROOM * ATTENTION_MARGIN


def mean(prog: Program, geom: Geometry, values: list[Lin], ranges: list, valid: Lin,
         name: str, source: str) -> list[Lin]:
    """Each value averaged over the positions j <= i whose ``valid_j`` is 1 (``valid`` also
    carries the BOS fallback at weight 1/2): equal logits give equal softmax weights."""
    q = [Lin() for _ in range(geom.d_head)]
    k = [Lin() for _ in range(geom.d_head)]
    q[ROTARY_DIMS] = Lin.constant(MEAN_VALIDITY)
    k[ROTARY_DIMS] = valid
    return _heads(prog, geom, q, k, values, ranges, name, source)


def scored(prog: Program, geom: Geometry, values: list[Lin], ranges: list,
           key_terms: list[tuple[float, Lin]], name: str, source: str) -> list[Lin]:
    """A head whose logit is ``sum(gain * key_lin_j)`` over the NoPE tail: the query is the
    constant gains, the key the per-position terms. Used by argmax and gather."""
    if len(key_terms) > geom.tail:
        raise GeometryError(f"{len(key_terms)} key terms need d_head >= "
                            f"{ROTARY_DIMS + len(key_terms)}")
    q = [Lin() for _ in range(geom.d_head)]
    k = [Lin() for _ in range(geom.d_head)]
    for r, (gain, lin) in enumerate(key_terms):
        q[ROTARY_DIMS + r] = Lin.constant(gain)
        k[ROTARY_DIMS + r] = lin
    return _heads(prog, geom, q, k, values, ranges, name, source)


def query_scored(prog: Program, geom: Geometry, values: list[Lin], ranges: list,
                 terms: list[tuple[Lin, Lin]], name: str, source: str) -> list[Lin]:
    """A head whose logit is ``sum(query_lin_i * key_lin_j)`` over the NoPE tail."""
    if len(terms) > geom.tail:
        raise GeometryError(f"{len(terms)} key terms need d_head >= {ROTARY_DIMS + len(terms)}")
    q = [Lin() for _ in range(geom.d_head)]
    k = [Lin() for _ in range(geom.d_head)]
    for r, (ql, kl) in enumerate(terms):
        q[ROTARY_DIMS + r] = ql
        k[ROTARY_DIMS + r] = kl
    return _heads(prog, geom, q, k, values, ranges, name, source)
