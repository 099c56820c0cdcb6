"""Measure every op's numerical error, compiled, against exact math (docs/design-notes.md §9).

For each op, machine (swiglu, relu) and named input distribution, a probe program applying the
op to per-position inputs is compiled and run through the in-process runtime (the real
weights: tests/test_ops_helpers.py), and its output is compared with the exact float64
reference evaluated on the same fp32 inputs. Writes ``docs/op_noise.json`` (the numbers, plus
the analytic bound each construction promises) and ``docs/numerical_noise.md`` (generated from
the JSON). Deterministic: every distribution is drawn from its own seeded generator.

    python scripts/measure_noise.py            # measure and write both files
    python scripts/measure_noise.py --check    # measure and compare with the committed JSON
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import sympy
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from test_ops_helpers import Claim, Probe, fp32, run_probes  # noqa: E402

import torchwright_fx as tw  # noqa: E402
from torchwright_fx.base import numerics  # noqa: E402
from torchwright_fx.base.numerics import RAMP_WIDTH, SILU_SCALE  # noqa: E402
from torchwright_fx.ir.graph import MachineKind  # noqa: E402

JSON_PATH = ROOT / "docs" / "op_noise.json"
MD_PATH = ROOT / "docs" / "numerical_noise.md"
SEED = 20240601
SAMPLES = 400
MACHINES: tuple[MachineKind, ...] = ("swiglu", "relu")
REL_FLOOR = 1e-3  # relative error is |err| / max(|exact|, REL_FLOOR)
# Drift tolerance: re-measured numbers must match the committed ones this closely.
RTOL, ATOL = 0.02, 1e-6
METRICS = ("max_abs", "mean_abs", "p99_abs", "max_rel", "mean_rel", "p99_rel")

Sampler = Callable[[np.random.Generator, int], list[np.ndarray]]
T = torch.Tensor


@dataclass(frozen=True)
class Dist:
    """A named input distribution: a sampler, the declared ranges, and optionally its own
    program and reference (e.g. floor of v/10 for an integer v exercises a grid)."""

    sample: Sampler
    claims: tuple[Claim, ...]
    program: Callable[..., T] | None = None
    reference: Callable[..., Any] | None = None


Bound = dict[str, float]  # {"abs": a} and/or {"rel": r}: max errors the construction promises


@dataclass(frozen=True)
class Op:
    name: str
    construction: str
    program: Callable[..., T]
    reference: Callable[..., Any]  # exact float64 math on numpy arrays
    dists: dict[str, Dist]
    notes: dict[Any, str]  # machine -> the bound in words
    bounds: dict[str, dict[str, Bound]] = field(default_factory=dict)  # machine -> dist -> bound


def uniform(lo: float, hi: float, k: int = 1) -> Sampler:
    return lambda g, n: [g.uniform(lo, hi, n) for _ in range(k)]


def integers(lo: int, hi: int, k: int = 1) -> Sampler:
    return lambda g, n: [g.integers(lo, hi + 1, n).astype(np.float64) for _ in range(k)]


def near(points: Sequence[float], width: float, k: int = 1) -> Sampler:
    """Points within +-width of the given kinks (thresholds, knots)."""
    def sample(g: np.random.Generator, n: int) -> list[np.ndarray]:
        centres = g.choice(np.array(points, dtype=np.float64), size=n)
        base = centres + g.uniform(-width, width, n)
        return [base] + [base + g.uniform(-width, width, n) for _ in range(k - 1)]

    return sample


def real(lo: float, hi: float, k: int = 1) -> tuple[Claim, ...]:
    return (Claim(lo, hi),) * k


def whole(lo: float, hi: float, k: int = 1) -> tuple[Claim, ...]:
    return (Claim(lo, hi, True),) * k


HINGE = numerics.HINGE_MAX_ERROR / SILU_SCALE  # relu(z) vs SiLU(S z)/S, per unit slope change
EXACT = 1e-6  # "exact": fp32 dust only (the probe reads affine forms in float64)
FP32 = 2.0 ** -24
X = sympy.Symbol("x")
PW_XS = [-4.0, -3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0, 4.0]
PW_EXPR = sympy.sin(X) + sympy.Abs(X) / 2
ALL_DISTS = ("uniform", "integers", "grid", "near_kink", "near_low_end")


def both(bound: Bound, dists: Sequence[str] = ALL_DISTS) -> dict[str, dict[str, Bound]]:
    return {m: {d: bound for d in dists} for m in MACHINES}


def per_machine(swiglu: dict[str, Bound], relu: dict[str, Bound]
                ) -> dict[str, dict[str, Bound]]:
    return {"swiglu": swiglu, "relu": relu}


def hinged(k: float) -> dict[str, dict[str, Bound]]:
    """SwiGLU: within k * 0.2785/128 near a kink, exact on integers; ReLU: exact."""
    near_kink = {"abs": k * HINGE + EXACT}
    return per_machine({"uniform": near_kink, "near_kink": near_kink, "integers": {"abs": EXACT}},
                       {d: {"abs": EXACT} for d in ("uniform", "near_kink", "integers")})


def table_bound(width: float, interp: float, top: float) -> Bound:
    """A 256-segment table over ``width``: ``interp(h)`` plus worst-case fp32 summation of
    its lanes (each partial sum below ``top``)."""
    h = width / numerics.TABLE_SEGMENTS
    return {"abs": interp * h * h + 2 * numerics.TABLE_SEGMENTS * top * FP32}


def ramped(top: float, exact_dists: Sequence[str]) -> dict[str, dict[str, Bound]]:
    """Staircases: exact on a grid; off-grid, a ramp may be anywhere in [0, 1] (times the
    step height ``top``)."""
    out = {d: {"abs": EXACT} for d in exact_dists}
    out.update({d: {"abs": top + EXACT} for d in ("uniform", "near_kink")})
    return per_machine(out, dict(out))


def _table(n: int = 5, m: int = 7) -> dict[tuple[int, int], float]:
    return {(i, j): float((3 * i + 5 * j) % 11 - 4) for i in range(n) for j in range(m)}


def _arithmetic_ops() -> list[Op]:
    rtol = numerics.RECIPROCAL_REL_TOL
    return [
        Op("mul", "SwiGLU: SiLU(a)b + SiLU(-a)(-b), exact in real arithmetic. ReLU: "
           "quarter squares ((a+b)**2 - (a-b)**2)/4, each a 256-segment table over the "
           "declared range (integers: one knot per integer, exact)",
           lambda a, b: a * b, lambda a, b: a * b,
           {"uniform": Dist(uniform(-8, 8, 2), real(-8, 8, 2)),
            "integers": Dist(integers(-8, 8, 2), whole(-8, 8, 2))},
           {"swiglu": "fp32 rounding only (relative 1e-6)",
            "relu": "h**2/16 with h = range(a + b)/256, plus fp32 summation; exact on integers"},
           per_machine({"uniform": {"rel": EXACT}, "integers": {"rel": EXACT}},
                       {"uniform": table_bound(32, 1 / 16, 64), "integers": {"abs": EXACT}})),
        Op("square", "SwiGLU: the exact product x*x. ReLU: a 256-segment table of t**2 over "
           "the declared range (integers: one knot per integer)",
           lambda a: a * a, lambda a: a * a,
           {"uniform": Dist(uniform(-8, 8), real(-8, 8)),
            "integers": Dist(integers(-8, 8), whole(-8, 8))},
           {"swiglu": "fp32 rounding only", "relu": "h**2/4 (h = range/256) + fp32 summation"},
           per_machine({"uniform": {"rel": EXACT}, "integers": {"rel": EXACT}},
                       {"uniform": table_bound(16, 1 / 4, 64), "integers": {"abs": EXACT}})),
        Op("reciprocal", "1/x as a piecewise-linear table: one knot per value for integer "
           "inputs (<= 256 values), else knots placed for rel_tol/2 interpolation error, with "
           "SwiGLU corners sharpened to rel_tol/2",
           lambda a: 1 / a, lambda a: 1 / a,
           {"uniform": Dist(uniform(0.5, 16), real(0.5, 16)),
            "near_low_end": Dist(uniform(0.5, 0.75), real(0.5, 16)),
            "integers": Dist(integers(1, 64), whole(1, 64))},
           {m: f"relative {rtol:g}; exact on integers" for m in MACHINES},
           {m: {"uniform": {"rel": rtol}, "near_low_end": {"rel": rtol},
                "integers": {"rel": EXACT}} for m in MACHINES}),
    ]


def _function_ops() -> list[Op]:
    return [
        Op("piecewise", "tw.piecewise(t**2, x, breakpoints -4..4): the interpolant is the "
           "reference; SwiGLU corners round within |slope change| * 0.2785/128 of each knot",
           lambda a: tw.piecewise(lambda t: t * t, a, PW_XS),
           lambda a: np.interp(a, PW_XS, [t * t for t in PW_XS]),
           {"uniform": Dist(uniform(-5, 5), real(-5, 5)),
            "near_kink": Dist(near(PW_XS, 0.05), real(-5, 5))},
           {"swiglu": f"{7 * HINGE:.3g}: the largest slope change (7, at the end knots) times "
                      "0.2785/128", "relu": "exact"},
           per_machine({d: {"abs": 7 * HINGE + EXACT} for d in ("uniform", "near_kink")},
                       {d: {"abs": EXACT} for d in ("uniform", "near_kink")})),
        Op("piecewise_expr", f"tw.piecewise({PW_EXPR}, x, tol=1e-3): knots chosen by the "
           "compiler (the kink of Abs is a knot); the expression is the reference",
           lambda a: tw.piecewise(PW_EXPR, a, tol=1e-3),
           lambda a: np.sin(a) + np.abs(a) / 2,
           {"uniform": Dist(uniform(-3, 3), real(-3, 3)),
            "near_kink": Dist(near([0.0], 0.05), real(-3, 3))},
           {m: "tol = 1e-3 (half interpolation, half SwiGLU corners)" for m in MACHINES},
           both({"abs": 1e-3 + EXACT}, ("uniform", "near_kink"))),
        Op("relu", "one hinge", torch.relu, lambda a: np.maximum(a, 0), _kinked(-4, 4, [0.0]),
           {"swiglu": f"{HINGE:.3g} near 0, exact on integers", "relu": "exact"}, hinged(1)),
        Op("abs", "-x + 2 relu(x): one hinge (SwiGLU: x tanh(128 x / 2))", torch.abs, np.abs,
           _kinked(-4, 4, [0.0]),
           {"swiglu": f"{2 * HINGE:.3g} near 0, exact on integers", "relu": "exact"},
           hinged(2)),
        Op("maximum", "b + relu(a - b)", torch.maximum, np.maximum, _kinked2(-4, 4),
           {"swiglu": f"{HINGE:.3g} where a ~ b, exact on integers", "relu": "exact"},
           hinged(1)),
        Op("minimum", "b - relu(b - a)", torch.minimum, np.minimum, _kinked2(-4, 4),
           {"swiglu": f"{HINGE:.3g} where a ~ b, exact on integers", "relu": "exact"},
           hinged(1)),
        Op("clamp", "clamp(x, -1, 2) = -1 + relu(x + 1) - relu(x - 2)",
           lambda a: torch.clamp(a, -1, 2), lambda a: np.clip(a, -1, 2),
           _kinked(-4, 4, [-1.0, 2.0]),
           {"swiglu": f"{HINGE:.3g} near -1 and 2, exact on integers", "relu": "exact"},
           hinged(1)),
    ]


def _step_ops() -> list[Op]:
    ramp = f"exact on integers (grids) and outside the {RAMP_WIDTH}-wide ramp of each step"
    return [
        Op("compare", "x > 0.5: a two-hinge ramp, on a grid between two lattice points "
           f"(exact), else over [t, t + {RAMP_WIDTH}]",
           lambda a: (a > 0.5).float(), lambda a: (a > 0.5).astype(np.float64),
           _kinked(-4, 4, [0.5], width=2 * RAMP_WIDTH), {m: ramp for m in MACHINES},
           ramped(1, ["integers"])),
        Op("compare_streams", "a > b: the ramp on a - b", lambda a, b: (a > b).float(),
           lambda a, b: (a > b).astype(np.float64), _kinked2(-4, 4),
           {m: ramp for m in MACHINES}, ramped(1, ["integers"])),
        _rounding_op("floor", torch.floor, np.floor),
        _rounding_op("ceil", torch.ceil, np.ceil),
        _rounding_op("round", torch.round, np.round),
        Op("mod", "x - 3 floor(x / 3)", lambda a: a % 3, lambda a: np.mod(a, 3),
           {"uniform": Dist(uniform(-8, 8), real(-8, 8)),
            "integers": Dist(integers(-300, 300), whole(-300, 300)),
            "near_kink": Dist(near([-6, -3, 0, 3, 6], 2 * RAMP_WIDTH), real(-8, 8))},
           {m: ramp for m in MACHINES}, ramped(3, ["integers"])),
        Op("sign", "[x >= 0] + [x > 0] - 1", torch.sign, np.sign,
           {"integers": Dist(integers(-3, 3), whole(-3, 3)),
            "near_kink": Dist(near([0.0], 2 * RAMP_WIDTH), real(-1, 1))},
           {m: ramp for m in MACHINES}, ramped(1, ["integers"])),
        Op("select", "torch.where(a > 0, a, b): SwiGLU SiLU(+-128) gates (no range needed), "
           "ReLU offset gates sized from the ranges",
           lambda a, b: torch.where(a > 0, a, b), lambda a, b: np.where(a > 0, a, b),
           {"uniform": Dist(uniform(-4, 4, 2), real(-4, 4, 2)),
            "integers": Dist(integers(-4, 4, 2), whole(-4, 4, 2))},
           {m: f"exact where the condition is (|a| > {RAMP_WIDTH}); a fractional condition "
            "mixes the branches" for m in MACHINES},
           per_machine({"integers": {"abs": EXACT}}, {"integers": {"abs": EXACT}})),
    ]


def _table_ops() -> list[Op]:
    exact = {m: "exact" for m in MACHINES}
    return [
        Op("logic", "(a > 0) & (b > 0) | ~(a > 2) ^ (b > 1): hinges on 0/1 counts",
           lambda a, b: ((a > 0) & (b > 0) | ~(a > 2) ^ (b > 1)).float(),
           lambda a, b: (((a > 0) & (b > 0)) | (~(a > 2) ^ (b > 1))).astype(np.float64),
           {"integers": Dist(integers(-3, 3, 2), whole(-3, 3, 2))}, exact,
           both({"abs": EXACT}, ["integers"])),
        Op("equals", "tw.equals([a, b], [1, -2]): one hinge on the summed mismatch",
           lambda a, b: tw.equals(torch.cat([a, b], -1), [1, -2]),
           lambda a, b: ((a == 1) & (b == -2)).astype(np.float64),
           {"integers": Dist(integers(-3, 3, 2), whole(-3, 3, 2))}, exact,
           both({"abs": EXACT}, ["integers"])),
        Op("lookup2", "tw.lookup2 on a 5 x 7 table: one staircase on a*7 + b",
           lambda a, b: tw.lookup2(a, b, _table()),
           lambda a, b: np.array([_table()[(int(i), int(j))] for i, j in zip(a, b, strict=True)]),
           {"integers": Dist(_pair(0, 4, 0, 6), (Claim(0, 4, True), Claim(0, 6, True)))},
           exact, both({"abs": EXACT}, ["integers"])),
        Op("digits", "tw.digits_to_number(tw.number_to_digits(v, 5)): floors of v/10**k "
           "(two-stage staircases where one stage would leave fp32's exact range)",
           lambda a: tw.digits_to_number(tw.number_to_digits(a, 5)),
           lambda a: a.copy(), {"integers": Dist(integers(0, 99999), whole(0, 99999))}, exact,
           both({"abs": EXACT}, ["integers"])),
    ]


def _ops() -> list[Op]:
    return _arithmetic_ops() + _function_ops() + _step_ops() + _table_ops()


def _pair(lo_a: int, hi_a: int, lo_b: int, hi_b: int) -> Sampler:
    return lambda g, n: [g.integers(lo_a, hi_a + 1, n).astype(np.float64),
                         g.integers(lo_b, hi_b + 1, n).astype(np.float64)]


def _kinked(lo: float, hi: float, kinks: Sequence[float], width: float = 0.2
            ) -> dict[str, Dist]:
    return {"uniform": Dist(uniform(lo, hi), real(lo, hi)),
            "integers": Dist(integers(int(lo), int(hi)), whole(lo, hi)),
            "near_kink": Dist(near(kinks, width), real(lo - 1, hi + 1))}


def _kinked2(lo: float, hi: float) -> dict[str, Dist]:
    return {"uniform": Dist(uniform(lo, hi, 2), real(lo, hi, 2)),
            "integers": Dist(integers(int(lo), int(hi), 2), whole(lo, hi, 2)),
            "near_kink": Dist(near([0.0, 1.5, -2.5], 2 * RAMP_WIDTH, 2), real(lo, hi, 2))}


def _rounding_op(name: str, fn: Callable[[T], T], ref: Callable[[np.ndarray], np.ndarray]
                 ) -> Op:
    return Op(name, f"{name}(x): a staircase of ramps; on a grid (v/10, v integer) each ramp "
              f"sits between lattice points (exact), off-grid it is {RAMP_WIDTH} wide",
              fn, ref,
              {"uniform": Dist(uniform(-8, 8), real(-8, 8)),
               "grid": Dist(integers(-800, 800), whole(-800, 800),
                            lambda a: fn(a / 10), lambda a: ref(a / 10)),
               "near_kink": Dist(near([k + (0.5 if name == "round" else 0.0)
                                       for k in range(-7, 8)], 2 * RAMP_WIDTH),
                                 real(-8, 8))},
              {m: f"exact on a grid; off-grid, wrong only within {RAMP_WIDTH} of a step"
               for m in MACHINES}, ramped(1, ["grid"]))


def metrics(got: np.ndarray, want: np.ndarray) -> dict[str, float]:
    err = np.abs(got - want)
    rel = err / np.maximum(np.abs(want), REL_FLOOR)
    return {"max_abs": float(err.max()), "mean_abs": float(err.mean()),
            "p99_abs": float(np.quantile(err, 0.99)), "max_rel": float(rel.max()),
            "mean_rel": float(rel.mean()), "p99_rel": float(np.quantile(rel, 0.99))}


def _probe(op: Op, dist_name: str, samples: int) -> tuple[Probe, list[np.ndarray]]:
    dist = op.dists[dist_name]
    gen = np.random.default_rng([SEED, sum(map(ord, op.name)), sum(map(ord, dist_name))])
    inputs = [col.tolist() for col in dist.sample(gen, samples)]
    xs = [fp32(col).numpy() for col in inputs]  # what the program sees
    return Probe(dist.program or op.program, inputs, list(dist.claims)), xs


def measure_group(ops: Sequence[Op], dist_name: str, machine: MachineKind, samples: int
                  ) -> dict[str, dict[str, float]]:
    """Every op that has this distribution, compiled together into one program."""
    probes, inputs = zip(*[_probe(op, dist_name, samples) for op in ops], strict=True)
    results = run_probes(list(probes), machine)
    out = {}
    for op, xs, got in zip(ops, inputs, results, strict=True):
        reference = op.dists[dist_name].reference or op.reference
        want = np.asarray(reference(*xs), dtype=np.float64)
        out[op.name] = metrics(got.numpy(), want)
    return out


def measure(samples: int = SAMPLES, only: Sequence[str] = ()) -> dict[str, Any]:
    torch.set_num_threads(2)
    chosen = [op for op in _ops() if not only or op.name in only]
    measured: dict[str, dict[str, dict[str, Any]]] = {op.name: {m: {} for m in MACHINES}
                                                      for op in chosen}
    dist_names = sorted({d for op in chosen for d in op.dists})
    for machine in MACHINES:
        for dist_name in dist_names:
            group = [op for op in chosen if dist_name in op.dists]
            for name, m in measure_group(group, dist_name, machine, samples).items():
                measured[name][machine][dist_name] = m
    ops = {op.name: {"construction": op.construction, "bound_notes": op.notes,
                     "bounds": {m: {d: b for d, b in op.bounds.get(m, {}).items()
                                    if d in op.dists} for m in MACHINES},
                     "distributions": {d: _describe(op.dists[d]) for d in op.dists},
                     "measured": {m: {d: measured[op.name][m][d] for d in op.dists}
                                  for m in MACHINES}}
           for op in chosen}
    return {"generated_by": "scripts/measure_noise.py", "seed": SEED, "samples": samples,
            "relative_error": f"|err| / max(|exact|, {REL_FLOOR:g})",
            "drift_tolerance": {"rtol": RTOL, "atol": ATOL}, "ops": ops}


def _describe(d: Dist) -> str:
    claims = ", ".join(f"[{c.lo:g}, {c.hi:g}]{' integral' if c.integral else ''}"
                       for c in d.claims)
    return f"declared {claims}" + (" (op applied to v/10)" if d.program else "")


def drift(new: dict[str, Any], old: dict[str, Any]) -> list[str]:
    """Every measured number that differs beyond the tolerance, or is missing."""
    problems = []
    for name, entry in old["ops"].items():
        got = new["ops"].get(name)
        if got is None:
            problems.append(f"{name}: not measured")
            continue
        for machine, dists in entry["measured"].items():
            for dist, values in dists.items():
                fresh = got["measured"].get(machine, {}).get(dist)
                if fresh is None:
                    problems.append(f"{name}/{machine}/{dist}: not measured")
                    continue
                for key in METRICS:
                    a, b = values[key], fresh[key]
                    if abs(a - b) > ATOL + RTOL * abs(a):
                        problems.append(f"{name}/{machine}/{dist}/{key}: committed {a:.4g}, "
                                        f"measured {b:.4g}")
    extra = set(new["ops"]) - set(old["ops"])
    problems += [f"{name}: measured but not committed" for name in sorted(extra)]
    return problems


def render_markdown(data: dict[str, Any]) -> str:
    lines = [
        "# Numerical noise of the op constructions",
        "",
        "Generated by `scripts/measure_noise.py` from `docs/op_noise.json`; do not edit by "
        "hand. Every number is measured on the compiled weights through the in-process "
        "runtime (fp32), against exact float64 math on the same fp32 inputs, "
        f"{data['samples']} samples per distribution (seed {data['seed']}). Relative error is "
        f"{data['relative_error']}. `tests/test_ops_noise_drift.py` fails when the code and "
        "these numbers drift apart (tolerance "
        f"{data['drift_tolerance']['rtol']:g} relative + {data['drift_tolerance']['atol']:g}).",
        "",
        "Distributions: `uniform` over the declared range (real-valued), `integers` over it "
        "(declared integral), `grid` = the op applied to v/10 for integer v (a lattice of "
        "step 0.1), `near_kink` = within a small distance of the op's kinks or thresholds "
        "(where hinges round and ramps sit).",
        "",
        "Errors do not compose into chain-level guarantees; a ramp's error inside its width is "
        "a wrong answer, not noise, which is why exact-on-grid constructions matter.",
        "",
    ]
    for name, entry in data["ops"].items():
        lines += [f"## {name}", "", entry["construction"] + ".", ""]
        for machine, note in entry["bound_notes"].items():
            lines.append(f"- bound ({machine}): {note}")
        lines += ["", "| machine | distribution | max abs | mean abs | p99 abs | max rel | "
                  "p99 rel | bound |", "|---|---|---|---|---|---|---|---|"]
        for machine, dists in entry["measured"].items():
            for dist, m in dists.items():
                bound = entry["bounds"].get(machine, {}).get(dist, {})
                text = ", ".join(f"{k} {_fmt(v)}" for k, v in bound.items()) or "-"
                lines.append(f"| {machine} | {dist} | {_fmt(m['max_abs'])} | "
                             f"{_fmt(m['mean_abs'])} | {_fmt(m['p99_abs'])} | "
                             f"{_fmt(m['max_rel'])} | {_fmt(m['p99_rel'])} | {text} |")
        lines += ["", "Declared ranges: " + "; ".join(
            f"{d}: {desc}" for d, desc in entry["distributions"].items()), ""]
    return "\n".join(lines)


def over_bound(data: dict[str, Any]) -> list[str]:
    """Every measurement above the bound its construction promises."""
    problems = []
    for name, entry in data["ops"].items():
        for machine, dists in entry["bounds"].items():
            for dist, bound in dists.items():
                m = entry["measured"][machine][dist]
                for key, limit in bound.items():
                    if m[f"max_{key}"] > limit:
                        problems.append(f"{name}/{machine}/{dist}: max {key} error "
                                        f"{m[f'max_{key}']:.3g} exceeds its bound {limit:.3g}")
    return problems


def _fmt(v: float) -> str:
    return "0" if v == 0 else f"{v:.2e}" if v < 1e-2 or v >= 1e3 else f"{v:.4f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true",
                        help="compare with the committed JSON instead of writing")
    parser.add_argument("--only", nargs="*", default=(), help="measure only these ops")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    data = measure(only=args.only)
    seconds = time.perf_counter() - start
    if args.check:
        problems = drift(data, json.loads(JSON_PATH.read_text())) + over_bound(data)
        for p in problems:
            print(p)
        print(f"{'DRIFT' if problems else 'ok'} ({seconds:.1f}s)")
        return 1 if problems else 0
    for p in over_bound(data):
        print("warning:", p)
    JSON_PATH.write_text(json.dumps(data, indent=1) + "\n")
    MD_PATH.write_text(render_markdown(data) + "\n")
    print(f"wrote {JSON_PATH.relative_to(ROOT)} and {MD_PATH.relative_to(ROOT)} "
          f"({len(data['ops'])} ops, {seconds:.1f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
