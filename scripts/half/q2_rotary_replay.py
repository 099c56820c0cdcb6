"""Q2 (part 3): replay of the hierarchical rotary lobe's logits in each dtype, as a compile-time
certificate would do it (transformers' eager arithmetic: q/k weights rounded to the dtype,
Phi3RotaryEmbedding's cos/sin cast to the dtype, apply_rotary_pos_emb in the dtype, the score
matmul rounded to the dtype): the worst lead of key i - t over every other key j <= i, at every
query position. Runs in about a minute (16384 positions, chunked).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import DTYPES  # noqa: E402
from q2_addressing import DH, LEAD, RN, A, E, lobe, shift_model  # noqa: E402


def replay_gap(n: int, t: int, P: int, r: float, dtype, chunk: int = 1024) -> float:
    """The smallest logit lead of key i - t over every other key j <= i, replaying transformers'
    eager arithmetic in ``dtype`` (q, k from the weights rounded to the dtype; cos/sin from
    Phi3RotaryEmbedding cast to the dtype; apply_rotary_pos_emb in the dtype; the score matmul
    rounded to the dtype, times 1/8)."""
    from transformers.models.phi3.modeling_phi3 import apply_rotary_pos_emb
    model, q, k, rot, inv = shift_model("multi", n, t, "eager", dtype, P, r)
    scale = 2.0 ** (A - E)   # the normalised constant column
    qv = (torch.tensor(q * RN, dtype=torch.float32).to(dtype) * scale).to(dtype)
    kv = (torch.tensor(k * RN, dtype=torch.float32).to(dtype) * scale).to(dtype)
    pos = torch.arange(n)[None]
    cos, sin = model.model.rotary_emb(qv[None, None], pos)
    Q = qv[None, None, None, :].expand(1, 1, n, DH)
    K = kv[None, None, None, :].expand(1, 1, n, DH)
    Qe, Ke = apply_rotary_pos_emb(Q, K, cos, sin)
    worst = math.inf
    for s in range(t, n, chunk):
        rows = torch.arange(s, min(n, s + chunk))
        sc = (torch.matmul(Qe[0, 0, rows], Ke[0, 0].T) * (1.0 / math.sqrt(DH))).double()
        sc = sc.masked_fill(torch.arange(n)[None, :] > rows[:, None], -math.inf)
        tgt = sc[torch.arange(len(rows)), rows - t].clone()
        sc[torch.arange(len(rows)), rows - t] = -math.inf
        worst = min(worst, float((tgt - sc.max(1).values).min()))
    return worst


def part_d3() -> None:
    print("\nD3. replayed worst lead (exact arithmetic: 160) of the hierarchical lobe, eager")
    for n, P, r in ((4096, 6, 4.0), (16384, 8, 4.0)):
        fr = [r ** -k for k in range(P)]
        _, m = lobe(fr, n)
        gaps = {name: replay_gap(n, t, P, r, dt) for name, dt in DTYPES.items() for t in (1,)}
        print(f"  n={n:>5} P={P} r={r:g} (margin {m:.4f}, max |logit| {LEAD / m:.0f}):"
              " shift 1 lead "
              + ", ".join(f"{k} {v:.1f}" for k, v in gaps.items()))


if __name__ == "__main__":
    part_d3()
