"""Residual-stream columns: the reserved ones (constant 1.0, RMSNorm pins) and one per signal.

Column 0 is the constant; the pins follow (their count depends on d, see ``emit/rmsnorm.py``);
then every live signal gets its own column in the order it is written.
"""

from __future__ import annotations

from torchwright_fx.emit.rmsnorm import pin_count
from torchwright_fx.ir.graph import Program
from torchwright_fx.ops.numerics import is_power_of_two
from torchwright_fx.schedule.plan import Plan


class WidthError(ValueError):
    """The program needs more residual columns than d_model provides."""


def columns_needed(prog: Program, d_model: int) -> int:
    return 1 + pin_count(d_model) + len(prog.live)


def smallest_width(prog: Program, minimum: int = 16) -> int:
    d = minimum
    while columns_needed(prog, d) > d:
        d *= 2
    return d


def allocate(prog: Program, plan: Plan, d_model: int | None) -> Plan:
    d = smallest_width(prog) if d_model is None else d_model
    if not is_power_of_two(d):
        raise WidthError(f"d_model={d}: the RMSNorm identity needs a power-of-two width")
    need = columns_needed(prog, d)
    if need > d:
        raise WidthError(f"the program needs {need} residual columns but d_model={d}; "
                         f"use d_model={smallest_width(prog)} (or leave it unset)")
    plan.d_model = d
    plan.const_col = 0
    plan.pin_cols = list(range(1, 1 + pin_count(d)))
    first = 1 + len(plan.pin_cols)
    order = sorted(prog.live, key=lambda s: (plan.signal_stage(prog, s), s))
    plan.columns = {s: first + i for i, s in enumerate(order)}
    return plan
