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

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import torch

from torchwright_fx.base.errors import CompileError
from torchwright_fx.base.machines import BF16, FP16
from torchwright_fx.base.numerics import (
    FP32_EXACT_INTEGERS,
    HALF_CERTIFY_POINTS,
    HALF_CERTIFY_WORK,
    HALF_COUNT_NORM_EXPONENT,
    HALF_GAIN_EXPONENT,
    HALF_JOINT_POINTS,
)
from torchwright_fx.emit import half_bounds
from torchwright_fx.emit.half import exact_in_half
from torchwright_fx.emit.half_domain import Known, domain, domain_size, too_many
from torchwright_fx.emit.half_domain import evaluate as _eval
from torchwright_fx.emit.half_domain import stored as _stored
from torchwright_fx.emit.machine import ACTIVATIONS, Machine
from torchwright_fx.emit.placement import Placement
from torchwright_fx.ir.graph import FFN, Head, Lane, Producer, Program
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import Interval
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
@dataclass(frozen=True)
class Arithmetic:
    """How one runtime computes a lane's value from its exact gate and up (each the exact dot
    product rounded once to the projection's output format), and the dtype the down
    projection's output is rounded to."""

    dtype: torch.dtype  # the projections' output format
    lane_input: torch.dtype  # the format the down projection reads lane values in

    def lanes(self, gate: np.ndarray, up: np.ndarray, act: str) -> np.ndarray:
        g, u = torch.from_numpy(gate).to(self.dtype), torch.from_numpy(up).to(self.dtype)
        return (u * ACTIVATIONS[act](g)).to(self.lane_input).double().numpy()

    def down(self, p: np.ndarray, down: np.ndarray) -> np.ndarray:
        """[points, lanes] x [outputs, lanes] -> [points, outputs]: an exact fp32 accumulation
        (checked; NaN where not, which no comparison accepts), rounded to the dtype."""
        terms = p[:, None, :] * down[None, :, :]
        if not _exact_sum(terms.reshape(-1, terms.shape[-1])):
            return np.full((p.shape[0], down.shape[0]), np.nan)
        return torch.from_numpy(terms.sum(axis=-1)).to(self.dtype).double().numpy()


ARITHMETICS = {
    "fp32": Arithmetic(torch.float32, torch.float32),
    "fp16": Arithmetic(torch.float16, torch.float16),
    "bf16": Arithmetic(torch.bfloat16, torch.bfloat16),
    # f32 activations; the down matmul reads its input as f16 and accumulates in f32
    "llama.cpp f16": Arithmetic(torch.float32, torch.float16),
}


def _within_facts(prog: Program, sid: int, values: np.ndarray) -> np.ndarray:
    """A value set less what the signal's facts rule out (its interval: a sound bound that
    knows what the value sets do not, such as terms that exclude each other). The column
    holds the lanes' sum; the facts are of that sum (``Signal.range``)."""
    rng = prog.signals[sid].range
    if not rng.finite:
        return values
    slack = 1e-9 * max(1.0, abs(rng.lo), abs(rng.hi))
    kept = values[(values >= rng.lo - slack) & (values <= rng.hi + slack)]
    return kept if kept.size else values


def _down_matrix(p: FFN) -> tuple[list[int], np.ndarray]:
    sids = list(p.outputs)
    down = np.zeros((len(sids), len(p.lanes)))
    for o, sid in enumerate(sids):
        for lane, w in p.outputs[sid].items():
            down[o, lane] = w
    return sids, down


def _refuse(prog: Program, sid: int, name: str, at: str, got: float, want: float,
            gate: float = 0.0) -> None:
    sig = prog.signals[sid]
    if abs(gate) >= FP16.max_finite:
        why = (f"a gate of {gate:g} is beyond fp16's 65504 (a step or relu's gate is 128 times "
               "what it reads less its threshold: keep that within 511)")
    elif not math.isfinite(got):
        why = ("its lanes' values do not sum exactly (a SiLU of a gate under 17, as in a "
               "product of two streams that are not 0/1, is exact in no format)")
    else:
        why = "a value on its way is not an fp16/bf16 number (bf16 holds whole numbers to 256)"
    raise CompileError(
        f"{sig.source}\n  {sig.name}: precision='half' is not exact in {name}: {at} it computes "
        f"{got:.9g} where the exact value is {want:.9g}: {why}; tw.claim the range that "
        f"occurs if it is smaller, or {ADVICE}")


