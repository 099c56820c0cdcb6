"""Primitive graph.

A *signal* is one scalar per position that some producer materialises into one residual
column. Producers are the embedding (per-token tables, free), FFN banks (gated-MLP lanes)
and attention heads. Everything a producer reads is a ``Lin`` (affine form) over earlier
signals, so linear maps, adds, concats and slices never become nodes (see ``linear.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import Interval
from torchwright_fx.vocab import Vocab

EMBED = -1  # producer id of the embedding

MachineKind = Literal["swiglu", "relu"]


@dataclass(frozen=True)
class Signal:
    id: int
    producer: int  # a producer id, or EMBED
    range: Interval
    name: str  # the fx node (and column) it came from
    source: str  # the user's source line, for errors and the probe


@dataclass(frozen=True)
class Lane:
    """One MLP lane: ``act(gate) * up``. On the ReLU machine ``up`` is the constant 1."""

    gate: Lin
    up: Lin


@dataclass
class FFN:
    id: int
    lanes: list[Lane]
    outputs: dict[int, dict[int, float]]  # signal id -> {lane index: down weight}
    name: str
    source: str

    def reads(self) -> set[int]:
        out: set[int] = set()
        for lane in self.lanes:
            out |= lane.gate.signals() | lane.up.signals()
        return out


@dataclass
class Head:
    """One attention head. ``q``/``k`` have d_head entries: the first ``d_rot`` rotate with
    RoPE, the rest are the position-free NoPE tail. Logit scaling is applied by the emitter."""

    id: int
    q: list[Lin]
    k: list[Lin]
    v: list[Lin]
    outputs: list[int]  # one signal per v entry; O is the identity onto them
    name: str
    source: str

    def reads(self) -> set[int]:
        out: set[int] = set()
        for lin in (*self.q, *self.k, *self.v):
            out |= lin.signals()
        return out


Producer = FFN | Head


@dataclass
class Program:
    """The lowered program: what the scheduler and emitter consume."""

    vocab: Vocab
    machine: MachineKind
    signals: dict[int, Signal] = field(default_factory=dict)
    embed_tables: dict[int, tuple[float, ...]] = field(default_factory=dict)  # signal -> row/token
    producers: dict[int, Producer] = field(default_factory=dict)
    output: Lin = field(default_factory=Lin)
    output_range: Interval = field(default_factory=lambda: Interval.point(0.0))  # its facts
    approximations: list[str] = field(default_factory=list)  # accepted with exact=False
    views: dict[str, list[Lin]] = field(default_factory=dict)  # fx node name -> its columns
    sources: dict[str, str] = field(default_factory=dict)  # fx node name -> user source line
    facts: dict[str, list[Interval]] = field(default_factory=dict)  # fx node name -> per column
    live: set[int] = field(default_factory=set)  # signals something reads (set by passes.dce)
    memo: dict[str, object] = field(default_factory=dict)  # shared sub-results (e.g. position)
    _embed_index: dict[tuple[float, ...], int] = field(default_factory=dict, repr=False)

    # -- building -------------------------------------------------------------------------
    def new_signal(self, producer: int, rng: Interval, name: str, source: str) -> int:
        sid = len(self.signals)
        self.signals[sid] = Signal(sid, producer, rng, name, source)
        return sid

    def embed(self, table: tuple[float, ...], rng: Interval, name: str, source: str) -> Lin:
        """A per-token feature; identical tables share one signal."""
        known = self._embed_index.get(table)
        if known is not None and known in self.embed_tables:
            return Lin.of(known)
        sid = self.new_signal(EMBED, rng, name, source)
        self.embed_tables[sid] = table
        self._embed_index[table] = sid
        return Lin.of(sid)

    def next_producer_id(self) -> int:
        return len(self.producers)

    def add(self, producer: Producer) -> None:
        self.producers[producer.id] = producer

    # -- reading --------------------------------------------------------------------------
    def deps(self, producer: Producer) -> set[int]:
        """Producer ids (EMBED included) whose signals this producer reads."""
        return {self.signals[s].producer for s in producer.reads()}

    def readers(self) -> dict[int, list[int]]:
        """signal id -> ids of producers reading it."""
        out: dict[int, list[int]] = {s: [] for s in self.signals}
        for p in self.producers.values():
            for s in p.reads():
                out[s].append(p.id)
        return out
