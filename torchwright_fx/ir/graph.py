"""Primitive graph.

A *signal* is one scalar per position that some producer materialises into one residual
column. Producers are the embedding (per-token tables, free), FFN banks (gated-MLP lanes)
and attention heads. Everything a producer reads is a ``Lin`` (affine form) over earlier
signals, so linear maps, adds, concats and slices never become nodes (see ``linear.py``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torchwright_fx.base.machines import FULL, MachineKind, Precision, machine_kind, precision_of
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import Interval
from torchwright_fx.vocab import Vocab

EMBED = -1  # producer id of the embedding


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


@dataclass(frozen=True)
class NodeRecord:
    """What lowering established about one fx node: its columns (affine forms over signals)
    and one ``Interval`` per column (value range, lattice, integrality, fp32 noise bound). The
    rest of the pipeline (probe, circuit map, plots, ``Compiled.facts``) reads this record."""

    name: str
    source: str  # the user's source line
    columns: tuple[Lin, ...]
    intervals: tuple[Interval, ...]
    error_bound: float | None = None  # a requested approximation's bound (tw.piecewise of sympy)

    @property
    def width(self) -> int:
        return len(self.columns)


@dataclass(frozen=True)
class Check:
    """A ``tw.check`` on a node: ``predicate`` over its compiled values, verified by probe."""

    node: str
    predicate: Callable[[Any], Any]
    message: str
    source: str


ALL_POSITIONS = -1  # the den_group of a mean without `where`: its count is position + 1


@dataclass(frozen=True)
class CountedMean:
    """A mean built from counts (families/counts.py): its column holds ``total / m``, the mean
    less its first value, for whole numbers total and m (both exact columns) where m >= 1, and
    ``at_empty`` where m is 0 (None: m is never 0). Means of one ``group`` average the same
    rows, so their m is one number."""

    total: Lin
    rows: Callable[[], Lin]  # m, built on demand (the exact position + 1 for a whole context)
    total_hi: float
    rows_hi: float
    group: int
    at_empty: float | None


@dataclass
class Shared:
    """Sub-results built once per program and read by every op that needs them."""

    position: Lin | None = None  # the decoded position (ops/position.py)
    inverse_position: Lin | None = None  # fl(1 / (i + 1)), the head the position decodes
    position_squared: Lin | None = None  # its square, for tw.gather (families/positional.py)
    position_squared_error: float = 0.0  # |position_squared - position**2|
    exact_position: Lin | None = None  # the position snapped onto the integers (gather)
    # a counted mean's column -> how it was counted: a comparison of means compares counts
    counted_means: dict[int, CountedMean] = field(default_factory=dict)
    indicators: dict[tuple, Lin] = field(default_factory=dict)  # selection's value indicators
    # the least head size at which no selection would have been split into digits to fit the
    # head (families/selection.content); 0 where none was
    split_d_head: int = 0


@dataclass(repr=False)
class Program:
    """The lowered program: what the scheduler and emitter consume. Lowering builds it; each
    pass returns a new one (``copy``) and ``check`` states what every stage may rely on."""

    vocab: Vocab
    machine: MachineKind
    signals: dict[int, Signal] = field(default_factory=dict)
    embed_tables: dict[int, tuple[float, ...]] = field(default_factory=dict)  # signal -> row/token
    producers: dict[int, Producer] = field(default_factory=dict)
    output: Lin = field(default_factory=Lin)
    output_range: Interval = field(default_factory=lambda: Interval.point(0.0))  # its facts
    approximations: list[str] = field(default_factory=list)  # accepted with exact=False
    nodes: dict[str, NodeRecord] = field(default_factory=dict)  # fx node name -> its record
    checks: list[Check] = field(default_factory=list)
    live: frozenset[int] | None = None  # signals something reads (None until passes.dce)
    shared: Shared = field(default_factory=Shared)
    # the arithmetics the build is certified for (base/machines.py); a name is accepted too
    precision: Precision = FULL
    # the geometry's head size (lowering sets it): every head's, and the emitted head_dim even
    # where the program has no head of its own (0: unknown, as in hand-built test programs)
    head_size: int = 0
    # the geometry's rotary dims, and the K rows of a head that attends to its own position
    # (a cancel head's: schedule/cancels.py), which the scheduler needs to know which heads
    # can share K/V blocks (schedule/kv_groups.py); 0 and () where not set
    rotary: int = 0
    self_key: tuple[Lin, ...] = ()
    share_kv: bool = False  # the heads of a layer may share K/V blocks (Options.share_kv)
    # half precision: the output as step columns u_t = [code >= t] for t in codes[1:], so that
    # lm_head gives token t the logit G * (u_t - u_{t+1}) (one-hot; ``emit/half.py``)
    output_steps: tuple[Lin, ...] = ()
    output_codes: tuple[int, int] = (0, -1)
    # E = [position = max_seq_len - 1] (ops/end.py): lm_head adds end_gain * E to <eos>'s logit,
    # so the model ends its answer where the certificate ends; None where not built
    end_flag: Lin | None = None
    end_gain: float = 0.0
    # half precision: what tw.claim declared of an affine form (its range and lattice), which
    # the certificate may take as the form's values (emit/certify_half.py)
    claims: list[tuple[Lin, Interval]] = field(default_factory=list)
    # half precision: signals whose values are not exact but bounded, checked where they are
    # built (a count's averaging head and its decoder, ops/count_half.py): (every value a
    # runtime can give them, whether fp16 must keep their bits through the norm), which the
    # certificate takes instead of replaying their producer
    inexact: dict[int, tuple[Any, bool]] = field(default_factory=dict)
    # half precision: signals whose bank the certificate replays lane by lane (each lane on
    # its own inputs) rather than on its inputs' joint domain: a count's window indicators,
    # whose bank reads every parent's indicator (a joint domain of 2**k points)
    by_lane: set[int] = field(default_factory=set)
    _embed_index: dict[tuple[float, ...], int] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.machine = machine_kind(self.machine)  # a name ("swiglu") is accepted too
        self.precision = precision_of(self.precision)

    def copy(self, **changes: Any) -> Program:
        """A new program sharing nothing mutable with this one (records are frozen; producer
        lists are copied), with ``changes`` applied: what a pass returns."""
        fields: dict[str, Any] = dict(
            signals=dict(self.signals), embed_tables=dict(self.embed_tables),
            producers={pid: _copy_producer(p) for pid, p in self.producers.items()},
            approximations=list(self.approximations), nodes=dict(self.nodes),
            checks=list(self.checks), claims=list(self.claims), inexact=dict(self.inexact),
            by_lane=set(self.by_lane),
            shared=dataclasses.replace(self.shared, indicators=dict(self.shared.indicators)),
            _embed_index=dict(self._embed_index))
        fields.update(changes)
        return dataclasses.replace(self, **fields)

    def final_reads(self) -> set[int]:
        """The signals read after the last layer: the output's, and its step columns in half
        precision (``output_steps``)."""
        out = set(self.output.signals())
        if self.end_flag is not None:
            out |= self.end_flag.signals()
        for lin in self.output_steps:
            out |= lin.signals()
        return out

    def live_signals(self) -> frozenset[int]:
        """The signals dead-code elimination kept; a stage after it may rely on this."""
        if self.live is None:
            raise RuntimeError("Program.live is set by passes.dce.eliminate_dead; run it first")
        return self.live

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

    # -- printing (ir/printer.py) ------------------------------------------------------------
    def __str__(self) -> str:
        """One line per producer, the output, the node records: ``ir/printer.py``."""
        from torchwright_fx.ir.printer import format_program

        return format_program(self)

    def __repr__(self) -> str:
        from torchwright_fx.ir.printer import summary

        return summary(self)

    # -- invariants -----------------------------------------------------------------------
    def check(self, stage: str) -> None:
        """What every stage after ``stage`` relies on; an AssertionError names the broken one
        (a compiler bug, never a user error)."""
        def reads_known(lin: Lin, where: str) -> None:
            unknown = lin.signals() - self.signals.keys()
            assert not unknown, f"after {stage}: {where} reads unknown signals {sorted(unknown)}"

        for sid, sig in self.signals.items():
            assert sig.id == sid, f"after {stage}: signal {sid} records id {sig.id}"
        for sid, table in self.embed_tables.items():
            assert self.signals[sid].producer == EMBED and len(table) == len(self.vocab), \
                f"after {stage}: embedding table of signal {sid} is not one row per token"
        for pid, p in self.producers.items():
            assert p.id == pid, f"after {stage}: producer {pid} records id {p.id}"
            for s in p.reads():
                assert s in self.signals, f"after {stage}: {p.name} reads unknown signal {s}"
            for s in p.outputs:
                assert self.signals[s].producer == pid, \
                    f"after {stage}: {p.name} writes signal {s} recorded as another producer's"
            if isinstance(p, Head):
                assert len(p.q) == len(p.k) and len(p.v) == len(p.outputs), \
                    f"after {stage}: head {p.name} has mismatched q/k or v/outputs"
        reads_known(self.output, "the output")
        if self.end_flag is not None:
            reads_known(self.end_flag, "the end-of-context flag")
        for rec in self.nodes.values():
            assert len(rec.columns) == len(rec.intervals), \
                f"after {stage}: node {rec.name} has {len(rec.columns)} columns and " \
                f"{len(rec.intervals)} intervals"
        if self.live is not None:
            assert self.final_reads() <= self.live, \
                f"after {stage}: the output reads dead signals"
            writers = {s for p in self.producers.values() for s in p.outputs}
            for p in self.producers.values():
                assert p.reads() <= self.live, f"after {stage}: {p.name} reads a dead signal"
            for s in self.live:
                assert s in self.embed_tables or s in writers, \
                    f"after {stage}: live signal {s} has no producer"


def _copy_producer(p: Producer) -> Producer:
    if isinstance(p, FFN):
        return FFN(p.id, list(p.lanes), {s: dict(w) for s, w in p.outputs.items()}, p.name,
                   p.source)
    return Head(p.id, list(p.q), list(p.k), list(p.v), list(p.outputs), p.name, p.source)
