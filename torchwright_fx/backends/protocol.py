"""The two shapes every backend takes (docs/architecture.md, "The user surface").

- A **writer** turns the compiled weights into files: ``write(weights, vocab, path, ...)``
  returning the path it wrote (``hf.save_pretrained``, ``gguf.save_gguf``). The ONNX export
  starts from a Phi-3 directory instead: ``onnx.export(hf_dir, out_dir)``. Every writer takes
  what it reads first and where it writes last.
- A **runner** executes a model: ``logits(ids)`` (teacher-forced, ``[len(ids), vocab]``) and
  ``generate_ids(ids, max_new_tokens=None)`` (greedy; the new ids, ``<eos>`` excluded). The
  in-process runtime (``runtime.Runtime``), transformers (``hf.TransformersRunner``) and ONNX
  Runtime (``onnx.OnnxRunner``) are runners; ``tw.verify`` takes any of them by name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol


class Runner(Protocol):
    def logits(self, ids: Sequence[int]) -> Any:
        """Teacher-forced logits, one row per position: ``[len(ids), vocab]`` (a torch tensor
        or a numpy array)."""
        ...

    def generate_ids(self, ids: Sequence[int], max_new_tokens: int | None = None) -> list[int]:
        """Greedy continuation of ``ids``: the new ids, up to ``<eos>`` (excluded)."""
        ...
