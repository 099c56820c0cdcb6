"""Shared definitions behind the two user-facing op libraries (``swiglu`` and ``relu``).

A library op is an intrinsic tagged with its machine: using one fixes the program's machine,
and using ops of both libraries in one program is rejected (``lower/lowering.py``). Both
libraries export the same names with the same signatures; the plain-torch spelling of each op
(``a * b``, ``torch.where``, ``torch.floor``...) lowers on whichever machine the program
compiles for. Library spellings add the knobs torch has no room for: the table ``step`` of a
ReLU product, the relative tolerance of a reciprocal, the tolerance of a piecewise function.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sympy
import torch

from torchwright_fx.analysis.facts import FactsCtx, NodeFacts, as_facts
from torchwright_fx.base import numerics
from torchwright_fx.capture.registry import OPS, intrinsic, register
from torchwright_fx.families import arithmetic
from torchwright_fx.families import functions as pw
from torchwright_fx.lower.context import LowerCtx
from torchwright_fx.lower.stream import Stream, to_stream

NAMES = ("abs", "ceil", "clamp", "compare", "floor", "maximum", "minimum", "mod", "mul",
         "piecewise", "reciprocal", "relu", "round", "select", "square")


def _define(machine: str, eager: Callable[..., Any], rule: Callable[..., Any],
            doc: str) -> Callable[..., Any]:
    def lower(ctx: LowerCtx, *args: Any, **kwargs: Any) -> Any:
        return rule(ctx, *args, **kwargs)

    eager.__doc__ = doc
    eager.__module__ = f"torchwright_fx.ops.{machine}"
    eager.__qualname__ = eager.__name__
    return intrinsic(lower, machine=machine)(eager)


def _rule(target: Any) -> Callable[..., Any]:
    rule = OPS[target].lower
    assert rule is not None, f"{target} has no lowering"
    return rule


def _mul_rule(ctx: LowerCtx, a: Any, b: Any, step: float | None = None) -> Stream:
    return _rule(torch.mul)(ctx, a, b, step=step)


def _square_rule(ctx: LowerCtx, x: Any, step: float | None = None) -> Stream:
    return arithmetic.power(ctx, to_stream(x, ctx.out_width), 2, step)


def _reciprocal_rule(ctx: LowerCtx, x: Any, rel_tol: float = numerics.RECIPROCAL_REL_TOL) -> Stream:
    return arithmetic.reciprocal(ctx, to_stream(x, ctx.out_width), rel_tol)


def _arithmetic(machine: str) -> dict[str, Callable[..., Any]]:
    def mul(a: torch.Tensor, b: torch.Tensor, step: float | None = None) -> torch.Tensor:
        return a * b

    def square(x: torch.Tensor, step: float | None = None) -> torch.Tensor:
        return x * x

    def reciprocal(x: torch.Tensor, rel_tol: float = numerics.RECIPROCAL_REL_TOL) -> torch.Tensor:
        return 1.0 / x

    step_doc = (" SwiGLU: exact (``step`` is ignored). ReLU: a 0/1 factor gates exactly;"
                " otherwise a piecewise-linear table over the declared ranges (tw.claim), exact"
                " on integer-valued inputs, else within step**2/16 (default: 256 segments).")
    return {
        "mul": _define(machine, mul, _mul_rule, "Product of two streams." + step_doc),
        "square": _define(machine, square, _square_rule, "x * x." + step_doc),
        "reciprocal": _define(machine, reciprocal, _reciprocal_rule,
                              "1/x over x's declared range (one sign), within rel_tol."),
    }


def _elementwise(machine: str) -> dict[str, Callable[..., Any]]:
    def select(cond: torch.Tensor, a: Any, b: Any) -> torch.Tensor:
        return torch.where(cond.bool(), a, b)

    def relu(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)

    def abs(x: torch.Tensor) -> torch.Tensor:
        return torch.abs(x)

    def minimum(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.minimum(a, b)

    def maximum(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.maximum(a, b)

    def clamp(x: torch.Tensor, min: Any = None, max: Any = None) -> torch.Tensor:
        return torch.clamp(x, min, max)

    def compare(x: torch.Tensor, threshold: float) -> torch.Tensor:
        return x > threshold

    return {
        "select": _define(machine, select, _rule(torch.where),
                          "``a`` where cond is 1, else ``b``."),
        "relu": _define(machine, relu, _rule(torch.relu), "max(x, 0)."),
        "abs": _define(machine, abs, _rule(torch.abs), "|x|."),
        "minimum": _define(machine, minimum, _rule(torch.minimum), "Elementwise min."),
        "maximum": _define(machine, maximum, _rule(torch.maximum), "Elementwise max."),
        "clamp": _define(machine, clamp, _rule(torch.clamp), "clamp(x, min, max)."),
        "compare": _define(machine, compare, _rule(torch.gt), "1 where x > threshold."),
    }


def _rounding(machine: str) -> dict[str, Callable[..., Any]]:
    def floor(x: torch.Tensor) -> torch.Tensor:
        return torch.floor(x)

    def ceil(x: torch.Tensor) -> torch.Tensor:
        return torch.ceil(x)

    def round(x: torch.Tensor) -> torch.Tensor:
        return torch.round(x)

    def mod(x: torch.Tensor, m: float) -> torch.Tensor:
        return torch.remainder(x, m)

    doc = " over x's declared range: exact on integer (grid) valued x."
    return {
        "floor": _define(machine, floor, _rule(torch.floor), "floor(x)" + doc),
        "ceil": _define(machine, ceil, _rule(torch.ceil), "ceil(x)" + doc),
        "round": _define(machine, round, _rule(torch.round), "round half to even" + doc),
        "mod": _define(machine, mod, _rule(torch.remainder), "x mod m (sign of m)" + doc),
    }


def _piecewise(machine: str) -> dict[str, Callable[..., Any]]:
    tagged_table = intrinsic(pw.lower_piecewise_table, machine=machine,
                             facts=OPS[pw.piecewise_table].facts)(
        _copy(pw.piecewise_table, machine))
    tagged_expr = intrinsic(pw.lower_piecewise_expr, machine=machine,
                            facts=OPS[pw.piecewise_expr].facts)(
        _copy(pw.piecewise_expr, machine))

    def piecewise(fn: Any, v: torch.Tensor, breakpoints: Any = None, *,
                  var: sympy.Symbol | None = None, tol: float | None = None,
                  input_scale: float = 1.0) -> torch.Tensor:
        return pw.piecewise_via(fn, v, breakpoints, var, tol, input_scale, tagged_table,
                                  tagged_expr)

    piecewise.__doc__ = pw.piecewise.__doc__
    piecewise.__module__ = f"torchwright_fx.ops.{machine}"
    return {"piecewise": piecewise}


def _copy(fn: Callable[..., Any], machine: str) -> Callable[..., Any]:
    """The eager semantics of ``fn`` under a machine-specific name (one intrinsic each)."""
    eager = getattr(fn, "__wrapped__", fn)

    def copy(*args: Any, **kwargs: Any) -> Any:
        return eager(*args, **kwargs)

    copy.__name__ = copy.__qualname__ = f"{eager.__name__}"
    copy.__module__ = f"torchwright_fx.ops.{machine}"
    copy.__doc__ = eager.__doc__
    return copy


def make_library(machine: str) -> dict[str, Callable[..., Any]]:
    ops = {**_arithmetic(machine), **_elementwise(machine), **_rounding(machine),
           **_piecewise(machine)}
    assert set(ops) == set(NAMES)
    _register_facts(ops)
    return ops


# -- facts ---------------------------------------------------------------------------------------
# The library ops analysed as the torch ops they spell (mul, square and reciprocal below).
SAME_FACTS = {"select": torch.where, "relu": torch.relu, "abs": torch.abs,
              "minimum": torch.minimum, "maximum": torch.maximum, "clamp": torch.clamp,
              "compare": torch.gt, "floor": torch.floor, "ceil": torch.ceil,
              "round": torch.round, "mod": torch.remainder}


def _mul_facts(ctx: FactsCtx, a: Any, b: Any, step: float | None = None) -> NodeFacts:
    rule = OPS[torch.mul].facts
    assert rule is not None
    return rule(ctx, a, b, step=step)


def _square_facts(ctx: FactsCtx, x: Any, step: float | None = None) -> NodeFacts:
    return arithmetic.power_facts(ctx, as_facts(x, ctx.out_width), 2)


def _reciprocal_facts(ctx: FactsCtx, x: Any,
                      rel_tol: float = numerics.RECIPROCAL_REL_TOL) -> NodeFacts:
    return arithmetic.reciprocal_facts(ctx, as_facts(x, ctx.out_width), rel_tol)


def _register_facts(ops: dict[str, Callable[..., Any]]) -> None:
    """Each library intrinsic's facts rule: the torch op's it spells."""
    own = {"mul": _mul_facts, "square": _square_facts, "reciprocal": _reciprocal_facts}
    for name, op in ops.items():
        rule = own.get(name) or (OPS[SAME_FACTS[name]].facts if name in SAME_FACTS else None)
        if rule is not None:
            register(op, facts=rule)
