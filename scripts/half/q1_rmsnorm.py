"""Q1: RMSNorm as an exact identity without pin columns (docs/half-precision.md, Q1).

Design: rms_norm_eps = 2**(2e), every norm gain 2**a (a <= 15: fp16's largest power of two),
the readers' weights (q/k/v, gate/up, lm_head) multiplied by 2**(e-a). Then
norm(h) = fl(2**a * fl_X(h * rsqrt(mean(h**2) + 2**(2e)))) and the readers see h exactly iff
that equals h * 2**(a-e).

Measured here, on transformers' own Phi3RMSNorm (and on emulations of llama.cpp's and vLLM's
CPU kernels):
  A. the largest mean square var = mean(h**2) at which every probe value survives bit for bit
     (probes: every significand of one binade of the dtype), per dtype and per e;
  B. fp16's subnormal rule: which fp16 values survive the intermediate cast of h * 2**-e;
  C. the same energy threshold in llama.cpp's formula (f32 activations, the next matmul
     rounding its input to f16) and vLLM's CPU kernel;
  D. whether the eps key survives save/load (config.json, from_pretrained in each dtype) and a
     GGUF round trip (gguf's writer and reader).
Runs in ~20 s on one core.
"""

from __future__ import annotations

import math
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import DTYPES, SIGNIFICAND, fl, llama_rms_norm, vllm_rms_norm  # noqa: E402
from transformers.models.phi3.modeling_phi3 import Phi3RMSNorm  # noqa: E402

D = 64  # d_model of the probe rows (the threshold is on the mean, so d only scales energy)


def probes(name: str) -> torch.Tensor:
    """Every significand of the binade [1, 2) (fp32: 4096 random ones plus the extremes)."""
    if name == "fp32":
        g = torch.Generator().manual_seed(0)
        m = torch.randint(0, 2 ** 23, (4096,), generator=g).double()
        m = torch.cat([m, torch.tensor([0.0, 1.0, 2.0 ** 23 - 1, 2.0 ** 23 - 2])])
        return 1.0 + m / 2 ** 23
    bits = SIGNIFICAND[name] - 1
    return 1.0 + torch.arange(2 ** bits, dtype=torch.float64) / 2 ** bits


def hf_norm(rows: torch.Tensor, dtype: torch.dtype, e: int, a: int) -> torch.Tensor:
    mod = Phi3RMSNorm(rows.shape[-1], eps=2.0 ** (2 * e)).to(dtype)
    with torch.no_grad():
        mod.weight.fill_(2.0 ** a)
        return mod(rows.to(dtype)).double()


def rows_with(p: torch.Tensor, filler: float, scale: float, columns: int = 1) -> torch.Tensor:
    """One row per probe: [1 (constant column), p * scale, filler x columns, 0, ...]."""
    rows = torch.zeros(len(p), D, dtype=torch.float64)
    rows[:, 0] = 1.0
    rows[:, 1] = p * scale
    rows[:, 2:2 + columns] = filler
    return rows


def survives(out: torch.Tensor, rows: torch.Tensor, factor: float) -> bool:
    """The probe column (the filler may be a non-dyadic that fp16's subnormals cut: part B)."""
    return bool((out[:, 1] == rows[:, 1] * factor).all())


def threshold(kernel, name: str, e: int, a: int, steps_per_octave: int = 4) -> float:
    """log2 of the largest mean square (over a grid 2**(k/4)) at which every probe survives,
    minus 2e (so: log2(var_max / eps)); the probe column is small beside the filler."""
    dtype = DTYPES[name]
    p = probes(name)
    best = -math.inf
    cols = D - 2
    for k in range(steps_per_octave * (2 * e - 40), steps_per_octave * (2 * e + 2)):
        var = 2.0 ** (k / steps_per_octave)
        filler = float(fl(math.sqrt(var * D / cols), dtype))
        if name == "fp16" and filler > 65504:
            return math.nan  # the fp16 residual cannot hold this much energy: no constraint
        # probes at 2**(e-13): after the scale 2**-e they are normal fp16 numbers
        rows = fl(rows_with(p, filler, 2.0 ** (e - 13), cols), dtype)
        mean_sq = float((rows ** 2).mean(-1).max())
        if survives(kernel(rows, dtype, e, a), rows, 2.0 ** (a - e)):
            best = max(best, math.log2(mean_sq))
        else:
            break
    return best - 2 * e


def llama_kernel(rows, dtype, e, a):
    y = llama_rms_norm(rows, 2.0 ** (2 * e), torch.full((D,), 2.0 ** a))
    return fl(y, torch.float16)  # the matmul's input


