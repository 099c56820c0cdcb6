"""The facts analysis: the semantic ``Interval`` of every column of every fx node, from the
captured graph alone (no lowering, no program, no geometry beyond ``max_seq_len``).

``analyse(gm, vocab, max_seq_len)`` runs the graph as an ``fx.Interpreter`` whose values are
facts: the placeholder is the one-hot token stream (one BOOL column per token); a call on
constants only runs eagerly (folded, as lowering does); every other call runs its op's facts
rule, registered with the op in its family file (``families/``) by ``@facts(...)``::

    @facts(torch.floor, methods=("floor",))
    def _floor_facts(ctx: FactsCtx, a, *_, **__) -> NodeFacts: ...

A rule gets a ``FactsCtx`` and the node's arguments, stream arguments as ``NodeFacts`` and
constants as themselves, and returns the output's ``NodeFacts``. Facts are semantic: what the
exact values can be (range, lattice, fractions, near-integrality) and how the fp32 reference
reaches them (the rounding class); ``noise`` is always 0 here, since it is a property of the
construction and of the arithmetic, which lowering adds. The analysis never refuses: an op with
no facts rule, or a rule that raises, gives its node unknown facts (unbounded, with the reason
in ``NodeFacts.unknown``) and the analysis goes on.

Beside the intervals a value carries the affine form of each column over *atoms* (one per
column of a non-linear node, one per token, one for the decoded position): the analysis'
mirror of lowering's ``Lin`` over signals, so that a rule can see that two operands are the same
value (``x * x`` is a square) and derive a column's lattice from its parts, as lowering does.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from torchwright_fx.base.errors import op_name
from torchwright_fx.capture.propagate import NodeShape, shape
from torchwright_fx.capture.registry import info, spec_of, using_vocab
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import BOOL, INEXACT, Interval, within_token_values
from torchwright_fx.ops import ffn
from torchwright_fx.vocab import Vocab

UNBOUNDED = Interval(-math.inf, math.inf, rounding=INEXACT)


@dataclass(frozen=True)
class NodeFacts:
    """The facts of a stream: one ``Interval`` per column (noise 0), whether torch holds it as
    a bool tensor, the columns' affine forms over atoms, and, for unknown facts, why."""

    ranges: Sequence[Interval]  # held as a tuple
    is_bool: bool = False
    forms: Sequence[Lin] | None = None  # held as a tuple
    unknown: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "ranges", tuple(self.ranges))
        if self.forms is not None:
            object.__setattr__(self, "forms", tuple(self.forms))
            assert len(self.forms) == len(self.ranges)

    @property
    def width(self) -> int:
        return len(self.ranges)

    @property
    def intervals(self) -> list[Interval]:
        return list(self.ranges)

    def form(self, i: int) -> Lin | None:
        return None if self.forms is None else self.forms[i]

    @staticmethod
    def const(values: Sequence[float], is_bool: bool = False) -> NodeFacts:
        return NodeFacts(tuple(Interval.point(v) for v in values), is_bool,
                         tuple(Lin.constant(v) for v in values))

    @staticmethod
    def of_unknown(width: int, reason: str) -> NodeFacts:
        return NodeFacts((UNBOUNDED,) * width, unknown=reason or "unknown")

    def as_bool(self) -> NodeFacts:
        return dataclasses.replace(self, ranges=tuple(r if r.is_bool else BOOL
                                                      for r in self.ranges), is_bool=True)

    def broadcast(self, width: int) -> NodeFacts:
        if self.width == width:
            return self
        if self.width != 1:
            raise ValueError(f"cannot broadcast a stream of width {self.width} to {width}")
        return NodeFacts(tuple(self.ranges) * width, self.is_bool,
                         None if self.forms is None else tuple(self.forms) * width)

    def columns(self, picked: Sequence[int]) -> NodeFacts:
        return NodeFacts([self.ranges[i] for i in picked], self.is_bool,
                         None if self.forms is None else [self.forms[i] for i in picked])


def const_values(value: object, width: int) -> list[float]:
    """A Python number or a constant tensor of shape [], [w], [1, w] as ``width`` floats."""
    if isinstance(value, (bool, int, float)):
        return [float(value)] * width
    if isinstance(value, torch.Tensor):
        flat = value.detach().to(torch.float64).reshape(-1)
        if value.dim() > 2 or (value.dim() == 2 and value.shape[0] != 1):
            raise ValueError(f"a constant of shape {tuple(value.shape)} does not act per "
                             "position")
        if flat.numel() == 1:
            return [float(flat[0])] * width
        if flat.numel() != width:
            raise ValueError(f"a constant of width {flat.numel()} does not match width {width}")
        return [float(v) for v in flat]
    raise TypeError(f"expected a stream or a constant, got {type(value).__name__}")


