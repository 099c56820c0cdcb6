"""Positions and the latch in half precision (``precision="half"``; docs/half-precision.md).

fp32 decodes the position from the ``<bos>`` mean ``1/(i+1)``, which bf16 cannot tell apart
past 94 positions. Here the position is read off one rotary plane that turns exactly
``2 pi / HALF_POSITIONS`` per position (``Geometry.half_planes`` sets the planes' ratio so that
plane ``HALF_POSITION_PLANE`` does), by *cuts*: a head whose only rotary key is ``<bos>``'s
gives ``<bos>`` the logit ``A sin(angle_i - beta) + OFFSET`` and every other key 0, and copies
``<bos>``'s indicator, so it outputs exactly 1 where the angle is past the line ``beta`` and
exactly 0 before it (the offset puts both sides beyond what fp32 rounds: ``<bos>``'s weight is
then exactly 1 or exactly 0).

- the high digit ``h = i // 8`` (16 sectors of the circle): 8 cuts through opposite sector
  boundaries give its Johnson code, and one MLP bank (a lane per code) decodes it;
- the low digit ``l = i % 8``: 7 cuts at the boundaries inside h's sector, each query turned
  back by h (its direction is a table of h from the same bank, rounded to bf16), so that
  ``[l >= t]`` for t = 1..7, summed, is l;
- ``position = 8 h + l``, a whole number in every arithmetic.

At ``<bos>`` itself a cut sees only ``<bos>`` and outputs 1: the decoding bank's lanes are off
there (h = 0) and each low cut's output less ``<bos>``'s own indicator is 0, so position 0
reads 0.

The certificate (``check_cuts``) replays every cut's logit at every position in each
arithmetic (eager and sdpa in fp32/fp16/bf16, llama.cpp's f16 q/k), with the stored (bf16)
weights and table values, and requires ``<bos>`` to win by ``ln(i) + 25 ln 2`` or lose by
``UNDERFLOW``.

The latch: ``v`` at the latest j <= i with ``valid_j``, by one head whose key is ``(p_j + 1)
valid_j`` (an MLP lane: ``relu(p + 1 - 128 (1 - valid))``) and whose query is ``G``: the
latest valid key leads every other by at least G, every score is a whole multiple of G that
fp16 and bf16 hold, and the copied values are offset to be at least 1 so that the others'
leak rounds away (``HALF_LATCH_GAIN``).
"""

from __future__ import annotations

import math
from functools import lru_cache

import torch

from torchwright_fx.base.errors import GeometryError
from torchwright_fx.base.machines import FP16
from torchwright_fx.base.numerics import (
    HALF_CUT_AMPLITUDE,
    HALF_CUT_OFFSET,
    HALF_CUT_TABLE,
    HALF_JOHNSON_CUTS,
    HALF_KEY_GAIN,
    HALF_LATCH_GAIN,
    HALF_POSITION_PLANE,
    HALF_POSITION_SECTORS,
    HALF_POSITIONS,
    UNDERFLOW,
)
from torchwright_fx.ir.graph import Program
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import BOOL, Interval
from torchwright_fx.ops.attention import Geometry, _inv_freq, heads
from torchwright_fx.ops.attention_half import DTYPES, _bf16
from torchwright_fx.ops.ffn.elementwise import select
from torchwright_fx.ops.lanes import Bank

HIGH = HALF_POSITION_SECTORS  # sectors of the circle: the high digit's base
LOW = HALF_POSITIONS // HIGH  # positions per sector: the low digit's base
ADVICE = "lower max_seq_len to 128, or compile with precision='fp32'"


def _johnson(h: int) -> tuple[int, ...]:
    """The Johnson code of h < 16 in 8 bits: bit c is 1 iff c < h <= c + 8."""
    return tuple(int(c < h <= c + HALF_JOHNSON_CUTS) for c in range(HALF_JOHNSON_CUTS))


def _step() -> float:
    return 2.0 * math.pi / HALF_POSITIONS


