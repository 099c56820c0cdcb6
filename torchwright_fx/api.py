"""The user's surface: ``tw.trace``, ``@tw.compile`` and the Compiled object."""

from __future__ import annotations

import functools
import html
import os
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.fx

from torchwright_fx import pipeline
from torchwright_fx.analysis.facts import analyse
from torchwright_fx.backends import card, circuit, circuit_exports, circuit_score, hf, runtime
from torchwright_fx.base.errors import (
    CompileError,
    InputError,
    node_source,
    op_name,
)
from torchwright_fx.base.machines import MachineName
from torchwright_fx.base.numerics import CODE_TOLERANCE
from torchwright_fx.capture.propagate import shape
from torchwright_fx.capture.registry import using_vocab
from torchwright_fx.emit.machine import Machine
from torchwright_fx.ir.ranges import EXACT, INEXACT, ONCE, PAIR, Interval
from torchwright_fx.pipeline import Build, Options
from torchwright_fx.verify.probe import probe
from torchwright_fx.verify.verify import verify
from torchwright_fx.vocab import Vocab

BOS_OUTPUT = ("the program output <bos> at position {position}; <bos> only starts a sequence "
              "(the compiled model counts positions from it), so generating it is outside every "
              "program's domain: print another token")


class Traced:
    """A captured program: its fx graph annotated with widths and BOS values; not compiled."""

    def __init__(self, fn: Callable[..., Any], vocab: Vocab):
        self.fn, self.vocab = fn, vocab
        self.graph_module: torch.fx.GraphModule = pipeline.trace(fn, vocab)
        self._facts: dict[str, list[Interval]] | None = None

    @property
    def graph(self) -> torch.fx.Graph:
        return self.graph_module.graph

    def facts(self) -> dict[str, list[Interval]]:
        """Per fx node, the facts of each column (value range, lattice, fractions, how the
        fp32 reference rounds it) from the facts analysis (``analysis/facts.py``) at the default
        ``max_seq_len``: no lowering, so cheap, and shown also for a program the compiler
        refuses; an op with no facts rule (or one that fails) shows unbounded facts. Facts are
        semantic (noise 0): the compiled model's noise is lowering's
        (``Compiled.build.program.nodes``)."""
        if self._facts is None:
            found = analyse(self.graph_module, self.vocab, Options().max_seq_len)
            self._facts = {name: found_facts.intervals for name, found_facts in found.items()}
        return self._facts

    def rows(self) -> list[tuple[str, str, str, str, str]]:
        """Per fx node: name, op, width, its facts (range, lattice, exactness), the user's
        source line (``file:line: code``)."""
        facts = self.facts()
        return [(n.name, op_name(n), str(getattr(shape(n), "width", "")),
                 _describe_facts(facts.get(n.name)),
                 "" if n.op in ("placeholder", "output") else node_source(n))
                for n in self.graph.nodes]

    def __repr__(self) -> str:
        lines = [f"Traced({self.fn.__name__}, {self.vocab!r})"]
        for name, op, width, facts, source in self.rows():
            where = _short_source(source)
            lines.append(f"  {name:<20} {op:<22} width={width:<3} {facts:<28} {where}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        cells = "".join(f"<tr><td><code>{html.escape(n)}</code></td><td>{html.escape(o)}</td>"
                        f"<td>{html.escape(w)}</td><td>{html.escape(f)}</td>"
                        f"<td><code>{html.escape(s)}</code></td></tr>"
                        for n, o, w, f, s in self.rows())
        return (f"<p><b>Traced</b> <code>{html.escape(self.fn.__name__)}</code>, "
                f"{html.escape(repr(self.vocab))}</p><table><tr><th>node</th><th>op</th>"
                f"<th>width</th><th>facts</th><th>source</th></tr>{cells}</table>")

    def compile(self, **options: Any) -> Compiled:
        """The program built now (a refusal is raised here), so that it displays as compiled;
        ``tw.compile(fn)`` is the lazy form."""
        return Compiled(self.fn, self.vocab, Options(**options), traced=self).compile()

    def run(self, ids: Sequence[int]) -> torch.Tensor:
        """The eager reference on token ids: the output code stream ``[T]``."""
        with using_vocab(self.vocab), torch.no_grad():
            out = self.fn(self.vocab.one_hot(ids))
        return out.reshape(len(ids), -1)[:, 0]


