"""A lower bound on a lobe head's fp32 logit gap from the rounding of each step, in O(n).

``attention._gap`` replays every (query, key) pair in fp32: O(max_seq_len**2), 10 s a head at
32768 and half an hour at 131072. This module bounds the same gap instead, over the distances
d = i - j alone. A rotary plane of frequency f (the fp32 value Phi-3 computes), amplitude A and
peak t gives the logit ``A cos(f (d - t))`` in exact arithmetic; fp32 moves it by at most:

- the frequency: a runtime that computes f itself (llama.cpp's ``theta_scale`` powers) may
  land a few roundings away, f' = f (1 +- ROTARY_FREQUENCY_SLACK). Both positions turn alike,
  so the logit stays a lobe, ``A cos(f' d - f t)``: the bound is taken for f' at both ends
  and at f;
- the angles: position i turns by ``fl(i * f)``, within half an ulp of ``(n - 1) f`` of
  ``i * f`` (transformers); llama.cpp reaches plane p's angle by p products, so delta = max(1,
  p) half-ulps. The two positions' errors move the cosine's argument by at most 2 delta:
  ``A (|sin(f (d - t))| 2 delta + 2 delta**2)``;
- cos and sin, within EVAL = ``ROTARY_TABLE_ERROR`` (one ulp of values below 1), in the
  key's two dims: ``sqrt(2) A EVAL``;
- the query's rotated dims (weights rounded to fp32, two products and a sum each, the
  tables' EVAL): an error vector fixed for the query row, so it moves two keys' logits
  *apart* only by its length times the distance between the two unit keys,
  ``min(2, f |d - d'| + 2 delta + 2 sqrt(2) EVAL)``;
- the dot product: each rotary product, each of its additions and the final scaling by
  ``1/sqrt(d_head)`` round by at most u times the largest partial sum S (every nonzero term's
  magnitude added up: ``sqrt(2) A`` a plane, C a validity part).

The RMSNorm is an exact identity in fp32 builds (``emit/rmsnorm.py``), so the query and key
are the weights themselves. A shift needs, for every query i >= k, the target d = k to lead
every other distance in [0, i]; for i < k the <bos> row (d = i) to lead every d' < i. The
recency lobe needs every later key to lead every earlier one (checked on neighbours: the lead
grows with the distance faster than the query's term). Where this bound holds the replay's
gap holds too (``tests/test_lobe_bound.py`` compares them up to 16384).
"""

from __future__ import annotations

import math

import numpy as np

from torchwright_fx.base.numerics import (
    FP32_UNIT,
    ROTARY_FREQUENCY_SLACK,
    ROTARY_TABLE_ERROR,
)

SQRT2 = math.sqrt(2)  # (not a construction constant: the length of a diagonal)

Lobe = tuple[tuple[int, float, float], ...]  # (plane, amplitude, peak distance), as attention


def half_ulp(x: float) -> float:
    """Half the fp32 spacing at |x| (the largest rounding error of a value of that size)."""
    x = abs(x)
    return 0.0 if x == 0 else 2.0 ** (math.floor(math.log2(x)) - 24)


def gap_bound(n: int, planes: Lobe, frequencies: dict[int, float], offset: int,
              validity: float, parts: int) -> tuple[float, int]:
    """A lower bound on the smallest fp32 logit gap over every query position below ``n``
    (what ``attention._gap`` measures), and the query position where the bound is least.
    ``frequencies``: each plane's fp32 frequency; ``parts`` validity terms of ``validity``
    each ride on every key alike (they change only the rounding)."""
    return min(_bound(n, planes, frequencies, offset, validity, parts, turn)
               for turn in (1.0 - ROTARY_FREQUENCY_SLACK, 1.0, 1.0 + ROTARY_FREQUENCY_SLACK))


def _bound(n: int, planes: Lobe, frequencies: dict[int, float], offset: int, validity: float,
           parts: int, turn: float) -> tuple[float, int]:
    """``gap_bound`` with the runtime's frequencies at ``turn`` times Phi-3's."""
    d = np.arange(n, dtype=np.float64)
    exact = np.zeros(n)
    per_key = np.zeros(n)  # errors of one key's logit on their own
    slopes, floors = [], []  # the query row's error vector: length * (f * |d - d'| + floor)
    total = parts * validity
    for plane, amp, peak in planes:
        f = frequencies[plane]
        top = (n - 1) * f
        # transformers rounds fl(i * f) once; llama.cpp turns plane p by p products with
        # theta_scale, each rounded (the earlier ones' errors scale down with the angle)
        delta = max(1, plane) * half_ulp(top)
        x = f * turn * d - f * peak
        exact += amp * np.cos(x)
        per_key += amp * (np.abs(np.sin(x)) * 2.0 * delta + 2.0 * delta ** 2)
        # the key's tables, and the two products
        per_key += SQRT2 * amp * ROTARY_TABLE_ERROR + 2.0 * FP32_UNIT * amp
        length = SQRT2 * amp * (ROTARY_TABLE_ERROR + 2.0 * FP32_UNIT) + FP32_UNIT * amp
        slopes.append(length * f)
        floors.append(length * (2.0 * delta + 2.0 * SQRT2 * ROTARY_TABLE_ERROR))
        total += SQRT2 * amp
    terms = 2 * len(planes) + parts
    per_key += terms * FP32_UNIT * total  # terms - 1 additions and the scaling
    slope, floor = float(sum(slopes)), float(sum(floors))
    cap = 2.0 * sum(s / frequencies[p] for s, (p, _, _) in zip(slopes, planes, strict=True)) \
        if slopes else 0.0  # the query term never exceeds twice its vector's length

    def query_term(dist: np.ndarray) -> np.ndarray:
        return np.minimum(slope * dist + floor, cap + floor)

    if offset == 0:  # every key above the one before it
        step = exact[:-1] - exact[1:]
        if n < 2:
            return math.inf, 0
        gaps = step - per_key[:-1] - per_key.max() - query_term(np.ones(1))
        # a lead of k steps is at least k times the least step: it must outgrow the query term
        if float(step.min()) < slope:
            return -math.inf, n - 1
        at = int(np.argmin(gaps))
        return float(gaps[at]), at + 1
    worst, where = math.inf, 0
    if offset < n:  # queries i >= offset: the target d = offset against every other d <= i
        others = exact + per_key + query_term(np.abs(d - offset))
        others[offset] = -math.inf
        g = exact[offset] - per_key[offset] - float(others.max())
        worst, where = g, n - 1
    k = min(offset, n)
    if k > 1:  # queries i < offset: the <bos> row (d = i) against every d' < i
        lifted = exact[:k] + per_key[:k] - slope * d[:k]
        best_before = np.maximum.accumulate(lifted)[:-1]  # over d' < i, for i = 1..k-1
        i = d[1:k]
        lead = exact[1:k] - per_key[1:k] - (best_before + slope * i + floor)
        at = int(np.argmin(lead))
        if float(lead[at]) < worst:
            worst, where = float(lead[at]), at + 1
    return worst, where
