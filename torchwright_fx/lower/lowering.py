"""Lowering: an ``fx.Interpreter`` over the annotated graph that turns every node into a
``Stream`` by its registered rule (``capture.registry``: one ``OpSpec`` per op).

The graph is read, never written: what lowering learns about a node goes into the program's
``NodeRecord`` for it (``Program.nodes``). Arguments are converted and errors wrapped once,
here: a rule raises ``CompileError`` (via ``ctx.error``) or a construction's ``RangeError`` /
``GeometryError``, and the user sees the line of the node being lowered."""

from __future__ import annotations

from typing import Any

import torch
import torch.fx

from torchwright_fx.analysis.facts import NodeFacts, analyse
from torchwright_fx.base import numerics
from torchwright_fx.base.errors import (
    CompileError,
    GeometryError,
    node_error,
    node_source,
    op_name,
)
from torchwright_fx.base.machines import (
    MachineKind,
    MachineName,
    arithmetic,
    machine_kind,
    precision_of,
)
from torchwright_fx.capture.registry import info, spec_of, using_vocab
from torchwright_fx.ir.graph import NodeRecord, Program
from torchwright_fx.ir.ranges import BOOL, within_token_values
from torchwright_fx.lower.context import LowerCtx
from torchwright_fx.lower.output import certify_output, decodable, end_of_context
from torchwright_fx.lower.rules import exact_within, noise_origin
from torchwright_fx.lower.stream import Stream
from torchwright_fx.ops import attention, decode, ffn, half
from torchwright_fx.ops.attention import Geometry
from torchwright_fx.vocab import Vocab

# What to write instead of torch ops that act across positions (by the op's name).
HINTS = {
    "cumsum": "a running sum over positions is tw.mean(v) * (tw.position(x) + 1), whole "
              "for whole v: torch.round it (or tw.mean(v, where=w) times a count); a running "
              "count of a 0/1 stream is tw.selector_width(tw.select(w, w, lambda k, q: k == 1))",
    "roll": "positions move only backwards, through attention: tw.shift(v, k) is v k "
            "positions back",
    "flip": "a causal model cannot read ahead: print the input backwards after a trigger with "
            "tw.gather(v, at) (see examples/sort_digits_v1.py)",
    "sort": "sort by counting: for each output step, the value v whose count of smaller keys "
            "equals the step (tw.select / tw.selector_width, or tw.mean per value)",
    "cumprod": "no running product: take logs of a bounded value with tw.piecewise and a "
               "running mean (tw.mean), or carry it one step at a time with tw.shift",
    **{name: "a function of one value is a table: of a whole number, tw.lookup(v, {k: f(k) "
             "for k in range(lo, hi + 1)}) (exact); of a real value, "
             f"tw.piecewise(torch.{name}, v, breakpoints) over v's range (approximate)"
       for name in ("exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt",
                    "sin", "cos", "tan", "tanh", "sigmoid", "atan", "erf", "softplus", "gelu",
                    "silu")},
}


def choose_machine(gm: torch.fx.GraphModule, requested: MachineName | None) -> MachineKind:
    """One op library per program: the one its library ops name, else the requested one."""
    first_use: dict[str, torch.fx.Node] = {}
    for node in gm.graph.nodes:
        meta = info(node.target) if node.op == "call_function" else None
        if meta is not None and meta.machine is not None:
            first_use.setdefault(meta.machine, node)
    if len(first_use) > 1:
        (m1, n1), (m2, n2) = list(first_use.items())[:2]
        raise CompileError(
            "the program mixes the two op libraries; a program compiles for one machine:\n"
            f"  {m1}: {node_source(n1)}\n  {m2}: {node_source(n2)}\n"
            "  use torchwright_fx.ops.swiglu or torchwright_fx.ops.relu, not both")
    if first_use:
        (used, node), = first_use.items()
        if requested is not None and machine_kind(requested) is not machine_kind(used):
            raise node_error(node, f"a {used} library op in a program compiled for the "
                                   f"{requested} machine", f"drop machine={requested!r} (the "
                                   f"library op fixes the machine), or use "
                                   f"torchwright_fx.ops.{requested}")
        return machine_kind(used)
    return machine_kind(requested or "swiglu")


