"""Where each producer lands in the weights: its layer, its head index, its MLP lane indices.

One function decides the order that the emitter writes and that the circuit map
(``emit/circuit.py``) reports, so the two cannot disagree. In each layer the program's heads
come first (by producer id), then the cancel heads that zero finished columns; MLP lanes are
numbered in producer order, and identical lanes of different producers share one index, the
cancel lanes (``schedule/cancels.py``) last.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from torchwright_fx.ir.graph import FFN, Head, Lane, Program
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.printer import format_placement
from torchwright_fx.ops import attention
from torchwright_fx.ops.attention import Geometry
from torchwright_fx.schedule import kv_groups
from torchwright_fx.schedule.cancels import CANCEL, by_layer, cancel_ffn
from torchwright_fx.schedule.kv_groups import KvGroup
from torchwright_fx.schedule.plan import ATTENTION, MLP, Plan, layer_members

__all__ = ["CANCEL", "LayerPlacement", "Placement", "cancel_groups", "place"]


@dataclass(frozen=True)
class LayerPlacement:
    heads: tuple[Head, ...]  # in head-index order; the last ``n_cancel`` are cancel heads
    n_cancel: int
    ffns: tuple[FFN, ...]  # the program's, then the cancel lanes' (named CANCEL), if any
    lane_index: dict[Lane, int]  # lane -> its row in gate/up (column in down)
    # the heads over shared K/V blocks (``schedule/kv_groups.py``); None: a K and V block a head
    kv: tuple[KvGroup, ...] | None = None

    def lanes_of(self, ffn: FFN) -> list[int]:
        return [self.lane_index[lane] for lane in ffn.lanes]


@dataclass(frozen=True)
class Placement:
    layers: tuple[LayerPlacement, ...]
    n_heads: int  # per layer in the checkpoint: the largest count, others padded with zeros
    d_ff: int
    n_kv_heads: int = 0  # K/V blocks per layer (``schedule/kv_groups.py``); 0: n_heads

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads

    def __str__(self) -> str:
        """Per layer, its heads and each FFN bank's lanes (``ir/printer.py``)."""
        return format_placement(self)


def cancel_groups(plan: Plan, geom: Geometry) -> list[list[list[int]]]:
    """Per layer, the signals whose columns its attention zeroes, in groups of at most d_head
    (one self-attention head each; see ``schedule/cancels.py``)."""
    return [[sigs[i:i + geom.d_head] for i in range(0, len(sigs), geom.d_head)]
            for sigs in by_layer(plan, ATTENTION)]


def _cancel_head(geom: Geometry, sigs: list[int]) -> Head:
    """Reads each signal at its own position; the emitter writes its negation (O = -1)."""
    q, k = attention.self_qk(geom)
    return Head(-1, q, k, [Lin.of(s) for s in sigs], list(sigs), CANCEL, "<columns>")


def place(prog: Program, plan: Plan, geom: Geometry, share_kv: bool = True) -> Placement:
    """Every layer's heads and lanes; ``share_kv``: heads share K/V blocks where they fit
    (``schedule/kv_groups.py``; never in half precision)."""
    layers = []
    for (heads, ffns), cancelled, lanes in zip(layer_members(prog, plan),
                                               cancel_groups(plan, geom), by_layer(plan, MLP),
                                               strict=True):
        cancels = [_cancel_head(geom, sigs) for sigs in cancelled]
        if lanes:
            ffns = [*ffns, cancel_ffn(prog, lanes)]
        index: dict[Lane, int] = {}
        for f in ffns:
            for lane in f.lanes:
                index.setdefault(lane, len(index))
        layers.append(LayerPlacement((*heads, *cancels), len(cancels), tuple(ffns), index))
    n_heads = max(1, max(len(la.heads) for la in layers))
    d_ff = max(1, max(len(la.lane_index) for la in layers))
    if prog.precision.half or not share_kv:  # (half's certificate reads each head's blocks)
        return Placement(tuple(layers), n_heads, d_ff)
    n_heads, n_kv, groups = kv_groups.choose([la.heads for la in layers], n_heads,
                                             geom.d_head, geom.rotary)
    if groups is not None:
        layers = [replace(la, kv=g) for la, g in zip(layers, groups, strict=True)]
    return Placement(tuple(layers), n_heads, d_ff, n_kv)