def _short_source(source: str) -> str:
    """``file:line: code`` without the file's directories (the code may hold slashes)."""
    path, sep, rest = source.partition(":")
    return os.path.basename(path) + sep + rest


_ROUNDING = {EXACT: "exact", ONCE: "rounded once", PAIR: "rounded twice", INEXACT: "inexact"}


def _describe_facts(ranges: list[Interval] | None) -> str:
    """One column's facts in a few words: ``[0, 9] Z exact``; several columns: their hull."""
    if not ranges:
        return ""
    if len(ranges) == 1 and ranges[0].lo == ranges[0].hi:
        return f"= {ranges[0].lo:g}"
    if all(r.is_bool for r in ranges):
        return "0/1" + (f" x{len(ranges)}" if len(ranges) > 1 else "")
    lo, hi = min(r.lo for r in ranges), max(r.hi for r in ranges)
    r = ranges[0]
    lattice = "Z" if all(x.integral for x in ranges) else (
        f"{r.step}Z" + (f"+{r.offset}" if r.offset else "") if r.step and len(ranges) == 1
        else "k/n" if r.max_den else "real")
    noise = max(x.noise for x in ranges)
    text = f"[{lo:g}, {hi:g}] {lattice} {_ROUNDING[max(x.rounding for x in ranges)]}"
    return text + (f" ±{noise:.1g}" if noise else "")


def trace(fn: Callable[..., Any], *, vocab: Vocab | None = None) -> Traced:
    """Capture ``fn`` without compiling: print it to see the fx graph and widths."""
    return Traced(fn, _vocab_for(fn, vocab))


