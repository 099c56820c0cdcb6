"""Numeric intrinsics: piecewise-linear functions of one value, reciprocal, 2-D lookups, digit
conversions and vector equality. Each is an eager reference (exact math on tensors) plus a
lowering (DESIGN §2.2, §6); the constructions live in ``ops/ffn/``, the errors they carry
are measured in ``docs/numerical_noise.md``.

- ``piecewise(fn, v, breakpoints)``: the linear interpolant of ``fn`` through the breakpoints
  (constant beyond the ends, like ``numpy.interp``); this interpolant *is* the reference, and
  the compiled value matches it at the breakpoints (SwiGLU: up to corner rounding nearby).
  ``fn`` may be a callable or a sympy expression; for an expression the interpolation error
  against it is bounded and recorded on the fx node (``meta["tw_error_bound"]``).
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

from torchwright_fx.intrinsics import current_vocab, intrinsic
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import BOOL, Interval, read_float
from torchwright_fx.lower import table
from torchwright_fx.lower.context import LowerCtx
from torchwright_fx.lower.stream import Stream, const_vector, to_stream
from torchwright_fx.ops import ffn, numerics
from torchwright_fx.ops.ffn import Pwl
from torchwright_fx.ops.numerics import SILU_SCALE
from torchwright_fx.ops.ties import refuse_ties, refuse_unheld_constant

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
                    "corners overlap")
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
    if ctx.prog.machine == "swiglu":
        problem = _knot_spacing_error(xs, input_scale)
        if problem:
            raise ctx.error(problem, "space them out, or pass input_scale=2**k (k >= 1)")
    f = Pwl.through(xs, ys, sharpness=input_scale, flat=True)
    f.anchor = xs[int(np.argmin(np.abs(ys)))]
    slack = ffn.hinge_error(f, ctx.prog.machine)
    if bound is not None:
        ctx.node.meta["tw_error_bound"] = bound + slack
    x = to_stream(v, ctx.out_width)
    ranges = [_on_points(ctx, f, c, r, _table_range(f, r, ys, slack))
              for c, r in zip(x.cols, x.ranges, strict=True)]
    return table.pwl_stream(ctx, x.cols, x.ranges, [f] * x.width, ranges)


def _on_points(ctx: LowerCtx, f: Pwl, c: Lin, r: Interval, rng: Interval) -> Interval:
    """The facts of f(x) when x takes few lattice values: the lattice of f at those points
    (the reference interpolates the same table, in float64)."""
    g = table.grid(ctx, c, r)
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
    with table.user_errors(ctx):
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
    ctx.node.meta["tw_error_bound"] = tol
    return table.pwl_stream(ctx, x.cols, x.ranges, fs, ranges)


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
    return table.reciprocal(ctx, to_stream(v, ctx.out_width), rel_tol)


@intrinsic(_lower_reciprocal)
def reciprocal(v: torch.Tensor, rel_tol: float = numerics.RECIPROCAL_REL_TOL) -> torch.Tensor:
    """1/v over v's declared range (one sign): exact on integer-valued streams with at most
    256 values, else within ``rel_tol`` relative. ``1/v`` and ``torch.reciprocal`` use the
    default tolerance."""
    return 1.0 / v


# -- 2-D lookup -----------------------------------------------------------------------------------
def _entry(value: Any) -> float:
    return float(current_vocab()[value]) if isinstance(value, str) else float(value)


def _table2(table: Any) -> dict[tuple[int, int], float]:
    if isinstance(table, dict):
        return {(int(k[0]), int(k[1])): _entry(val) for k, val in table.items()}
    rows = table.tolist() if isinstance(table, torch.Tensor) else table
    return {(i, j): _entry(val) for i, row in enumerate(rows) for j, val in enumerate(row)}


def _lower_lookup2(ctx: LowerCtx, a: Stream, b: Stream, table2: Any,
                   default: str | float = 0.0) -> Stream:
    if a.width != 1 or b.width != 1:
        raise ctx.error("lookup2 keys must be streams of width 1")
    ra, rb = a.ranges[0], b.ranges[0]
    for name, r in (("first", ra), ("second", rb)):
        if not (r.integral and r.finite):
            raise ctx.error(f"lookup2's {name} key needs a finite integer range, got "
                            f"[{r.lo}, {r.hi}]", "declare it with tw.claim(v, lo, hi, "
                            "integral=True)")
    lo_a, lo_b = math.ceil(ra.lo), math.ceil(rb.lo)
    n_a, n_b = math.floor(ra.hi) - lo_a + 1, math.floor(rb.hi) - lo_b + 1
    entries = _table2(table2)
    fallback = _entry(default)
    # The two keys as one integer key: exact (integer arithmetic below 2**24).
    key = (a.cols[0] - lo_a) * float(n_b) + (b.cols[0] - lo_b)
    flat = {i * n_b + j: entries.get((lo_a + i, lo_b + j), fallback)
            for i in range(n_a) for j in range(n_b)}
    key_rng = Interval(0, n_a * n_b - 1, True)
    if n_a * n_b > 4096:
        raise ctx.error(f"lookup2 over {n_a} x {n_b} keys is too large (over 4096 entries)",
                        "narrow the key ranges with tw.claim")
    f = ffn.lookup_pwl(0, n_a * n_b - 1, flat, fallback)
    values = list(flat.values())
    rng = Interval(min(values), max(values), all(float(v).is_integer() for v in values))
    return table.pwl_stream(ctx, [key], [key_rng], [f], [rng])


@intrinsic(_lower_lookup2)
def lookup2(a: torch.Tensor, b: torch.Tensor, table: Any, default: str | float = 0.0
            ) -> torch.Tensor:
    """``table[(a, b)]`` at each position for two small integer streams, ``default`` for
    missing keys. ``table`` is a dict ``{(i, j): value}`` or a 2-D list/tensor indexed from 0;
    values may be numbers or token names (their codes)."""
    entries = _table2(table)
    fallback = _entry(default)
    ka = a.reshape(a.shape[0], -1)[:, 0].round().long().tolist()
    kb = b.reshape(b.shape[0], -1)[:, 0].round().long().tolist()
    return torch.tensor([entries.get((i, j), fallback) for i, j in zip(ka, kb, strict=True)]
                        )[:, None]


# -- digits ---------------------------------------------------------------------------------------
def _digit_columns(digits: Any) -> list[Any]:
    if isinstance(digits, (list, tuple)):
        return list(digits)
    return [digits[:, k] for k in range(digits.shape[-1])]


def _lower_digits_to_number(ctx: LowerCtx, digits: Any, base: int = 10) -> Stream:
    parts: list[Stream] = []
    for d in _digit_columns(digits) if isinstance(digits, (list, tuple)) else [digits]:
        s = to_stream(d, 1) if not isinstance(d, Stream) else d
        parts += [Stream([c], [r]) for c, r in zip(s.cols, s.ranges, strict=True)]
    n = len(parts)
    total, rng = Lin(), Interval.point(0.0)
    for k, p in enumerate(parts):
        weight = float(base ** (n - 1 - k))
        total, rng = total + p.cols[0] * weight, rng + p.ranges[0].scale(weight)
    return Stream([total], [rng])


@intrinsic(_lower_digits_to_number)
def digits_to_number(digits: Any, base: int = 10) -> torch.Tensor:
    """sum_k digits[k] * base**(n-1-k): most significant digit first. ``digits`` is a list of
    ``[seq, 1]`` streams or one ``[seq, n]`` stream. Linear: free."""
    cols = [c.reshape(c.shape[0], -1) for c in _digit_columns(digits)]
    n = len(cols)
    return sum((c * float(base ** (n - 1 - k)) for k, c in enumerate(cols)),
               torch.zeros_like(cols[0]))


def _lower_number_to_digits(ctx: LowerCtx, v: Stream, n_digits: int, base: int = 10) -> Stream:
    if v.width != 1:
        raise ctx.error("number_to_digits takes a stream of width 1")
    r = v.ranges[0]
    with table.user_errors(ctx):
        ffn.need_finite(r, "number_to_digits")
    if r.lo < 0:
        bos = ctx.bos_row(0)
        at_bos = float(bos.reshape(-1)[0]) if bos is not None else 0.0
        if at_bos < 0:
            raise ctx.error(f"number_to_digits needs a non-negative value, and this one is "
                            f"{at_bos:g} at <bos> (position 0; its range is [{r.lo:g}, "
                            f"{r.hi:g}])", "clamp it first, torch.clamp(v, min=0) (a claim "
                            "would fail at <bos>), or give it a default there with "
                            "torch.where(tw.is_token(x, '<bos>'), 0, v)")
        raise ctx.error(f"number_to_digits needs a non-negative range, got [{r.lo:g}, {r.hi:g}]",
                        "clamp it (torch.clamp(v, min=0)) or declare it with "
                        "tw.claim(v, 0, hi, integral=True)")
    wraps = r.hi >= base ** n_digits  # the top digit needs its own modulus
    powers = [float(base ** k) for k in range(n_digits + (1 if wraps else 0))]
    scaled = Stream([v.cols[0].divided(p) for p in powers], [r.divided(p) for p in powers])
    floors = table.rounded(ctx, scaled, "floor")  # f_k = floor(v / base**k)
    digits, ranges = [], []
    for k in range(n_digits):
        nxt = floors.cols[k + 1] if k + 1 < len(powers) else Lin()
        digits.append(floors.cols[k] - nxt * float(base))
        top = k == n_digits - 1 and not wraps
        ranges.append(Interval(0, min(base - 1, math.floor(r.hi / powers[k])) if top
                               else base - 1, True))
    return Stream(digits[::-1], ranges[::-1])


@intrinsic(_lower_number_to_digits)
def number_to_digits(v: torch.Tensor, n_digits: int, base: int = 10) -> torch.Tensor:
    """The ``n_digits`` lowest base-``base`` digits of ``floor(v)`` (v >= 0 over a declared
    range), most significant first: ``[seq, n_digits]``, digit k = floor(v / base**(n-1-k))
    mod base. Compiled by floor staircases: exact on integer (or grid) valued v."""
    v = v.reshape(v.shape[0], -1)[:, :1]
    cols = [torch.remainder(torch.floor(v / float(base ** (n_digits - 1 - k))), base)
            for k in range(n_digits)]
    return torch.cat(cols, dim=-1)


# -- vector equality ------------------------------------------------------------------------------
def _mismatch(ctx: LowerCtx, c: Lin, r: Interval, t: float
              ) -> tuple[Lin, Interval, bool] | None:
    """An integer-valued form m with m == 0 exactly where c == t (in lattice steps), its
    range, and whether |m| is linear (t at an end of c's range). None if c never equals t."""
    g = table.grid(ctx, c, r)
    if g is None:
        raise ffn.RangeError("tw.equals needs integer-valued (or grid-valued) streams; "
                             "declare them with tw.claim(v, lo, hi, integral=True)")
    tq = read_float(t)  # as the lattice reads its points
    if tq is None or (tq - g.offset) % g.spacing != 0 or not r.lo <= t <= r.hi:
        return None
    k = 1.0 / float(g.spacing)
    span = Interval(round((r.lo - t) * k), round((r.hi - t) * k), True)
    if span.lo == 0:
        return (c - t) * k, span, True
    if span.hi == 0:
        return (c - t) * -k, -span, True
    return (c - t) * k, span, False


def _lower_equals(ctx: LowerCtx, v: Stream, target: Any) -> Stream:
    if isinstance(target, (list, tuple)):  # fx hands lists over as immutable_list
        target = torch.tensor([float(t) for t in target], dtype=torch.float64)
    ts = const_vector(target, v.width)
    count, count_hi = Lin(), 0.0  # the number of lattice steps away from target, summed
    signed: list[tuple[Lin, Interval]] = []
    with table.user_errors(ctx):
        for c, r, t in zip(v.cols, v.ranges, ts, strict=True):
            refuse_ties(r, table.value_set(ctx, c, r), [read_float(t)],
                        "tw.equals")
            refuse_unheld_constant(t, r, table.value_set(ctx, c, r), "tw.equals")
            found = _mismatch(ctx, c, r, t)
            if found is None:
                return Stream.const([0.0], True)
            m, span, linear = found
            if linear:
                count, count_hi = count + m, count_hi + span.hi
            else:
                signed.append((m, span))
    if signed:  # |m| = -m + 2 relu(m): one lane per such column, in a first stage
        spans = [Interval(0.0, sp.magnitude, True) for _, sp in signed]
        parts = table.pwl_stream(ctx, [m for m, _ in signed], [sp for _, sp in signed],
                                 [ffn.abs_pwl()] * len(signed), spans)
        count = count + sum(parts.cols, Lin())
        count_hi += sum(sp.hi for sp in spans)
    # [count == 0] = relu(1 - count) = 1 - count + relu(count - 1): exact on integer counts.
    eq = Pwl(const=1.0, slope=-1.0)
    eq.hinge(1.0, 1.0)
    return table.pwl_stream(ctx, [count], [Interval(0.0, count_hi, True)], [eq], [BOOL],
                            is_bool=True)


@intrinsic(_lower_equals)
def equals(v: torch.Tensor, target: Any) -> torch.Tensor:
    """1 where every column of ``v`` equals the constant vector ``target`` (else 0),
    ``[seq, 1]``. Needs integer-valued columns; one MLP sublayer when each column is 0/1 or
    ``target`` sits at an end of its range, two otherwise."""
    t = torch.as_tensor(target, dtype=v.dtype).reshape(1, -1)
    return (v.reshape(v.shape[0], -1) == t).all(-1, keepdim=True).to(v.dtype)


__all__ = ["digits_to_number", "equals", "interpolation_error", "lookup2", "number_to_digits",
           "piecewise", "reciprocal"]
