"""Shared definitions behind the two user-facing op libraries (``swiglu`` and ``relu``).

A library op is an intrinsic tagged with its machine: using one fixes the program's machine,
and using ops of both libraries in one program is rejected (``lower/lowering.py``). The
plain-torch spelling of each op (``a * b``, ``torch.where``, ``torch.relu``...) lowers on
whichever machine the program compiles for.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torchwright_fx.intrinsics import intrinsic
from torchwright_fx.lower import table
from torchwright_fx.lower.context import LowerCtx


def _define(machine: str, eager: Callable[..., Any], rule: Callable[..., Any],
            doc: str) -> Callable[..., Any]:
    def lower(ctx: LowerCtx, *args: Any, **kwargs: Any) -> Any:
        return rule(ctx, *args, **kwargs)

    eager.__doc__ = doc
    eager.__module__ = f"torchwright_fx.ops.{machine}"
    eager.__qualname__ = eager.__name__
    return intrinsic(lower, machine=machine)(eager)


def make_library(machine: str) -> dict[str, Callable[..., Any]]:
    def mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a * b

    def select(cond: torch.Tensor, a: Any, b: Any) -> torch.Tensor:
        return torch.where(cond.bool(), a, b)

    def relu(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)

    def compare(x: torch.Tensor, threshold: float) -> torch.Tensor:
        return x > threshold

    return {
        "mul": _define(machine, mul, table.FUNCTIONS[torch.mul],
                       "Product of two streams (elementwise)."),
        "select": _define(machine, select, table.FUNCTIONS[torch.where],
                          "``a`` where cond is 1, else ``b``."),
        "relu": _define(machine, relu, table.FUNCTIONS[torch.relu], "max(x, 0)."),
        "compare": _define(machine, compare, table.FUNCTIONS[torch.gt], "1 where x > threshold."),
    }
