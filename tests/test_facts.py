"""The facts analysis (torchwright_fx/analysis/facts.py, docs/facts.md).

- Every torch op's facts rule against the op's eager function on sampled operands: each output
  value lies in the facts' range and on their lattice (exact rationals where float64 computes
  the op exactly), and the rounding class holds of the fp32 result.
- The analysis agrees with lowering on every example: the same facts, noise aside.
- ``Traced.facts()`` shows facts on a program the compiler refuses.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.fx

import torchwright_fx as tw
from torchwright_fx import pipeline
from torchwright_fx.analysis.facts import Analysis, FactsCtx, NodeFacts, analyse
from torchwright_fx.capture.propagate import META_KEY, NodeShape
from torchwright_fx.capture.registry import OPS
from torchwright_fx.ir.ranges import BOOL, EXACT, ONCE, PAIR, Interval, read_float

ROOT = Path(__file__).resolve().parents[1]
V = tw.Vocab("ab\n")
ROWS = 24  # sampled values per operand


# -- the generic test: every torch op's rule against its eager function --------------------------
@dataclass(frozen=True)
class S:
    """A stream operand: ``kind`` of its facts (int, half, real, pos, neg, bool, const)."""

    kind: str
    width: int = 1
    one_d: bool = False


SAME = S("same")  # the previous stream operand again (x * x)


@dataclass(frozen=True)
class C:
    """A constant operand drawn from ``values``."""

    values: tuple[float, ...] = (2.0, -3.0, 0.5, 1.5, 0.1, 0.0)


@dataclass(frozen=True)
class Pattern:
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    exact: bool = True  # float64 computes the op exactly on dyadic operands


def _interval(kind: str, rng: random.Random) -> tuple[Interval, list[Fraction]]:
    """Facts of one kind, and the points sampled on them (ends included)."""
    if kind == "bool":
        return BOOL, [Fraction(0), Fraction(1)]
    if kind == "const":
        c = rng.choice((3.0, -1.5, 0.1, 0.0))
        return Interval.point(c), [read_float(c)]
    lo = rng.randint(-6, 5)
    hi = rng.randint(lo + 1, 7)
    if kind == "pos":
        lo, hi = rng.randint(1, 4), rng.randint(5, 9)
    if kind == "neg":
        lo, hi = -rng.randint(5, 9), -rng.randint(1, 4)
    if kind in ("int", "pos", "neg"):
        return Interval(lo, hi, True), [Fraction(v) for v in range(lo, hi + 1)]
    if kind == "half":  # n + 1/2
        iv = Interval.of(lo + 0.5, hi + 0.5, (Fraction(1), Fraction(1, 2)))
        return iv, [Fraction(2 * v + 1, 2) for v in range(lo, hi + 1)]
    assert kind == "real"
    return Interval(lo + 0.25, hi), [Fraction(lo * 64 + 16 + k, 64)
                                    for k in range((hi - lo) * 64 - 16 + 1)]


BIN = (Pattern((S("int"), S("int"))), Pattern((S("half"), S("real"))),
       Pattern((S("int"), C())), Pattern((C(), S("half"))), Pattern((S("const"), S("int"))))
UN = (Pattern((S("int"),)), Pattern((S("half"),)), Pattern((S("real"),)),
      Pattern((S("const"),)))
W = torch.tensor([[1.0, -2.0], [0.5, 3.0]], dtype=torch.float64)
DIV = (Pattern((S("int"), C((2.0, 4.0, 3.0, 0.5, -10.0))), exact=False),
       Pattern((C((1.0, 6.0, -2.0)), S("pos")), exact=False),
       Pattern((S("half"), S("neg")), exact=False))
MOD = (Pattern((S("int"), C((3.0, 2.0, -3.0, 1.5, 0.5)))),
       Pattern((S("half"), C((3.0, 0.25, -2.0)))))
CMP = (*BIN, Pattern((S("bool"), S("bool"))))
LOGIC = (Pattern((S("bool"), S("bool"))),)
EXTREMUM = (Pattern((S("int"), S("half"))), Pattern((S("real"), S("int"))))

PATTERNS: dict[str, tuple[Pattern, ...]] = {
    **dict.fromkeys(("add", "radd", "sub", "rsub"), BIN),
    **dict.fromkeys(("mul", "rmul"), (*BIN, Pattern((S("int"), SAME)), Pattern((S("half"), SAME)))),
    **dict.fromkeys(("neg", "pos", "abs", "relu", "floor", "ceil", "round", "trunc", "fix",
                     "frac", "sign", "square", "float", "double", "contiguous", "clone",
                     "detach", "int", "long", "flatten", "ones_like", "zeros_like"), UN),
    "to": (Pattern((S("int"), torch.float64)),),
    "type": (Pattern((S("half"), torch.float64)),),
    "round_decimals": (Pattern((S("real"),), {"decimals": 1}, exact=False),),
    **dict.fromkeys(("truediv", "div", "true_divide"), DIV),
    **dict.fromkeys(("floordiv", "floor_divide"), (Pattern((S("int"), C((2.0, 3.0, -4.0)))),)),
    "reciprocal": (Pattern((S("pos"),), exact=False), Pattern((S("neg"),), exact=False)),
    "pow": tuple(Pattern((S(k), n)) for k in ("int", "half") for n in (0, 1, 2, 3)),
    **dict.fromkeys(("mod", "remainder", "fmod"), MOD),
    **dict.fromkeys(("gt", "ge", "lt", "le", "eq", "ne", "greater", "greater_equal", "less",
                     "less_equal", "not_equal"), CMP),
    **dict.fromkeys(("and", "or", "xor", "logical_and", "logical_or", "logical_xor",
                     "bitwise_and", "bitwise_or", "bitwise_xor", "rand", "ror", "rxor"), LOGIC),
    **dict.fromkeys(("invert", "logical_not", "bitwise_not"), (Pattern((S("bool"),)),)),
    **dict.fromkeys(("all", "any"), (Pattern((S("bool", 2), -1)),)),
    "where": (Pattern((S("bool"), S("int"), S("half"))), Pattern((S("bool"), C(), S("int")))),
    "bool": (Pattern((S("bool"),)), Pattern((S("int"),))),
    **dict.fromkeys(("clamp", "clip"), (Pattern((S("int"), -1.0, 2.0)),
                                        Pattern((S("real"), None, 0.5)),
                                        Pattern((S("half"), S("int"))),
                                        Pattern((S("int"), S("half"), S("int"))))),
    "hardtanh": (Pattern((S("real"),)), Pattern((S("int"), -2.0, 3.0))),
    "relu6": UN,
    **dict.fromkeys(("maximum", "minimum", "fmax", "fmin", "max", "min"), EXTREMUM),
    "getitem": (Pattern((S("int", 3), (slice(None), 1))),
                Pattern((S("half", 3), (slice(None), slice(0, 2)))),
                Pattern((S("int", 1, True), (slice(None), None)))),
    **dict.fromkeys(("cat", "concat", "concatenate"),
                    (Pattern(([S("int"), S("half", 2)],), {"dim": -1}),)),
    "stack": (Pattern(([S("int", 1, True), S("real", 1, True)],), {"dim": -1}),),
    **dict.fromkeys(("matmul", "mm"), (Pattern((S("int", 2), W)),)),
    "linear": (Pattern((S("half", 2), W, torch.tensor([1.0, -0.5], dtype=torch.float64))),),
    "sum": (Pattern((S("int", 3), -1)), Pattern((S("half", 2),), {"dim": -1})),
    "squeeze": (Pattern((S("int"), -1)),),
    "unsqueeze": (Pattern((S("int", 1, True), -1)),),
    **dict.fromkeys(("reshape", "view"), (Pattern((S("half"), -1, 1)),)),
    "full_like": (Pattern((S("int"), 2.5)),),
}
# Tensor.reshape / torch.reshape take the shape as one argument
PATTERNS_BY_TARGET: dict[object, tuple[Pattern, ...]] = {
    torch.reshape: (Pattern((S("half"), (-1, 1))),),
    torch.round: (*UN, *PATTERNS["round_decimals"]),
}


def _short(target: object) -> str:
    name = target[1] if isinstance(target, tuple) else getattr(target, "__name__", str(target))
    return name.strip("_")


def _torch_ops() -> list[tuple[object, Callable[..., Any]]]:
    import torchwright_fx.ops.relu  # noqa: F401  (the op libraries register their intrinsics)
    import torchwright_fx.ops.swiglu  # noqa: F401

    out = []
    for key, spec in OPS.items():
        if spec.intrinsic or spec.lower is None:
            continue
        assert spec.facts is not None, f"{spec.name} has a lowering and no facts rule"
        out.append((key, spec.facts))
    return out


def _sample(pattern: Pattern, rng: random.Random) -> tuple[list[Any], list[Any],
                                                            dict[str, Any], bool]:
    """(facts args, eager args as exact Fractions-in-tensors placeholders, kwargs, exact)."""
    facts_args: list[Any] = []
    eager_args: list[Any] = []
    exact = pattern.exact
    last: tuple[NodeFacts, list[list[Fraction]], S] | None = None

    def one(a: Any) -> tuple[Any, Any]:
        nonlocal last, exact
        if isinstance(a, S):
            if a is SAME:
                assert last is not None
                return last[0], ("stream", last[1], last[2])
            cols = [_interval(a.kind, rng) for _ in range(a.width)]
            values = [[rng.choice(pts) for pts in (p for _, p in cols)] for _ in range(ROWS)]
            values[0] = [p[0] for _, p in cols]
            values[-1] = [p[-1] for _, p in cols]
            facts = NodeFacts([iv for iv, _ in cols], a.kind == "bool")
            last = (facts, values, a)
            if a.kind == "const" and any(not iv.rounding == EXACT for iv, _ in cols):
                exact = False
            return facts, ("stream", values, a)
        if isinstance(a, C):
            c = rng.choice(a.values)
            if c == 0.1:
                exact = False
            return c, c
        if isinstance(a, list):
            pairs = [one(x) for x in a]
            return [p[0] for p in pairs], ("list", [p[1] for p in pairs])
        return a, a

    for a in pattern.args:
        f, e = one(a)
        facts_args.append(f)
        eager_args.append(e)
    return facts_args, eager_args, dict(pattern.kwargs), exact


def _tensor(spec: Any, dtype: torch.dtype) -> Any:
    if isinstance(spec, tuple) and spec and spec[0] == "stream":
        _, values, s = spec
        t = torch.tensor([[float(v) for v in row] for row in values], dtype=torch.float64)
        t = t.to(torch.bool) if s.kind == "bool" else t.to(dtype)
        return t[:, 0] if s.one_d else t
    if isinstance(spec, tuple) and spec and spec[0] == "list":
        return [_tensor(x, dtype) for x in spec[1]]
    if isinstance(spec, torch.Tensor) and spec.is_floating_point():
        return spec.to(dtype)
    return spec


def _eager(target: object, args: list[Any], kwargs: dict[str, Any], dtype: torch.dtype
           ) -> torch.Tensor:
    real = [_tensor(a, dtype) for a in args]
    if isinstance(target, tuple):  # a Tensor method (.float() of the float64 run: .double())
        method = "double" if target[1] == "float" and dtype == torch.float64 else target[1]
        out = getattr(real[0], method)(*real[1:], **kwargs)
    else:
        out = target(*real, **kwargs)  # type: ignore[operator]
    out = torch.as_tensor(out).to(torch.float64)
    return out.reshape(ROWS, -1)


def _ctx(target: object, width: int, bos: torch.Tensor, analysis: Analysis) -> FactsCtx:
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    if isinstance(target, tuple):
        node = graph.call_method(target[1], (x,))
    else:
        node = graph.call_function(target, (x,))  # type: ignore[arg-type]
    node.meta[META_KEY] = NodeShape(width, torch.float32, bos)
    return FactsCtx(node, V, 64, analysis)


def _fresh_analysis() -> Analysis:
    graph = torch.fx.Graph()
    graph.output(graph.placeholder("x"))
    return Analysis(torch.fx.GraphModule(torch.nn.Module(), graph), V, 64)


def _with_forms(analysis: Analysis, value: Any, seen: dict[int, NodeFacts]) -> Any:
    if isinstance(value, NodeFacts):
        if id(value) not in seen:
            seen[id(value)] = dataclasses.replace(value, forms=analysis.fresh(value.ranges))
        return seen[id(value)]
    if isinstance(value, list):
        return [_with_forms(analysis, v, seen) for v in value]
    return value


def _on_lattice(q: Fraction, iv: Interval, tol: Fraction) -> bool:
    step, off = iv.step, iv.offset
    assert step is not None
    if step == 0:
        return abs(q - off) <= tol
    k = round((q - off) / step)
    return abs(q - off - k * step) <= tol


def _check(iv: Interval, v64: float, v32: float, exact: bool, what: str) -> None:
    """One output value against its facts."""
    q = Fraction(v64) if exact else read_float(v64)
    tol = Fraction(0) if exact else Fraction(abs(v64) + 1) * Fraction(1, 10 ** 9)
    assert Fraction(iv.lo) - tol <= q <= Fraction(iv.hi) + tol if iv.finite else \
        iv.lo <= v64 <= iv.hi, f"{what}: {v64} outside [{iv.lo}, {iv.hi}]"
    if iv.lattice is not None:
        assert _on_lattice(q, iv, tol), f"{what}: {v64} off the lattice {iv.offset} + {iv.step}Z"
    if iv.max_den:
        assert abs(q - q.limit_denominator(iv.max_den)) <= tol, f"{what}: {v64} not k/n"
    if iv.rounding == EXACT:
        assert Fraction(v32) == q, f"{what}: fp32 gives {v32}, the exact value is {q} (EXACT)"
    elif iv.rounding == ONCE:
        assert float(np.float32(float(q))) == v32, f"{what}: fp32 {v32} is not {q} rounded once"
    elif iv.rounding == PAIR:
        assert np.sign(v32) == np.sign(float(q)), f"{what}: fp32 {v32} has not the sign of {q}"


TORCH_OPS = _torch_ops()


@pytest.mark.parametrize("target,rule", TORCH_OPS, ids=[str(t) for t, _ in TORCH_OPS])
def test_torch_op_facts_hold_of_its_eager_values(target: object, rule: Callable[..., Any]):
    # an op without its own patterns is sampled as a unary and as a binary op on streams (the
    # ones torch refuses are skipped); an op with constant arguments needs an entry above
    patterns = PATTERNS_BY_TARGET.get(target) or PATTERNS.get(_short(target)) or (*UN, *BIN)
    rng = random.Random(f"{target}")
    ran = 0
    for pattern in patterns:
        for draw in range(12):
            facts_args, eager_args, kwargs, exact = _sample(pattern, rng)
            try:
                out64 = _eager(target, eager_args, kwargs, torch.float64)
            except (TypeError, RuntimeError, AttributeError):  # not a call torch takes

                continue
            out32 = _eager(target, eager_args, kwargs, torch.float32)
            ran += 1
            analysis = _fresh_analysis()
            ctx = _ctx(target, out64.shape[1], out32[0], analysis)
            args = _with_forms(analysis, facts_args, {})
            got = rule(ctx, *args, **kwargs)
            assert isinstance(got, NodeFacts) and got.width == out64.shape[1]
            what = f"{target} {pattern} draw {draw} on {[getattr(a, 'ranges', a) for a in args]}"
            for row in range(ROWS):
                for col, iv in enumerate(got.ranges):
                    _check(iv, float(out64[row, col]), float(out32[row, col]), exact,
                           f"{what}, row {row}")
    assert ran, f"no pattern of {target} runs eagerly: add its sampling patterns to PATTERNS"


# -- agreement with lowering ----------------------------------------------------------------------
def _examples() -> list[str]:
    sys.path.insert(0, str(ROOT))
    import examples

    rasp = sorted(f"rasp.{p.stem}" for p in (ROOT / "examples" / "rasp").glob("[!_]*.py"))
    return [*examples.NAMES, *rasp]


# Ops whose facts are a sound superset of lowering's, not equal to them, and why: lowering's
# facts there depend on the construction (the machine), the analysis covers both machines.
SUPERSET = {
    "reciprocal": "1/x: the range is widened by rel_tol on both machines (lowering widens it "
                  "on SwiGLU only), and the reference rounds 1/x once (lowering says EXACT)",
    "truediv": "c / x and x / y read 1/x (see reciprocal)",
    "div": "as truediv", "true_divide": "as truediv", "floordiv": "as truediv",
    "floor_divide": "as truediv",
    "piecewise_table": "the range is widened by the SwiGLU corners' error on both machines",
    "pow": "odd powers by repeated squaring (SwiGLU's facts); the ReLU table's are tighter",
    "square": "as pow", "mul": "as pow (a library tw.mul / tw.square on the ReLU machine)",
}


def _contains(a: Interval, b: Interval) -> bool:
    """Every value b allows, a allows (den_group aside)."""
    if not (a.lo <= b.lo and b.hi <= a.hi) or a.rounding < b.rounding:
        return False
    if a.lattice is not None:
        if b.lattice is None:
            return False
        (sa, oa), (sb, ob) = a.lattice, b.lattice
        if (sa == 0 and (sb != 0 or ob != oa)) or (sa and (sb % sa or (ob - oa) % sa)):
            return False
    if a.max_den and not (b.integral or 0 < b.max_den <= a.max_den):
        return False
    return not a.near_integral or b.near_integral or b.integral


def _semantic(iv: Interval) -> Interval:
    return dataclasses.replace(iv, noise=0.0, den_group=0)


@pytest.mark.parametrize("name", _examples())
def test_analysis_agrees_with_lowering(name: str):
    compiled = importlib.import_module(f"examples.{name}").make()
    gm, vocab, opts = compiled.traced.graph_module, compiled.vocab, compiled.options
    prog, _, _ = pipeline.sized_lowering(gm, vocab, opts)
    facts = analyse(gm, vocab, opts.max_seq_len)
    nodes = {n.name: n for n in gm.graph.nodes}
    loose: set[str] = set()  # nodes where the analysis is a strict superset (or fed by one)
    groups: dict[int, int] = {}  # analysis den_group -> lowering's: the same partition
    for name_, record in prog.nodes.items():
        got = facts[name_]
        assert not got.unknown, f"{name_}: {got.unknown}"
        node = nodes[name_]
        fed = any(i.name in loose for i in node.all_input_nodes)
        for a, b in zip(got.ranges, record.intervals, strict=True):
            assert a.noise == 0.0
            if a.max_den and b.max_den:
                assert groups.setdefault(a.den_group, b.den_group) == b.den_group, name_
            if _semantic(a) == _semantic(b):
                continue
            assert _short(node.target) in SUPERSET or fed, \
                f"{name_} ({node.target}): analysis {a} != lowering {b}"
            assert _contains(_semantic(a), _semantic(b)), f"{name_}: {a} does not contain {b}"
            loose.add(name_)
    assert len(set(groups.values())) == len(groups), "den_groups merged differently"


# -- facts without lowering -----------------------------------------------------------------------
def _refused_at_lowering(x: torch.Tensor) -> torch.Tensor:
    """m * 3 can be exactly 1 (m = 1/3) while fp32 rounds it either side: refused."""
    m = tw.mean(tw.is_token(x, "a"))
    flag = (m * 3 > 1).float()
    return tw.emit(tw.is_token(x, "\n"),
                   [torch.where(flag.bool(), tw.token("a"), tw.token("b"))])


def test_traced_facts_of_a_program_refused_at_lowering():
    with pytest.raises(tw.CompileError, match="not exact"):
        tw.compile(_refused_at_lowering, vocab=V).compile()
    facts = tw.trace(_refused_at_lowering, vocab=V).facts()
    (mean,) = facts["mean"]
    n = pipeline.Options().max_seq_len  # Traced.facts() reads the default max_seq_len
    assert (mean.lo, mean.hi, mean.max_den, mean.rounding) == (0.0, 1.0, n, ONCE)
    (scaled,) = facts["mul"]
    assert (scaled.lo, scaled.hi) == (0.0, 3.0) and scaled.lattice is None
    assert facts["gt"] == [BOOL]
    (out,) = facts["output"]
    assert (out.lo, out.hi, out.integral) == (1.0, 4.0, True)


def test_an_op_without_a_rule_or_a_failing_rule_gives_unknown_facts():
    def prog(x: torch.Tensor) -> torch.Tensor:
        c = tw.code(x)
        low = tw.number_to_digits(c, 2)[:, 1:]
        held = tw.latch(c, c)  # `when` is not 0/1: lowering refuses, the rule raises
        return tw.emit(tw.is_token(x, "\n"), [torch.cumsum(c, 0) + low + held])

    facts = analyse(pipeline.trace(prog, V), V, 16)
    assert facts["cumsum"].unknown == "FactsError: no facts rule for torch.cumsum"
    assert facts["latch"].unknown.startswith("FactsError: latch's `when` must be")
    assert math.isinf(facts["add"].ranges[0].hi)  # and the analysis goes on
    assert facts["getitem"].ranges[0] == Interval(0, 9, True)
    assert facts["code"].ranges[0] == Interval(0, len(V) - 1, True)
