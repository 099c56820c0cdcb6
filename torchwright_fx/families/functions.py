"""Functions of one value: ``tw.piecewise`` (piecewise-linear) and ``tw.reciprocal``. Each is
an eager reference (exact math on tensors) plus a lowering (docs/design-notes.md §6-§7); the
constructions live in ``ops/ffn/``, the errors they carry are measured in
``docs/numerical_noise.md``.

- ``piecewise(fn, v, breakpoints)``: the linear interpolant of ``fn`` through the breakpoints
  (constant beyond the ends, like ``numpy.interp``); this interpolant *is* the reference, and
  the compiled value matches it at the breakpoints (SwiGLU: up to corner rounding nearby).
  ``fn`` may be a callable or a sympy expression; for an expression the interpolation error
  against it is bounded and recorded on the fx node (``NodeRecord.error_bound``).
- ``piecewise(expr, v, tol=...)`` without breakpoints: the reference is the sympy expression
  itself; the compiler places knots over v's declared range (kinks of Abs/Max/Min/Piecewise
  are always knots) so that the compiled value is within ``tol`` of it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

import numpy as np
import sympy
import torch

from torchwright_fx.analysis.facts import FactsCtx, NodeFacts, as_facts
from torchwright_fx.base import numerics
from torchwright_fx.base.machines import MACHINES
from torchwright_fx.base.numerics import SILU_SCALE
from torchwright_fx.capture.registry import facts, intrinsic
from torchwright_fx.families import arithmetic
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import Interval
from torchwright_fx.lower import rules
from torchwright_fx.lower.context import LowerCtx
from torchwright_fx.lower.stream import Stream, to_stream
from torchwright_fx.ops import ffn
from torchwright_fx.ops.ffn import Pwl

# -- piecewise ----------------------------------------------------------------------------------
Fn: TypeAlias = "Callable[[Any], Any] | sympy.Expr | tuple[sympy.Expr, sympy.Symbol]"


def _sympy_of(fn: Any, var: sympy.Symbol | None) -> tuple[sympy.Expr, sympy.Symbol] | None:
    """(expr, symbol) if ``fn`` is a sympy expression (or an (expr, symbol) pair)."""
    if isinstance(fn, tuple) and len(fn) == 2 and isinstance(fn[0], sympy.Basic):
        return fn[0], fn[1]
    if not isinstance(fn, sympy.Expr):
        return None
    if var is None:
        free = sorted(fn.free_symbols, key=str)
        if len(free) != 1:
            raise ValueError(f"tw.piecewise: {fn} has free symbols {free}; pass var=")
        var = free[0]
    return fn, var


def _numeric(expr: sympy.Expr, var: sympy.Symbol) -> Callable[[np.ndarray], np.ndarray]:
    """``expr`` as a float64 numpy function; poles give inf/nan quietly (sqrt'' at 0)."""
    f = sympy.lambdify(var, expr, modules="numpy")

    def call(x: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            y = np.asarray(f(np.asarray(x, dtype=np.float64)), dtype=np.float64)
        return y * np.ones_like(x, dtype=np.float64)

    return call


def _unimodal_max(g: Callable[[np.ndarray], np.ndarray], a: float, b: float) -> float:
    """max of a unimodal g >= 0 on [a, b] (golden-section search to float precision)."""
    ratio = (math.sqrt(5) - 1) / 2
    lo, hi = a, b
    for _ in range(200):
        m1, m2 = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
        if g(np.array([m1]))[0] < g(np.array([m2]))[0]:
            lo = m1
        else:
            hi = m2
        if hi - lo <= 1e-15 * max(1.0, abs(a), abs(b)):
            break
    return float(np.max(g(np.array([a, lo, (lo + hi) / 2, hi, b]))))


def _values(fn: Any, xs: Sequence[float], var: sympy.Symbol | None) -> list[float]:
    sym = _sympy_of(fn, var)
    if sym is not None:
        return [float(v) for v in _numeric(*sym)(np.array(xs))]
    return [float(fn(torch.tensor(x, dtype=torch.float64))) for x in xs]


def piecewise(fn: Fn, v: torch.Tensor, breakpoints: Sequence[float] | None = None, *,
              var: sympy.Symbol | None = None, tol: float | None = None,
              input_scale: float = 1.0) -> torch.Tensor:
    """A piecewise-linear function of each value of ``v``.

    With ``breakpoints``: the interpolant of ``fn`` (a callable or a sympy expression) through
    them, constant beyond the ends. On the SwiGLU machine consecutive breakpoints must be at
    least 34 / (128 * input_scale) apart (their rounded corners would overlap); a larger
    ``input_scale`` (a power of two) sharpens the corners. Without ``breakpoints``: ``fn`` must
    be a sympy expression; knots are chosen over v's declared range (tw.claim) so that the
    compiled value is within ``tol`` (default 1e-3) of the expression.
    """
    return piecewise_via(fn, v, breakpoints, var, tol, input_scale, piecewise_table,
                         piecewise_expr)


def piecewise_via(fn: Fn, v: torch.Tensor, breakpoints: Sequence[float] | None,
                  var: sympy.Symbol | None, tol: float | None, input_scale: float,
                  table_op: Callable[..., torch.Tensor], expr_op: Callable[..., torch.Tensor]
                  ) -> torch.Tensor:
    """``piecewise`` through the given intrinsics (the op libraries pass machine-tagged ones):
    the callable or expression is evaluated here, at trace time, so the fx graph holds data."""
    if breakpoints is not None:
        xs = tuple(float(b) for b in breakpoints)
        if len(xs) < 1 or any(b <= a for a, b in itertools.pairwise(xs)):
            raise ValueError(f"tw.piecewise: breakpoints must increase strictly, got {xs}")
        ys = tuple(_values(fn, xs, var))
        sym = _sympy_of(fn, var)
        bound = interpolation_error(sym[0], xs, sym[1]) if sym is not None else None
        return table_op(v, xs, ys, input_scale=input_scale, bound=bound)
    sym = _sympy_of(fn, var)
    if sym is None:
        raise ValueError("tw.piecewise needs breakpoints unless fn is a sympy expression")
    return expr_op(v, sympy.srepr(sym[0]), sympy.srepr(sym[1]),
                   numerics.PIECEWISE_TOL if tol is None else float(tol))


def _interp(v: torch.Tensor, xs: Sequence[float], ys: Sequence[float]) -> torch.Tensor:
    out = np.interp(v.detach().double().numpy(), np.array(xs), np.array(ys))
    return torch.from_numpy(out).to(v.dtype)


def _knot_spacing_error(xs: Sequence[float], input_scale: float) -> str | None:
    need = numerics.KNOT_SPACING / (SILU_SCALE * input_scale)
    for a, b in itertools.pairwise(xs):
        if b - a < need:
            return (f"breakpoints {a:g} and {b:g} are {b - a:.3g} apart; on the SwiGLU machine "
                    f"they must be >= {need:.3g} = 34/(128*input_scale) apart, or their rounded "
                    "corners overlap (input_scale="
                    f"{2 ** math.ceil(math.log2(input_scale * need / (b - a)))} and up spaces "
                    "them)")
    return None


def _table_range(f: Pwl, rng: Interval, ys: Sequence[float], slack: float) -> Interval:
    if rng.finite:
        pts = np.array([rng.lo, rng.hi, *[h.knot for h in f.hinges if rng.lo < h.knot < rng.hi]])
        vals = f(pts)
        lo, hi = float(vals.min()), float(vals.max())
    else:
        lo, hi = min(ys), max(ys)
    return Interval(lo - slack, hi + slack)


def lower_piecewise_table(ctx: LowerCtx, v: Stream, xs: Sequence[float], ys: Sequence[float],
                           input_scale: float = 1.0, bound: float | None = None) -> Stream:
    if ctx.prog.machine.smooth_hinge:
        problem = _knot_spacing_error(xs, input_scale)
        if problem:
            raise ctx.error(problem, "space them out, or pass that input_scale (a power of "
                                     "two)")
    f = Pwl.through(xs, ys, sharpness=input_scale, flat=True)
    f.anchor = xs[int(np.argmin(np.abs(ys)))]
    slack = ffn.hinge_error(f, ctx.prog.machine)
    if bound is not None:
        ctx.error_bound = bound + slack
    x = to_stream(v, ctx.out_width)
    ranges = [_on_points(ctx, f, c, r, _table_range(f, r, ys, slack))
              for c, r in zip(x.cols, x.ranges, strict=True)]
    return rules.pwl_stream(ctx, x.cols, x.ranges, [f] * x.width, ranges)


def _on_points(ctx: LowerCtx, f: Pwl, c: Lin, r: Interval, rng: Interval) -> Interval:
    """The facts of f(x) when x takes few lattice values: the lattice of f at those points
    (the reference interpolates the same table, in float64)."""
    return on_points_of(f, rules.grid(ctx, c, r), r, rng)


def on_points_of(f: Pwl, g: ffn.Grid | None, r: Interval, rng: Interval) -> Interval:
    """``_on_points`` for an input on the lattice ``g`` (None: no lattice)."""
    if g is None or not r.finite or g.count(r) > 4096:
        return rng
    values = [float(v) for v in f(np.array(g.points(r)))]
    if not values:
        return rng
    pts = Interval.of_values(values)  # entries fp32 does not hold: rounded ONCE
    return Interval.of(pts.lo, pts.hi, pts.lattice, rounding=pts.rounding)


@intrinsic(lower_piecewise_table)
def piecewise_table(v: torch.Tensor, xs: Sequence[float], ys: Sequence[float],
                    input_scale: float = 1.0, bound: float | None = None) -> torch.Tensor:
    """The linear interpolant through (xs, ys), constant beyond the ends (``tw.piecewise``
    with breakpoints). ``bound`` is only recorded: the error against a sympy source."""
    return _interp(v, xs, ys)


def lower_piecewise_expr(ctx: LowerCtx, v: Stream, expr: str, var: str, tol: float) -> Stream:
    e, s = sympy.sympify(expr), sympy.sympify(var)
    f_num = _numeric(e, s)
    x = to_stream(v, ctx.out_width)
    fs, ranges = [], []
    with rules.user_errors(ctx):
        for r in x.ranges:
            ffn.need_finite(r, f"tw.piecewise of {e}")
            knots = ffn.auto_knots(f_num, r.lo, r.hi, lambda t: np.full_like(t, tol / 2),
                                   expression_kinks(e, s, r.lo, r.hi, tol))
            f = Pwl.through(knots, list(f_num(np.array(knots))), flat=True)
            f.anchor = knots[int(np.argmin(np.abs(f_num(np.array(knots)))))]
            sharp = ffn.sharpness_for(knots, f, lambda _k: tol / 2, ctx.prog.machine,
                                      f"tw.piecewise of {e}")
            fs.append(ffn.with_sharpness(f, sharp))
            ranges.append(_table_range(fs[-1], r, [], tol))
    ctx.error_bound = tol
    return rules.pwl_stream(ctx, x.cols, x.ranges, fs, ranges)


@intrinsic(lower_piecewise_expr)
def piecewise_expr(v: torch.Tensor, expr: str, var: str, tol: float) -> torch.Tensor:
    """The sympy expression (``srepr`` text) of ``var`` at each value: ``tw.piecewise`` with
    knots chosen by the compiler to within ``tol``."""
    f = _numeric(sympy.sympify(expr), sympy.sympify(var))
    return torch.from_numpy(f(v.detach().double().numpy())).to(v.dtype)


def _kink_arguments(expr: sympy.Expr) -> list[sympy.Expr]:
    """Expressions whose zeros are the kinks of ``expr``."""
    out: list[sympy.Expr] = []
    for node in sympy.preorder_traversal(expr):
        if isinstance(node, (sympy.Abs, sympy.sign, sympy.Heaviside)):
            out.append(node.args[0])
        elif isinstance(node, (sympy.Max, sympy.Min)):
            out += [a - b for a, b in itertools.combinations(node.args, 2)]
        elif isinstance(node, sympy.Piecewise):
            for _, cond in node.args:
                out += [rel.lhs - rel.rhs for rel in cond.atoms(sympy.core.relational.Relational)]
        elif isinstance(node, (sympy.floor, sympy.ceiling, sympy.frac)):
            raise ffn.RangeError(f"{node} is discontinuous: a piecewise-linear function cannot "
                                 "follow it; use torch.floor / round on the stream instead")
    return out


def _roots(g: Callable[[np.ndarray], np.ndarray], lo: float, hi: float) -> list[float]:
    """Zeros of g in [lo, hi]: sign changes on a fine grid, refined by bisection."""
    xs = np.linspace(lo, hi, 4097)
    ys = g(xs)
    roots = [float(x) for x, y in zip(xs, ys, strict=True) if y == 0]
    for i in np.nonzero(np.sign(ys[:-1]) * np.sign(ys[1:]) < 0)[0]:
        a, b = float(xs[i]), float(xs[i + 1])
        for _ in range(80):
            m = (a + b) / 2
            if np.sign(g(np.array([m]))[0]) == np.sign(g(np.array([a]))[0]):
                a = m
            else:
                b = m
        roots.append((a + b) / 2)
    return roots


def expression_kinks(expr: sympy.Expr, var: sympy.Symbol, lo: float, hi: float,
                     tol: float) -> list[float]:
    """Kinks of ``expr`` in (lo, hi); raises where it jumps by more than ``tol``."""
    f = _numeric(expr, var)
    kinks = sorted({k for arg in _kink_arguments(expr)
                    for k in _roots(_numeric(arg, var), lo, hi) if lo < k < hi})
    eps = 1e-9 * max(1.0, hi - lo)
    for k in kinks:
        jump = abs(float(f(np.array([k + eps]))[0] - f(np.array([k - eps]))[0]))
        if jump > tol:
            raise ffn.RangeError(f"{expr} jumps by {jump:.3g} at {var} = {k:.6g}: a "
                                 "piecewise-linear function cannot follow a discontinuity")
    return kinks


def interpolation_error(expr: sympy.Expr, breakpoints: Sequence[float],
                        var: sympy.Symbol | None = None) -> float:
    """A bound on |interpolant - expr| between the first and last breakpoint: h**2/8 * max|f''|
    on smooth segments (f'' sampled); where f'' is unbounded but keeps its sign (sqrt at 0),
    the error is unimodal and its maximum is found exactly; a dense sample where a kink falls
    inside a segment."""
    sym = _sympy_of(expr, var)
    assert sym is not None
    e, s = sym
    f, f2 = _numeric(e, s), _numeric(sympy.diff(e, s, 2), s)
    xs = list(breakpoints)
    kinks = expression_kinks(e, s, xs[0], xs[-1], math.inf) if len(xs) > 1 else []
    worst = 0.0
    for a, b in itertools.pairwise(xs):
        pts = np.linspace(a, b, 65)
        fa, fb = f(np.array([a, b]))
        sampled = float(np.max(np.abs(fa + (fb - fa) * (pts - a) / (b - a) - f(pts))))
        if any(a < k < b for k in kinks):
            worst = max(worst, sampled)
            continue
        curvature = f2(pts)
        if np.all(np.isfinite(curvature)):
            worst = max(worst, sampled, (b - a) ** 2 / 8 * float(np.max(np.abs(curvature))))
            continue
        inner = curvature[1:-1]
        if np.all(np.isfinite(inner)) and (np.all(inner >= 0) or np.all(inner <= 0)):
            def gap(t: np.ndarray, a: float = a, fa: float = fa, fb: float = fb,
                    b: float = b) -> np.ndarray:
                return np.abs(fa + (fb - fa) * (t - a) / (b - a) - f(t))

            worst = max(worst, sampled, _unimodal_max(gap, a, b))
        else:
            worst = math.inf
    return worst


# -- reciprocal -----------------------------------------------------------------------------------
def _lower_reciprocal(ctx: LowerCtx, v: Stream, rel_tol: float = numerics.RECIPROCAL_REL_TOL
                      ) -> Stream:
    return arithmetic.reciprocal(ctx, to_stream(v, ctx.out_width), rel_tol)


@intrinsic(_lower_reciprocal)
def reciprocal(v: torch.Tensor, rel_tol: float = numerics.RECIPROCAL_REL_TOL) -> torch.Tensor:
    """1/v over v's declared range (one sign): exact on integer-valued streams with at most
    256 values, else within ``rel_tol`` relative. ``1/v`` and ``torch.reciprocal`` use the
    default tolerance."""
    return 1.0 / v


__all__ = ["interpolation_error", "piecewise", "reciprocal"]


# -- facts ---------------------------------------------------------------------------------------
@facts(piecewise_table)
def _piecewise_table_facts(ctx: FactsCtx, v: NodeFacts, xs: Sequence[float],
                           ys: Sequence[float], input_scale: float = 1.0,
                           bound: float | None = None) -> NodeFacts:
    """The table's values over v's range (its lattice where v takes few values), widened by
    the SwiGLU corners' error as lowering's facts are on that machine."""
    f = Pwl.through(xs, ys, sharpness=input_scale, flat=True)
    slack = max(ffn.hinge_error(f, m) for m in MACHINES.values())
    x = as_facts(v, ctx.out_width)
    return NodeFacts([on_points_of(f, ctx.grid(x.form(i), r), r,
                                   _table_range(f, r, ys, slack))
                      for i, r in enumerate(x.ranges)])


@facts(piecewise_expr)
def _piecewise_expr_facts(ctx: FactsCtx, v: NodeFacts, expr: str, var: str,
                          tol: float) -> NodeFacts:
    e, s = sympy.sympify(expr), sympy.sympify(var)
    f_num = _numeric(e, s)
    ranges = []
    for r in as_facts(v, ctx.out_width).ranges:
        ffn.need_finite(r, f"tw.piecewise of {e}")
        knots = ffn.auto_knots(f_num, r.lo, r.hi, lambda t: np.full_like(t, tol / 2),
                               expression_kinks(e, s, r.lo, r.hi, tol))
        f = Pwl.through(knots, list(f_num(np.array(knots))), flat=True)
        ranges.append(_table_range(f, r, [], tol))
    return NodeFacts(ranges)


@facts(reciprocal)
def _reciprocal_facts(ctx: FactsCtx, v: NodeFacts,
                      rel_tol: float = numerics.RECIPROCAL_REL_TOL) -> NodeFacts:
    return arithmetic.reciprocal_facts(ctx, as_facts(v, ctx.out_width), rel_tol)