def _high_line(c: int) -> float:
    """Cut c's line: between positions 8(c+1) - 1 and 8(c+1) (and, opposite, 8(c+9) - 1 and
    8(c+9)): bit c of the Johnson code is 1 on the half circle after it."""
    return (c + 1) * LOW * _step() - _step() / 2


def _low_line(h: int, t: int) -> float:
    """Low cut t's line in sector h: between positions 8h + t - 1 and 8h + t."""
    return (h * LOW + t - 0.5) * _step()


def _query(beta: float) -> tuple[float, float]:
    """The query (q0, q1) on the position plane, in units of 1/HALF_CUT_TABLE, whose logit
    against ``<bos>``'s key (1, 0) at angle phi is sin(phi - beta): whole numbers up to
    HALF_CUT_TABLE, which the residual holds exactly in every format (a fraction such as
    0.0245 would lose bits to fp16's subnormals once the norm divides the residual by 2**e)."""
    scale = HALF_CUT_TABLE
    return float(round(-math.sin(beta) * scale)), float(round(-math.cos(beta) * scale))


def _high_query(c: int) -> tuple[float, float]:
    """High cut c's stored query weights (the amplitude and sqrt(d_head) = 8 folded in),
    bf16 numbers."""
    beta = _high_line(c)
    return _bf16(-math.sin(beta) * _weight()), _bf16(-math.cos(beta) * _weight())


def _weight() -> float:
    """The cut's amplitude times sqrt(d_head) = 8 (HALF_D_HEAD), a bf16 number."""
    return _bf16(HALF_CUT_AMPLITUDE * 8.0)


