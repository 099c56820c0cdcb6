"""Q3: position information in half precision.

A. The head that attends uniformly to every key, value = the <bos> indicator, outputs
   fl(1/(i+1)) (rounded as each runtime rounds it). Measured on real Phi-3 modules (eager and
   sdpa, fp32 / fp16 / bf16) and llama.cpp's flash attention emulated, at every i < 4096:
   - the largest N such that y(0) > y(1) > ... > y(N-1) in each runtime;
   - the largest N such that for every i < N - 1 one threshold t, a bf16 number (so that the
     gate's weights S' and -S' t are exact in every dtype), separates y(i+1) < t < y(i) in
     every runtime at once; and the sharpness a two-lane step needs there (S' >= 128 / gap so
     that fp32's SiLU is exact: the gate's largest value is S' * 1, at most 65504 in fp16).
B. Absolute position digits from RoPE (measured): a plane with an exact period m (frequency
   2 pi / m) compared against <bos> (the only key with a rotary component; every other key has
   the constant logit 0) gives the exact indicator [cos(2 pi i / m - psi) > 0]: bos's logit is
   A cos(2 pi i / m - psi), so the softmax is one-hot on <bos> (value 1) or on the rest (value
   0). Eight cuts psi_c = 2 pi (c + 1/2) / 16 - pi / 2 give the 16 residues i mod 16 a Johnson
   code. Level 1 (frequency 2 pi / 256) turns its query by -2 pi d0 / 256 (d0 = i mod 16, read
   here from the token, a previous layer's output in a real build), so that its cuts see
   floor(i / 16) mod 16 exactly. Frequencies set per plane through longrope's short_factor
   (transformers, vLLM) / rope_freqs (llama.cpp).
Runs in about a minute on one core.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import DTYPES, IMPLS, build, config, fl, hidden, llama_fa_one_chunk, norm_weights  # noqa: E402

N = 4096
D, DH = 64, 64
E, A = 16, 15
RN = 2.0 ** (E - A)
CONST, BOS, OUT, D0, OUT_CUTS = 0, 1, 2, 8, 32  # D0..D0+15: one-hot of i mod 16 (level 1)
RUNTIMES = [(f"{i} {n}", i, d) for i in IMPLS for n, d in DTYPES.items()] + \
    [("llama.cpp FA", None, None)]


def uniform_y(impl, dtype) -> torch.Tensor:
    emb = torch.zeros(2, D, dtype=torch.float64)
    emb[:, CONST] = 1.0
    emb[0, BOS] = 1.0
    qkv = torch.zeros(3 * DH, D, dtype=torch.float64)
    qkv[2 * DH + DH - 1, BOS] = RN
    o = torch.zeros(D, DH, dtype=torch.float64)
    o[OUT, DH - 1] = 1.0
    ids = torch.ones(N, dtype=torch.long)
    ids[0] = 0
    if impl is None:
        v = torch.zeros(N, DH, dtype=torch.float64)
        v[0, -1] = 1.0
        z = torch.zeros(N, DH, dtype=torch.float64)
        return llama_fa_one_chunk(z, z, v, 1.0 / 8.0)[:, -1]
    cfg = config(vocab=2, d=D, n_heads=1, d_head=DH, d_ff=8, eps=2.0 ** (2 * E), rotary=4,
                 max_pos=N, impl=impl)
    w = norm_weights(cfg, 2.0 ** A)
    w.update({"model.embed_tokens.weight": emb, "model.layers.0.self_attn.qkv_proj.weight": qkv,
              "model.layers.0.self_attn.o_proj.weight": o})
    return hidden(build(cfg, w, dtype), ids)[1][:, OUT]


def bf16_between(lo: float, hi: float) -> float | None:
    """The bf16 number strictly between lo and hi (0 < lo < hi) farthest from both, or None."""
    up = torch.tensor(2.0, dtype=torch.bfloat16)
    x = torch.tensor(lo, dtype=torch.float64).to(torch.bfloat16)
    best = None
    while float(x) < hi:
        c = float(x)
        if lo < c < hi and (best is None or min(c - lo, hi - c) > min(best - lo, hi - best)):
            best = c
        x = torch.nextafter(x, up)
    return best


def part_a() -> None:
    print(f"A. the uniform head's output y(i) = fl(1/(i+1)), i < {N}")
    ys = {label: uniform_y(impl, dt) for label, impl, dt in RUNTIMES}
    for label, y in ys.items():
        exact = (y == fl(fl(1.0 / torch.arange(1, N + 1, dtype=torch.float64), torch.float32),
                         DTYPES.get(label.split()[-1], torch.float32)))
        drop = (y[1:] >= y[:-1]).nonzero()
        first = int(drop[0]) + 1 if len(drop) else N
        print(f"  {label:<16} y == fl_dtype(fl32(1/(i+1))) at {int(exact.sum())}/{N}; strictly "
              f"decreasing for i < {first}")
    Y = torch.stack(list(ys.values()))
    upper, lower = Y.min(0).values, Y.max(0).values   # y(i) and y(i+1) over all runtimes
    limit, need = None, []
    for i in range(N - 1):
        lo, hi = float(lower[i + 1]), float(upper[i])
        t = bf16_between(lo, hi) if lo < hi else None
        if t is None:
            limit = i + 1
            break
        need.append(128.0 / min(t - lo, hi - t))
    print(f"  one bf16 threshold separates y(i+1) < t < y(i) in every runtime for every i < {limit}"
          f" (the first i without one: {limit - 1 if limit else '-'})")
    over = next((i for i, v in enumerate(need) if v > 65504), None)
    rel = [128.0 / v / float(upper[i]) for i, v in enumerate(need)]
    worst = min(range(len(rel)), key=rel.__getitem__)
    print(f"  a one-stage step reading y needs S' = 128 / gap; the gate at y = 1 is S', at most"
          f" 65504 in fp16: holds for i < {over}")
    print(f"  smallest common gap relative to y(i) below i = {limit}: {rel[worst]:.2e} at"
          f" i = {worst}"
          " (where the runtimes' roundings of 1/(i+1) nearly meet)")
    for k in (8, 9, 10, 12):
        n_ok = next((i for i, v in enumerate(rel) if v < 2.0 ** -k), len(rel))
        print(f"    common gap >= 2^-{k} y(i) for every i < {n_ok}  (a step on z = 2^m y in [1, 2)"
              f" then needs S' = 2^{k + 7}{'; fp16 gates allow 2^15' if k == 8 else ''})")


def cut_head(level: int, n: int, impl, dtype, cuts=8, amp: float = 640.0):
    """Eight phase-cut heads of one level; returns the [n, cuts] 0/1 outputs."""
    m = 16 ** (level + 1)
    f = 2 * math.pi / m
    vocab = n                                         # token id = position (for the test)
    d = cuts * DH   # transformers validates longrope factors against hidden_size // heads
    emb = torch.zeros(vocab, d, dtype=torch.float64)
    emb[:, CONST] = 1.0
    emb[0, BOS] = 1.0
    for p in range(vocab):
        emb[p, D0 + p % 16] = 1.0
    rot = 4                                            # plane 0 = dims (0, 2)
    qkv = torch.zeros(3 * DH * cuts, d, dtype=torch.float64)
    o = torch.zeros(d, DH * cuts, dtype=torch.float64)
    s = math.sqrt(amp)
    for c in range(cuts):
        psi = 2 * math.pi * (c + 0.5) / 16 - math.pi / 2
        base = c * DH
        # query s (cos(psi + corr), -sin(psi + corr)), key s (1, 0) on <bos> only:
        # logit_bos = A cos(f i - psi - corr); corr = 2 pi d0 / m at level 1
        for dig in range(16 if level else 1):
            corr = 2 * math.pi * dig / m if level else 0.0
            col = D0 + dig if level else CONST
            qkv[base + 0, col] = s * math.cos(psi + corr) * math.sqrt(DH) * RN
            qkv[base + 2, col] = -s * math.sin(psi + corr) * math.sqrt(DH) * RN
        qkv[DH * cuts + base + 0, BOS] = s * RN
        qkv[2 * DH * cuts + base + DH - 1, BOS] = RN
        o[OUT_CUTS + c, base + DH - 1] = 1.0
    ids = torch.arange(n)
    factors = [1.0 / f, 1.0]
    if impl is None:
        h = emb[ids] * 2.0 ** (A - E)
        proj = (h.to(torch.float16).float() @ qkv.to(torch.float16).float().T).double()
        inv = torch.tensor([f, 1.0], dtype=torch.float32)
        outs = []
        for c in range(cuts):
            q = proj[:, c * DH:(c + 1) * DH]
            k = proj[:, DH * cuts + c * DH: DH * cuts + (c + 1) * DH]
            v = proj[:, 2 * DH * cuts + c * DH: 2 * DH * cuts + (c + 1) * DH]
            ang = torch.arange(n)[:, None].float() * inv[None, :]
            cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()

            def rope(x, cos=cos, sin=sin):
                x = x.float().clone()
                a = x[:, :rot].clone()
                x[:, :rot] = a * cos + torch.cat([-a[:, 2:], a[:, :2]], -1) * sin
                return x.double()
            outs.append(llama_fa_one_chunk(rope(q), rope(k), v, 1.0 / 8.0)[:, -1])
        return torch.stack(outs, 1)
    cfg = config(vocab=vocab, d=d, n_heads=cuts, d_head=DH, d_ff=8, eps=2.0 ** (2 * E),
                 rotary=rot, max_pos=n, impl=impl, rope_theta=1.0,
                 rope={"rope_type": "longrope", "short_factor": factors, "long_factor": factors})
    w = norm_weights(cfg, 2.0 ** A)
    w.update({"model.embed_tokens.weight": emb, "model.layers.0.self_attn.qkv_proj.weight": qkv,
              "model.layers.0.self_attn.o_proj.weight": o})
    return hidden(build(cfg, w, dtype), ids)[1][:, OUT_CUTS:OUT_CUTS + cuts]


def part_b(n: int = 4096) -> None:
    print(f"\nB. phase-cut heads against <bos> (A = 640): exact Johnson code of the digit, i < {n}")
    i = torch.arange(n)
    for level in (0, 1):
        digit = (i // 16 ** level) % 16
        psi = 2 * math.pi * (torch.arange(8) + 0.5) / 16 - math.pi / 2
        want = (torch.cos(2 * math.pi * digit[:, None].double() / 16 - psi[None, :]) > 0).double()
        want[0] = 1.0   # <bos> reads itself
        for label, impl, dt in RUNTIMES:
            got = cut_head(level, n, impl, dt)
            bad = int((got[1:] != want[1:]).any(1).sum())
            print(f"  level {level} (period {16 ** (level + 1)}) {label:<16} wrong positions:"
                  f" {bad}")


def replay_cuts(level: int, n: int, dtype, amp: float = 640.0) -> tuple[float, float]:
    """<bos>'s logit at every query i < n for the eight cuts of one level, replaying
    transformers' eager arithmetic in ``dtype`` (the query from weights rounded to the dtype,
    Phi3RotaryEmbedding's cos/sin cast to the dtype, apply_rotary_pos_emb in the dtype, the
    score rounded to the dtype, times 1/8). Level k turns its query back by 2 pi d_{k-1} / m,
    d_{k-1} = floor(i / 16^(k-1)) mod 16; the finer digits are left in the margin.
    Returns the smallest logit where <bos> must win (needs >= 17 + ln(i + 1) in fp32) and the
    largest where it must lose (needs <= -(104 - ln(i + 1)))."""
    from transformers.models.phi3.modeling_phi3 import apply_rotary_pos_emb
    m = 16 ** (level + 1)
    f = 2 * math.pi / m
    cfg = config(vocab=2, d=2 * DH, n_heads=2, d_head=DH, d_ff=8, rotary=4, max_pos=n,
                 rope_theta=1.0, rope={"rope_type": "longrope", "short_factor": [1 / f, 1.0],
                                       "long_factor": [1 / f, 1.0]})
    rope = build(cfg, {}, dtype).model.rotary_emb
    i = torch.arange(n)
    prev = (i // 16 ** (level - 1)) % 16 if level else torch.zeros_like(i)
    digit = (i // 16 ** level) % 16
    s = math.sqrt(amp)
    half = 2.0 ** (A - E)
    k = torch.zeros(1, 1, 1, DH, dtype=dtype)
    k[..., 0] = (torch.tensor(s * RN).to(dtype) * half).to(dtype)
    cos, sin = rope(k, torch.arange(n)[None])
    kb, _ = apply_rotary_pos_emb(k, k, cos[:, :1], sin[:, :1])      # <bos> at position 0
    win, lose = math.inf, -math.inf
    for c in range(8):
        psi = 2 * math.pi * (c + 0.5) / 16 - math.pi / 2
        corr = (2 * math.pi * prev.double() * 16 ** (level - 1) / m if level
                else torch.zeros(n, dtype=torch.float64))
        q = torch.zeros(1, 1, n, DH, dtype=torch.float64)
        q[0, 0, :, 0] = s * torch.cos(psi + corr) * math.sqrt(DH) * RN
        q[0, 0, :, 2] = -s * torch.sin(psi + corr) * math.sqrt(DH) * RN
        q = (q.to(torch.float32).to(dtype) * half).to(dtype)
        qe, _ = apply_rotary_pos_emb(q, q, cos, sin)
        logit = (torch.matmul(qe, kb.transpose(2, 3)) * (1.0 / math.sqrt(DH)))[0, 0, :, 0].double()
        want = torch.cos(2 * math.pi * digit.double() / 16 - psi) > 0
        lg = logit[1:]
        wn = want[1:]
        if bool(wn.any()):
            win = min(win, float((lg[wn] - torch.log(i[1:][wn].double() + 1)).min()))
        if bool((~wn).any()):
            lose = max(lose, float((lg[~wn] - torch.log(i[1:][~wn].double() + 1)).max()))
    return win, lose


def part_b2(n: int = 65536) -> None:
    print(f"\nB2. replay of the cut logits at every i < {n} (eager arithmetic): smallest "
          "logit - ln(i+1) where <bos> must win (need >= 17) / largest where it must lose"
          " (need <= -104)")
    for level in range(4):
        row = []
        for name, dt in DTYPES.items():
            w, l = replay_cuts(level, n, dt)
            row.append(f"{name} {w:6.1f} / {l:6.1f}")
        print(f"  level {level} (period {16 ** (level + 1):>5}): " + ";  ".join(row))


if __name__ == "__main__":
    part_a()
    part_b(1024)
    part_b2()