class Compiled:
    """A program compiled (lazily, on first use) to a Phi-3 machine."""

    def __init__(self, fn: Callable[..., Any], vocab: Vocab, options: Options,
                 traced: Traced | None = None):
        functools.update_wrapper(self, fn)
        self.fn, self.vocab, self.options = fn, vocab, options
        self._traced = traced
        self._build: Build | None = None
        self.compile_seconds = 0.0
        self.domain: Callable[[], Iterable[str]] | None = None
        self.oracle: Callable[[str], str] | None = None

    def with_domain(self, inputs: Callable[[], Iterable[str]],
                    oracle: Callable[[str], str] | None = None) -> Compiled:
        """Attach the prompts this program is meant for (and a plain-Python oracle), used by
        ``tw.verify(..., exhaustive=True)`` and the ``verify`` command."""
        self.domain, self.oracle = inputs, oracle
        return self

    # -- eager --------------------------------------------------------------------------------
    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        with using_vocab(self.vocab):
            return self.fn(x)

    @property
    def traced(self) -> Traced:
        if self._traced is None:
            self._traced = Traced(self.fn, self.vocab)
        return self._traced

    def _prompt_ids(self, text: str, allow_unknown: bool = False) -> list[int]:
        unknown = sorted({c for c in text if c not in self.vocab})
        if unknown and not allow_unknown:
            raise InputError(f"characters outside the vocabulary {self.vocab!r}: {unknown}; "
                             "the Phi-3 tokenizer would read each as <unk>")
        ids = self.vocab.encode(text)
        if len(ids) > self.options.max_seq_len:
            raise InputError(f"the prompt is {len(ids)} tokens with <bos>, over max_seq_len="
                             f"{self.options.max_seq_len}")
        return ids

    # reference_ids asks the compiled runtime for a draft of the rest of the answer after this
    # many tokens found one eager run each, if those runs took longer than this on average (s)
    DRAFT_AFTER = 8
    DRAFT_SECONDS = 0.003

    def reference_ids(self, ids: Sequence[int], max_new_tokens: int | None = None,
                      draft: Sequence[int] | None = None) -> list[int]:
        """Greedy generation by the eager semantics: the new ids (eos excluded), at most
        ``max_new_tokens`` of them.

        The eager function has no incremental form: each run evaluates the whole sequence, so
        one run per new token is quadratic in a long answer (measured: about 1 ms a run at
        8,192 positions for the long-context programs of the tests, so 4,000 new tokens cost
        seconds). It is causal (position t's output depends on tokens up to t), so one run
        over the sequence followed by a *draft* of the answer checks every drafted token at
        once: the answer is the reference's own whatever the draft, and a right draft costs
        one run. ``draft``: the ids expected (``verify`` passes the backend's answer). When
        ``DRAFT_AFTER`` tokens were found one run each and those runs took longer than
        ``DRAFT_SECONDS`` on average (about what the runtime spends on a token), a compiled
        program's KV-cached runtime drafts the rest of the answer."""
        seq = list(ids)
        new: list[int] = []
        limit = self.options.max_seq_len if max_new_tokens is None else \
            min(self.options.max_seq_len, len(seq) + max_new_tokens)
        pending = list(draft or [])
        alone, spent = 0, 0.0  # tokens found one run each since the last draft, their time
        while len(seq) < limit:
            if not pending and alone >= self.DRAFT_AFTER and \
                    spent > alone * self.DRAFT_SECONDS:
                pending, alone, spent = self._draft(seq, limit), 0, 0.0
            guess, pending = pending[: limit - len(seq) - 1], []
            start = time.perf_counter()
            codes = self.traced.run(seq + guess)
            if not guess:
                alone += 1
                spent += time.perf_counter() - start
            for j in range(len(guess) + 1):
                nxt = self._reference_token(float(codes[len(seq) - 1]), len(seq) - 1)
                if nxt == self.vocab.eos_id:
                    return new
                seq.append(nxt)
                new.append(nxt)
                if j == len(guess) or guess[j] != nxt:
                    break  # the draft is wrong from here (or used up)
        return new

    def _reference_token(self, code: float, position: int) -> int:
        nxt = round(code)
        if not 0 <= nxt < len(self.vocab) or abs(code - nxt) > CODE_TOLERANCE:
            raise ValueError(f"the program output {code} at position {position}, "
                             f"which is not a token code (0..{len(self.vocab) - 1}): "
                             "return whole token codes (tw.token, tw.emit, tw.lookup)")
        if nxt == self.vocab.bos_id:
            raise ValueError(BOS_OUTPUT.format(position=position))
        return nxt

    def _draft(self, seq: list[int], limit: int) -> list[int]:
        """The compiled runtime's answer after ``seq`` (nothing when not compiled yet, not a
        token program, or the runtime refuses)."""
        if self._build is None or self.options.output != "code":
            return []
        try:
            return self._runtime(torch.float32).generate_ids(seq, limit - len(seq))
        except InputError:
            return []

    def reference(self, text: str, allow_unknown: bool = False) -> str:
        return self.vocab.decode(self.reference_ids(self._prompt_ids(text, allow_unknown)))

    # -- compiled -----------------------------------------------------------------------------
    def compile(self) -> Compiled:
        if self._build is None:
            start = time.perf_counter()
            gm = self.traced.graph_module
            self._build = pipeline.build(gm, self.vocab, self.options)
            self.compile_seconds = time.perf_counter() - start
        return self

    @property
    def build(self) -> Build:
        return self.compile()._build  # type: ignore[return-value]

    @property
    def weights(self) -> Machine:
        """The compiled weights (``emit/machine.py``): what every backend writes or runs."""
        return self.build.machine

    @property
    def machine(self) -> Machine:
        """The old name of ``weights`` (``machine=`` is the machine *kind* option)."""
        warnings.warn("Compiled.machine is now Compiled.weights", DeprecationWarning, 2)
        return self.weights

    def _runtime(self, dtype: torch.dtype) -> runtime.Runtime:
        """The in-process runtime in ``dtype`` (its cast weights kept per dtype)."""
        runtimes = self.__dict__.setdefault("_runtimes", {})
        if dtype not in runtimes:
            runtimes[dtype] = runtime.Runtime(self.weights, dtype)
        return runtimes[dtype]

    def printed_ids(self, ids: Sequence[int]) -> torch.Tensor:
        """The token the compiled model's argmax gives after every prefix of ``ids`` (one
        teacher-forced pass), by the eager semantics: the program's code at each position, and
        ``<eos>`` at position max_seq_len - 1 where the build ends its answers there
        (``stats()["ends_with_eos"]``, ops/end.py)."""
        codes = self.traced.run(ids).round().long()
        last = self.options.max_seq_len - 1
        if len(ids) > last and self.weights.ends_with_eos:
            codes[last] = self.vocab.eos_id
        return codes

    def logits(self, ids: Sequence[int], dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Logits ``[T, vocab]`` by the in-process runtime, computed in ``dtype`` as
        transformers' eager Phi-3 computes in it."""
        return self._runtime(dtype).logits(ids)

    def generate_ids(self, ids: Sequence[int], max_new_tokens: int | None = None, *,
                     dtype: torch.dtype = torch.float32) -> list[int]:
        if self.options.output != "code":
            raise CompileError(f"{self.fn.__name__} was compiled with output="
                               f"{self.options.output!r}: its output is not certified as "
                               "token codes, so it does not generate; compile with "
                               "output='code'")
        return self._runtime(dtype).generate_ids(ids, max_new_tokens)

    def generate(self, text: str, allow_unknown: bool = False, *,
                 dtype: torch.dtype = torch.float32) -> str:
        """Greedy generation by the compiled weights (in-process runtime, KV-cached: O(n) per
        new token), computed in ``dtype`` (float32; float16 or bfloat16 as transformers'
        eager Phi-3 computes in them: builds certified for fp32 may be wrong there). Unknown
        characters raise InputError unless ``allow_unknown`` (then they are ``<unk>``, as in
        the Phi-3 tokenizer); a prompt that does not fit max_seq_len raises InputError;
        generation stops at ``<eos>`` or at max_seq_len."""
        return self.vocab.decode(self.generate_ids(self._prompt_ids(text, allow_unknown),
                                                   dtype=dtype))

    def probe(self, text: str, tolerance: float = 1e-3) -> Any:
        """Node-by-node diff of the compiled model against the reference (``verify.probe``)."""
        return probe(self, text, tolerance)

    def verify(self, inputs: Iterable[str] | None = None, **options: Any) -> Any:
        """The compiled model against the reference (and oracle) on prompts: ``tw.verify``."""
        return verify(self, inputs, **options)

    def save_pretrained(self, directory: str | os.PathLike) -> Path:
        """A stock Phi-3 directory, with the model card (how to run it in each runtime),
        ``circuit.json`` (which heads, lanes and columns compute each fx node;
        ``tw.load_circuit``) and the ground truth for circuit discovery, ``edges.json`` and
        ``components.json`` (docs/circuits.md)."""
        truth = self._truth()  # the maps are built first: a failure writes nothing
        maps = self.circuit(), self.edges(truth), self.components(truth)
        out = hf.save_pretrained(self.weights, self.vocab, directory, card=self.model_card())
        circuit.write(out, maps[0])
        circuit_exports.write(out, maps[1], maps[2])
        return out

    def save_gguf(self, path: str | os.PathLike) -> Path:
        """One f32 GGUF file for llama.cpp (arch llama; run with ``-fa off -ctk f32 -ctv f32``,
        see ``backends/gguf.py``). The ReLU machine has no llama.cpp architecture: refused."""
        from torchwright_fx.backends.gguf import save_gguf

        return save_gguf(self.weights, self.vocab, path, name=self.fn.__name__)

    def circuit(self) -> dict[str, Any]:
        """The ground-truth circuit map as a dict (``backends/circuit.py``)."""
        b = self.build
        return circuit.circuit(self.traced.graph_module, b.program, b.plan, b.placement,
                               self.weights.d_head, self.fn.__name__)

    def _truth(self) -> circuit_exports.Truth:
        b = self.build
        return circuit_exports.truth(b.program, b.plan, b.placement)

    def edges(self, _truth: circuit_exports.Truth | None = None) -> dict[str, Any]:
        """The ground-truth circuit as edge lists at head, Q/K/V and neuron (MLP lane)
        granularity: ``edges.json`` (docs/circuits.md)."""
        b = self.build
        return circuit_exports.edges(b.program, b.plan, b.placement, self.weights.d_head,
                                     self.fn.__name__, _truth or self._truth())

    def components(self, _truth: circuit_exports.Truth | None = None) -> dict[str, Any]:
        """The ground-truth components (each head, each fx node's MLP lanes) with their
        TransformerLens hooks, role tags and source lines: ``components.json``
        (docs/circuits.md)."""
        b = self.build
        return circuit_exports.components(self.traced.graph_module, b.program, b.plan,
                                          b.placement, self.weights.d_head, self.fn.__name__,
                                          self.fn, _truth or self._truth())

    def score_circuit(self, found: Any, **options: Any) -> dict[str, Any]:
        """``tw.score_circuit(found, self, **options)``: a discovered circuit against this
        program's ground truth."""
        return circuit_score.score_circuit(found, self.edges(), **options)

    def to_onnx(self, directory: str | os.PathLike, *, hf_dir: str | os.PathLike | None = None
                ) -> Path:
        """Export through torch.onnx into ``directory`` (from ``hf_dir``, a Phi-3 directory
        saved from this program; when none is given, one is written beside ``directory``)."""
        from torchwright_fx.backends.onnx import export_onnx

        if hf_dir is None:
            hf_dir = Path(directory).with_name(Path(directory).name + "_hf")
            self.save_pretrained(hf_dir)
        return export_onnx(hf_dir, directory)

    # -- reporting ----------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        b, m = self.build, self.build.machine
        heads = sum(m.meta["layer_heads"])
        lanes = sum(m.meta["layer_lanes"])
        return {
            "name": self.fn.__name__, "machine": b.program.machine.name, "layers": m.n_layers,
            "critical_path_layers": b.critical_path_layers, "d_model": m.d_model,
            "peak_live_width": b.peak_live_width, "d_head": m.d_head, "heads_per_layer": m.n_heads,
            "kv_heads": m.kv_heads,
            "heads_total": heads, "lanes_per_layer": m.d_ff, "lanes_total": lanes,
            "parameters": m.parameters(), "nonzero_weights": m.nonzero_weights(),
            "parameter_bound": b.parameter_bound,
            "zero_fraction": m.zero_fraction(), "scheduler": b.plan.scheduler,
            "status": b.plan.status, "proven_bound": b.plan.proven_bound,
            "solve_seconds": b.plan.solve_seconds, "compile_seconds": self.compile_seconds,
            "max_seq_len": m.max_seq_len, "vocab_size": m.vocab_size,
            "output_margin": m.meta.get("output_margin"), "ends_with_eos": m.ends_with_eos,
            "approximations": list(b.program.approximations), "precision": b.program.precision.name,
            "certified": [f.name for f in b.program.precision.formats],
        }

    def __repr__(self) -> str:
        if self._build is None:
            return f"Compiled({self.fn.__name__}, {self.vocab!r}, not compiled yet: .compile())"
        return self.summary()

    def _repr_html_(self) -> str:
        if self._build is None:
            return f"<pre>{html.escape(repr(self))}</pre>"
        m, placed = self.build.machine, self.build.placement
        def names(producers: Iterable[Any]) -> str:
            return html.escape(", ".join(sorted({p.name for p in producers})))

        rows = "".join(f"<tr><td>{i}</td><td>{names(la.heads)}</td><td>{len(la.heads)}</td>"
                       f"<td>{names(la.ffns)}</td><td>{len(la.lane_index)}</td></tr>"
                       for i, la in enumerate(placed.layers))
        from torchwright_fx.backends import plot

        picture = plot.plan_svg(self.build.program, self.build.plan, placed, self.fn.__name__)
        return (f"<pre>{html.escape(self.summary())}</pre><table><tr><th>layer</th>"
                f"<th>attention: nodes</th><th>heads (of {m.n_heads})</th><th>MLP: nodes</th>"
                f"<th>lanes (of {m.d_ff})</th></tr>{rows}</table>"
                f'<div style="overflow-x:auto">{picture}</div>')

    def plot_plan(self, path: str | os.PathLike) -> Path:
        """A picture of the plan, PNG or SVG by the extension: the residual columns over the
        layers' attention and MLP sublayers, each value a bar from the sublayer that writes it
        to the one that cancels its columns, labelled with its fx node name."""
        from torchwright_fx.backends import plot

        plot.plan_format(path)  # a bad extension is refused before compiling
        b = self.build
        return plot.plot_plan(b.program, b.plan, b.placement, path, self.fn.__name__)

    def report(self) -> None:
        """Print ``summary()``: layers, their lower bound, d, heads, lanes, parameters (and
        the nonzero ones, and their lower bound)."""
        print(self.summary())

    def summary(self) -> str:
        return card.summary(self.stats(), self.build.d_head_reason)

    def model_card(self) -> str:
        """The directory's README.md: the build, its certificate, and how to run it in
        transformers, onnxruntime, llama.cpp, vLLM and TransformerLens."""
        prompt = next(iter(self.domain()), None) if self.domain is not None else None
        return card.model_card(self.stats(), prompt)


def _vocab_for(fn: Callable[..., Any], vocab: Vocab | None) -> Vocab:
    if vocab is not None:
        return vocab
    found = getattr(fn, "__globals__", {}).get("VOCAB")
    if isinstance(found, Vocab):
        return found
    raise TypeError(f"{fn.__qualname__}: pass vocab=tw.Vocab(...) or define a module-level "
                    "VOCAB = tw.Vocab(...) beside the function")


_DEFAULTS = Options()  # the one home of the defaults


def compile(fn: Callable[..., Any] | None = None, *, vocab: Vocab | None = None,
            d_model: int | None = _DEFAULTS.d_model, d_head: int | None = _DEFAULTS.d_head,
            max_seq_len: int | None = None, optimize: int = _DEFAULTS.optimize,
            machine: MachineName | None = _DEFAULTS.machine, exact: bool = _DEFAULTS.exact,
            output: str = _DEFAULTS.output, progress: bool | None = _DEFAULTS.progress,
            dump: str | os.PathLike[str] | None = _DEFAULTS.dump,
            precision: str = _DEFAULTS.precision, share_kv: bool = _DEFAULTS.share_kv) -> Any:
    """``@tw.compile``, ``@tw.compile(vocab=V, ...)`` or ``tw.compile(fn, vocab=V)``. Without
    ``vocab``, the function's module-level ``VOCAB`` is used. Compiling is lazy: it happens on
    first use (generate, save_pretrained, report) or on ``.compile()``. ``exact=False`` accepts
    steps on values without a lattice as 0.1-wide ramps (each listed by ``report()``) instead
    of refusing them. ``output="value"`` lets the program return any number, for reading
    values from the hidden states (``runtime.forward(..., capture=True)``); such a build does
    not generate. ``progress``: a one-line progress display on stderr (None: on a terminal
    outside CI; True: always; False: never). ``dump``: a directory to write each compiler
    stage's record into as text (docs/ir.md; None: ``TORCHWRIGHT_FX_DUMP`` if set).
    ``precision="half"``: a build certified in fp32, fp16 and bf16 (and llama.cpp's F16 GGUF
    arithmetic); ``max_seq_len`` then defaults to 128 (docs/half-precision.md says which ops
    half holds). ``max_seq_len=None``: 512, or 128 in half precision. ``share_kv=False``: a K
    and V block per head (by default a layer's heads share them where their keys and values
    fit one block: Phi-3's ``num_key_value_heads``, the same scores, fewer weights)."""
    length = {} if max_seq_len is None else {"max_seq_len": max_seq_len}
    opts = Options(d_model=d_model, d_head=d_head, optimize=optimize, machine=machine,
                   exact=exact, output=output, progress=progress, dump=dump,
                   precision=precision, share_kv=share_kv, **length)

    def wrap(f: Callable[..., Any]) -> Compiled:
        return Compiled(f, _vocab_for(f, vocab), opts)

    return wrap if fn is None else wrap(fn)