@lru_cache(maxsize=8)
def check_cuts(geom: Geometry) -> float:
    """The least slack of every cut at every position 1 <= i < max_seq_len in every
    arithmetic; raises GeometryError where negative."""
    n, r = geom.max_seq_len, geom.rotary
    if n > HALF_POSITIONS or math.sqrt(geom.d_head) != 8.0:
        raise GeometryError(f"precision='half' reads positions up to {HALF_POSITIONS} with "
                            f"d_head 64 (max_seq_len={n}, d_head={geom.d_head})", ADVICE)
    inv = _inv_freq(geom.rope_theta, r)[HALF_POSITION_PLANE]
    ang = torch.arange(n, dtype=torch.float32) * inv
    cos, sin = ang.cos(), ang.sin()
    w, bias = _weight() / HALF_CUT_TABLE, _bf16(HALF_CUT_OFFSET * 8.0)
    pos = torch.arange(n)
    cuts = []
    for c in range(HALF_JOHNSON_CUTS):  # constant queries: the stored weights
        q0, q1 = _high_query(c)
        want = torch.tensor([_johnson(int(i) // LOW)[c] for i in pos], dtype=torch.bool)
        cuts.append((torch.full((n,), q0, dtype=torch.float64),
                     torch.full((n,), q1, dtype=torch.float64), want, False))
    for t in range(1, LOW):  # queries from the table of h, times the weight
        qs = [_query(_low_line(int(i) // LOW, t)) for i in pos]
        want = torch.tensor([int(i) % LOW >= t for i in pos], dtype=torch.bool)
        cuts.append((torch.tensor([q[0] for q in qs], dtype=torch.float64),
                     torch.tensor([q[1] for q in qs], dtype=torch.float64), want, True))
    need = torch.log(pos.clamp(min=1).double()) + 25 * math.log(2)
    worst = math.inf
    for c0, c1, want, table in cuts:
        scores: dict[str, torch.Tensor]
        for name in ("fp32", "fp16", "bf16", "llama.cpp"):
            if name == "llama.cpp":  # f32 q (its f16 weight times the f16 input), f32 rotary
                a0 = (c0 * w).float() if table else c0.float()
                a1 = (c1 * w).float() if table else c1.float()
                raw = (a0 * cos - a1 * sin).half().double() + bias
                scores = {name: (raw.float().double() / 8.0).float().double()}
            else:
                dt = DTYPES[name]
                a0 = c0.to(dt) * torch.tensor(w).to(dt) if table else c0.to(dt)
                a1 = c1.to(dt) * torch.tensor(w).to(dt) if table else c1.to(dt)
                raw = (a0 * cos.to(dt) - a1 * sin.to(dt)).double() + bias
                if name == "fp16" and float(raw.abs().max()) >= FP16.max_finite:
                    raise GeometryError("a position cut overflows fp16's scores", ADVICE)
                scores = {f"eager {name}": (raw.to(dt).double() / 8.0).to(dt).double(),
                          f"sdpa {name}": (raw.float().double() / 8.0).float().double()}
            for label, s in scores.items():
                slack = torch.where(want, s - need, -UNDERFLOW - s)[1:]
                low = float(slack.min())
                if low < 0:
                    i = int(slack.argmin()) + 1
                    raise GeometryError(f"a position cut is not exact in {label} at position "
                                        f"{i} (slack {low:.1f})", ADVICE)
                worst = min(worst, low)
    return worst


def _cut(prog: Program, geom: Geometry, q0: Lin, q1: Lin, bos: Lin, name: str, source: str
         ) -> Lin:
    """One cut head's output (1 at ``<bos>`` itself, where it sees only ``<bos>``)."""
    q = [Lin() for _ in range(geom.d_head)]
    k = [Lin() for _ in range(geom.d_head)]
    # the key carries HALF_KEY_GAIN of the logit (exact: a power of two), so that the query's
    # stored weights stay below fp16's 65504 once the norm's reader scale multiplies them
    q[HALF_POSITION_PLANE] = q0 * (1.0 / HALF_KEY_GAIN)
    q[HALF_POSITION_PLANE + geom.rotary // 2] = q1 * (1.0 / HALF_KEY_GAIN)
    q[geom.rotary] = Lin.constant(_bf16(HALF_CUT_OFFSET * 8.0) / 8.0 / HALF_KEY_GAIN)
    k[HALF_POSITION_PLANE] = bos * HALF_KEY_GAIN
    k[geom.rotary] = bos * HALF_KEY_GAIN
    (out,) = heads(prog, geom, q, k, [bos], [BOOL], name, source, half=True)
    return out


def position(prog: Program, geom: Geometry, bos: Lin, name: str, source: str) -> Lin:
    """The position as a whole number (module docstring), built once per program."""
    if prog.shared.position is not None:
        return prog.shared.position
    check_cuts(geom)
    w = _weight() / 8.0 / HALF_CUT_TABLE  # the emitter folds sqrt(d_head) = 8 back in
    bits = []
    for c in range(HALF_JOHNSON_CUTS):
        q0, q1 = _high_query(c)
        bits.append(_cut(prog, geom, Lin.constant(q0 / 8.0), Lin.constant(q1 / 8.0), bos,
                         f"{name}.position_high{c}", source))
    # the high digit and the low cuts' query tables: a lane per Johnson code (exact 0/1)
    bank = Bank(prog.machine, 1 + 2 * (LOW - 1))
    for h in range(HIGH):
        code = _johnson(h)
        # 1 where the cuts spell h's code, <= -1 elsewhere; at <bos> every cut reads 1 (the
        # code of h = 8), and the -2 there turns that lane off too: position 0 reads h = 0
        match = sum(((b * 2 - 1) * (1 if bit else -1) for b, bit in zip(bits, code, strict=True)),
                    Lin()) - (HALF_JOHNSON_CUTS - 1) - bos * 2.0
        if h:
            bank.hinge(0, match, float(h))
        for t in range(1, LOW):
            q0, q1 = _query(_low_line(h, t))
            bank.hinge(2 * t - 1, match, q0)
            bank.hinge(2 * t, match, q1)
    ranges = [Interval(0, HIGH - 1, True)] + \
        [Interval(-HALF_CUT_TABLE, HALF_CUT_TABLE, True)] * (2 * (LOW - 1))
    cols = bank.finish(prog, ranges, f"{name}.position_decode", source)
    high, tables = cols[0], cols[1:]
    low = Lin()
    for t in range(1, LOW):
        low = low + _cut(prog, geom, tables[2 * t - 2] * w, tables[2 * t - 1] * w, bos,
                         f"{name}.position_low{t}", source) - bos  # 0 at <bos>
    pos = high * float(LOW) + low
    # its parts take every combination separately, the sum only 0..n-1: the certificate's
    # value sets take the sum as one value (emit/certify_half.py, as for tw.claim)
    prog.claims.append((pos, Interval(0, geom.max_seq_len - 1, True)))
    prog.shared.position = pos
    return pos


def _latch_span() -> int:
    """The widest range of latched values the gain keeps exact at HALF_POSITIONS positions."""
    return int(math.exp(HALF_LATCH_GAIN - 25 * math.log(2)) / HALF_POSITIONS)


def latch(prog: Program, geom: Geometry, values: list[Lin], ranges: list[Interval],
          valid: Lin, bos: Lin, name: str, source: str) -> list[Lin]:
    """Each value at the latest j <= i with ``valid_j`` = 1 (module docstring)."""
    n = geom.max_seq_len
    if n > HALF_POSITIONS or \
            HALF_LATCH_GAIN * math.sqrt(geom.d_head) * n >= FP16.max_finite:
        raise GeometryError(f"precision='half' latches over at most {HALF_POSITIONS} positions "
                            f"(max_seq_len={n})", ADVICE)
    pos = position(prog, geom, bos, name, source)
    # valid = when + <bos> (1 - when at <bos>) is 0/1 at every position (at <bos> it is 1); its
    # terms, taken apart, could sum to 2: the certificate takes it as one 0/1 value
    prog.claims.append((valid, BOOL))
    bank = Bank(prog.machine, 1)
    # (p + 1) valid: a select gated by valid (SwiGLU: SiLU(+-128) (p + 1) / 128, exact; its
    # gate reads valid with a small coefficient, so the norm's reader scale keeps it < 65504)
    select(bank, 0, valid, pos + 1.0, Interval(1, n, True), Lin(), Interval.point(0.0))
    (key,) = bank.finish(prog, [Interval(0, n, True)], f"{name}.latch_key", source)
    q = [Lin() for _ in range(geom.d_head)]
    k = [Lin() for _ in range(geom.d_head)]
    q[geom.rotary] = Lin.constant(HALF_LATCH_GAIN / HALF_KEY_GAIN)
    k[geom.rotary] = key * HALF_KEY_GAIN
    return _copy_latest(prog, geom, q, k, values, ranges, name, source)


def latest(prog: Program, geom: Geometry, parts: list[list[tuple[Lin, Lin]]],
           values: list[Lin], ranges: list[Interval], bos: Lin, name: str, source: str
           ) -> list[Lin]:
    """Each value at the latest key 1 <= j <= i that every part selects, the ``<bos>`` row
    when none: ``select_latest``'s head (and gather's, argmax's) in half precision.

    ``parts``: the selector's factors, each a list of (query, key) 0/1 feature pairs of which
    at most one product is 1, and that one exactly when the factor holds (keys 0 at ``<bos>``,
    ``families/selection.py``). With c_j the number of parts key j satisfies and m the number
    of parts, the logit is ``G (p_j + 1) (c_j - m + 1)`` for j >= 1 and ``G`` for ``<bos>``:
    a selected key scores ``G (p_j + 1) >= 2 G``, the latest one leads every other selected
    key by G, ``<bos>`` by at least G, and every unselected key (logit <= 0) by 2 G; with no
    selected key, ``<bos>`` leads every other by G. Every logit is a whole multiple of G, of
    at most ``G n max(1, m - 1)``, which fp16 and bf16 hold; the copied values are offset as
    the latch's (``_copy_latest``)."""
    n, m = geom.max_seq_len, len(parts)
    top = HALF_LATCH_GAIN * math.sqrt(geom.d_head) * n * max(1, m - 1)
    if n > HALF_POSITIONS or top >= FP16.max_finite:
        raise GeometryError(
            f"precision='half' selects the latest match over at most {HALF_POSITIONS} "
            f"positions, of a selector joining at most 2 conditions with & (max_seq_len={n}, "
            f"{m} joined)", "join the conditions into one tw.select with a predicate function, "
            "lower max_seq_len to 128, or compile with precision='fp32'")
    pos = position(prog, geom, bos, name, source)
    pairs = [pair for part in parts for pair in part]
    if len(pairs) + 2 > geom.tail:
        raise GeometryError(
            f"precision='half' selects with {len(pairs)} content dims and 2 more for recency "
            f"and <bos>, more than the {geom.tail} of d_head={geom.d_head}",
            "select on streams with fewer distinct values (map them first with tw.lookup), "
            "or compile with precision='fp32'")
    # (p_j + 1) times each key feature: a select gated by the feature (0 or p + 1, exact)
    bank = Bank(prog.machine, len(pairs))
    for lane, (_, kf) in enumerate(pairs):
        select(bank, lane, kf, pos + 1.0, Interval(1, n, True), Lin(), Interval.point(0.0))
    keys = bank.finish(prog, [Interval(0, n, True)] * len(pairs), f"{name}.select_keys",
                       source) if pairs else []
    for _, kf in pairs:  # each feature is 0/1 where the selector's encodings are exact
        prog.claims.append((kf, BOOL))
    gain = HALF_LATCH_GAIN / HALF_KEY_GAIN  # the key carries HALF_KEY_GAIN (a power of two)
    q = [Lin() for _ in range(geom.d_head)]
    k = [Lin() for _ in range(geom.d_head)]
    for r, ((qf, _), key) in enumerate(zip(pairs, keys, strict=True)):
        q[geom.rotary + r] = qf * gain
        k[geom.rotary + r] = key * HALF_KEY_GAIN
    recency, at_bos = geom.rotary + len(pairs), geom.rotary + len(pairs) + 1
    q[recency] = Lin.constant(-gain * (m - 1))  # (p_j + 1)(1 - m): with the parts, c_j - m + 1
    k[recency] = (pos + 1.0) * HALF_KEY_GAIN
    q[at_bos] = Lin.constant(gain * m)  # <bos>: G (1 - m) + G m = G
    k[at_bos] = bos * HALF_KEY_GAIN
    return _copy_latest(prog, geom, q, k, values, ranges, name, source)


def _copy_latest(prog: Program, geom: Geometry, q: list[Lin], k: list[Lin],
                 values: list[Lin], ranges: list[Interval], name: str, source: str
                 ) -> list[Lin]:
    """The head whose target leads every other key by at least HALF_LATCH_GAIN, copying each
    value exactly: offset to be at least 1, so that the others' leak rounds away."""
    n = geom.max_seq_len
    shifted, moved = [], []
    for v, r in zip(values, ranges, strict=True):
        # the others' leak, exp(-G) n max|v'|, must round away against the target (>= 1)
        span = r.hi - r.lo + 1 if r.finite else math.inf
        if not math.log(n * span) + 25 * math.log(2) <= HALF_LATCH_GAIN:
            raise GeometryError(
                f"precision='half' latches values within {_latch_span():,} of each other, and "
                f"this one's range is [{r.lo:g}, {r.hi:g}]", "latch a smaller value (declare "
                "its range with tw.claim), or compile with precision='fp32'")
        shifted.append(v + (1.0 - r.lo))  # >= 1: the others' leak rounds away
        moved.append(r.shift(1.0 - r.lo))
    out = heads(prog, geom, q, k, shifted, moved, name, source, half=True)
    return [o - (1.0 - r.lo) for o, r in zip(out, ranges, strict=True)]
