"""Q4: MLP lanes in half precision, on real Phi3MLP modules (one layer, attention off).

Phi3MLP: gate, up = gate_up_proj(norm(h)) (a matmul in the dtype: inputs and weights rounded
to the dtype, fp32 accumulation, output rounded to the dtype), act = SiLU(gate) (computed in
fp32, rounded to the dtype), act * up (rounded), down_proj (rounded), then the residual add
(rounded). The norm is the Q1 identity (eps 2^(2e), e from the inputs' energy as in Q1, gains
2^15, readers x 2^(e-15)); a second constant column holds 64 so that large gate constants
need only small weights.

  A. SiLU in each dtype: from which g is SiLU(g) == g, and SiLU(-g) == 0, for every larger g;
  B. the integer step [x >= t] = hinge(x - t + 1) - hinge(x - t), S = 128 (corners on the
     integers): for which |x - t| is it exact; today's ramp (corners at t + 1/4, t + 3/4,
     sharpness 2: gates 256 (x - t) - 64 and - 192) for comparison;
  C. a staircase on a non-lattice input (the position head's y = fl(1/(i+1)), i < 9), steps
     with corners between consecutive y: exact count in each dtype?
  D. products of whole numbers: the exact identity SiLU(a) b + SiLU(-a)(-b) (today's), the
     saturated lane SiLU(a + M) b - M b (M = 17), and a one-hot select (lane k: gate
     S (2 [a == k] - 1), up k b / S): exact over which ranges?
  E. what the dtypes hold: whole numbers exact to 256 (bf16) / 2048 (fp16).
Runs in about 30 s on one core.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import DTYPES, build, config, fl, norm_weights  # noqa: E402

D = 1024
A = 15
CONST, BIGC, OUT = 0, 1, 2
BIG = 64.0
S = 128.0


def norm_exponent(inputs: torch.Tensor) -> int:
    """The smallest e >= 15 whose eps = 2^(2e) keeps fp32's norm exact (Q1):
    mean(h^2) <= 2^(2e - 24)."""
    mean = float(((inputs ** 2).sum(1).max() + 1 + BIG ** 2) / D)
    return max(15, math.ceil((math.log2(mean) + 24) / 2))


def mlp_run(inputs: torch.Tensor, lanes: list[tuple[dict, dict, float]], dtype,
            extra: dict[int, torch.Tensor] | None = None) -> torch.Tensor:
    """inputs: [n, k] real values placed in columns 3..3+k (one token per row); lanes: (gate,
    up, down weight into OUT), gate/up as {column: coefficient} with column -1 the constant 1.
    Returns OUT after the layer, per token."""
    n, k = inputs.shape
    E = norm_exponent(inputs)
    RN = 2.0 ** (E - A)
    emb = torch.zeros(n, D, dtype=torch.float64)
    emb[:, CONST] = 1.0
    emb[:, BIGC] = BIG
    emb[:, 3:3 + k] = inputs
    f = len(lanes)
    gu = torch.zeros(2 * f, D, dtype=torch.float64)
    down = torch.zeros(D, f, dtype=torch.float64)
    for j, (gate, up, w) in enumerate(lanes):
        for row, form in ((j, gate), (f + j, up)):
            for col, c in form.items():
                if col == -1:
                    gu[row, BIGC] += c / BIG * RN
                else:
                    gu[row, 3 + col] += c * RN
        down[OUT, j] = w
    cfg = config(vocab=n, d=D, n_heads=1, d_head=64, d_ff=f, eps=2.0 ** (2 * E), rotary=4,
                 max_pos=max(n, 16))
    w = norm_weights(cfg, 2.0 ** A)
    w.update({"model.embed_tokens.weight": emb, "model.layers.0.mlp.gate_up_proj.weight": gu,
              "model.layers.0.mlp.down_proj.weight": down})
    model = build(cfg, w, dtype)
    # every input its own one-token sequence (a batch): attention is zero anyway
    caught = []
    hook = model.model.layers[0].register_forward_hook(
        lambda mod, inp, out: caught.append(out[0] if isinstance(out, tuple) else out))
    with torch.no_grad():
        model.model(input_ids=torch.arange(n)[:, None], use_cache=False)
    hook.remove()
    return caught[0][:, 0, OUT].to(torch.float64)


def part_a() -> None:
    print("A. SiLU in each dtype (torch's, as Phi3MLP calls it)")
    act = torch.nn.SiLU()
    for name, dt in DTYPES.items():
        g = torch.arange(0, 200, 1 / 64, dtype=torch.float64)
        gd = g.to(dt)
        pos = act(gd).double() == gd.double()
        neg = act(-gd).double() == 0
        sat = float(g[~pos].max()) if (~pos).any() else 0.0
        zero = float(g[~neg].max()) if (~neg).any() else 0.0
        print(f"  {name}: SiLU(g) == g for every grid g > {sat:.3f}; SiLU(-g) == 0 for every grid"
              f" g > {zero:.3f}")


def step_lanes(t: float, kind: str) -> list:
    if kind == "integer corners":       # hinge(x - t + 1) - hinge(x - t)
        return [({0: S, -1: -S * (t - 1)}, {-1: 1 / S}, 1.0),
                ({0: S, -1: -S * t}, {-1: 1 / S}, -1.0)]
    # today's: ramp over [t - 3/4, t - 1/4] for [x >= t] on integers (sharpness 2)
    return [({0: 2 * S, -1: -2 * S * (t - 0.75)}, {-1: 1 / (2 * S)}, 2.0),
            ({0: 2 * S, -1: -2 * S * (t - 0.25)}, {-1: 1 / (2 * S)}, -2.0)]


def part_b() -> None:
    print("\nB. the step [x >= t] on whole numbers x (every x the dtype holds in [-4096, 4096])")
    for kind in ("integer corners", "today's ramp"):
        for name, dt in DTYPES.items():
            for t in (0.0, 100.0):
                x = torch.arange(-4096, 4097, dtype=torch.float64)
                x = x[fl(x, dt) == x]
                out = mlp_run(x[:, None], step_lanes(t, kind), dt)
                ok = out == (x >= t).double()
                bad = (x - t)[~ok].abs()
                lim = float(bad.min()) if len(bad) else math.inf
                print(f"  {kind:<16} {name} t={t:>4g}: exact for every |x - t| < {lim:g}"
                      f" (wrong at {int((~ok).sum())} of {len(x)})")


def part_c() -> None:
    print("\nC. staircase on the position head's y = fl(1/(i+1)), i < 9: count of thresholds"
          " above y (corners at bf16 numbers 1/3 and 2/3 of the way between y(k+1) and y(k))")
    n = 9
    for name, dt in DTYPES.items():
        y = fl(fl(1.0 / torch.arange(1, n + 1, dtype=torch.float64), torch.float32), dt)
        lanes = []
        for k in range(n - 1):
            lo, hi = float(y[k + 1]), float(y[k])
            t1 = float(fl(lo + (hi - lo) / 3, torch.bfloat16))
            t2 = float(fl(lo + 2 * (hi - lo) / 3, torch.bfloat16))
            sp = 2.0 ** 14                 # gate at most S' * 1 < 65504
            # [y < t] = (hinge(t2 - y) - hinge(t1 - y)) / (t2 - t1)
            w = 1.0 / (t2 - t1)
            lanes.append(({0: -sp, -1: sp * t2}, {-1: 1 / sp}, w))
            lanes.append(({0: -sp, -1: sp * t1}, {-1: 1 / sp}, -w))
        out = mlp_run(y[:, None], lanes, dt)
        want = torch.arange(n, dtype=torch.float64)
        print(f"  {name}: exact at {int((out == want).sum())} of {n}; worst error "
              f"{float((out - want).abs().max()):.3g}")


def part_d() -> None:
    print("\nD. products a * b of whole numbers, a in [0, A), b in [-B, B] (every pair)")
    cases = [(10, 9), (16, 15), (32, 31), (64, 63)]
    for name, dt in DTYPES.items():
        row = []
        for amax, bmax in cases:
            a, b = torch.meshgrid(torch.arange(amax, dtype=torch.float64),
                                  torch.arange(-bmax, bmax + 1, dtype=torch.float64), indexing="ij")
            a, b = a.flatten(), b.flatten()
            want = a * b
            ident = [({0: 1.0}, {1: 1.0}, 1.0), ({0: -1.0}, {1: -1.0}, 1.0)]
            M = 17.0
            sat = [({0: 1.0, -1: M}, {1: 1.0}, 1.0), ({-1: S}, {1: -M / S}, 1.0)]
            ins = torch.stack([a, b], 1)
            r1 = bool((mlp_run(ins, ident, dt) == want).all())
            r2 = bool((mlp_run(ins, sat, dt) == want).all())
            onehot = torch.zeros(len(a), amax, dtype=torch.float64)
            onehot[torch.arange(len(a)), a.long()] = 1.0
            ins3 = torch.cat([ins, onehot], 1)
            sel = [({2 + k: 2 * S, -1: -S}, {1: k / S}, 1.0) for k in range(1, amax)]
            r3 = bool((mlp_run(ins3, sel, dt) == want).all())
            row.append(f"{amax}x{bmax}: {'ok' if r1 else 'FAIL'}/{'ok' if r2 else 'FAIL'}/"
                       f"{'ok' if r3 else 'FAIL'}")
        print(f"  {name} (identity / saturated M=17 / one-hot select): " + "  ".join(row))


def part_e() -> None:
    print("\nE. whole numbers a residual column holds exactly")
    for name, dt in DTYPES.items():
        x = torch.arange(0, 5000, dtype=torch.float64)
        first = int(x[fl(x, dt) != x][0]) if (fl(x, dt) != x).any() else None
        held = int((fl(torch.arange(0, 1000, dtype=torch.float64), dt) ==
                    torch.arange(0, 1000, dtype=torch.float64)).sum())
        print(f"  {name}: first whole number lost {first}; of 0..999, {held} exact"
              f" (999 -> {float(fl(999.0, dt)):g})")


if __name__ == "__main__":
    part_a()
    part_b()
    part_c()
    part_d()
    part_e()
