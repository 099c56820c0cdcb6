"""Q5: the output. The program's next token is a code c; lm_head turns the final normalised
residual into one logit per token t; greedy decoding takes the argmax (ties: the lowest id).

Measured through the real final Phi3RMSNorm + lm_head (a one-layer Phi-3 whose layer adds
nothing), logits in the dtype as transformers returns them, for every code c < V:
  quadratic (today): logit_t = G ((t - m)(c - m) - (t - m)^2 / 2), G = 16, m the middle code;
  quadratic, G = 1;
  one-hot:  the code as V indicator columns, logit_t = G [c == t], G = 16;
  digits:   c = 16 h + l as one-hot columns of h and l, logit_t = G ([h == h_t] + [l == l_t]);
and llama.cpp's output matmul (input and weights rounded to f16, f32 result) for the same
weights. Reported: the smallest lead of the right token over the best other one (0 or less:
greedy can pick a wrong token), and the largest |logit|.
Runs in about 20 s on one core.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import DTYPES, build, config, norm_weights  # noqa: E402

A = 15


def features(kind: str, V: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Residual rows per code (const column 0, then the code's columns) and the lm_head rows
    over those columns (real coefficients, before the norm's reader factor)."""
    t = torch.arange(V, dtype=torch.float64)
    m = float((V - 1) // 2)
    if kind.startswith("quadratic"):
        G = 16.0 if kind == "quadratic G=16" else 1.0
        rows = torch.stack([torch.ones(V), t], 1)
        head = torch.stack([-G * (t - m) * m - G * (t - m) ** 2 / 2, G * (t - m)], 1)
    elif kind == "one-hot":
        rows = torch.cat([torch.ones(V, 1), torch.eye(V)], 1)
        head = torch.cat([torch.zeros(V, 1), 16.0 * torch.eye(V)], 1)
    else:
        H = (V + 15) // 16
        hi, lo = t // 16, t % 16
        oh = torch.zeros(V, H)
        oh[torch.arange(V), hi.long()] = 1.0
        ol = torch.zeros(V, 16)
        ol[torch.arange(V), lo.long()] = 1.0
        rows = torch.cat([torch.ones(V, 1), oh, ol], 1)
        head = torch.cat([torch.zeros(V, 1), 16.0 * oh, 16.0 * ol], 1)
    return rows.double(), head.double()


def leads(logits: torch.Tensor) -> tuple[float, bool]:
    V = logits.shape[0]
    right = logits[torch.arange(V), torch.arange(V)].clone()
    other = logits.clone()
    other[torch.arange(V), torch.arange(V)] = -math.inf
    lead = float((right - other.max(1).values).min())
    greedy_ok = bool((logits.argmax(1) == torch.arange(V)).all())
    return lead, greedy_ok


def run(kind: str, V: int) -> dict[str, tuple[float, bool, float]]:
    rows, head = features(kind, V)
    k = rows.shape[1]
    d = max(64, 1 << (k + 1).bit_length())
    energy = float((rows ** 2).sum(1).max())
    E = max(15, math.ceil((math.log2(energy / d) + 24) / 2))
    RN = 2.0 ** (E - A)
    emb = torch.zeros(V, d, dtype=torch.float64)
    emb[:, :k] = rows
    lm = torch.zeros(V, d, dtype=torch.float64)
    lm[:, :k] = head * RN
    cfg = config(vocab=V, d=d, n_heads=1, d_head=64, d_ff=8, eps=2.0 ** (2 * E), rotary=4,
                 max_pos=16)
    w = norm_weights(cfg, 2.0 ** A)
    w.update({"model.embed_tokens.weight": emb, "lm_head.weight": lm})
    out = {}
    for name, dt in DTYPES.items():
        model = build(cfg, w, dt)
        with torch.no_grad():
            logits = model(input_ids=torch.arange(V)[:, None], use_cache=False).logits[:, 0]
        logits = logits.to(torch.float64)
        lead, ok = leads(logits)
        out[name] = (lead, ok, float(logits.abs().max()))
    # llama.cpp: f32 residual and norm (exact here), f16-rounded matmul input and weights
    x = (emb * 2.0 ** (A - E)).to(torch.float16).float()
    logits = (x @ lm.to(torch.float16).float().T).double()
    lead, ok = leads(logits)
    out["llama.cpp"] = (lead, ok, float(logits.abs().max()))
    return out


if __name__ == "__main__":
    print("smallest lead of the right token (greedy right at every code?) / largest |logit|")
    for kind in ("quadratic G=16", "quadratic G=1", "one-hot", "digits"):
        for V in (16, 32, 64, 128, 256):
            res = run(kind, V)
            cells = [f"{k} {lead:9.4g}{'' if ok else ' WRONG'} /{mx:8.3g}"
                     for k, (lead, ok, mx) in res.items()]
            print(f"  {kind:<15} V={V:>3}: " + "  ".join(cells))