def vllm_kernel(rows, dtype, e, a):
    return vllm_rms_norm(rows, 2.0 ** (2 * e), torch.full((D,), 2.0 ** a), dtype)


def part_a() -> None:
    print("A/C. largest mean(h^2) with every probe exact, as log2(var_max / eps); eps = 2^(2e),"
          " gain 2^a")
    print(f"{'kernel':<28}{'e':>4}{'a':>4}{'measured':>10}{'derived':>10}")
    for e, a in ((12, 12), (15, 15), (20, 15), (24, 15)):
        for name in ("fp32", "fp16", "bf16"):
            derived = -24 if name == "fp32" else -SIGNIFICAND[name]
            m = threshold(hf_norm, name, e, a)
            print(f"{'transformers ' + name:<28}{e:>4}{a:>4}{m:>10.2f}{derived:>10}")
        for name in ("fp16", "bf16"):
            m = threshold(vllm_kernel, name, e, a)
            print(f"{'vLLM CPU ' + name:<28}{e:>4}{a:>4}{m:>10.2f}{-SIGNIFICAND[name]:>10}")
        m = threshold(llama_kernel, "fp16", e, a)
        print(f"{'llama.cpp (f32, f16 matmul)':<28}{e:>4}{a:>4}{m:>10.2f}{-11:>10}")


def part_b() -> None:
    print("\nB. fp16 (transformers): which positive fp16 values h survive at small energy;"
          " rule: h >= 2^(e-14) or h a multiple of 2^(e-24)")
    allbits = torch.arange(1, 0x7C00, dtype=torch.int32).to(torch.int16)
    values = allbits.view(torch.float16).double()
    for e in (12, 15, 20, 24):
        v = values[values < 2.0 ** (e - 4)]  # keeps the probe's own energy under the limit
        rows = rows_with(v, 0.0, 1.0)
        out = hf_norm(rows, torch.float16, e, 15)
        ok = out[:, 1] == v * 2.0 ** (15 - e)
        rule = (v >= 2.0 ** (e - 14)) | (torch.remainder(v, 2.0 ** (e - 24)) == 0)
        print(f"  e={e:>2}: {int(ok.sum()):>6} of {len(v)} survive; rule predicts "
              f"{int(rule.sum()):>6}; mismatches {int((ok != rule).sum())}; smallest lost "
              f"{float(v[~ok].max()) if (~ok).any() else 0:.3g}; integers lost "
              f"{int((~ok & (v == v.round())).sum())}")
    # vLLM and llama.cpp have no intermediate cast: only h * 2**(a-e) must be an fp16 number
    e = 20
    v = values[values < 2.0 ** (e - 4)]
    rows = rows_with(v, 0.0, 1.0)
    out = vllm_rms_norm(rows, 2.0 ** 40, torch.full((D,), 2.0 ** 15), torch.float16)
    print(f"  vLLM CPU fp16, e=20, a=15: {int((out[:, 1] == v * 2.0 ** -5).sum())} of {len(v)}"
          " survive (one rounding of h * 2^(a-e))")


def part_d() -> None:
    print("\nD. does the eps key survive?")
    sys.path.insert(0, str(Path(__file__).parent))
    from common import build, config, norm_weights  # noqa: E402
    from transformers import AutoModelForCausalLM
    cfg = config(vocab=8, d=64, n_heads=1, d_head=64, d_ff=8, eps=2.0 ** 40)
    model = build(cfg, norm_weights(cfg, 2.0 ** 15), torch.float32)
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        for name, dtype in DTYPES.items():
            back = AutoModelForCausalLM.from_pretrained(tmp, dtype=dtype)
            n = back.model.layers[0].input_layernorm
            eps = math.log2(n.variance_epsilon)
            print(f"  transformers from_pretrained({name}): eps = 2^{eps:g}"
                  f", gain {float(n.weight[0])} ({n.weight.dtype})")
        import gguf
        path = Path(tmp) / "t.gguf"
        w = gguf.GGUFWriter(str(path), "llama")
        w.add_layer_norm_rms_eps(2.0 ** 40)
        gain = torch.full((64,), 2.0 ** 15).numpy().astype("float16")
        w.add_tensor("blk.0.attn_norm.weight", gain)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        r = gguf.GGUFReader(str(path))
        f = r.fields["llama.attention.layer_norm_rms_epsilon"]
        val = float(f.parts[f.data[0]][0])
        t = r.tensors[0]
        print(f"  GGUF llama.attention.layer_norm_rms_epsilon (float32) = 2^{math.log2(val):g};"
              f" F16 norm gain {float(t.data[0])}")


if __name__ == "__main__":
    part_a()
    part_b()
    part_d()
