"""Q2 (part 2): addressing in half precision: rotary lobes and content digit matching.

D. "Read the token t positions back" (a shift) from RoPE alone, on real Phi-3 modules:
   D1 one rotary plane turning at theta = (2 pi / 3) / n (today's coarse lobe, amplitude
      A = L / (1 - cos theta)), D2 hierarchical planes: Phi-3's own geometric frequencies
      1, r^-1, r^-2, ... (rope_theta = r^P for P planes), amplitudes from a max-min solve of
      sum_k A_k (1 - cos(f_k d)) over every distance d != 0 in (-n, n). Lead L = 160 logits in
      exact arithmetic. Exact = every query i >= t reads v[i - t] bit for bit.
E. "Attend to the key whose address digits equal the query's" (content, NoPE dims), base b,
   L digits, N = b^L keys in random order then queries: one-hot digits (score G * matches),
   parabolic digits (score G (2 q k - k^2), digits 1..b), angle digits
   (score G' cos(2 pi (q - k) / b), G' = G / (1 - cos(2 pi / b))).
F. latch(v, valid) over 256 positions in one head, from exact positions p_j (content):
   logit G (p_j + 1) valid_j, every value nonzero (Q2 part 1, A2).
Every runtime: transformers eager / sdpa in fp32, fp16, bf16, and llama.cpp's CPU flash
attention emulated (RoPE in f32, Q and K/V rounded to f16, f16 accumulator).
Runs in about a minute on one core (D2 at n = 4096 is the long part).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import DTYPES, IMPLS, build, config, hidden, llama_fa_one_chunk, norm_weights  # noqa: E402

D, DH = 256, 64
E, A = 16, 15
RN = 2.0 ** (E - A)          # the norm's reader factor (Q1)
LEAD = 160.0
VOCAB = 257
CONST, V_COL, OUT = 0, 1, 2
gen = torch.Generator().manual_seed(5)
VALUES = torch.randint(0, 257, (VOCAB,), generator=gen).double()


def solve(M: torch.Tensor, iters: int = 3000) -> torch.Tensor:
    """max over the simplex of min_r (M x)_r: multiplicative weights on the rows, best responses
    on the columns (their average converges to the max-min strategy)."""
    span = float(M.max() - M.min()) or 1.0
    logy = torch.zeros(M.shape[0], dtype=torch.float64)
    xs = torch.zeros(M.shape[1], dtype=torch.float64)
    eta = math.sqrt(8 * math.log(M.shape[0]) / iters) / span
    for _ in range(iters):
        col = int(torch.argmax(torch.softmax(logy, 0) @ M))
        xs[col] += 1
        logy -= eta * M[:, col]
    return xs / xs.sum()


def lobe(freqs: list[float], n: int) -> tuple[torch.Tensor, float]:
    """Amplitudes (summing to 1) and the exact-arithmetic normalised margin."""
    d = torch.arange(1, n, dtype=torch.float64)
    d = torch.cat([d, -d])
    M = 1 - torch.cos(d[:, None] * torch.tensor(freqs, dtype=torch.float64)[None, :])
    x = solve(M)
    return x, float((M @ x).min())


def shift_model(freqs_kind: str, n: int, t: int, impl: str, dtype, P: int = 1, r: float = 2.0):
    """Weights of a head reading position i - t through RoPE. Returns (model | None, q, k)
    where q, k are the unrotated per-head query/key vectors (for the llama.cpp emulation)."""
    if freqs_kind == "single":
        theta = (2 * math.pi / 3) / n
        rot, rope_theta = 4, theta ** -2.0          # plane 1 turns at rope_theta^-1/2 = theta
        planes = [(1, theta, LEAD / (1 - math.cos(theta)))]
    else:
        rot, rope_theta = 2 * P, r ** P             # plane k turns at r^-k
        fr = [r ** -k for k in range(P)]
        x, m = lobe(fr, n)
        planes = [(k, fr[k], float(x[k]) * LEAD / m) for k in range(P) if x[k] > 0]
    q = torch.zeros(DH, dtype=torch.float64)
    k = torch.zeros(DH, dtype=torch.float64)
    for p, f, amp in planes:
        # query sqrt(A) (cos ft, -sin ft), key sqrt(A) (1, 0): logit A cos(f (i - j - t))
        s = math.sqrt(amp)
        q[p], q[p + rot // 2] = s * math.cos(f * t), -s * math.sin(f * t)
        k[p] = s
    emb = torch.zeros(VOCAB, D, dtype=torch.float64)
    emb[:, CONST] = 1.0
    emb[:, V_COL] = VALUES
    qkv = torch.zeros(3 * DH, D, dtype=torch.float64)
    qkv[:DH, CONST] = q * math.sqrt(DH) * RN
    qkv[DH:2 * DH, CONST] = k * RN
    qkv[2 * DH + DH - 1, V_COL] = RN                 # value on the last (NoPE) dim
    o = torch.zeros(D, DH, dtype=torch.float64)
    o[OUT, DH - 1] = 1.0
    model = None
    if impl is not None:
        cfg = config(vocab=VOCAB, d=D, n_heads=1, d_head=DH, d_ff=8, eps=2.0 ** (2 * E),
                     rope_theta=rope_theta, rotary=rot, max_pos=max(n, 16), impl=impl)
        w = norm_weights(cfg, 2.0 ** A)
        w.update({"model.embed_tokens.weight": emb,
                  "model.layers.0.self_attn.qkv_proj.weight": qkv,
                  "model.layers.0.self_attn.o_proj.weight": o})
        model = build(cfg, w, dtype)
    inv = 1.0 / (torch.tensor(rope_theta, dtype=torch.float32)
                 ** (torch.arange(0, rot, 2, dtype=torch.float32) / rot))
    return model, q * math.sqrt(DH), k, rot, inv


def rotate(x: torch.Tensor, pos: torch.Tensor, rot: int, inv: torch.Tensor) -> torch.Tensor:
    """Phi-3's rotate_half RoPE in f32 (llama.cpp rotates f32 activations, then stores f16)."""
    ang = pos[:, None].float() * inv[None, :]
    cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()
    xr = x.float()[None, :].expand(len(pos), -1).clone()
    a = xr[:, :rot].clone()
    half = torch.cat([-a[:, rot // 2:], a[:, :rot // 2]], -1)
    xr[:, :rot] = a * cos + half * sin
    return xr.double()


def shift_exact(kind, n, t, impl, dtype, P=1, r=2.0, seed=0) -> bool:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, VOCAB, (n,), generator=g)
    ids[0] = 0
    model, q, k, rot, inv = shift_model(kind, n, t, impl, dtype, P, r)
    want = VALUES[ids[: n - t]]
    if model is not None:
        out = hidden(model, ids)[1][t:, OUT]
    else:
        pos = torch.arange(n)
        v = torch.zeros(n, DH, dtype=torch.float64)
        v[:, -1] = VALUES[ids]
        out = llama_fa_one_chunk(rotate(q, pos, rot, inv), rotate(k, pos, rot, inv), v,
                                 1.0 / math.sqrt(DH))[t:, -1]
    return bool((out == want).all())


RUNTIMES = [(f"{i} {n}", i, d) for i in IMPLS for n, d in DTYPES.items()] + \
    [("llama.cpp FA", None, None)]


def part_d() -> None:
    print("D1. one rotary plane (today's coarse lobe), shift by 1: exact at every position?")
    lengths = [8, 12, 16, 24, 32, 64, 256]
    print(f"  {'runtime':<16}" + "".join(f"{n:>6}" for n in lengths))
    for label, impl, dtype in RUNTIMES:
        row = ["ok" if shift_exact("single", n, 1, impl, dtype) else "FAIL" for n in lengths]
        print(f"  {label:<16}" + "".join(f"{c:>6}" for c in row))
    print("\nD2. hierarchical planes (frequencies 1, 1/r, 1/r^2, ...), shifts t = 1, 7, n/3")
    configs = [(256, 5, 3.0), (1024, 6, 3.0), (4096, 6, 4.0)]
    for n, P, r in configs:
        fr = [r ** -k for k in range(P)]
        x, m = lobe(fr, n)
        amp = LEAD / m
        print(f"  n={n} P={P} r={r:g}: normalised margin {m:.4f}, amplitude sum {amp:.0f}"
              f" (max |logit|), weights {[round(float(v), 3) for v in x]}")
        for label, impl, dtype in RUNTIMES:
            res = [shift_exact("multi", n, t, impl, dtype, P, r) for t in (1, 7, n // 3)]
            print(f"    {label:<16} " + " ".join("ok" if ok else "FAIL" for ok in res))


def digits(a: int, b: int, L: int) -> list[int]:
    return [(a // b ** i) % b for i in range(L)]


def address_exact(enc: str, b: int, L: int, impl, dtype, G: float = 128.0) -> bool:
    """Keys 1..N carry address a = id - 1 and a value; queries N+1..2N ask for address id-N-1."""
    N = b ** L
    vocab = 1 + 2 * N
    width = {"onehot": L * b, "parabolic": 2 * L, "angle": 2 * L}[enc]
    kc, qc = 3, 3 + width                            # key and query feature columns
    d = 512  # the Q1 fp32 condition: mean(h^2) <= 2^(2E-24) = 256 with a value of 255
    g = torch.Generator().manual_seed(7)
    vals = torch.randint(0, 256, (vocab,), generator=g).double()
    vals[N + 1:] = 0.0
    vals[0] = 0.0
    emb = torch.zeros(vocab, d, dtype=torch.float64)
    emb[:, CONST] = 1.0
    emb[:, V_COL] = vals
    qkv = torch.zeros(3 * DH, d, dtype=torch.float64)
    s8 = math.sqrt(DH) * RN
    NOPE = 8
    for a in range(N):
        for j, dig in enumerate(digits(a, b, L)):
            if enc == "onehot":
                emb[1 + a, kc + j * b + dig] = 1.0
                emb[1 + N + a, qc + j * b + dig] = 1.0
            elif enc == "parabolic":
                emb[1 + a, kc + 2 * j] = dig + 1
                emb[1 + a, kc + 2 * j + 1] = (dig + 1) ** 2
                emb[1 + N + a, qc + 2 * j] = dig + 1
            else:
                ang = 2 * math.pi * dig / b
                emb[1 + a, kc + 2 * j], emb[1 + a, kc + 2 * j + 1] = math.cos(ang), math.sin(ang)
                emb[1 + N + a, qc + 2 * j] = math.cos(ang)
                emb[1 + N + a, qc + 2 * j + 1] = math.sin(ang)
    if enc == "onehot":
        for c in range(width):
            qkv[NOPE + c, qc + c] = G * s8
            qkv[DH + NOPE + c, kc + c] = RN
    elif enc == "parabolic":
        for j in range(L):
            qkv[NOPE + 2 * j, qc + 2 * j] = 2 * G * s8          # 2 G q_d . k_d
            qkv[DH + NOPE + 2 * j, kc + 2 * j] = RN
            qkv[NOPE + 2 * j + 1, CONST] = -G * s8              # -G . k_d^2
            qkv[DH + NOPE + 2 * j + 1, kc + 2 * j + 1] = RN
    else:
        gp = G / (1 - math.cos(2 * math.pi / b))
        for c in range(width):
            qkv[NOPE + c, qc + c] = gp * s8
            qkv[DH + NOPE + c, kc + c] = RN
    qkv[2 * DH + DH - 1, V_COL] = RN
    o = torch.zeros(d, DH, dtype=torch.float64)
    o[OUT, DH - 1] = 1.0
    perm = torch.randperm(N, generator=g) + 1
    asks = torch.randint(0, N, (64,), generator=g)
    ids = torch.cat([torch.zeros(1, dtype=torch.long), perm, 1 + N + asks])
    want = vals[1 + asks]
    if impl is not None:
        cfg = config(vocab=vocab, d=d, n_heads=1, d_head=DH, d_ff=8, eps=2.0 ** (2 * E),
                     rotary=4, max_pos=len(ids), impl=impl)
        w = norm_weights(cfg, 2.0 ** A)
        w.update({"model.embed_tokens.weight": emb,
                  "model.layers.0.self_attn.qkv_proj.weight": qkv,
                  "model.layers.0.self_attn.o_proj.weight": o})
        out = hidden(build(cfg, w, dtype), ids)[1][N + 1:, OUT]
    else:
        h = emb[ids] * 2.0 ** (A - E)                    # the normalised residual
        qkv16 = qkv.to(torch.float16).double()           # F16 GGUF weights
        x = h.to(torch.float16).double()                 # the matmul's f16 input
        proj = (x.float() @ qkv16.float().T).double()    # f32 accumulation
        out = llama_fa_one_chunk(proj[:, :DH], proj[:, DH:2 * DH], proj[:, 2 * DH:],
                                 1.0 / math.sqrt(DH))[N + 1:, -1]
    return bool((out == want).all())


def part_e() -> None:
    print("\nE. content address matching (G = 128 lead), N = b^L keys then 64 queries")
    cases = [(16, 2), (8, 3), (4, 4)]
    print(f"  {'runtime':<16}" + "".join(f"{enc + f' b{b} L{L}':>18}" for enc in
                                        ("onehot", "parabolic", "angle") for b, L in cases))
    for label, impl, dtype in RUNTIMES:
        row = ["ok" if address_exact(enc, b, L, impl, dtype) else "FAIL"
               for enc in ("onehot", "parabolic", "angle") for b, L in cases]
        print(f"  {label:<16}" + "".join(f"{c:>18}" for c in row))


def latch_exact(n: int, G: float, impl, dtype, seed: int = 11) -> bool:
    """latch(v, valid) over n <= 256 positions in one head: logit G (p_j + 1) valid_j with the
    exact position p_j (here read from the token; a phase-cut build computes it) and <bos>
    always valid, values 1..256 (nonzero). Every query must read v at its latest valid j."""
    g = torch.Generator().manual_seed(seed)
    valid = (torch.rand(n, generator=g) < 0.1).double()
    valid[0] = 1.0
    vals = torch.randint(1, 257, (n,), generator=g).double()
    d = 256
    emb = torch.zeros(n, d, dtype=torch.float64)        # token id = position, for the test
    emb[:, CONST] = 1.0
    emb[:, V_COL] = vals
    emb[:, 3] = (torch.arange(n) + 1.0) * valid          # (p_j + 1) valid_j: an exact product
    qkv = torch.zeros(3 * DH, d, dtype=torch.float64)
    qkv[8, CONST] = G * math.sqrt(DH) * RN
    qkv[DH + 8, 3] = RN
    qkv[2 * DH + DH - 1, V_COL] = RN
    o = torch.zeros(d, DH, dtype=torch.float64)
    o[OUT, DH - 1] = 1.0
    marks = torch.where(valid > 0, torch.arange(n), torch.zeros(n, dtype=torch.long))
    last = torch.cummax(marks, 0).values
    want = vals[last]
    ids = torch.arange(n)
    if impl is None:
        h = emb * 2.0 ** (A - E)
        proj = (h.to(torch.float16).float() @ qkv.to(torch.float16).float().T).double()
        out = llama_fa_one_chunk(proj[:, :DH], proj[:, DH:2 * DH], proj[:, 2 * DH:], 1 / 8)[:, -1]
    else:
        cfg = config(vocab=n, d=d, n_heads=1, d_head=DH, d_ff=8, eps=2.0 ** (2 * E), rotary=4,
                     max_pos=n, impl=impl)
        w = norm_weights(cfg, 2.0 ** A)
        w.update({"model.embed_tokens.weight": emb,
                  "model.layers.0.self_attn.qkv_proj.weight": qkv,
                  "model.layers.0.self_attn.o_proj.weight": o})
        out = hidden(build(cfg, w, dtype), ids)[1][:, OUT]
    return bool((out == want).all())


def part_f() -> None:
    print("\nF. latch in one head: logit G (p_j + 1) valid_j, values 1..256 (the largest logit is"
          " G n: 8 G n must stay below 65504 in fp16 eager)")
    for n, G in ((256, 16.0), (256, 24.0), (256, 32.0), (255, 32.0)):
        row = [("ok" if latch_exact(n, G, impl, dt) else "FAIL") for _, impl, dt in RUNTIMES]
        cells = [f"{lab} {r}" for (lab, _, _), r in zip(RUNTIMES, row, strict=True)]
        print(f"  n={n} G={G:>3g}: " + "  ".join(cells))


if __name__ == "__main__":
    part_d()
    part_e()
    part_f()