def _ffn(prog: Program, known: Known, p: FFN, arithmetics: dict[str, Arithmetic]) -> None:
    """Replay the bank on its inputs' joint domain, or lane by lane where that is too large."""
    n_tokens = len(prog.vocab.tokens)
    reads = p.reads()
    claimed_parts = any(len(form.terms) > 1 and set(form.terms) <= reads
                        for form, _ in known.claims)
    # lane by lane when the joint domain is too large, or when a claimed form (several
    # signals whose sum is declared: the position's digits) would be enumerated part by part
    if claimed_parts or any(sid in prog.by_lane for sid in p.outputs) or \
            domain_size(known, sorted(reads)) > HALF_CERTIFY_POINTS:
        _ffn_by_lane(prog, known, p, arithmetics)
        return
    cols, by_token = domain(known, sorted(p.reads()), n_tokens, p)
    n = n_tokens if by_token else len(next(iter(cols.values()))) if cols else 1
    if n * sum(len(lane.gate.terms) + len(lane.up.terms) + 2 for lane in p.lanes) > \
            HALF_CERTIFY_WORK:  # many lanes on many points: lane by lane, each on its own
        _ffn_by_lane(prog, known, p, arithmetics)
        return
    gates = np.stack([_dot(lane.gate, cols, n, p, "gate") for lane in p.lanes], axis=1)
    ups = np.stack([_dot(lane.up, cols, n, p, "up") for lane in p.lanes], axis=1)
    sids, down = _down_matrix(p)
    exact = (np.maximum(gates, 0.0) * ups) @ down.T
    for name, arith in arithmetics.items():
        got = arith.down(arith.lanes(gates, ups, prog.machine.act), down)
        bad = np.argwhere(got != exact)
        if len(bad):
            i, o = (int(v) for v in bad[0])
            at = (f"at token {prog.vocab.tokens[i]!r}" if by_token else
                  "for inputs " + ", ".join(f"{prog.signals[s].name}={cols[s][i]:g}"
                                            for s in sorted(cols)))
            _refuse(prog, sids[o], name, at, got[i, o], exact[i, o])
    for o, sid in enumerate(sids):
        if by_token:
            known.per_token[sid] = exact[:, o]
        else:
            known.sets[sid] = _within_facts(prog, sid, np.unique(exact[:, o]))


def _claimed(claims: list[tuple[Lin, Interval]], lin: Lin) -> tuple[list[int], np.ndarray]:
    """A claim covering part of ``lin``: its signals and the values that part takes (the
    part is a multiple of the claimed form, whose values tw.claim declared and the reference
    checks), else ([], empty)."""
    for form, rng in claims:
        if not form.terms or not set(form.terms) <= set(lin.terms) or not rng.finite or \
                rng.step is None or rng.step == 0:
            continue
        s0 = next(iter(form.terms))
        ratio = lin.terms[s0] / form.terms[s0]
        if all(lin.terms[s] == ratio * c for s, c in form.terms.items()):
            first = math.ceil((Fraction(rng.lo) - rng.offset) / rng.step)
            last = math.floor((Fraction(rng.hi) - rng.offset) / rng.step)
            if last - first > HALF_CERTIFY_POINTS:
                continue
            points = np.array([float(rng.offset + rng.step * k) for k in range(first, last + 1)])
            return sorted(form.terms), ratio * (points - float(form.const))
    return [], np.zeros(0)


