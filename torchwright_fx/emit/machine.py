"""The Machine: a Phi-3-shaped model as dense fp32 tensors, independent of any framework."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch

from torchwright_fx.base.numerics import RMS_EPS


@dataclass
class LayerWeights:
    qkv: torch.Tensor  # [(n_heads + 2 kv_heads) * d_head, d]: rows [Q; K; V]
    o: torch.Tensor  # [d, n_heads * d_head]
    gate_up: torch.Tensor  # [2 * d_ff, d]: rows [gate; up]
    down: torch.Tensor  # [d, d_ff]
    norm_attn: torch.Tensor  # [d]
    norm_mlp: torch.Tensor  # [d]


@dataclass
class Machine:
    act: Literal["silu", "relu"]
    d_model: int
    d_head: int
    n_heads: int
    d_ff: int
    vocab_size: int
    max_seq_len: int
    rope_theta: float
    partial_rotary_factor: float
    embed: torch.Tensor  # [vocab, d]
    layers: list[LayerWeights]
    final_norm: torch.Tensor  # [d]
    lm_head: torch.Tensor  # [vocab, d]
    rms_eps: float = RMS_EPS
    bos_id: int = 0
    eos_id: int = 1
    # the model prints <eos> at position max_seq_len - 1 (ops/end.py): a runtime's caller needs
    # no length cap
    ends_with_eos: bool = False
    meta: dict = field(default_factory=dict)
    # K/V blocks per layer (Phi-3's num_key_value_heads; schedule/kv_groups.py): query head h reads
    # block h // (n_heads / kv_heads). None: one a head
    n_kv_heads: int | None = None

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    def mha_qkv(self, qkv: torch.Tensor) -> torch.Tensor:
        """A layer's qkv with every query head's K and V block of its own (the shared blocks
        repeated, as transformers' ``repeat_kv`` does): ``[3 n_heads d_head, d]``, the same
        scores and outputs."""
        if self.kv_heads == self.n_heads:
            return qkv
        hd, kvd, rep = self.n_heads * self.d_head, self.kv_heads * self.d_head, \
            self.n_heads // self.kv_heads
        k, v = qkv[hd:hd + kvd], qkv[hd + kvd:]

        def repeat(t: torch.Tensor) -> torch.Tensor:
            return t.reshape(self.kv_heads, 1, self.d_head, -1).expand(
                -1, rep, -1, -1).reshape(hd, -1)

        return torch.cat([qkv[:hd], repeat(k), repeat(v)])

    def _tensors(self) -> list[torch.Tensor]:
        tensors = [self.embed, self.final_norm, self.lm_head]
        for layer in self.layers:
            tensors += [layer.qkv, layer.o, layer.gate_up, layer.down, layer.norm_attn,
                        layer.norm_mlp]
        return tensors

    def parameters(self) -> int:
        return sum(t.numel() for t in self._tensors())

    def nonzero_weights(self) -> int:
        """The parameters that are not zero: what the program uses (the rest of each matrix is
        there because every Phi-3 layer has one shape)."""
        return sum(int((t != 0).sum()) for t in self._tensors())

    def zero_fraction(self) -> float:
        tensors = [self.embed, self.lm_head, *[t for la in self.layers
                                                for t in (la.qkv, la.o, la.gate_up, la.down)]]
        zeros = sum(int((t == 0).sum()) for t in tensors)
        return zeros / max(1, sum(t.numel() for t in tensors))


def rms_norm(h: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Phi3RMSNorm: variance and normalisation in fp32, cast back to h's dtype, then times the
    weight (in fp32, both casts are no-ops)."""
    x = h.to(torch.float32)
    variance = x.pow(2).mean(-1, keepdim=True)
    return weight * (x * torch.rsqrt(variance + eps)).to(h.dtype)


# Phi-3's ``hidden_act`` names (transformers' ACT2FN) to their functions
ACTIVATIONS = {"silu": torch.nn.functional.silu, "relu": torch.relu}