def is_constant(value: object) -> bool:
    return isinstance(value, (bool, int, float, torch.Tensor))


def as_facts(value: object, width: int) -> NodeFacts:
    """A stream argument's facts broadcast to ``width``, or a constant's (lower's to_stream)."""
    if isinstance(value, NodeFacts):
        return value.broadcast(width)
    is_bool = isinstance(value, bool) or (isinstance(value, torch.Tensor)
                                          and value.dtype == torch.bool)
    return NodeFacts.const(const_values(value, width), is_bool)


def scaled(x: NodeFacts, ks: Sequence[float]) -> NodeFacts:
    """x * k per column, k constants (lower.rules.scaled_stream)."""
    return NodeFacts([r.scale(k) for r, k in zip(x.ranges, ks, strict=True)], False,
                     None if x.forms is None else [c * k for c, k in zip(x.forms, ks,
                                                                       strict=True)])


def divided(x: NodeFacts, ks: Sequence[float]) -> NodeFacts:
    """x / k per column, one correctly rounded division (lower.rules.divided_stream)."""
    return NodeFacts([r.divided(k) for r, k in zip(x.ranges, ks, strict=True)], x.is_bool,
                     None if x.forms is None else [c.divided(k) for c, k in zip(x.forms, ks,
                                                                              strict=True)])


class FactsError(ValueError):
    """A facts rule cannot say anything of this node (its facts become unknown)."""


@dataclass
class FactsCtx:
    """What a facts rule sees: the node, its shape, the vocabulary, the longest context, and
    the analysis' atoms (the token stream's, the decoded position's, fresh ones)."""

    node: torch.fx.Node
    vocab: Vocab
    max_seq_len: int
    analysis: Analysis = field(repr=False)

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def shape(self) -> NodeShape:
        record = shape(self.node)
        if record is None:
            raise FactsError(f"{self.name} has no shape record (run capture.propagate)")
        return record

    @property
    def out_width(self) -> int:
        return self.shape.width

    @property
    def tokens(self) -> NodeFacts:
        """The token stream's facts: one BOOL column per token."""
        return self.analysis.tokens

    @property
    def input_node(self) -> torch.fx.Node:
        return next(n for n in self.node.graph.nodes if n.op == "placeholder")

    def bos_row(self, arg_index: int, kwarg: str | None = None) -> torch.Tensor | None:
        """An argument's value at <bos> (position 0 sees only <bos>), None if not a stream."""
        if arg_index < len(self.node.args):
            arg = self.node.args[arg_index]
        else:
            arg = self.node.kwargs.get(kwarg) if kwarg else None
        record = shape(arg) if isinstance(arg, torch.fx.Node) else None
        return None if record is None else record.bos

    def bos_form(self) -> Lin:
        """1 at <bos>, else 0: the token stream's <bos> column."""
        forms = self.tokens.forms
        assert forms is not None
        return forms[self.vocab.bos_id]

    def position_form(self) -> Lin:
        """The decoded position, one atom per program (lowering builds it once)."""
        return self.analysis.shared_atom("position", Interval(0, self.max_seq_len - 1, True))

    def grid(self, form: Lin | None, rng: Interval) -> ffn.Grid | None:
        """The lattice a column lives on, from its own facts and those of its form's atoms
        (lower.rules.grid, with atoms for signals)."""
        if form is None:
            return ffn.grid_of(Lin({-1: 1.0}), rng, lambda _: UNBOUNDED)
        return ffn.grid_of(form, rng, self.analysis.atom_range)

    def fresh(self, ranges: Sequence[Interval]) -> list[Lin]:
        """New atoms holding ``ranges``: the forms of a non-linear result's columns."""
        return self.analysis.fresh(ranges)

    def error(self, what: str) -> FactsError:
        return FactsError(what)


def _has_facts(value: Any) -> bool:
    if isinstance(value, NodeFacts):
        return True
    if isinstance(value, (list, tuple)):
        return any(_has_facts(v) for v in value)
    if isinstance(value, dict):
        return any(_has_facts(v) for v in value.values())
    return False


def _has_opaque(value: Any) -> bool:
    """A non-stream facts value an intrinsic reads (a selector's, from tw.select)."""
    if getattr(value, "tw_facts", False):
        return True
    if isinstance(value, (list, tuple)):
        return any(_has_opaque(v) for v in value)
    return False


