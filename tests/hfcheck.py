"""The saved Phi-3 directory's top token at every position, through transformers in each
dtype and attention implementation a half build is certified for (also the fuzzer's)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

CONFIGS = tuple((dt, impl) for dt in (torch.float32, torch.float16, torch.bfloat16)
                for impl in ("eager", "sdpa"))


def top_tokens(directory: str | Path, ids: list[int]
               ) -> Iterator[tuple[torch.dtype, str, list[int]]]:
    """(dtype, attn_implementation, argmax at every position) for each of CONFIGS."""
    for dtype, impl in CONFIGS:
        model = AutoModelForCausalLM.from_pretrained(directory, dtype=dtype,
                                                     attn_implementation=impl)
        with torch.no_grad():
            yield dtype, impl, model(torch.tensor([ids])).logits[0].argmax(-1).tolist()
