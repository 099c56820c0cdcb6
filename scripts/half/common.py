"""Shared helpers for the half-precision design study (docs/half-precision.md).

Tiny stock Phi-3 models with hand-set weights, loaded in fp32 / fp16 / bf16 with eager or sdpa
attention, and torch emulations of the other runtimes' rounding (llama.cpp's CPU flash
attention and RMSNorm, vLLM's CPU RMSNorm). Nothing here imports the compiler.
"""

from __future__ import annotations

import math
import warnings

import torch
from transformers import Phi3Config, Phi3ForCausalLM
from transformers.utils import logging as hf_logging

hf_logging.set_verbosity_error()
warnings.filterwarnings("ignore")
torch.set_num_threads(1)

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
HALF = {"fp16": torch.float16, "bf16": torch.bfloat16}
IMPLS = ("eager", "sdpa")
SIGNIFICAND = {"fp32": 24, "fp16": 11, "bf16": 8}


def fl(x: torch.Tensor | float, dtype: torch.dtype) -> torch.Tensor:
    """Round to ``dtype`` (round to nearest even) and return as float64."""
    t = torch.as_tensor(x, dtype=torch.float64)
    return t.to(dtype).to(torch.float64)


def representable(x: torch.Tensor | float, dtype: torch.dtype) -> torch.Tensor:
    t = torch.as_tensor(x, dtype=torch.float64)
    return fl(t, dtype) == t


def config(*, vocab: int, d: int, n_heads: int, d_head: int, d_ff: int, layers: int = 1,
           max_pos: int = 4096, eps: float = 2.0 ** 30, rope_theta: float = 10000.0,
           rotary: int | None = None, rope: dict | None = None, impl: str = "eager"
           ) -> Phi3Config:
    rotary = d_head if rotary is None else rotary
    params = {"rope_type": "default", "rope_theta": rope_theta,
              "partial_rotary_factor": rotary / d_head}
    if rope:
        params.update(rope)
    cfg = Phi3Config(
        vocab_size=vocab, hidden_size=d, intermediate_size=d_ff, num_hidden_layers=layers,
        num_attention_heads=n_heads, num_key_value_heads=n_heads, head_dim=d_head,
        hidden_act="silu", max_position_embeddings=max_pos,
        original_max_position_embeddings=max_pos, rms_norm_eps=eps, rope_parameters=params,
        tie_word_embeddings=False, bos_token_id=0, eos_token_id=1, pad_token_id=1,
        attention_dropout=0.0, resid_pdrop=0.0, embd_pdrop=0.0, sliding_window=None)
    cfg._attn_implementation = impl
    return cfg


def build(cfg: Phi3Config, weights: dict[str, torch.Tensor], dtype: torch.dtype
          ) -> Phi3ForCausalLM:
    """A Phi3ForCausalLM with every weight zero except ``weights`` (float64 values, stored
    as fp32 as the compiler saves them, then cast to ``dtype`` as from_pretrained(dtype=...)
    does)."""
    with torch.device("cpu"):
        model = Phi3ForCausalLM(cfg)
    sd = {k: torch.zeros_like(v, dtype=torch.float32) for k, v in model.state_dict().items()}
    for k, v in weights.items():
        assert k in sd, k
        sd[k] = torch.as_tensor(v, dtype=torch.float64).to(torch.float32).reshape(sd[k].shape)
    model.load_state_dict(sd, strict=False)
    rope = model.model.rotary_emb
    kept = {k: getattr(rope, k).clone() for k in ("inv_freq", "original_inv_freq")}
    model = model.to(dtype).eval()
    for k, v in kept.items():  # from_pretrained(dtype=...) keeps these fp32 buffers fp32
        setattr(rope, k, v)
    model.config._attn_implementation = cfg._attn_implementation
    return model


def norm_weights(cfg: Phi3Config, gain: float) -> dict[str, torch.Tensor]:
    d = cfg.hidden_size
    out = {"model.norm.weight": torch.full((d,), gain)}
    for i in range(cfg.num_hidden_layers):
        out[f"model.layers.{i}.input_layernorm.weight"] = torch.full((d,), gain)
        out[f"model.layers.{i}.post_attention_layernorm.weight"] = torch.full((d,), gain)
    return out


