"""The torch modules the ONNX graphs are exported from: Phi-3 over a static key-value cache.

They reuse the loaded model's own modules (embedding, norms, projections, MLP, head) and HF's
own attention and rotary helpers, so the arithmetic matches the eager fp32 path of
``Phi3ForCausalLM``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

_MASK_MIN = torch.finfo(torch.float32).min  # what HF's eager mask puts on blocked pairs
_DYNAMIC_ROPE_TYPES = ("dynamic", "longrope")


class StaticCachePhi3(nn.Module):
    """Phi-3 forward over a static cache, built from a loaded ``Phi3ForCausalLM``.

    Cache slot ``s`` holds the rotated key and the value of position ``s``. The cos/sin
    tables are computed once by the model's own rotary embedding and gathered by
    ``position_ids``, so the graph has no data-dependent control flow.
    """

    cos_table: torch.Tensor
    sin_table: torch.Tensor

    def __init__(self, model: Any, max_seq_len: int) -> None:
        super().__init__()
        from transformers.models.phi3 import modeling_phi3

        self._phi3 = modeling_phi3
        self.model = model
        config = model.config
        self.max_seq_len = max_seq_len
        self.num_kv_heads = int(config.num_key_value_heads)
        self.head_dim = config_head_dim(config)
        self.sliding_window: int | None = getattr(config, "sliding_window", None)
        cos, sin = _rope_tables(model, max_seq_len)
        self.register_buffer("cos_table", cos, persistent=False)
        self.register_buffer("sin_table", sin, persistent=False)

    def run(
        self, input_ids: torch.Tensor, position_ids: torch.Tensor, past: Sequence[torch.Tensor]
    ) -> tuple[torch.Tensor, ...]:
        """Return ``(logits, key0, value0, key1, ...)``; ``past`` is empty for prefill."""
        inner = self.model.model
        hidden = inner.embed_tokens(input_ids)
        cos = self.cos_table[position_ids]
        sin = self.sin_table[position_ids]
        presents: list[torch.Tensor] = []
        for n, layer in enumerate(inner.layers):
            layer_past = tuple(past[2 * n : 2 * n + 2])
            hidden, key, value = self._layer(layer, hidden, cos, sin, position_ids, layer_past)
            presents += [key, value]
        logits = self.model.lm_head(inner.norm(hidden))
        return (logits, *presents)

    def _layer(
        self,
        layer: Any,
        hidden: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        position_ids: torch.Tensor,
        past: tuple[torch.Tensor, ...],
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One decoder layer, in the order of ``Phi3DecoderLayer.forward`` (eval mode)."""
        normed = layer.input_layernorm(hidden)
        attn, key, value = self._attention(layer.self_attn, normed, cos, sin, position_ids, past)
        hidden = hidden + attn
        hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
        return hidden, key, value

    def _attention(
        self,
        attn: Any,
        hidden: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        position_ids: torch.Tensor,
        past: tuple[torch.Tensor, ...],
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``Phi3Attention.forward`` with the cache update done by scatter into slots."""
        query, key, value = self._project(attn, hidden)
        query, key = self._phi3.apply_rotary_pos_emb(query, key, cos, sin)
        query_pos = position_ids[0]
        if past:
            keys = self._write(past[0], key, query_pos)
            values = self._write(past[1], value, query_pos)
            key_pos = torch.arange(self.max_seq_len, device=query_pos.device)
            present = (keys, values)
        else:
            keys, values, key_pos = key, value, query_pos
            zeros = key.new_zeros(self.cache_shape())
            present = (self._write(zeros, key, query_pos), self._write(zeros, value, query_pos))
        mask = self._mask(query_pos, key_pos)
        out, _ = self._phi3.eager_attention_forward(
            attn, query, keys, values, mask, scaling=attn.scaling, dropout=0.0
        )
        out = out.reshape(*hidden.shape[:-1], -1).contiguous()
        return attn.o_proj(out), present[0], present[1]

    def _project(
        self, attn: Any, hidden: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Split ``qkv_proj`` rows ``[Q; K; V]`` into ``[1, heads, T, head_dim]`` tensors."""
        qkv = attn.qkv_proj(hidden)
        q_end = attn.config.num_attention_heads * self.head_dim
        k_end = q_end + self.num_kv_heads * self.head_dim
        shape = (*hidden.shape[:-1], -1, self.head_dim)
        parts = (qkv[..., :q_end], qkv[..., q_end:k_end], qkv[..., k_end:])
        query, key, value = (p.view(shape).transpose(1, 2) for p in parts)
        return query, key, value

    def cache_shape(self) -> tuple[int, int, int, int]:
        """Shape of one static key or value cache tensor."""
        return (1, self.num_kv_heads, self.max_seq_len, self.head_dim)

    def _write(self, cache: torch.Tensor, new: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """Return ``cache`` with ``new[:, :, i]`` written at slot ``slots[i]``."""
        index = slots.view(1, 1, -1, 1).expand(1, self.num_kv_heads, -1, self.head_dim)
        return cache.scatter(2, index, new)

    def _mask(self, query_pos: torch.Tensor, key_pos: torch.Tensor) -> torch.Tensor:
        """HF's eager causal mask: 0 where allowed, float32 min where blocked."""
        allowed = key_pos[None, :] <= query_pos[:, None]
        if self.sliding_window is not None:
            allowed = allowed & (key_pos[None, :] > query_pos[:, None] - self.sliding_window)
        zero = torch.zeros((), dtype=torch.float32, device=query_pos.device)
        return torch.where(allowed, zero, _MASK_MIN)[None, None]


class PrefillModule(nn.Module):
    """Prompt graph: ``(input_ids, position_ids) -> (logits, present...)``."""

    def __init__(self, core: StaticCachePhi3) -> None:
        super().__init__()
        self.core = core

    def forward(
        self, input_ids: torch.Tensor, position_ids: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        """Run the prompt; the returned cache has zeros past the prompt's slots."""
        return self.core.run(input_ids, position_ids, ())


class DecodeModule(nn.Module):
    """One-token graph: ``(input_ids, position_ids, past...) -> (logits, present...)``."""

    def __init__(self, core: StaticCachePhi3) -> None:
        super().__init__()
        self.core = core

    def forward(
        self, input_ids: torch.Tensor, position_ids: torch.Tensor, *past: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        """Run one token at slot ``position_ids[0, 0]`` and return the updated cache."""
        return self.core.run(input_ids, position_ids, past)


def config_head_dim(config: Any) -> int:
    """Head size as ``Phi3Attention`` computes it."""
    head_dim = getattr(config, "head_dim", None)
    return int(head_dim or config.hidden_size // config.num_attention_heads)


def _rope_tables(model: Any, max_seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin for positions ``0..max_seq_len-1``, from the model's rotary embedding."""
    config = model.config
    rope_type = config.rope_parameters.get("rope_type", "default")
    original = config.rope_parameters.get(
        "original_max_position_embeddings",
        getattr(config, "original_max_position_embeddings", config.max_position_embeddings),
    )
    if rope_type in _DYNAMIC_ROPE_TYPES and max_seq_len > original:
        raise NotImplementedError(
            f"rope_type={rope_type!r} changes its frequencies past {original} positions; "
            f"a static cache of {max_seq_len} slots cannot follow that "
            f"(use max_seq_len <= {original})"
        )
    positions = torch.arange(max_seq_len)[None]
    probe = torch.zeros((), dtype=torch.float32)
    with torch.no_grad():
        cos, sin = model.model.rotary_emb(probe, positions)
    return cos[0].contiguous(), sin[0].contiguous()

