"""In-process runtime: a Machine run with Phi-3's arithmetic, op for op as transformers' eager
path computes it (fp32), with the residual stream capturable after every sublayer."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from torchwright_fx.base.errors import InputError
from torchwright_fx.emit.machine import Machine


def rms_norm(h: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    variance = h.pow(2).mean(-1, keepdim=True)
    return weight * (h * torch.rsqrt(variance + eps))


def rotary_tables(m: Machine, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    dim = int(m.d_head * m.partial_rotary_factor)
    inv_freq = 1.0 / (m.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
    freqs = torch.arange(n, dtype=torch.float)[:, None] * inv_freq[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    dim = cos.shape[-1]
    rot, rest = x[..., :dim], x[..., dim:]
    half = torch.cat([-rot[..., dim // 2:], rot[..., : dim // 2]], dim=-1)
    return torch.cat([rot * cos + half * sin, rest], dim=-1)


def _attention(m: Machine, layer_qkv: torch.Tensor, o: torch.Tensor, x: torch.Tensor,
               cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    n, hd = x.shape[0], m.n_heads * m.d_head
    qkv = x @ layer_qkv.T
    q, k, v = (t.reshape(n, m.n_heads, m.d_head).transpose(0, 1)
               for t in (qkv[:, :hd], qkv[:, hd:2 * hd], qkv[:, 2 * hd:]))
    q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
    scores = (q @ k.transpose(1, 2)) * m.d_head ** -0.5
    mask = torch.ones(n, n, dtype=torch.bool).tril()
    scores = scores.masked_fill(~mask, torch.finfo(torch.float32).min)
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32)
    out = (weights @ v).transpose(0, 1).reshape(n, hd)
    return out @ o.T


# Phi-3's ``hidden_act`` names (transformers' ACT2FN) to their functions
ACTIVATIONS = {"silu": torch.nn.functional.silu, "relu": torch.relu}


def _mlp(m: Machine, gate_up: torch.Tensor, down: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    gate, up = (x @ gate_up.T).chunk(2, dim=-1)
    act = ACTIVATIONS[m.act](gate)
    return (up * act) @ down.T


@torch.no_grad()
def forward(m: Machine, ids: Sequence[int], capture: bool = False
            ) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Logits ``[T, vocab]`` for a token sequence; with ``capture``, the residual after the
    embedding and after every sublayer (index s + 1 holds the residual after stage s)."""
    if len(ids) > m.max_seq_len:
        raise InputError(f"{len(ids)} tokens exceed max_seq_len={m.max_seq_len}")
    h = m.embed[torch.tensor(list(ids), dtype=torch.long)]
    cos, sin = rotary_tables(m, len(ids))
    states = [h.clone()] if capture else []
    for layer in m.layers:
        h = h + _attention(m, layer.qkv, layer.o, rms_norm(h, layer.norm_attn, m.rms_eps), cos, sin)
        if capture:
            states.append(h.clone())
        h = h + _mlp(m, layer.gate_up, layer.down, rms_norm(h, layer.norm_mlp, m.rms_eps))
        if capture:
            states.append(h.clone())
    logits = rms_norm(h, m.final_norm, m.rms_eps) @ m.lm_head.T
    return logits, states


def generate(m: Machine, ids: Sequence[int], max_new_tokens: int | None = None) -> list[int]:
    """Greedy decoding until ``<eos>`` or max_seq_len; returns the new ids (eos excluded)."""
    seq = list(ids)
    limit = m.max_seq_len if max_new_tokens is None else min(m.max_seq_len,
                                                             len(seq) + max_new_tokens)
    new: list[int] = []
    while len(seq) < limit:
        logits, _ = forward(m, seq)
        nxt = int(torch.argmax(logits[-1]))
        if nxt == m.eos_id:
            break
        if nxt == m.bos_id:
            raise InputError(f"the model generated <bos> at position {len(seq) - 1}; <bos> only "
                             "starts a sequence, so this input is outside the program's domain")
        seq.append(nxt)
        new.append(nxt)
    return new


class Runtime:
    """The in-process runtime as a runner (``backends/protocol.py``)."""

    def __init__(self, weights: Machine):
        self.weights = weights

    def logits(self, ids: Sequence[int]) -> torch.Tensor:
        return forward(self.weights, ids)[0]

    def generate_ids(self, ids: Sequence[int], max_new_tokens: int | None = None) -> list[int]:
        return generate(self.weights, ids, max_new_tokens)
