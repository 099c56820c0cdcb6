"""The compiler as a chain of plain stages (docs/design-notes.md §2); each can be run and
inspected alone.

    fn --capture--> fx.GraphModule --propagate--> annotated fx graph
       --lower--> Program --passes--> Program --schedule--> Plan --columns--> Plan
       --place--> Placement --emit--> Machine
       --backends--> runtime | Hugging Face directory (+ circuit.json) | GGUF | ONNX

``Options.dump`` (or the environment variable ``TORCHWRIGHT_FX_DUMP``; the option wins) names a
directory where ``build`` writes each stage's record as text: ``01-lower.txt``, one file per
pass, the plan after schedule and after columns, the placement (``docs/ir.md``).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch.fx

from torchwright_fx import progress
from torchwright_fx.base.errors import CompileError, GeometryError, HeadTooSmall
from torchwright_fx.base.machines import MACHINES, PRECISIONS, MachineName
from torchwright_fx.base.numerics import (
    AUTO_D_HEAD_LIMIT,
    DEFAULT_LENGTH,
    HALF_D_HEAD,
    HALF_POSITIONS,
)
from torchwright_fx.capture.propagate import propagate
from torchwright_fx.capture.tracer import capture
from torchwright_fx.emit import certify_half, half
from torchwright_fx.emit.emitter import emit
from torchwright_fx.emit.machine import Machine
from torchwright_fx.emit.placement import Placement, place
from torchwright_fx.ir.graph import Program
from torchwright_fx.ir.printer import format_placement, format_plan, format_program
from torchwright_fx.ir.ranges import Interval
from torchwright_fx.lower.lowering import lower
from torchwright_fx.ops.attention import Geometry
from torchwright_fx.passes.dce import eliminate_dead
from torchwright_fx.passes.fold_embedding import fold_embedding
from torchwright_fx.schedule import bounds, columns, heuristic
from torchwright_fx.schedule.balance import estimate
from torchwright_fx.schedule.columns import exact_width, usable_width
from torchwright_fx.schedule.plan import Plan, layer_count
from torchwright_fx.vocab import Vocab


@dataclass
class Options:
    d_model: int | None = None  # None: the width of fewest parameters that fits
    # None: the least head size of the geometry (8; 16 beyond SINGLE_PLANE_LENGTH; HALF_D_HEAD
    # in half precision), raised to the smallest power of two up to AUTO_D_HEAD_LIMIT that every
    # head of the program fits when one needs more (a selection on many values, gather or argmax
    # at long lengths); Build.d_head_reason says why. A number: that size, refused if a head
    # needs more. transformers and llama.cpp take any; vLLM's attention takes 32 and up
    # (base/numerics.VLLM_HEAD_SIZES): a build for vLLM asks for d_head=32.
    d_head: int | None = None
    # None: 512, or in half precision HALF_POSITIONS (128: the length its latch and position
    # certify; a program of shifts alone may ask for up to 16384)
    max_seq_len: int = None  # type: ignore[assignment]  # an int after __post_init__
    optimize: int = 0  # 0: heuristic; 1-3: CP-SAT with growing time limits
    machine: MachineName | None = None  # None: from the op library used, else swiglu
    exact: bool = True  # False: accept steps without a lattice as ramps (listed in report())
    # "code": the output is certified to be a whole token code, decoded with a certified logit
    # margin. "value": any number, for reading values from hidden states; no generation.
    output: str = "code"
    # a one-line progress display on stderr (torchwright_fx/progress.py). None: on a terminal
    # outside CI only; True: always; False: never
    progress: bool | None = None
    # a directory to write each stage's record into as text (01-lower.txt, 02-fold_embedding.txt,
    # ...; docs/ir.md). None: the environment variable TORCHWRIGHT_FX_DUMP if set, else none
    dump: str | os.PathLike[str] | None = None
    # the arithmetics the build is certified for: "fp32" (fp32 only), or "half" (fp32, fp16
    # and bf16: every weight and residual value exact in each, certified by replaying the build
    # in each format; docs/half-precision.md). Constructions half cannot hold are refused.
    precision: str = "fp32"
    # True: the heads of a layer share K and V blocks where their keys and values fit one
    # block (Phi-3's num_key_value_heads < num_attention_heads; schedule/kv_groups.py): fewer
    # weights and a smaller KV cache, the same scores. False: a K and V block per head
    share_kv: bool = True

    def __post_init__(self) -> None:
        if self.max_seq_len is None:
            self.max_seq_len = HALF_POSITIONS if self.precision == "half" else DEFAULT_LENGTH
        choices = {"machine": (None, *MACHINES), "optimize": (0, 1, 2, 3),
                   "output": ("code", "value"), "exact": (True, False),
                   "progress": (None, True, False), "precision": tuple(PRECISIONS),
                   "share_kv": (True, False)}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise CompileError(f"{name}={getattr(self, name)!r}: choose one of "
                                   f"{', '.join(repr(a) for a in allowed)}")
        for name in ("d_head", "max_seq_len"):
            value = getattr(self, name)
            if (not isinstance(value, int) or isinstance(value, bool)) and \
                    not (name == "d_head" and value is None):
                raise CompileError(f"{name}={value!r}: a whole number"
                                   + (", or None to let the compiler choose" * (name == "d_head")))
        if self.dump is not None and (not isinstance(self.dump, (str, os.PathLike))
                                      or not os.fspath(self.dump)):
            raise CompileError(f"dump={self.dump!r}: a directory to write each stage's text "
                               "into, or None (then TORCHWRIGHT_FX_DUMP, if set)")
        if self.precision == "half" and self.output != "code":
            raise CompileError("precision='half' certifies token outputs (output='code'); "
                               "read values with precision='fp32'")
        try:
            Geometry(self.head_size, self.max_seq_len, self.half)
        except GeometryError as e:  # no op to name yet: the advice goes into the message
            raise GeometryError(f"{e}; {e.advice}", e.advice) from None
        if self.d_model is not None and (not isinstance(self.d_model, int) or
                                         not exact_width(self.d_model) or self.d_model < 16):
            start = self.d_model if isinstance(self.d_model, int) else 16
            near = [d for d in range(max(16, start), 2 ** 16) if usable_width(d)][:2]
            raise CompileError(f"d_model={self.d_model!r}: a width >= 16 at which the RMSNorm "
                               f"identity holds (fp32 rounds d * fl(1/d) to 1), such as "
                               f"{near[0]} or {near[1]}, or None to let the compiler choose the "
                               "width of fewest parameters that fits")

    @property
    def half(self) -> bool:
        return self.precision == "half"

    @property
    def head_size(self) -> int:
        """The head size lowering starts from."""
        if self.d_head is not None:
            return self.d_head
        return HALF_D_HEAD if self.half else Geometry.least_d_head(self.max_seq_len)


@dataclass
class Build:
    program: Program
    plan: Plan
    machine: Machine
    placement: Placement  # which heads and lanes each producer became (the circuit map)
    seconds: dict[str, float] = field(default_factory=dict)
    critical_path_layers: int = 0
    peak_live_width: int = 0
    # why d_head=None chose more than the least head size: "at 8, <HeadTooSmall.reason>"
    d_head_reason: str = ""
    parameter_bound: int = 0  # bounds.parameter_bound: no checkpoint of its heads goes under


def trace(fn: Callable[..., Any], vocab: Vocab) -> torch.fx.GraphModule:
    return propagate(capture(fn, vocab), vocab)


def sized_lowering(gm: torch.fx.GraphModule, vocab: Vocab, opts: Options, start: int = 0
                   ) -> tuple[Program, Geometry, str]:
    """The lowered program, its geometry and why its head size grew: ``opts.d_head``, or with
    None the smallest power of two from ``start`` (else the least) that every construction
    fits (on a HeadTooSmall, the next one, up to the size it names; a refusal after a selection
    was split into digits to fit the head retries at the size that splits nothing; the graph
    is not mutated by lowering, so a retry starts clean)."""
    geom, reason = Geometry(start or opts.head_size, opts.max_seq_len, opts.half), ""
    while True:
        try:
            prog = lower(gm, vocab, geom, opts.machine, opts.exact, opts.output == "code",
                         opts.precision, opts.share_kv)
            return prog, geom, reason
        except HeadTooSmall as e:
            if opts.d_head is not None or not geom.d_head < e.d_head <= AUTO_D_HEAD_LIMIT:
                raise
            reason = reason or f"at {geom.d_head}, {e.reason.splitlines()[0]}"
            # the next size first: a selection too wide for this head may fit it split into
            # digits (chosen_lowering then weighs the split against the size that needs none)
            geom = Geometry(min(2 * geom.d_head, e.d_head), opts.max_seq_len, opts.half)
        except CompileError as e:
            if opts.d_head is not None or not geom.d_head < e.split_d_head <= AUTO_D_HEAD_LIMIT:
                raise
            reason = reason or (f"at {geom.d_head}, a selection's == split into digits to fit "
                                "the head was refused")
            geom = Geometry(e.split_d_head, opts.max_seq_len, opts.half)


def chosen_lowering(gm: torch.fx.GraphModule, vocab: Vocab, opts: Options
                    ) -> tuple[Program, Program, Geometry, str]:
    """``sized_lowering``, and with d_head=None where it split a selection's == into digits to
    fit the head, also the lowering at the size that splits nothing: of the two, the one of
    fewer layers, then fewer parameters (the heuristic's placement, ``balance.estimate``).
    Returns the lowered program, the same after the passes, its geometry and the reason."""
    prog, geom, reason = sized_lowering(gm, vocab, opts)
    passed = run_passes(prog)
    split = prog.shared.split_d_head
    if opts.d_head is not None or not geom.d_head < split <= AUTO_D_HEAD_LIMIT:
        return prog, passed, geom, reason
    try:
        other, other_geom, other_reason = sized_lowering(gm, vocab, opts, split)
    except CompileError:
        return prog, passed, geom, reason
    other_passed = run_passes(other)

    def cost(p: Program) -> tuple[int, int]:
        stage = heuristic.schedule(p).stage
        return layer_count(stage.values()), estimate(p, stage)

    if cost(other_passed) < cost(passed):
        why = other_reason or (f"at {geom.d_head}, a selection's == is split into digits, "
                               "which costs more")
        return other, other_passed, other_geom, why
    return prog, passed, geom, reason


class Dump:
    """Writes a stage's record as text into ``directory`` (``NN-<stage>.txt``, numbered in the
    order written); with no directory it does nothing, and formats nothing."""

    def __init__(self, directory: str | os.PathLike[str] | None, title: str = ""):
        self.directory = None if directory is None else Path(directory)
        self.title, self.written = title, 0

    def __call__(self, stage: str, text: Callable[..., str], *record: Any) -> None:
        """Write ``text(*record)`` as ``NN-<stage>.txt``."""
        if self.directory is None:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        self.written += 1
        path = self.directory / f"{self.written:02d}-{stage}.txt"
        path.write_text(f"# {self.title} after {stage}\n{text(*record)}\n")


def program_text(prog: Program) -> str:
    """A program as dumped: every producer with its lanes or head dims."""
    return format_program(prog, detail=True)


def dump_directory(opts: Options) -> str | os.PathLike[str] | None:
    """Where ``build`` dumps: ``opts.dump``, else ``TORCHWRIGHT_FX_DUMP``, else nowhere."""
    return opts.dump if opts.dump is not None else os.environ.get("TORCHWRIGHT_FX_DUMP") or None


# The passes, in order: each takes a Program and returns a new one (it checks its result).
PASSES: list[tuple[str, Callable[[Program], Program]]] = [
    ("fold_embedding", fold_embedding),
    ("dce", eliminate_dead),
]


def run_passes(prog: Program, dump: Dump | None = None) -> Program:
    for name, run in PASSES:
        prog = run(prog)
        if dump is not None:
            dump(name, program_text, prog)
    return prog


def lower_program(gm: torch.fx.GraphModule, vocab: Vocab, opts: Options) -> Program:
    return chosen_lowering(gm, vocab, opts)[1]


def lower_facts(gm: torch.fx.GraphModule, vocab: Vocab, opts: Options
                ) -> dict[str, list[Interval]]:
    """The facts of every fx node (a lowering run for its facts only, e.g. to show them)."""
    prog, _, _ = sized_lowering(gm, vocab, opts)
    return {name: list(rec.intervals) for name, rec in prog.nodes.items()}


def schedule_stages(prog: Program, opts: Options) -> Plan:
    """A stage per producer: the heuristic's plan, improved by CP-SAT when ``optimize``."""
    plan = heuristic.schedule(prog)
    if opts.optimize > 0:
        progress.stage(f"schedule: CP-SAT solve (optimize={opts.optimize})")
        from torchwright_fx.schedule import cpsat  # imported lazily: OR-Tools is slow to load

        warm, plan = plan, cpsat.schedule(prog, plan, opts.optimize, d_model=opts.d_model)
        if opts.d_model is None and not prog.precision.half and warm.stage != plan.stage:
            # the solver weighs heads and lanes, not the width its spreading costs: keep the
            # heuristic's stages where they are no more layers and fewer parameters
            def cost(p: Plan) -> tuple[int, float]:
                return p.n_layers, columns.parameters(prog, columns.allocate(prog, p, None))

            if cost(warm) < cost(plan):
                plan = dataclasses.replace(plan, stage=dict(warm.stage))
    return plan


