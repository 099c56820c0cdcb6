"""The fast scheduler (optimize=0): every producer at its earliest stage.

With no cap on heads or lanes per layer, as-soon-as-possible placement meets the critical-path
bound, so the layer count is optimal for the graph; width is the only thing it does not trade.
"""

from __future__ import annotations

from torchwright_fx.ir.graph import Program
from torchwright_fx.schedule.bounds import earliest_stages
from torchwright_fx.schedule.plan import Plan


def schedule(prog: Program) -> Plan:
    return Plan(stage=earliest_stages(prog), scheduler="heuristic", status="heuristic")
