"""Where each producer lands in the weights: its layer, its head index, its MLP lane indices.

One function decides the order that the emitter writes and that the circuit map
(``emit/circuit.py``) reports, so the two cannot disagree. In each layer the program's heads
come first (by producer id), then the cancel heads that zero finished columns; MLP lanes are
numbered in producer order, and identical lanes of different producers share one index.
"""

from __future__ import annotations

from dataclasses import dataclass

from torchwright_fx.ir.graph import FFN, Head, Lane, Program
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.printer import format_placement
from torchwright_fx.ops import attention
from torchwright_fx.ops.attention import Geometry
from torchwright_fx.schedule.plan import Plan, layer_members, layer_of

CANCEL = "cancel"  # the name of the heads that zero a column once nothing reads it


@dataclass(frozen=True)
class LayerPlacement:
    heads: tuple[Head, ...]  # in head-index order; the last ``n_cancel`` are cancel heads
    n_cancel: int
    ffns: tuple[FFN, ...]
    lane_index: dict[Lane, int]  # lane -> its row in gate/up (column in down)

    def lanes_of(self, ffn: FFN) -> list[int]:
        return [self.lane_index[lane] for lane in ffn.lanes]


@dataclass(frozen=True)
class Placement:
    layers: tuple[LayerPlacement, ...]
    n_heads: int  # per layer in the checkpoint: the largest count, others padded with zeros
    d_ff: int

    def __str__(self) -> str:
        """Per layer, its heads and each FFN bank's lanes (``ir/printer.py``)."""
        return format_placement(self)


def cancel_groups(plan: Plan, geom: Geometry) -> list[list[list[int]]]:
    """Per layer, the signals whose columns are zeroed there, in groups of at most d_head
    (one self-attention head each; see ``schedule/columns.py``)."""
    per_layer: list[list[int]] = [[] for _ in range(plan.n_layers)]
    for sid, stage in sorted(plan.cancels.items()):
        per_layer[layer_of(stage)].append(sid)
    return [[sigs[i:i + geom.d_head] for i in range(0, len(sigs), geom.d_head)]
            for sigs in per_layer]


def _cancel_head(geom: Geometry, sigs: list[int]) -> Head:
    """Reads each signal at its own position; the emitter writes its negation (O = -1)."""
    q, k = attention.self_qk(geom)
    return Head(-1, q, k, [Lin.of(s) for s in sigs], list(sigs), CANCEL, "<columns>")


def place(prog: Program, plan: Plan, geom: Geometry) -> Placement:
    layers = []
    for (heads, ffns), groups in zip(layer_members(prog, plan), cancel_groups(plan, geom),
                                     strict=True):
        cancels = [_cancel_head(geom, sigs) for sigs in groups]
        index: dict[Lane, int] = {}
        for f in ffns:
            for lane in f.lanes:
                index.setdefault(lane, len(index))
        layers.append(LayerPlacement((*heads, *cancels), len(cancels), tuple(ffns), index))
    n_heads = max(1, max(len(la.heads) for la in layers))
    d_ff = max(1, max(len(la.lane_index) for la in layers))
    return Placement(tuple(layers), n_heads, d_ff)
