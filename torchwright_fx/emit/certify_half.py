"""The half-precision certificate: every producer replayed in every arithmetic the build claims.

A half build (``precision="half"``) must compute every residual value exactly in fp32, fp16 and
bf16. The certificate goes producer by producer, in program order, with the set of values each
signal can take:

- a signal of the current token (the embedding, and MLP outputs of such signals only) is
  known token by token; any other signal (a head's copy) by its set of values;
- an MLP bank is replayed on every point of its inputs' joint domain (the tokens, times the
  value sets of the other signals it reads): its gates and ups are dot products whose terms
  and partial sums are exact in an fp32 accumulator (checked: ``_exact_sum``), so they are the
  exact values rounded once to the format; the activation, the product and the down
  projection are then computed as each arithmetic computes them, and every output must equal
  its exact value (each hinge an exact relu);
- a head (``ops/attention.py``, the half geometry) reads positions only: its logits are
  replayed at every query position in each arithmetic (``attention.check_half``) and its
  softmax is exactly one-hot there, so it copies its value, which must be an exact dot
  product too.

The arithmetics: transformers' eager Phi-3 in float32, float16 and bfloat16 (weights cast to
the dtype; each projection's output, the activation and the product rounded to it), and
llama.cpp's CPU graph on an F16 GGUF (f32 activations; each matmul rounds its input and
weights to f16 and accumulates in f32). Where every term and partial sum of a dot product is
exact in fp32, any order of summation gives the same bits, so sdpa, vLLM's kernels and GPU
matmuls with fp32 accumulators compute the same. The RMSNorm identity is certified by its
energy bound (``emit/half.py``); every weight must be an fp16 and bf16 number.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from torchwright_fx.base.errors import CompileError
from torchwright_fx.base.numerics import FP32_EXACT_INTEGERS, HALF_CERTIFY_POINTS
from torchwright_fx.emit.half import exact_in_half
from torchwright_fx.emit.machine import ACTIVATIONS, Machine
from torchwright_fx.emit.placement import Placement
from torchwright_fx.ir.graph import FFN, Head, NodeRecord, Producer, Program, Signal
from torchwright_fx.ir.linear import Lin
from torchwright_fx.schedule.plan import Plan

ADVICE = "compile with precision='fp32' (the default)"


def _fraction_bits(x: np.ndarray) -> int:
    """The most binary fraction digits any entry of ``x`` needs (0 for whole numbers)."""
    x = np.asarray(x, dtype=np.float64)
    x = x[(x != 0) & np.isfinite(x)]
    if x.size == 0:
        return 0
    m, e = np.frexp(np.abs(x))  # x = m * 2**e, m in [0.5, 1)
    mi = (m * 2.0 ** 53).astype(np.int64)
    tz = np.log2(mi & -mi).astype(np.int64)  # trailing zero bits of the 53-bit significand
    return int(max(0, (53 - e - tz).max()))


def _exact_sum(terms: np.ndarray) -> bool:
    """Whether every partial sum of each row of ``terms`` (in any order) is exact in fp32:
    every term on a grid 2**-g and the sum of magnitudes below 2**(24 - g)."""
    if terms.size == 0:
        return True
    g = _fraction_bits(terms)
    return bool(np.abs(terms).sum(axis=-1).max() * 2.0 ** g < FP32_EXACT_INTEGERS)


@dataclass
class Known:
    """What the certificate knows of each signal: its value per token (a function of the
    current token) or its set of values."""

    per_token: dict[int, np.ndarray] = field(default_factory=dict)
    sets: dict[int, np.ndarray] = field(default_factory=dict)


def _domain(known: Known, reads: list[int], n_tokens: int, where: Signal | Producer
            ) -> tuple[dict[int, np.ndarray], bool]:
    """Every joint value of ``reads``: column per signal; True when the points are the tokens
    in order (every read a function of the current token)."""
    tok = [s for s in reads if s in known.per_token]
    other = [s for s in reads if s not in known.per_token]
    if not other:
        return ({s: known.per_token[s] for s in tok} or {}), True
    rows = np.unique(np.stack([known.per_token[s] for s in tok], axis=1), axis=0) if tok \
        else np.zeros((1, 0))
    sizes = [len(rows)] + [len(known.sets[s]) for s in other]
    if math.prod(sizes) > HALF_CERTIFY_POINTS:
        raise CompileError(
            f"{where.source}\n  {where.name}: precision='half' certifies an op by replaying it on "
            f"every value its inputs can take together, and this op's inputs take "
            f"{math.prod(sizes):,} combinations (more than {HALF_CERTIFY_POINTS:,}); narrow "
            f"their ranges (tw.claim), or {ADVICE}")
    grid = list(itertools.product(range(len(rows)), *[known.sets[s] for s in other]))
    idx = np.array([g[0] for g in grid], dtype=np.int64)
    out = {s: rows[idx, c] for c, s in enumerate(tok)}
    for c, s in enumerate(other):
        out[s] = np.array([g[c + 1] for g in grid], dtype=np.float64)
    return out, False


def _eval(lin: Lin, cols: dict[int, np.ndarray], n: int) -> tuple[np.ndarray, np.ndarray]:
    """``lin`` on the domain, and its terms [n, k + 1] (the constant included)."""
    terms = [np.full(n, float(lin.const))] + [c * cols[s] for s, c in lin.terms.items()]
    t = np.stack(terms, axis=1)
    return t.sum(axis=1), t


def _dot(lin: Lin, cols: dict[int, np.ndarray], n: int, where: Producer, what: str
         ) -> np.ndarray:
    value, terms = _eval(lin, cols, n)
    if not _exact_sum(terms):
        raise CompileError(
            f"{where.source}\n  {where.name}: precision='half' needs every dot product exact in "
            f"an fp32 accumulator, and this op's {what} sums terms too fine or too large for "
            f"fp32 (24 significant bits); keep its values small whole numbers, or {ADVICE}")
    return value


# -- the arithmetics: an MLP bank's lanes, from exact gates and ups --------------------------
Lanes = Callable[[np.ndarray, np.ndarray, np.ndarray, str], np.ndarray]


def _transformers(dtype: torch.dtype) -> Lanes:
    def run(gate: np.ndarray, up: np.ndarray, down: np.ndarray, act: str) -> np.ndarray:
        g, u = torch.from_numpy(gate).to(dtype), torch.from_numpy(up).to(dtype)
        p = (u * ACTIVATIONS[act](g)).double().numpy()  # each op rounded to the dtype
        return _down(p, down, dtype)
    return run


def _llama_cpp(gate: np.ndarray, up: np.ndarray, down: np.ndarray, act: str) -> np.ndarray:
    g, u = torch.from_numpy(gate).float(), torch.from_numpy(up).float()
    p = (u * ACTIVATIONS[act](g)).half().double().numpy()  # f32, then the matmul's f16 input
    return _down(p, down, torch.float32)


def _down(p: np.ndarray, down: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    """The down projection: an exact fp32 accumulation (checked), rounded to the output's
    dtype. [points, lanes] x [outputs, lanes] -> [points, outputs]."""
    terms = p[:, None, :] * down[None, :, :]
    if not _exact_sum(terms.reshape(-1, terms.shape[-1])):
        return np.full((p.shape[0], down.shape[0]), np.nan)  # refused by the comparison
    return torch.from_numpy(terms.sum(axis=-1)).to(dtype).double().numpy()


ARITHMETICS: dict[str, Lanes] = {
    "fp32": _transformers(torch.float32),
    "fp16": _transformers(torch.float16),
    "bf16": _transformers(torch.bfloat16),
    "llama.cpp f16": _llama_cpp,
}


def _ffn(prog: Program, known: Known, p: FFN) -> None:
    n_tokens = len(prog.vocab.tokens)
    cols, by_token = _domain(known, sorted(p.reads()), n_tokens, p)
    n = n_tokens if by_token else len(next(iter(cols.values()))) if cols else 1
    gates = np.stack([_dot(lane.gate, cols, n, p, "gate") for lane in p.lanes], axis=1)
    ups = np.stack([_dot(lane.up, cols, n, p, "up") for lane in p.lanes], axis=1)
    sids = list(p.outputs)
    down = np.zeros((len(sids), len(p.lanes)))
    for o, sid in enumerate(sids):
        for lane, w in p.outputs[sid].items():
            down[o, lane] = w
    exact = (np.maximum(gates, 0.0) * ups) @ down.T
    for name, run in ARITHMETICS.items():
        got = run(gates, ups, down, prog.machine.act)
        bad = np.argwhere(got != exact)
        if len(bad):
            i, o = (int(v) for v in bad[0])
            sig = prog.signals[sids[o]]
            at = (f"at token {prog.vocab.tokens[i]!r}" if by_token else
                  "for inputs " + ", ".join(f"{prog.signals[s].name}={cols[s][i]:g}"
                                            for s in sorted(cols)))
            raise CompileError(
                f"{sig.source}\n  {sig.name}: precision='half' is not exact in {name}: {at} it "
                f"computes {got[i, o]:.9g} where the exact value is {exact[i, o]:.9g}; {ADVICE}")
    for o, sid in enumerate(sids):
        if by_token:
            known.per_token[sid] = exact[:, o]
        else:
            known.sets[sid] = np.unique(exact[:, o])


def _head(prog: Program, known: Known, h: Head) -> None:
    """A head's copy: its values must be exact dot products; its pattern is certified by the
    attention replay (``attention.check_half``, at lowering)."""
    n_tokens = len(prog.vocab.tokens)
    reads = sorted(set().union(*(lin.signals() for lin in h.v)))
    cols, by_token = _domain(known, reads, n_tokens, h)
    n = n_tokens if by_token else len(next(iter(cols.values()))) if cols else 1
    for lin, sid in zip(h.v, h.outputs, strict=True):
        v = _dot(lin, cols, n, h, "value")
        if not exact_in_half(torch.from_numpy(v)):
            raise CompileError(f"{h.source}\n  {h.name}: precision='half' copies values that "
                               f"fp16 or bf16 does not hold; {ADVICE}")
        known.sets[sid] = np.unique(v)


def _weights_exact(prog: Program, plan: Plan, m: Machine, placed: Placement) -> None:
    """Refuse a weight fp16 or bf16 does not hold, naming the producer that needs it."""
    for layer, lp in zip(m.layers, placed.layers, strict=True):
        for f in lp.ffns:
            rows = lp.lanes_of(f)
            cols = [plan.columns[s] for s in f.outputs if s in plan.columns]
            parts = (layer.gate_up[rows], layer.gate_up[[r + m.d_ff for r in rows]],
                     layer.down[cols][:, rows])
            if not all(exact_in_half(t) for t in parts):
                raise CompileError(
                    f"{f.source}\n  {f.name}: precision='half' needs every weight to be an "
                    "fp16 and bf16 number, and this op's lanes need one neither holds "
                    f"(its steps or table entries are too fine); {ADVICE}")
        if not exact_in_half(layer.qkv) or not exact_in_half(layer.o):
            raise CompileError(f"an attention weight is not an fp16 and bf16 number (a "
                               f"compiler bug: the half geometry rounds them); {ADVICE}")
    readers = prog.readers()
    for sid in prog.embed_tables:
        if sid in plan.columns and not exact_in_half(m.embed[:, plan.columns[sid]]):
            # a folded column's own source is the token stream's: name the op reading it
            sig = _reader(prog, readers, sid)
            values = sorted({float(v) for v in m.embed[:, plan.columns[sid]]
                             if not exact_in_half(torch.tensor([float(v)]))})
            raise CompileError(
                f"{sig.source}\n  {sig.name}: precision='half' keeps every value in fp16 and "
                f"bf16, and this per-token value takes {values[0]:g}, which bf16 (8 significant "
                "bits: every whole number to 256) or fp16 (11 bits, to 2048) does not hold; "
                f"keep values small, or {ADVICE}")
    if not exact_in_half(m.lm_head) or not exact_in_half(m.final_norm):
        raise CompileError(f"the output decoding needs a weight half cannot hold; {ADVICE}")


def _reader(prog: Program, readers: dict[int, list[int]], sid: int
            ) -> Signal | NodeRecord | Producer:
    """What to blame for a per-token column: the first producer reading it, else the last
    node (the output) whose columns read it, else the column itself."""
    if readers.get(sid):
        return prog.producers[readers[sid][0]]
    nodes = [rec for rec in prog.nodes.values() if rec.name != "output"
             and any(sid in lin.signals() for lin in rec.columns)]
    return nodes[-1] if nodes else prog.signals[sid]


def certify(prog: Program, plan: Plan, m: Machine, placed: Placement) -> dict[str, float]:
    """Replay every producer of ``m`` in each arithmetic; refuse the first one that is not
    exact, naming the user's line. Returns the output's logit lead in each arithmetic: every
    step column is exact, so lm_head gives the code G and every other token 0."""
    _weights_exact(prog, plan, m, placed)
    known = Known(per_token={s: np.asarray(t, dtype=np.float64)
                             for s, t in prog.embed_tables.items()})
    for pid in sorted(prog.producers):
        p = prog.producers[pid]
        if isinstance(p, FFN):
            _ffn(prog, known, p)
        else:
            _head(prog, known, p)
    for s in prog.live_signals():
        values = known.per_token.get(s, known.sets.get(s))
        assert values is not None, f"signal {prog.signals[s].name} was never certified"
        if not exact_in_half(torch.from_numpy(values)):
            sig = prog.signals[s]
            raise CompileError(f"{sig.source}\n  {sig.name}: precision='half' keeps every value "
                               f"in fp16 and bf16, and this one does not fit; {ADVICE}")
    lead = float(np.abs(m.lm_head.double().numpy()).max())
    return {name: lead for name in ARITHMETICS}
