"""What a lowering rule sees: the program being built, the geometry, the current fx node."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import torch.fx

from torchwright_fx.analysis.facts import NodeFacts
from torchwright_fx.base.errors import CompileError, node_error, node_source
from torchwright_fx.capture.propagate import NodeShape, shape
from torchwright_fx.ir.graph import Program
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import Interval
from torchwright_fx.lower.stream import Stream
from torchwright_fx.ops.attention import Geometry
from torchwright_fx.ops.lanes import Bank
from torchwright_fx.vocab import Vocab


@dataclass
class LowerCtx:
    prog: Program
    geom: Geometry
    vocab: Vocab
    node: torch.fx.Node
    tokens: Stream = field(default_factory=lambda: Stream([], []))  # the token stream's one-hot
    # a requested approximation's error bound, set by the rule (tw.piecewise of an expression)
    error_bound: float | None = None
    # the node's facts from the analysis (analysis/facts.py): its semantic Interval per column
    facts: NodeFacts | None = None

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def source(self) -> str:
        return node_source(self.node)

    @property
    def shape(self) -> NodeShape:
        record = shape(self.node)
        assert record is not None, f"{self.name} has no shape record (run capture.propagate)"
        return record

    @property
    def out_width(self) -> int:
        return self.shape.width

    def bank(self, n_outputs: int) -> Bank:
        return Bank(self.prog.machine, n_outputs)

    def finish(self, bank: Bank, ranges: Sequence[Interval]) -> list[Lin]:
        return bank.finish(self.prog, ranges, self.name, self.source)

    def error(self, what: str, advice: str = "", d_head: int | None = None) -> CompileError:
        """A CompileError naming the user's line; ``d_head``: the head size that would fit
        (a HeadTooSmall, which a compile without an explicit d_head retries at that size)."""
        return node_error(self.node, what, advice, d_head)

    @property
    def input_node(self) -> torch.fx.Node:
        """The program's token stream (the graph's placeholder)."""
        return next(n for n in self.node.graph.nodes if n.op == "placeholder")

    def bos_indicator(self) -> Lin:
        """1 at the <bos> position, else 0: the token stream's <bos> embedding column."""
        return self.tokens.cols[self.vocab.bos_id]

    def bos_row(self, arg_index: int, kwarg: str | None = None) -> torch.Tensor | None:
        """The value of an argument (positional index, or keyword) at the BOS position, known
        at compile time: position 0 sees only the BOS token."""
        if arg_index < len(self.node.args):
            arg = self.node.args[arg_index]
        else:
            arg = self.node.kwargs.get(kwarg) if kwarg else None
        record = shape(arg) if isinstance(arg, torch.fx.Node) else None
        return None if record is None else record.bos
