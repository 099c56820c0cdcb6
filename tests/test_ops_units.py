"""Every op on both machines, through the compiled weights (in-process runtime), at interior
and edge points of its declared range, against exact float64 math.

Exact ops must agree to 1e-6 relative (fp32 dust); approximate ones must stay within the bound
committed in docs/op_noise.json for their construction. All cases of one machine compile into
one program (tests/test_ops_helpers.py), so the whole file costs a few compiles.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sympy
import torch
import torch.nn.functional as F
from test_ops_helpers import Claim, Probe, fp32, run_probes

import torchwright_fx as tw
from torchwright_fx.base import numerics
from torchwright_fx.base.numerics import RAMP_WIDTH

NOISE = json.loads((Path(__file__).resolve().parents[1] / "docs" / "op_noise.json").read_text())
N = 24  # points per case (cases with fewer points repeat them)
X = sympy.Symbol("x")
Ref = Callable[..., Any]


@dataclass(frozen=True)
class Case:
    name: str
    op: Callable[..., torch.Tensor]
    ref: Ref
    points: Sequence[Sequence[float]]  # one list per argument
    claims: Sequence[Claim]
    # None: exact. Otherwise (op, distribution) in docs/op_noise.json, or a number (abs).
    bound: tuple[str, str] | float | None = None


def edge_points(lo: float, hi: float, integral: bool = False) -> list[float]:
    """Both ends, just inside them, the middle and a spread of interior points."""
    if integral:
        span = np.linspace(lo, hi, N).round()
        return [lo, hi, *span.tolist()][:N]
    inner = np.linspace(lo, hi, N - 6)[1:-1].tolist()
    return [lo, hi, lo + 1e-3, hi - 1e-3, (lo + hi) / 2, lo + (hi - lo) / 3, *inner]


def pairs(lo: float, hi: float, integral: bool = False) -> list[list[float]]:
    a = edge_points(lo, hi, integral)
    return [a, a[::-1]]


def away_from_ramps(points: Sequence[float], thresholds: Sequence[float]) -> list[float]:
    """Real points at least 2 ramp widths from every threshold (where steps are exact)."""
    return [p for p in points if all(abs(p - t) > 2 * RAMP_WIDTH for t in thresholds)]


REAL8 = edge_points(-8, 8)
INT8 = edge_points(-8, 8, True)
C8, W8 = Claim(-8, 8), Claim(-8, 8, True)
GRID = [float(v) for v in range(-80, 81, 7)] + [-80.0, 80.0, -1.0, 1.0, 0.0, 5.0, -5.0, 15.0]
PW_XS = [-4.0, -2.0, -1.0, 0.0, 1.5, 3.0]


def _linear_cases() -> list[Case]:
    w = torch.tensor([[1.0, -2.0], [0.5, 3.0]])
    return [
        Case("add_sub_scale", lambda a, b: 2 * a - b / 4 + 3 - (-a), lambda a, b: 3 * a - b / 4 + 3,
             pairs(-8, 8), [C8, C8]),
        Case("matmul", lambda a, b: (torch.cat([a, b], -1) @ w)[:, 1:2],
             lambda a, b: -2 * a + 3 * b, pairs(-8, 8), [C8, C8]),
        Case("linear_sum", lambda a, b: F.linear(torch.cat([a, b], -1), w, torch.tensor(
            [1.0, 2.0])).sum(-1, keepdim=True), lambda a, b: 1.5 * a + b + 3,
            pairs(-8, 8), [C8, C8]),
        Case("stack", lambda a, b: torch.stack([a[:, 0], b[:, 0]], -1).sum(-1, keepdim=True),
             lambda a, b: a + b, pairs(-8, 8), [C8, C8]),
        Case("digits_to_number", lambda a, b: tw.digits_to_number([a, b], base=7),
             lambda a, b: 7 * a + b, pairs(0, 6, True), [Claim(0, 6, True)] * 2),
    ]


def _product_cases() -> list[Case]:
    return [
        Case("mul", lambda a, b: a * b, lambda a, b: a * b, pairs(-8, 8), [C8, C8],
             ("mul", "uniform")),
        Case("mul_int", lambda a, b: torch.mul(a, b), lambda a, b: a * b, pairs(-8, 8, True),
             [W8, W8]),
        Case("mul_bool", lambda a, b: (a > 0).float() * b, lambda a, b: (a > 0) * b,
             [INT8, REAL8], [W8, C8]),
        Case("square", lambda a: a ** 2, lambda a: a * a, [REAL8], [C8], ("square", "uniform")),
        Case("square_int", torch.square, lambda a: a * a, [INT8], [W8]),
        Case("pow3_int", lambda a: torch.pow(a, 3), lambda a: a ** 3, [INT8], [W8]),
        Case("reciprocal", lambda a: 1 / a, lambda a: 1 / a, [edge_points(0.5, 16)],
             [Claim(0.5, 16)], ("reciprocal", "uniform")),
        Case("reciprocal_negative", torch.reciprocal, lambda a: 1 / a,
             [edge_points(-16, -0.5)], [Claim(-16, -0.5)], ("reciprocal", "uniform")),
        Case("reciprocal_int", lambda a: 3 / a, lambda a: 3 / a, [edge_points(1, 40, True)],
             [Claim(1, 40, True)]),
        Case("reciprocal_tight", lambda a: tw.reciprocal(a, rel_tol=1e-4), lambda a: 1 / a,
             [edge_points(1, 4)], [Claim(1, 4)], 1e-4),
        Case("divide", lambda a, b: a / b, lambda a, b: a / b, [REAL8, edge_points(1, 4)],
             [C8, Claim(1, 4)], 8 * 1e-3 + 1e-2),
    ]


def _largest_slope_change(xs: Sequence[float], f: Callable[[float], float]) -> float:
    """The SwiGLU corner error of a piecewise table scales with this (flat beyond the ends)."""
    slopes = [0.0, *[(f(b) - f(a)) / (b - a) for a, b in zip(xs, xs[1:], strict=False)], 0.0]
    return max(abs(b - a) for a, b in zip(slopes, slopes[1:], strict=False))


def _hinge_cases() -> list[Case]:
    real, ints = ("relu", "near_kink"), None
    return [
        Case("relu", torch.relu, lambda a: np.maximum(a, 0), [REAL8], [C8], real),
        Case("relu_int", F.relu, lambda a: np.maximum(a, 0), [INT8], [W8], ints),
        Case("abs", torch.abs, np.abs, [REAL8], [C8], ("abs", "near_kink")),
        Case("abs_int", lambda a: a.abs(), np.abs, [INT8], [W8], ints),
        Case("maximum", torch.maximum, np.maximum, pairs(-8, 8), [C8, C8],
             ("maximum", "near_kink")),
        Case("minimum_int", lambda a, b: torch.min(a, b), np.minimum, pairs(-8, 8, True),
             [W8, W8], ints),
        Case("clamp", lambda a: torch.clamp(a, -1.5, 2), lambda a: np.clip(a, -1.5, 2),
             [REAL8], [C8], ("clamp", "near_kink")),
        Case("hardtanh", lambda a: F.hardtanh(a, min_val=-1.5, max_val=2.0),
             lambda a: np.clip(a, -1.5, 2), [REAL8], [C8], ("clamp", "near_kink")),
        Case("relu6_int", F.relu6, lambda a: np.clip(a, 0, 6), [INT8], [W8], ints),
        Case("clamp_streams", lambda a, b: torch.clamp(a, min=b, max=b + 3),
             lambda a, b: np.minimum(np.maximum(a, b), b + 3), pairs(-8, 8, True), [W8, W8]),
        Case("piecewise", lambda a: tw.piecewise(lambda t: t ** 3, a, PW_XS),
             lambda a: np.interp(a, PW_XS, [t ** 3 for t in PW_XS]), [REAL8 + PW_XS], [C8],
             _largest_slope_change(PW_XS, lambda t: t ** 3) * numerics.HINGE_MAX_ERROR / 128),
        Case("piecewise_sympy", lambda a: tw.piecewise(sympy.exp(X / 4), a, tol=1e-3),
             lambda a: np.exp(a / 4), [REAL8], [C8], 1e-3 + 1e-6),
        Case("piecewise_kink", lambda a: tw.piecewise(sympy.Max(X, 1) - sympy.Abs(X + 2),
                                                           a, tol=1e-3),
             lambda a: np.maximum(a, 1) - np.abs(a + 2), [REAL8 + [1.0, -2.0, 0.99, -2.01]],
             [C8], 1e-3 + 1e-6),
    ]


def _step_cases() -> list[Case]:
    thresholds = list(range(-8, 9))
    real = away_from_ramps(REAL8 + [k + 0.5 for k in range(-7, 7)], thresholds)
    return [
        Case("gt_const", lambda a: (a > 0.5).float(), lambda a: (a > 0.5) * 1.0,
             [away_from_ramps(REAL8, [0.5])], [C8]),
        Case("le_int", lambda a: (a <= 2).float(), lambda a: (a <= 2) * 1.0, [INT8], [W8]),
        Case("eq_ne_grid", lambda a: (a / 10 == 0.7).float() - (a / 4 != 2).float(),
             lambda a: (a == 7) * 1.0 - (a != 8) * 1.0, [GRID + [7.0, 8.0]],
             [Claim(-80, 80, True)]),
        Case("ge_streams", lambda a, b: torch.ge(a, b).float(), lambda a, b: (a >= b) * 1.0,
             pairs(-8, 8, True), [W8, W8]),
        Case("floor_real", torch.floor, np.floor, [real], [C8]),
        Case("floor_grid", lambda a: torch.floor(a / 10), lambda a: np.floor(a / 10), [GRID],
             [Claim(-80, 80, True)]),
        Case("ceil_grid", lambda a: (a / 4).ceil(), lambda a: np.ceil(a / 4), [GRID],
             [Claim(-80, 80, True)]),
        Case("round_grid", lambda a: torch.round(a / 2), lambda a: np.round(a / 2), [GRID],
             [Claim(-80, 80, True)]),
        # a / 4 is exact in fp32; a / 100 * 10 would be rounded twice (refused: ties)
        Case("round_decimals", lambda a: torch.round(a / 4, decimals=1),
             lambda a: np.round(a / 4 * 10) / 10, [GRID], [Claim(-80, 80, True)]),
        Case("trunc_int_frac", lambda a: torch.trunc(a / 3) + torch.frac(a / 5),
             lambda a: np.trunc(a / 3) + (a / 5 - np.trunc(a / 5)), [GRID],
             [Claim(-80, 80, True)]),
        Case("int_method", lambda a: (a / 4).int().float(), lambda a: np.trunc(a / 4), [GRID],
             [Claim(-80, 80, True)]),
        Case("mod_floordiv", lambda a: a % 7 + 10 * (a // 3), lambda a: np.mod(a, 7) + 10 *
             np.floor(a / 3), [GRID], [Claim(-80, 80, True)]),
        Case("fmod_div_modes", lambda a: torch.fmod(a, 6) + torch.div(a, 4, rounding_mode="trunc")
             + torch.div(a, 4, rounding_mode="floor"), lambda a: np.fmod(a, 6) + np.trunc(a / 4)
             + np.floor(a / 4), [GRID], [Claim(-80, 80, True)],
             1e-4),  # in the shared program: ~10 fp32 ulps of 38 (open: see the closing note)
        Case("remainder_wide", lambda a: torch.remainder(a, 10), lambda a: np.mod(a, 10),
             [[0.0, 99999.0, 12345.0, 50000.0, 9.0, 10.0, 99990.0]], [Claim(0, 99999, True)]),
        Case("sign", torch.sign, np.sign, [INT8], [W8]),
    ]


def _logic_cases() -> list[Case]:
    a, b = pairs(-3, 3, True)
    w3 = Claim(-3, 3, True)
    return [
        Case("and_or_xor_not", lambda a, b: ((a > 0) & (b > 0) | ~(a > 1) ^ (b < -1)).float(),
             lambda a, b: (((a > 0) & (b > 0)) | (~(a > 1) ^ (b < -1))) * 1.0, [a, b], [w3, w3]),
        Case("logical_fns", lambda a, b: torch.logical_or(torch.logical_not(a > 0),
                                                          torch.logical_and(b > 0, a > 2)).float(),
             lambda a, b: ((a <= 0) | ((b > 0) & (a > 2))) * 1.0, [a, b], [w3, w3]),
        Case("all_any", lambda a, b: torch.stack([a[:, 0] > 0, b[:, 0] > 0], -1).all(-1).float()
             [:, None] + 2 * torch.cat([a > 1, b > 1], -1).any(-1, keepdim=True).float(),
             lambda a, b: ((a > 0) & (b > 0)) * 1.0 + 2.0 * ((a > 1) | (b > 1)), [a, b],
             [w3, w3]),
        Case("where", lambda a, b: torch.where(a > 0, a * 2, b), lambda a, b: np.where(
            a > 0, a * 2, b), [a, b], [w3, w3]),
        Case("equals", lambda a, b: tw.equals(torch.cat([a, b], -1), [1, -3]),
             lambda a, b: ((a == 1) & (b == -3)) * 1.0, [a + [1.0], b + [-3.0]], [w3, w3]),
        Case("equals_middle", lambda a, b: tw.equals(torch.cat([a, b], -1), [0, 2]),
             lambda a, b: ((a == 0) & (b == 2)) * 1.0, [a + [0.0], b + [2.0]], [w3, w3]),
    ]


def _table(i: int, j: int) -> float:
    return float((i * 5 + j * 3) % 7) - 2.5


def _lookup_cases() -> list[Case]:
    a, b = [float(v % 4) for v in range(N)], [float((v * 7) % 6) for v in range(N)]
    return [
        Case("lookup", lambda a: tw.lookup(a, {0: 5.0, 2: -1.0, 3: 7.5}, default=0.25),
             lambda a: np.array([{0: 5.0, 2: -1.0, 3: 7.5}.get(int(v), 0.25) for v in a]),
             [a], [Claim(0, 3, True)]),
        Case("lookup2", lambda a, b: tw.lookup2(a, b, {(i, j): _table(i, j) for i in range(4)
                                                            for j in range(6) if i != j}, -9.0),
             lambda a, b: np.array([-9.0 if i == j else _table(int(i), int(j))
                                    for i, j in zip(a, b, strict=True)]),
             [a, b], [Claim(0, 3, True), Claim(0, 5, True)]),
        Case("lookup2_grid_table", lambda a, b: tw.lookup2(a, b, [[1, 2], [3, 4], [5, 6]]),
             lambda a, b: 2 * a + b + 1, [[v % 3 for v in a], [v % 2 for v in b]],
             [Claim(0, 2, True), Claim(0, 1, True)]),
    ] + [
        Case(f"number_to_digits_{k}", lambda a, k=k: tw.number_to_digits(a, 4)[:, k:k + 1],
             lambda a, k=k: np.mod(np.floor(a / 10 ** (3 - k)), 10),
             [[0.0, 9999.0, 12345.0, 99999.0, 1000.0, 999.0, 7.0, 10.0, 54321.0]],
             [Claim(0, 99999, True)]) for k in range(4)
    ]


CASES = (_linear_cases() + _product_cases() + _hinge_cases() + _step_cases() + _logic_cases()
         + _lookup_cases())


def _padded(points: Sequence[float]) -> list[float]:
    return [points[i % len(points)] for i in range(N)]


@pytest.fixture(scope="module", params=["swiglu", "relu"])
def results(request: pytest.FixtureRequest) -> tuple[str, dict[str, torch.Tensor]]:
    machine = request.param
    probes = [Probe(c.op, [_padded(p) for p in c.points], c.claims) for c in CASES]
    values = run_probes(probes, machine)
    return machine, {c.name: v for c, v in zip(CASES, values, strict=True)}


def tolerance(case: Case, machine: str, want: np.ndarray) -> np.ndarray:
    exact = 1e-6 * np.maximum(1.0, np.abs(want))
    if case.bound is None:
        return exact
    if isinstance(case.bound, float):
        return exact + case.bound
    op, dist = case.bound
    bound = NOISE["ops"][op]["bounds"][machine][dist]
    return exact + bound.get("abs", 0.0) + bound.get("rel", 0.0) * np.abs(want)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_op_matches_exact_math(results, case: Case):
    machine, values = results
    xs = [fp32(_padded(p)).numpy() for p in case.points]
    want = np.asarray(case.ref(*xs), dtype=np.float64).reshape(-1)
    got = values[case.name].numpy()
    err = np.abs(got - want)
    tol = tolerance(case, machine, want)
    worst = int(np.argmax(err - tol))
    assert np.all(err <= tol), (f"{case.name} on {machine}: at inputs "
                                f"{[x[worst] for x in xs]} got {got[worst]!r}, want "
                                f"{want[worst]!r} (tolerance {tol[worst]:.3g})")


def test_ramps_stay_between_their_ends(results):
    """Inside a ramp a comparison is fractional but never outside [0, 1]: the error of a
    real-valued comparison is bounded by 1 and confined to RAMP_WIDTH."""
    machine, _ = results
    pts = [0.5 + RAMP_WIDTH * f for f in np.linspace(0, 1, N)]
    (got,) = run_probes([Probe(lambda a: (a > 0.5).float(), [pts], [C8])], machine)
    assert torch.all(got >= -1e-6) and torch.all(got <= 1 + 1e-6)
    assert math.isclose(float(got[-1]), 1.0, abs_tol=1e-6)


def test_lookup_over_a_wide_key_range_costs_the_table_not_the_range():
    """A 3-entry table on keys in [-30000, 10**5]: a few steps' lanes, not 130,000 (the old
    4096-entry cap refused it), right on every token."""
    vocab = tw.Vocab("0123456789")

    def program(x):
        key = (tw.code(x) - tw.token("0")) * 10_000
        return tw.lookup(key, {0: "7", 30_000: "1", 90_000: "4"}, default="0")

    compiled = tw.compile(program, vocab=vocab, max_seq_len=4)
    assert compiled.stats()["lanes_per_layer"] <= 16, compiled.summary()
    for d in "0123456789":
        want = {"0": "7", "3": "1", "9": "4"}.get(d, "0")
        got = compiled.generate(d)  # each printed digit is looked up in turn
        assert got == compiled.reference(d) and got[0] == want, (d, got)
