"""Attention in half precision (``precision="half"``; docs/half-precision.md Q2).

fp32's shift lobe is one coarse rotary plane whose amplitude grows with the square of the
length; half precision's 8-11 bit cos/sin cannot hold it past a few dozen positions. Here a
head reads distance k through P planes at Phi-3's own geometric frequencies ``r**-p``
(``rope_theta = r**P``; ``Geometry.half_planes``): the query holds ``A_p (cos(f_p k),
-sin(f_p k))`` on plane p and the key ``(1, 0)``, so the logit between positions i and j is
``sum_p A_p cos(f_p (i - j - k))``, largest at distance k, with logits near a thousand at any
length. The amplitudes come from a max-min linear program over every distance: the target
beats every other key by the most it can, for amplitudes summing to 1, then are scaled so that
the lead is ``HALF_SHIFT_LEAD``. Where ``i < k`` the contract is the BOS row: a content bonus B
on the BOS key (its indicator on the position-free tail), in the same program, makes BOS win
there and lose everywhere else.

The certificate (``check``): the weights are rounded to bf16 numbers (which fp16 holds too),
and the logits are replayed at every query position as each runtime computes them —
transformers eager (rotary and scores rounded to the dtype; fp16 must not overflow before the
1/sqrt(d) scale), sdpa (fp32 scores of the dtype's rotated q and k), llama.cpp (f32 rotary from
its own angles, f16 q and k, f32 scores) — and the target must lead every other key by
``HALF_ATTENTION_GAP``, where each other softmax weight is exactly 0: the head copies its
target's value exactly.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import torch

from torchwright_fx.base.errors import GeometryError
from torchwright_fx.base.machines import FP16
from torchwright_fx.base.numerics import HALF_ATTENTION_GAP, HALF_KEY_GAIN, HALF_SHIFT_LEAD
from torchwright_fx.ir.graph import Program
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ops.attention import Geometry, _inv_freq, heads

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def _bf16(x: float) -> float:
    """The bf16 number nearest x, or 0 below fp16's normal numbers (2**-14): a number both
    formats hold while |x| <= 65504 (the LP's round-off, 1e-12, becomes 0)."""
    y = float(torch.tensor(x, dtype=torch.float64).to(torch.bfloat16).double())
    return y if abs(y) >= 2.0 ** -14 else 0.0


@lru_cache(maxsize=64)
def lobe(geom: Geometry, offset: int) -> tuple[tuple[float, ...], float, float]:
    """(amplitudes per plane, BOS bonus, normalised lead) of the max-min program for a head
    reading distance ``offset`` (amplitudes sum to 1; the lead is the exact-arithmetic margin
    of the target over every other key, at every query position)."""
    from ortools.linear_solver import pywraplp  # imported lazily: OR-Tools is slow to load

    n, k = geom.max_seq_len, offset
    planes = geom.half_planes[0]
    freqs = _inv_freq(geom.rope_theta, geom.rotary).double().numpy()[:planes]

    def lobe_at(d: np.ndarray) -> np.ndarray:  # [len(d), planes]: cos(f_p (d - k))
        return np.cos((d[:, None] - k) * freqs[None, :])

    solver = pywraplp.Solver.CreateSolver("GLOP")
    amps = [solver.NumVar(0.0, 1.0, f"a{p}") for p in range(planes)]
    bonus = solver.NumVar(0.0, 2.0, "b")
    lead = solver.NumVar(-solver.infinity(), solver.infinity(), "m")
    solver.Add(sum(amps) == 1.0)
    peak = lobe_at(np.array([k]))[0]

    def row(coefs: np.ndarray, with_bonus: float) -> None:
        solver.Add(sum(float(c) * a for c, a in zip(coefs, amps, strict=True))
                   + with_bonus * bonus >= lead)

    others = np.array([d for d in range(n) if d != k])
    for d, c in zip(others, lobe_at(others), strict=True):
        row(peak - c, 0.0)  # a key at distance d (not BOS)
        if d > k:
            row(peak - c, -1.0)  # BOS at distance d = i > k
    for i in range(1, min(k, n)):  # before the target exists: BOS (distance i) wins
        here = lobe_at(np.array([i]))[0]
        for c in lobe_at(np.arange(i)):
            row(here - c, 1.0)
    solver.Maximize(lead)
    if solver.Solve() != pywraplp.Solver.OPTIMAL or lead.solution_value() <= 0:
        raise GeometryError(f"no rotary lobe reads distance {offset} at max_seq_len={n} in "
                            "half precision", "shift by less, or compile with precision='fp32'")
    return (tuple(a.solution_value() for a in amps), bonus.solution_value(),
            lead.solution_value())


def weights(geom: Geometry, offset: int) -> tuple[tuple[float, ...], float]:
    """The stored query weights (sqrt(d_head) folded in, rounded to bf16): the rotary dims,
    and the BOS bonus on the first tail dim."""
    amps, bonus, lead = lobe(geom, offset)
    scale = HALF_SHIFT_LEAD / lead * math.sqrt(geom.d_head)
    freqs = _inv_freq(geom.rope_theta, geom.rotary).double().numpy()
    q = [0.0] * geom.rotary
    for p, a in enumerate(amps):
        q[p] = _bf16(a * scale * math.cos(freqs[p] * offset))
        q[p + geom.rotary // 2] = _bf16(-a * scale * math.sin(freqs[p] * offset))
    return tuple(q), _bf16(bonus * scale)


def _rotary(geom: Geometry, n: int, llama: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [n, rotary] in fp32: transformers' (position times inv_freq), or llama.cpp's
    (the angle's per-pair factor by repeated fp32 multiplication)."""
    inv = _inv_freq(geom.rope_theta, geom.rotary)
    if llama:
        step = torch.tensor(geom.rope_theta, dtype=torch.float32) ** (-2.0 / geom.rotary)
        inv = torch.ones(geom.rotary // 2)
        for p in range(1, geom.rotary // 2):
            inv[p] = inv[p - 1] * step
    ang = torch.arange(n, dtype=torch.float32)[:, None] * inv[None, :]
    emb = torch.cat([ang, ang], dim=-1)
    return emb.cos(), emb.sin()


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    r = cos.shape[-1]
    half = torch.cat([-x[..., r // 2:], x[..., : r // 2]], dim=-1)
    return x * cos + half * sin


@lru_cache(maxsize=64)
def check(geom: Geometry, q: tuple[float, ...], bonus: float, offset: int) -> float:
    """The smallest lead of the target (``i - offset``, BOS where i < offset) over every other
    key, at every query position, over the arithmetics; raises GeometryError below
    HALF_ATTENTION_GAP or where fp16's unscaled scores overflow."""
    n, r = geom.max_seq_len, geom.rotary
    qv = torch.tensor(q, dtype=torch.float64)
    kv = torch.zeros(r, dtype=torch.float64)
    kv[: geom.half_planes[0]] = 1.0
    worst = math.inf
    for name in ("fp32", "fp16", "bf16", "llama.cpp"):
        llama = name == "llama.cpp"
        cos, sin = _rotary(geom, n, llama)
        if llama:  # f32 rotary, then q and k stored / converted to f16
            qr = _rotate(qv.float(), cos, sin).half().double()
            kr = _rotate(kv.float(), cos, sin).half().double()
        else:
            dt = DTYPES[name]
            qr = _rotate(qv.to(dt), cos.to(dt), sin.to(dt)).double()
            kr = _rotate(kv.to(dt), cos.to(dt), sin.to(dt)).double()
        chunk = max(1, (1 << 22) // n)  # query rows at a time: O(4M) scores in memory
        for start in range(0, n, chunk):
            rows = torch.arange(start, min(n, start + chunk))
            raw = qr[rows] @ kr.T  # [query i, key j] before the 1/sqrt(d) scale
            raw[:, 0] += _bf16(bonus)  # the BOS key's tail term
            for label, s in _scores(name, raw, geom).items():
                gap, at = _lead(s, rows, offset)
                if gap < HALF_ATTENTION_GAP:
                    raise GeometryError(
                        f"a half shift by {offset} at max_seq_len={n} leads by only {gap:.1f} "
                        f"at position {at} in {label} (needs {HALF_ATTENTION_GAP:g})",
                        "shift by less, lower max_seq_len, or compile with precision='fp32'")
                worst = min(worst, gap)
    return worst


def _scores(name: str, raw: torch.Tensor, geom: Geometry) -> dict[str, torch.Tensor]:
    """The scaled scores each implementation computes from the exact dot products ``raw`` of
    its rounded q and k: eager rounds the product and the scaled score to the dtype (in fp16
    the product must stay below 65504), sdpa and llama.cpp compute them in fp32."""
    scale = 1.0 / math.sqrt(geom.d_head)
    fp32 = (raw.float().double() * scale).float().double()
    if name == "llama.cpp":
        return {"llama.cpp": fp32}
    dt = DTYPES[name]
    if name == "fp16" and float(raw.abs().max()) >= FP16.max_finite:
        raise GeometryError(
            f"a half shift reaches a score of {float(raw.abs().max()):.0f} before the "
            "1/sqrt(d_head) scale, beyond fp16's 65504",
            "lower d_head, or compile with precision='fp32'")
    eager = (raw.to(dt).double() * scale).to(dt).double()
    return {f"eager {name}": eager, f"sdpa {name}": fp32}


def _lead(s: torch.Tensor, rows: torch.Tensor, offset: int) -> tuple[float, int]:
    """The smallest lead of each query row's target over its other keys j <= i (``s``: the
    rows ``rows`` of the scores)."""
    local = torch.arange(len(rows))
    target = torch.where(rows >= offset, rows - offset, torch.zeros_like(rows))
    masked = s.masked_fill(torch.arange(s.shape[1])[None, :] > rows[:, None], -math.inf)
    best = masked[local, target].clone()
    masked[local, target] = -math.inf
    gap = best - masked.max(dim=1).values
    gap[rows == 0] = math.inf  # position 0 has one key
    i = int(torch.argmin(gap))
    return float(gap[i]), int(rows[i])


def shift(prog: Program, geom: Geometry, values: list[Lin], ranges: list, offset: int,
          bos: Lin, name: str, source: str) -> list[Lin]:
    """Each value at position i - offset (the BOS row when i < offset), certified in fp32,
    fp16, bf16 and llama.cpp's arithmetic."""
    if offset >= geom.max_seq_len:
        raise GeometryError(f"shift by {offset} >= max_seq_len={geom.max_seq_len}",
                            f"raise max_seq_len above {offset}, or shift by less")
    qw, bonus = weights(geom, offset)
    check(geom, qw, bonus, offset)
    root = math.sqrt(geom.d_head)  # the emitter folds it back in (emit/emitter.py)
    q = [Lin() for _ in range(geom.d_head)]
    k = [Lin() for _ in range(geom.d_head)]
    # the key carries HALF_KEY_GAIN of the logit (a power of two: no product changes), so
    # that the query's stored weights stay below 65504 under the norm's reader scale
    for r, w in enumerate(qw):
        q[r] = Lin.constant(w / root / HALF_KEY_GAIN)
    for p in range(geom.half_planes[0]):
        k[p] = Lin.constant(HALF_KEY_GAIN)
    if bonus:
        q[geom.rotary] = Lin.constant(bonus / root / HALF_KEY_GAIN)
        k[geom.rotary] = bos * HALF_KEY_GAIN
    return heads(prog, geom, q, k, values, ranges, name, source, half=True)