@dataclass(frozen=True)
class Opaque:
    """What the analysis knows of a non-stream value that failed: nothing, and why."""

    unknown: str
    tw_facts = True


class Analysis(torch.fx.Interpreter):
    """Runs the graph on facts: the placeholder is the token stream, constants fold, every
    other call runs its op's facts rule (unknown facts where there is none, or it raises)."""

    def __init__(self, gm: torch.fx.GraphModule, vocab: Vocab, max_seq_len: int):
        super().__init__(gm, garbage_collect_values=False)
        self.extra_traceback = False
        self.vocab, self.max_seq_len = vocab, max_seq_len
        self.atoms: list[Interval] = []
        self.shared: dict[str, Lin] = {}
        self.result: dict[str, NodeFacts] = {}
        token_ranges = [BOOL] * len(vocab)
        self.tokens = NodeFacts(token_ranges, False, self.fresh(token_ranges))

    def fresh(self, ranges: Sequence[Interval]) -> list[Lin]:
        """One new atom per column, holding that column's facts."""
        start = len(self.atoms)
        self.atoms += [dataclasses.replace(r, noise=0.0) for r in ranges]
        return [Lin.of(start + i) for i in range(len(ranges))]

    def atom_range(self, atom: int) -> Interval:
        return self.atoms[atom] if 0 <= atom < len(self.atoms) else UNBOUNDED

    def shared_atom(self, key: str, rng: Interval) -> Lin:
        if key not in self.shared:
            (self.shared[key],) = self.fresh([rng])
        return self.shared[key]

    def analyse(self) -> dict[str, NodeFacts]:
        with using_vocab(self.vocab):
            self.run(self.tokens, enable_io_processing=False)
        return self.result

    def run_node(self, n: torch.fx.Node) -> Any:
        self.node = n
        try:
            value = super().run_node(n)
        except Exception as e:  # never a refusal: the node's facts are unknown
            reason = f"{type(e).__name__}: {e}".splitlines()[0]
            record = shape(n)
            value = NodeFacts.of_unknown(record.width, reason) if record is not None \
                else Opaque(reason)
        if isinstance(value, NodeFacts):
            if any(r.noise for r in value.ranges):
                value = dataclasses.replace(value, ranges=[dataclasses.replace(r, noise=0.0)
                                                           for r in value.ranges])
            if value.forms is None:
                value = dataclasses.replace(value, forms=self.fresh(value.ranges))
            value = self._token_ranges(value)
            self.result[n.name] = value
        return value

    def _token_ranges(self, value: NodeFacts) -> NodeFacts:
        """Each column that is an affine form of the token stream's atoms bounded by its
        values over the vocabulary, as lowering does (``ir.ranges.within_token_values``)."""
        assert value.forms is not None and self.tokens.forms is not None
        ranges = [within_token_values(r, f, self.tokens.forms)
                  for f, r in zip(value.forms, value.ranges, strict=True)]
        return value if ranges == list(value.ranges) else dataclasses.replace(value,
                                                                              ranges=ranges)

    def call_function(self, target: Any, args: Any, kwargs: Any) -> Any:
        return self._call(target, args, kwargs)

    def call_method(self, target: Any, args: Any, kwargs: Any) -> Any:
        return self._call(target, args, kwargs)

    def _call(self, target: Any, args: Any, kwargs: Any) -> Any:
        node = self.node
        intrinsic_reads = node.op == "call_function" and info(target) is not None and \
            _has_opaque((args, tuple(kwargs.values())))
        if not _has_facts((args, kwargs)) and not intrinsic_reads:  # constants: fold
            if node.op == "call_function":
                return target(*args, **kwargs)
            return getattr(args[0], target)(*args[1:], **kwargs)
        spec = spec_of(node)
        if spec is None or spec.facts is None:
            raise FactsError(f"no facts rule for {op_name(node)}")
        ctx = FactsCtx(node, self.vocab, self.max_seq_len, self)
        return spec.facts(ctx, *args, **kwargs)

    def output(self, target: Any, args: Any, kwargs: Any) -> Any:
        return args[0]


def analyse(gm: torch.fx.GraphModule, vocab: Vocab, max_seq_len: int) -> dict[str, NodeFacts]:
    """The facts of every stream node of ``gm`` (annotated by ``capture.propagate``), by fx
    node name: what lowering would establish of its exact values, without lowering."""
    return Analysis(gm, vocab, max_seq_len).analyse()