@torch.no_grad()
def hidden(model: Phi3ForCausalLM, ids: torch.Tensor) -> list[torch.Tensor]:
    """The residual stream (float64) after the embedding and after every layer, batch 1
    (caught by hooks: transformers' last hidden state is after the final norm)."""
    caught: list[torch.Tensor] = []
    hooks = [model.model.embed_tokens.register_forward_hook(
        lambda mod, inp, out: caught.append(out[0].to(torch.float64)))]
    for layer in model.model.layers:
        hooks.append(layer.register_forward_hook(
            lambda mod, inp, out: caught.append(
                (out[0] if isinstance(out, tuple) else out)[0].to(torch.float64))))
    try:
        model.model(input_ids=ids[None], use_cache=False)  # no lm_head: not needed
    finally:
        for h in hooks:
            h.remove()
    return caught


# -- llama.cpp emulation -------------------------------------------------------------------------
def llama_fa_one_chunk(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
                       ) -> torch.Tensor:
    """ggml's CPU flash attention (``ggml_compute_forward_flash_attn_ext_f16_one_chunk``) with an
    F16 K/V cache, causal: Q rounded to f16 before the scale, K and V stored as f16, the KQ dot
    product accumulated in f32, s = dot * scale in f32, an online softmax in f32 and the output
    accumulated in an f16 vector (every update rounded to f16), divided by S at the end.
    q, k: [n, dk], v: [n, dv] (float64 values). Returns [n, dv] float64. All queries are
    processed together (one running state per query row), keys in order 0..n-1."""
    n = q.shape[0]
    q16 = q.to(torch.float16).to(torch.float32)
    k16 = k.to(torch.float16).to(torch.float32)
    v16 = v.to(torch.float16).to(torch.float32)
    dots = (q16 @ k16.T)  # f32 accumulation of exact f16 x f16 products
    s_all = dots * torch.tensor(scale, dtype=torch.float32)
    M = torch.full((n,), -math.inf, dtype=torch.float32)
    S = torch.zeros(n, dtype=torch.float32)
    acc = torch.zeros(n, v.shape[1], dtype=torch.float16)
    rows = torch.arange(n)
    for j in range(n):
        live = rows >= j  # causal mask: key j is seen by queries i >= j
        s = s_all[:, j]
        new = live & (s > M)
        old = live & ~new
        ms = torch.ones(n, dtype=torch.float32)
        vs = torch.ones(n, dtype=torch.float32)
        ms[new] = torch.exp(M[new] - s[new])
        vs[old] = torch.exp(s[old] - M[old])
        M = torch.where(new, s, M)
        # ggml_vec_scale_f16 then ggml_vec_mad_f16: f32 arithmetic, rounded to f16 each time
        scaled = (acc.to(torch.float32) * ms[:, None]).to(torch.float16)
        upd = (scaled.to(torch.float32) + v16[j][None, :] * vs[:, None]).to(torch.float16)
        acc = torch.where(live[:, None], upd, acc)
        S = torch.where(live, S * ms + vs, S)
    out = acc.to(torch.float32) * (1.0 / S)[:, None]
    return out.to(torch.float64)


def llama_rms_norm(x: torch.Tensor, eps: float, weight: torch.Tensor) -> torch.Tensor:
    """ggml_rms_norm then ggml_mul (f32 activations): the squares in f32 summed in double,
    mean = (float)(sum / n), scale = 1.0f / sqrtf(mean + eps), y = x * scale * w in f32.
    The next matmul rounds y to f16 (not done here)."""
    x32 = x.to(torch.float32)
    sq = (x32 * x32).to(torch.float64).sum(-1, keepdim=True)
    mean = (sq / x.shape[-1]).to(torch.float32)
    scale = 1.0 / torch.sqrt(mean + torch.tensor(eps, dtype=torch.float32))
    return ((x32 * scale) * weight.to(torch.float32)).to(torch.float64)


def vllm_rms_norm(x: torch.Tensor, eps: float, weight: torch.Tensor, dtype: torch.dtype
                  ) -> torch.Tensor:
    """vLLM's CPU kernel (csrc/cpu/layernorm.cpp): squares summed in f32 (8 lanes, then a
    reduction), s = 1.0f / sqrtf(var / n + eps), out = (x * s * w) in f32, one rounding to
    the dtype. The lane order is emulated by summing in 8 strided partial sums."""
    x32 = x.to(dtype).to(torch.float32)
    n = x.shape[-1]
    parts = (x32 * x32).reshape(*x.shape[:-1], n // 8, 8).sum(-2)  # f32 per lane
    var = parts.sum(-1, keepdim=True)
    s = 1.0 / torch.sqrt(var / n + torch.tensor(eps, dtype=torch.float32))
    w = weight.to(dtype).to(torch.float32)
    return (x32 * s * w).to(dtype).to(torch.float64)
