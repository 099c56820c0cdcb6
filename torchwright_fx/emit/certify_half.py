"""The half-precision certificate: the build replayed in every arithmetic it claims.

A half build (``precision="half"``) holds only programs whose every value is a function of
the current token (attention is refused at lowering until its half constructions land:
docs/half-precision.md), so its domain at one position is the vocabulary, and every position
computes the same thing whatever the length (each attention sublayer is all zeros and adds
exactly 0). The certificate is therefore exhaustive: every token is run through the machine
in each arithmetic below, and every residual column must equal the program's exact value (its
lanes evaluated in exact arithmetic, each hinge an exact relu), bit for bit, and the logits
must choose the exact code with logit lead ``G`` (``emit/half.py``).

The arithmetics: transformers' eager Phi-3 in float32, float16 and bfloat16 (weights cast to
the dtype; RMSNorm in fp32 and cast; each projection, the activation, the product and the
residual add rounded to the dtype), and llama.cpp's CPU graph on an F16 GGUF (f32 residual and
RMSNorm; every matmul's inputs and weights rounded to f16, accumulated in f32). Where every
value is a number the format holds and every dot product's terms and partial sums are exact in
an fp32 accumulator, any order of summation gives the same bits, so sdpa, vLLM's kernels and
GPU matmuls compute the same (the premise the weight check below keeps: every weight is an
fp16 and bf16 number).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from torchwright_fx.base.errors import CompileError
from torchwright_fx.emit.half import exact_in_half
from torchwright_fx.emit.machine import ACTIVATIONS, Machine, rms_norm
from torchwright_fx.emit.placement import Placement
from torchwright_fx.ir.graph import FFN, NodeRecord, Producer, Program, Signal
from torchwright_fx.ir.linear import Lin
from torchwright_fx.schedule.plan import Plan

ADVICE = "compile with precision='fp32' (the default)"


def exact_values(prog: Program, plan: Plan, const: float = 1.0) -> torch.Tensor:
    """[vocab, d] float64: every live column's exact value for each token at one position
    (``const``: what the constant column holds)."""
    n = len(prog.vocab.tokens)
    vals: dict[int, np.ndarray] = {s: np.asarray(t, dtype=np.float64)
                                   for s, t in prog.embed_tables.items()}

    def ev(lin: Lin) -> np.ndarray:
        out = np.full(n, float(lin.const))
        for s, c in lin.terms.items():
            out = out + c * vals[s]
        return out

    for pid in sorted(prog.producers):
        p = prog.producers[pid]
        assert isinstance(p, FFN), f"{p.name}: a head in a half build (refused at lowering)"
        lanes = [np.maximum(ev(lane.gate), 0.0) * ev(lane.up) for lane in p.lanes]
        for sid, weights in p.outputs.items():
            vals[sid] = sum((w * lanes[i] for i, w in weights.items()), np.zeros(n))
    out = torch.zeros(n, plan.d_model, dtype=torch.float64)
    out[:, plan.const_col] = const
    for sid in prog.live_signals():
        out[:, plan.columns[sid]] = torch.from_numpy(vals[sid])
    return out


def _transformers(m: Machine, ids: torch.Tensor, dtype: torch.dtype
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """The residual before the final norm and the logits, as transformers' eager Phi-3 computes
    them in ``dtype`` (the attention sublayers are zero: they add exactly 0)."""
    act = ACTIVATIONS[m.act]
    h = m.embed.to(dtype)[ids]
    for layer in m.layers:
        x = rms_norm(h, layer.norm_mlp.to(dtype), m.rms_eps)
        gate, up = torch.nn.functional.linear(x, layer.gate_up.to(dtype)).chunk(2, dim=-1)
        h = h + torch.nn.functional.linear(up * act(gate), layer.down.to(dtype))
    logits = torch.nn.functional.linear(rms_norm(h, m.final_norm.to(dtype), m.rms_eps),
                                        m.lm_head.to(dtype))
    return h.double(), logits.double()


def _llama_cpp(m: Machine, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """llama.cpp's CPU graph on an F16 GGUF: f32 residual, norm, activation and product; each
    matmul rounds its input and its (f16) weights to f16 and accumulates in f32."""
    act = ACTIVATIONS[m.act]

    def matmul(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(x.half().float(), w.half().float())

    h = m.embed.half().float()[ids]
    for layer in m.layers:
        x = rms_norm(h, layer.norm_mlp.half().float(), m.rms_eps)
        gate, up = matmul(x, layer.gate_up).chunk(2, dim=-1)
        h = h + matmul(up * act(gate), layer.down)
    logits = matmul(rms_norm(h, m.final_norm.half().float(), m.rms_eps), m.lm_head)
    return h.double(), logits.double()


ARITHMETICS: dict[str, Callable[[Machine, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]] = {
    "fp32": lambda m, ids: _transformers(m, ids, torch.float32),
    "fp16": lambda m, ids: _transformers(m, ids, torch.float16),
    "bf16": lambda m, ids: _transformers(m, ids, torch.bfloat16),
    "llama.cpp f16": _llama_cpp,
}


def _weights_exact(prog: Program, plan: Plan, m: Machine, placed: Placement) -> None:
    """Refuse a weight fp16 or bf16 does not hold, naming the producer that needs it."""
    for i, (layer, lp) in enumerate(zip(m.layers, placed.layers, strict=True)):
        if not float(layer.qkv.abs().sum()) == 0.0:
            raise CompileError(f"layer {i}: a half build has an attention weight (a compiler "
                               "bug: half refuses attention at lowering)")
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
    """Replay ``m`` on every token in each arithmetic; refuse the first column that differs
    from its exact value, naming the op that wrote it. Returns each arithmetic's smallest
    logit lead of the code over every other token."""
    _weights_exact(prog, plan, m, placed)
    exact = exact_values(prog, plan, float(m.embed[0, plan.const_col]))
    ids = torch.arange(len(prog.vocab.tokens))
    code = torch.from_numpy(np.asarray(
        [float(prog.output.const) + sum(c * float(exact[t, plan.columns[s]])
                                        for s, c in prog.output.terms.items())
         for t in range(len(ids))])).round().long()
    owner = {plan.columns[s]: s for s in prog.live_signals()}
    lo, hi = prog.output_codes
    decoded = (code >= lo) & (code <= hi)  # a code outside the vocabulary has no token to pick
    code = code.clamp(lo, hi)
    leads: dict[str, float] = {}
    for name, run in ARITHMETICS.items():
        h, logits = run(m, ids)
        wrong = (h != exact)
        if bool(wrong.any()):
            t, col = (int(v) for v in wrong.nonzero()[0])
            sig = prog.signals[owner[col]] if col in owner else None
            where = f"{sig.source}\n  {sig.name}" if sig is not None else f"column {col}"
            raise CompileError(
                f"{where}: precision='half' is not exact in {name}: at token "
                f"{prog.vocab.tokens[t]!r} it computes {float(h[t, col]):.9g} where the "
                f"exact value is {float(exact[t, col]):.9g}; {ADVICE}")
        right = logits.gather(1, code[:, None]).squeeze(1)
        others = logits.scatter(1, code[:, None], -torch.inf).max(dim=1).values
        gap = torch.where(decoded, right - others, torch.inf)
        lead = float(gap.min())
        if not lead > 0:
            t = int(gap.argmin())
            raise CompileError(
                f"precision='half': the output at token {prog.vocab.tokens[t]!r} is not "
                f"certain in {name} (logit lead {lead:.3g}); {ADVICE}")
        leads[name] = lead
    return leads