def _lin_values(known: Known, lin: Lin, where: Producer, what: str) -> np.ndarray:
    """Every value ``lin`` can take (a superset: its signals taken as independent, those of
    the current token jointly, a claimed part by its claim), after checking that its dot
    product is exact in fp32."""
    covered, claimed = _claimed(known.bounds(), lin)
    tok = [s for s in lin.terms if s in known.per_token and s not in covered]
    parts = [_stored(lin.terms[s]) * known.sets[s] for s in lin.terms
             if s not in known.per_token and s not in covered]
    if covered:
        parts.append(claimed)
    base = np.unique(sum((_stored(lin.terms[s]) * known.per_token[s] for s in tok),
                         np.zeros(1)) + _stored(lin.const))
    # the accumulator adds the terms one at a time, in an order of its own: every partial sum
    # stays within the sum of the terms' sizes (a claimed part's and a token's terms taken
    # one by one: 256 a - 256 b may be 0 as a whole and 256 after its first term)
    terms = [_stored(lin.terms[s]) * (known.per_token[s] if s in known.per_token
                                      else known.sets[s]) for s in lin.terms]
    bits = max([_fraction_bits(base)] + [_fraction_bits(v) for v in parts + terms])
    total = abs(_stored(lin.const)) + sum(float(np.abs(v).max()) for v in terms)
    if not total * 2.0 ** bits < FP32_EXACT_INTEGERS:
        raise CompileError(
            f"{where.source}\n  {where.name}: precision='half' needs every dot product exact "
            f"in an fp32 accumulator, and this op's {what} sums terms too fine or too large "
            f"for fp32 (24 significant bits); keep its values small whole numbers, or {ADVICE}")
    acc = base
    for v in parts:  # the sums, a slice of v at a time (memory), refused when too many
        if len(acc) * len(v) > HALF_CERTIFY_WORK:
            raise too_many(where, f"this op's {what} sums {len(acc):,} x {len(v):,} values of "
                                  f"its terms (more than {HALF_CERTIFY_WORK:,})")
        step = max(1, HALF_CERTIFY_POINTS // len(acc))
        sums = np.unique((acc[:, None] + v[None, :step]).ravel())
        for i in range(step, len(v), step):
            sums = np.union1d(sums, (acc[:, None] + v[None, i:i + step]).ravel())
            if len(sums) > HALF_CERTIFY_POINTS:
                break
        if len(sums) > HALF_CERTIFY_POINTS:
            raise too_many(where, f"this op's {what} takes more than "
                                  f"{HALF_CERTIFY_POINTS:,} values")
        acc = sums
    return acc


def _exact_lane(gate: np.ndarray, up: np.ndarray, act: str) -> bool:
    """Whether the lane computes its exact value at every point in every arithmetic."""
    exact = np.maximum(gate, 0.0) * up
    return all(np.array_equal(a.lanes(gate, up, act), exact) for a in ARITHMETICS.values())


def _lane_points(prog: Program, known: Known, lane: Lane, p: FFN
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(gate, up) [points, 1] at every pair of values the lane can see: the gate's values
    with a constant up (a hinge), the pairs of two independent value sets (a product of two
    streams), else the joint domain of what both read. Where that joint domain is large
    (a selection's key feature, many indicator columns, times the position's digits), the
    pairs of the gate's and the up's values first: a superset of the joint domain's pairs
    (each by its claim where one covers it), taken when the lane is exact on every pair."""
    g_reads, u_reads = lane.gate.signals(), lane.up.signals()
    joint = sorted(g_reads | u_reads)
    shared = bool(g_reads & u_reads)
    if not u_reads or not g_reads or not shared or \
            domain_size(known, joint) > HALF_JOINT_POINTS:
        try:
            gate = _lin_values(known, lane.gate, p, "gate")
            up = _lin_values(known, lane.up, p, "up")
        except CompileError:
            if not shared:
                raise
        else:
            if len(gate) * len(up) <= HALF_CERTIFY_POINTS:
                pairs = np.stack(np.meshgrid(gate, up, indexing="ij"), -1).reshape(-1, 2)
                if not shared or _exact_lane(pairs[:, :1], pairs[:, 1:], prog.machine.act):
                    return pairs[:, :1], pairs[:, 1:]
    cols, by_token = domain(known, joint, len(prog.vocab.tokens), p)
    n = len(prog.vocab.tokens) if by_token else len(next(iter(cols.values()))) if cols else 1
    return (_dot(lane.gate, cols, n, p, "gate")[:, None],
            _dot(lane.up, cols, n, p, "up")[:, None])


def _ffn_by_lane(prog: Program, known: Known, p: FFN, arithmetics: dict[str, Arithmetic]
                 ) -> None:
    """Each lane exact on its own inputs' domain, in every arithmetic; then the down
    projection's sum is exact in fp32 (every term on a grid 2**-g, the magnitudes' sum below
    2**(24 - g)), and its result a number both half formats hold: every multiple of 2**-g
    within the output's range (its facts) is one. The output's values: those multiples."""
    sids, down = _down_matrix(p)
    peak, bits, work = np.zeros(len(p.lanes)), 0, 0
    for i, lane in enumerate(p.lanes):
        gate, up = _lane_points(prog, known, lane, p)
        work += len(gate) * (len(lane.gate.terms) + len(lane.up.terms) + 2)
        if work > HALF_CERTIFY_WORK:  # lanes each within HALF_CERTIFY_POINTS, many of them
            raise CompileError(
                f"{p.source}\n  {p.name}: precision='half' certifies an op by replaying each "
                f"of its lanes on every value its inputs can take together, and the values "
                f"of its lanes' terms (the first {i + 1} of {len(p.lanes)} lanes) already "
                f"number more than {HALF_CERTIFY_WORK:,}; narrow the ranges of what it reads "
                f"(tw.claim), or {ADVICE}")
        exact = np.maximum(gate, 0.0) * up
        for name, arith in arithmetics.items():
            got = arith.lanes(gate, up, prog.machine.act)
            bad = np.argwhere(got != exact)
            if len(bad):
                j = int(bad[0][0])
                o = next(o for o in range(len(sids)) if down[o, i] != 0)
                _refuse(prog, sids[o], name, f"in a lane with gate {gate[j, 0]:g}",
                        got[j, 0], exact[j, 0], gate=float(gate[j, 0]))
        peak[i] = np.abs(exact).max()
        bits = max(bits, _fraction_bits(exact))
    for o, sid in enumerate(sids):
        g = bits + _fraction_bits(down[o])
        total = float((np.abs(down[o]) * peak).sum())
        sig = prog.signals[sid]
        rng = sig.range
        top = max(abs(rng.lo), abs(rng.hi)) if rng.finite else total
        if not (total * 2.0 ** g < FP32_EXACT_INTEGERS and
                min(top, total) * 2.0 ** g <= BF16.exact_integers):
            raise CompileError(
                f"{sig.source}\n  {sig.name}: precision='half' cannot show this op's sum exact "
                f"in bf16 (its terms need {g} fraction bits and reach {total:g}); keep its "
                f"values small whole numbers, or {ADVICE}")
        lo = math.ceil(max(rng.lo, -total) * 2.0 ** g) if rng.finite else \
            math.ceil(-total * 2.0 ** g)
        hi = math.floor(min(rng.hi, total) * 2.0 ** g) if rng.finite else \
            math.floor(total * 2.0 ** g)
        known.sets[sid] = _within_facts(prog, sid,
                                        np.arange(lo, hi + 1, dtype=np.float64) / 2.0 ** g)


def _head(prog: Program, known: Known, h: Head) -> None:
    """A head's copy: each value an exact dot product that fp16 and bf16 hold; its pattern is
    certified by the attention replay at lowering (``ops/attention_half.py``,
    ``ops/position_half.py``). The copy's values: the set of values its source can take."""
    for lin, sid in zip(h.v, h.outputs, strict=True):
        v = _lin_values(known, lin, h, "value")
        if not exact_in_half(torch.from_numpy(v)):
            worst = float(v[torch.from_numpy(v).bfloat16().double().numpy() != v][0])
            raise CompileError(
                f"{h.source}\n  {h.name}: precision='half' copies values that fp16 and bf16 "
                f"hold (bf16: every whole number to 256), and this one may reach {worst:g} "
                f"(taking its terms as independent, values in [{v.min():g}, {v.max():g}]); if "
                "fewer values occur, declare them with tw.claim(v, lo, hi, integral=True) "
                f"before this op, or {ADVICE}")
        known.sets[sid] = _within_facts(prog, sid, v)


def values(prog: Program, arithmetics: dict[str, Arithmetic] | None = None) -> Known:
    """Every signal's values (per token, or as a set), producer by producer; with
    ``arithmetics``, every MLP bank replayed in each (refused where not exact)."""
    facts = sorted(((lin, rng) for rec in prog.nodes.values()
                    for lin, rng in zip(rec.columns, rec.intervals, strict=True)
                    if lin.terms and rng.finite and rng.step),
                   key=lambda f: -len(f[0].terms))  # the widest forms first
    known = Known(per_token={s: np.asarray(t, dtype=np.float64)
                             for s, t in prog.embed_tables.items()}, claims=list(prog.claims),
                  facts=facts)
    for pid in sorted(prog.producers):
        p = prog.producers[pid]
        outs = list(p.outputs) if isinstance(p, FFN) else p.outputs
        if outs and all(sid in prog.inexact for sid in outs):  # bounded where it was built
            for sid in outs:
                known.sets[sid] = np.asarray(prog.inexact[sid][0], dtype=np.float64)
            continue
        if isinstance(p, FFN):
            _ffn(prog, known, p, arithmetics or {})
        else:
            _head(prog, known, p)
    return known


def energy(prog: Program, known: Known) -> float:
    """A bound on the sum of squares of the data columns at any position, from the values
    each can take (tighter than the facts' ranges, which ``emitter.data_energy`` reads)."""
    total = 1.0  # the constant column (emit/half.py adds what it holds beyond 1)
    for s in prog.live_signals():
        v = known.per_token.get(s, known.sets.get(s))
        if v is not None and v.size:
            total += float(np.abs(v).max()) ** 2
    return total


def certify(prog: Program, plan: Plan, m: Machine, placed: Placement) -> dict[str, float]:
    """Replay every producer of ``m`` in each arithmetic; refuse the first one that is not
    exact, naming the user's line. Returns the output's logit lead in each arithmetic: every
    step column is exact, so lm_head gives the code G and every other token 0."""
    half_bounds.weights_exact(prog, plan, m, placed)
    known = values(prog, ARITHMETICS)
    e = int(m.meta["norm_exponent"])
    for s in prog.live_signals():
        held = known.per_token.get(s, known.sets.get(s))
        assert held is not None, f"signal {prog.signals[s].name} was never certified"
        # transformers casts h * 2**-e to fp16 before the gain: below fp16's normal numbers
        # (|h| < 2**(e - 14)) only multiples of 2**(e - 24) survive (Q1 part B)
        if s in prog.inexact:  # bounded where built: see Program.inexact
            have, exact_bits = prog.inexact[s]
            if exact_bits:  # its values include fp16's norm grid for e up to a bound
                ok = e <= HALF_COUNT_NORM_EXPONENT
            else:  # a comparison's margin: fp16's subnormals may round it by 2**-7
                ok = not np.any((have != 0) & (np.abs(have) < 2.0 ** (e - 18)))
            if not ok:
                sig = prog.signals[s]
                raise CompileError(
                    f"{sig.source}\n  {sig.name}: precision='half' normalises the residual by "
                    f"2**-{e}, and fp16 keeps too few bits of this value there; keep fewer or "
                    f"smaller values live, or {ADVICE}")
            continue
        small = held[np.abs(held) < 2.0 ** (e - 14)]
        if small.size and not np.all(small * 2.0 ** (24 - e) == np.round(small * 2.0 ** (24 - e))):
            sig = prog.signals[s]
            raise CompileError(
                f"{sig.source}\n  {sig.name}: precision='half' normalises the residual by "
                f"2**-{e}, and fp16 loses this value's fraction there (it needs multiples of "
                f"2**{e - 24} below 2**{e - 14}); keep the values small or whole, or {ADVICE}")
        if not exact_in_half(torch.from_numpy(held)):
            sig = prog.signals[s]
            raise CompileError(f"{sig.source}\n  {sig.name}: precision='half' keeps every value "
                               f"in fp16 and bf16, and this one does not fit; {ADVICE}")
    half_bounds.projections(prog, known.per_token, known.sets,
                            2.0 ** (e - min(e, HALF_GAIN_EXPONENT)))
    lead = float(np.abs(m.lm_head.double().numpy()).max())
    return {name: lead for name in ARITHMETICS}