def allocate_columns(prog: Program, plan: Plan, opts: Options, energy: float | None = None
                     ) -> Plan:
    """A new plan with a residual column per live signal, checked. ``energy``: a half build's
    residual energy, from which the width its readers' weights need follows."""
    if opts.optimize > 0:
        progress.stage("schedule: residual columns")
    at_least = 0 if energy is None or opts.d_model is not None else \
        half.width_for_readers(prog, energy, columns.MIN_D_MODEL, columns.MAX_D_MODEL)
    plan = columns.allocate(prog, plan, opts.d_model, at_least)
    plan.check(prog)
    return plan


def schedule_program(prog: Program, opts: Options) -> Plan:
    return allocate_columns(prog, schedule_stages(prog, opts), opts)


def build(gm: torch.fx.GraphModule, vocab: Vocab, opts: Options) -> Build:
    """Every stage in order; ``dump`` writes each one's record when a directory is set."""
    dump = Dump(dump_directory(opts), type(gm).__name__)  # gm's class: the fn's name
    with progress.compiling(type(gm).__name__, opts.progress):
        t0 = time.perf_counter()
        progress.stage("lower")
        lowered, prog, geom, reason = chosen_lowering(gm, vocab, opts)
        if dump.directory is not None:
            dump("lower", program_text, lowered)
            run_passes(lowered, dump)  # each pass dumped under its name (passes are pure)
        t1 = time.perf_counter()
        progress.stage("schedule")
        plan = schedule_stages(prog, opts)
        dump("schedule", format_plan, prog, plan)
        energy = None
        if prog.precision.half:  # the norm sized from the values each column can take
            progress.stage("certify: value sets")
            energy = certify_half.energy(prog, certify_half.values(prog))
        plan = allocate_columns(prog, plan, opts, energy)
        dump("columns", format_plan, prog, plan)
        t2 = time.perf_counter()
        progress.stage("emit")
        placed = place(prog, plan, geom, opts.share_kv)
        dump("place", format_placement, placed)
        machine = emit(prog, plan, geom, placed, energy)
        if prog.precision.half:
            progress.stage("certify: replay in fp32, fp16, bf16, llama.cpp")
            machine.meta["half_leads"] = certify_half.certify(prog, plan, machine, placed)
        t3 = time.perf_counter()
    seconds = {"lower": t1 - t0, "schedule": t2 - t1, "emit": t3 - t2}
    return Build(prog, plan, machine, placed, seconds, bounds.critical_path_layers(prog),
                 bounds.peak_live_width(prog, plan), reason,
                 bounds.parameter_bound(prog))
