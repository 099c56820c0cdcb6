"""The O(n) bound on a lobe head's fp32 logit gap (ops/lobe_bound.py) against the O(n^2) replay
it replaces beyond REPLAY_LENGTH: wherever both run, the bound is below the replayed gap."""

from __future__ import annotations

import numpy as np
import pytest

from torchwright_fx.base import numerics
from torchwright_fx.ops import lobe_bound
from torchwright_fx.ops.attention import Geometry, _gap, check_margins, lobe


def _bound(geom: Geometry, offset: int, parts: int) -> float:
    planes = lobe(geom, offset)
    freqs = {p: geom.frequency(p) for p, _, _ in planes}
    return lobe_bound.gap_bound(geom.max_seq_len, planes, freqs, offset, geom.validity,
                                parts)[0]


@pytest.mark.parametrize("n,d_head", [(64, 16), (512, 16), (2048, 16), (4096, 32), (8192, 32)])
@pytest.mark.parametrize("offset,parts", [(0, 0), (0, 1), (0, 3), (1, 0), (2, 0), (7, 0),
                                          (60, 0), (300, 0)])
def test_the_bound_never_exceeds_the_replayed_gap(n, d_head, offset, parts):
    if offset >= n:
        pytest.skip("shift beyond the context")
    geom = Geometry(d_head, n)
    replayed = _gap(geom, lobe(geom, offset), offset, parts)[0]
    assert _bound(geom, offset, parts) <= replayed


def test_half_ulp_is_half_of_fp32_spacing():
    for x in (1.0, 3.0, 1e7, 2.0 ** 26 - 4, 0.3, 2.25e7):
        xf = float(np.float32(x))
        assert lobe_bound.half_ulp(xf) == float(np.spacing(np.float32(xf))) / 2


@pytest.mark.parametrize("n", [65536, 131072])
def test_recency_shift_and_latch_are_certified_at_long_lengths(n):
    geom = Geometry(64, n)
    for offset in (0, 1, 2, 7, 60):
        assert check_margins(geom, offset) >= numerics.ATTENTION_MARGIN
    assert check_margins(geom, 0, with_validity=1) >= numerics.ATTENTION_MARGIN


def test_a_selection_of_many_parts_is_refused_where_its_sums_round_too_far():
    """Five validity parts add 5 * 4.5e7 to every logit at 131072: fp32's spacing there (16)
    leaves less than the margin, and no replay runs beyond REPLAY_LENGTH."""
    geom = Geometry(64, 131072)
    assert _bound(geom, 0, 5) < numerics.ATTENTION_MARGIN