def _has_stream(value: Any) -> bool:
    if isinstance(value, Stream):
        return True
    if isinstance(value, (list, tuple)):
        return any(_has_stream(v) for v in value)
    if isinstance(value, dict):
        return any(_has_stream(v) for v in value.values())
    return False


def _has_lowered(value: Any) -> bool:
    """A lowered non-stream value an intrinsic reads (a selector from tw.select)."""
    if getattr(value, "tw_lowered", False):
        return True
    if isinstance(value, (list, tuple)):
        return any(_has_lowered(v) for v in value)
    return False


def token_ranges(tokens: Stream, value: Stream) -> Stream:
    """``value`` with each column that is an affine form of the one-hot token stream bounded
    by its values over the vocabulary (``ir.ranges.within_token_values``)."""
    ranges = [within_token_values(r, col, tokens.cols)
              for col, r in zip(value.cols, value.ranges, strict=True)]
    return value if ranges == list(value.ranges) else Stream(value.cols, ranges)


class Lowering(torch.fx.Interpreter):
    """Runs the graph with lowered values: the placeholder is the token stream, a call on
    constants only runs eagerly (folded), a call on streams runs its op's lowering rule."""

    def __init__(self, gm: torch.fx.GraphModule, prog: Program, geom: Geometry, vocab: Vocab,
                 exact: bool = True, code_output: bool = True,
                 facts: dict[str, NodeFacts] | None = None):
        super().__init__(gm, garbage_collect_values=False)
        self.facts = {} if facts is None else facts  # the analysis' facts, per node (ctx.facts)
        self.extra_traceback = False  # errors name the user's line themselves
        self.prog, self.geom, self.vocab = prog, geom, vocab
        self.exact, self.code_output = exact, code_output
        self.ctx: LowerCtx | None = None
        self.tokens = Stream([prog.embed(tuple(float(i == t) for i in range(len(vocab))), BOOL,
                                         f"x[{vocab.tokens[t]!r}]", "<token stream>")
                              for t in range(len(vocab))], [BOOL] * len(vocab))

    def lower(self) -> Program:
        with using_vocab(self.vocab):
            self.run(self.tokens, enable_io_processing=False)
        self.prog.check("lower")
        return self.prog

    def run_node(self, n: torch.fx.Node) -> Any:
        log: list[str] | None = None if self.exact else []
        self.node, self.ctx = n, None
        with ffn.recording_approximations(log):
            value = super().run_node(n)
        if isinstance(value, Stream):
            value = token_ranges(self.tokens, value)
        self.prog.approximations += [f"{node_source(n)}: {what}" for what in log or []]
        if isinstance(value, Stream):
            self.prog.nodes[n.name] = NodeRecord(
                n.name, node_source(n), tuple(value.cols), tuple(value.ranges),
                None if self.ctx is None else self.ctx.error_bound)
        return value

    def call_function(self, target: Any, args: Any, kwargs: Any) -> Any:
        return self._call(target, args, kwargs)

    def call_method(self, target: Any, args: Any, kwargs: Any) -> Any:
        return self._call(target, args, kwargs)

    def _call(self, target: Any, args: Any, kwargs: Any) -> Any:
        node = self.node
        intrinsic_reads = node.op == "call_function" and info(target) is not None and \
            _has_lowered((args, tuple(kwargs.values())))
        if not _has_stream((args, kwargs)) and not intrinsic_reads:  # constants: fold
            if node.op == "call_function":
                return target(*args, **kwargs)
            return getattr(args[0], target)(*args[1:], **kwargs)
        spec = spec_of(node)
        if spec is None or spec.lower is None:
            name = op_name(node)
            raise node_error(node, f"no lowering for {name}", HINTS.get(
                name.split(".")[-1], "see docs/ops.md for the supported torch ops and tw "
                                     "intrinsics"))
        self.ctx = LowerCtx(self.prog, self.geom, self.vocab, node, self.tokens,
                            facts=self.facts.get(node.name))
        try:
            return spec.lower(self.ctx, *args, **kwargs)
        except GeometryError as e:  # a head that d_head / max_seq_len cannot host
            raise node_error(node, str(e), e.advice) from None
        except (CompileError, AssertionError):
            raise
        except ffn.RangeError as e:  # our own obligations: the message says what to do
            origin = noise_origin(self.ctx, node) if e.noisy else ""
            raise node_error(node, str(e) + origin) from None
        except (ValueError, TypeError, IndexError, KeyError) as e:
            raise node_error(node, f"{type(e).__name__}: {e}") from None

    def output(self, target: Any, args: Any, kwargs: Any) -> Any:
        node, prog = self.node, self.prog
        result = node.args[0]
        value = args[0]
        if not isinstance(value, Stream) or value.width != 1:
            raise node_error(node, "the program must return one code stream of width 1",
                             "return tw.emit(trigger, [...]) or a [seq, 1] stream of token codes")
        src = node_source(result) if isinstance(result, torch.fx.Node) else ""
        prog.output, prog.output_range = value.cols[0], value.ranges[0]
        if not self.code_output:
            return value
        if prog.precision.half:  # one-hot decoding from step columns (ops/half.py)
            try:
                certify_output(prog)
            except CompileError as e:
                raise CompileError(f"{src}\n  {e}" if src else str(e)) from None
            half.output_steps(prog, value.cols[0], value.ranges[0],
                              getattr(result, "name", "output"), src)
            return value
        rctx = LowerCtx(prog, self.geom, self.vocab, result, self.tokens) \
            if isinstance(result, torch.fx.Node) else None
        r = value.ranges[0]
        if rctx is not None and r.integral and r.noise > 0 and (
                r.noise >= numerics.OUTPUT_NOISE_LIMIT
                or decode.margin(prog, value.cols[0], r) <= 0):
            # a whole-number code too noisy to decode: snapped onto its integers (one MLP
            # sublayer) where the reference holds it there, instead of a refusal
            value = exact_within(rctx, value, 0.0)
            prog.output, prog.output_range = value.cols[0], value.ranges[0]
        origin = "" if rctx is None else noise_origin(rctx, rctx.node)
        try:
            certify_output(prog, origin=origin)
        except CompileError as e:
            raise CompileError(f"{src}\n  {e}" if src else str(e)) from None
        if rctx is not None:
            value = decodable(rctx, value)
            prog.output, prog.output_range = value.cols[0], value.ranges[0]
        if decode.margin(prog, prog.output, prog.output_range) <= 0:
            lo, hi = decode.reachable_codes(prog)
            noisy = prog.output_range.noise > 0
            raise CompileError(
                f"{src}\n  the output codes span {lo}..{hi} of a {len(self.vocab)}-token "
                f"vocabulary and fp32 cannot certify the choice between neighbouring tokens "
                f"(the code may be off by {prog.output_range.noise:.3g}{origin})" + (
                    "; compute the code from exact values (tw.lookup results, counts) so "
                    "that it can be snapped, or use a smaller vocabulary" if noisy else
                    "; use a smaller vocabulary"))
        end_of_context(prog, self.geom, self.tokens.cols[self.vocab.bos_id],
                       getattr(result, "name", "output"), src)
        return value


def lower(gm: torch.fx.GraphModule, vocab: Vocab, geom: Geometry,
          machine: MachineName | None = None, exact: bool = True,
          code_output: bool = True, precision: str = "fp32", share_kv: bool = True) -> Program:
    """Every node by its rule. ``exact``: refuse steps the facts cannot prove exact; else
    accept them as ramps and list each in ``Program.approximations`` with the user's line.
    ``precision``: the arithmetics the constructions are built for (``base/machines.py``).
    ``share_kv``: the scheduler may place heads to share K/V blocks (``Options.share_kv``)."""
    prog = Program(vocab, choose_machine(gm, machine), precision=precision_of(precision),
                   head_size=geom.d_head, rotary=geom.rotary,
                   share_kv=share_kv and not geom.half,
                   self_key=() if geom.half else tuple(attention.self_qk(geom)[1]))
    facts = analyse(gm, vocab, geom.max_seq_len)
    with arithmetic(prog.precision):
        try:
            return Lowering(gm, prog, geom, vocab, exact, code_output, facts).lower()
        except CompileError as e:  # d_head=None may retry at a size that splits nothing
            e.split_d_head = prog.shared.split_d_head
            raise
