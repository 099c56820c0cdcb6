"""The ONNX export's directory format: file names, cache input/output names, ``runner.json``.

`export_onnx` (``backends/onnx.py``) writes a directory in this format and `OnnxRunner`
(``backends/onnx_runner.py``) reads one; both take the names and shapes from here.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

PREFILL_FILE = "prefill.onnx"
DECODE_FILE = "decode.onnx"
RUNNER_FILE = "runner.json"
TOKENIZER_FILE = "tokenizer.json"
COPIED_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "generation_config.json",
)
FORMAT_VERSION = 1
StrPath = str | os.PathLike[str]


# --------------------------------------------------------------------------- names


def token_inputs() -> list[str]:
    """Token and position inputs, first in both graphs."""
    return ["input_ids", "position_ids"]


def cache_names(prefix: str, num_layers: int) -> list[str]:
    """Return ``[prefix.0.key, prefix.0.value, prefix.1.key, ...]`` for every layer."""
    return [f"{prefix}.{n}.{kind}" for n in range(num_layers) for kind in ("key", "value")]


@dataclass(frozen=True)
class RunnerSpec:
    """Everything `OnnxRunner` needs, stored as ``runner.json`` next to the graphs."""

    max_seq_len: int
    num_layers: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    bos_token_id: int | None
    eos_token_ids: list[int]
    prefill_file: str = PREFILL_FILE
    decode_file: str = DECODE_FILE
    tokenizer_file: str = TOKENIZER_FILE
    prefill_inputs: list[str] = field(default_factory=token_inputs)
    decode_inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    cache_layout: str = "[1, num_kv_heads, max_seq_len, head_dim] float32, slot = position"
    format_version: int = FORMAT_VERSION

    @classmethod
    def build(cls, **values: Any) -> RunnerSpec:
        """Create a spec, filling the cache input/output names from ``num_layers``."""
        layers = values["num_layers"]
        past = cache_names("past_key_values", layers)
        values.setdefault("decode_inputs", [*token_inputs(), *past])
        values.setdefault("outputs", ["logits", *cache_names("present", layers)])
        return cls(**values)

    @property
    def cache_shape(self) -> tuple[int, int, int, int]:
        """Shape of one key or value cache tensor."""
        return (1, self.num_kv_heads, self.max_seq_len, self.head_dim)

    def save(self, path: Path) -> None:
        """Write the spec as JSON."""
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def load(cls, path: Path) -> RunnerSpec:
        """Read a spec written by `save`."""
        data = json.loads(path.read_text())
        if data.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"{path}: unsupported runner.json format {data.get('format_version')}")
        return cls(**data)
