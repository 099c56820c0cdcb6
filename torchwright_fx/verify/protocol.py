"""What verification reads of a compiled program: the shape ``api.Compiled`` has.

``verify`` and ``probe`` take any object of this shape, so this layer never imports the user
surface (``api.py``) that calls it (``tests/test_layout.py`` counts imports under
``TYPE_CHECKING`` too).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

import torch.fx

from torchwright_fx.emit.machine import Machine
from torchwright_fx.pipeline import Build
from torchwright_fx.vocab import Vocab


class TracedProgram(Protocol):
    """The captured program (``api.Traced``): its annotated fx graph."""

    graph_module: torch.fx.GraphModule


class CompiledProgram(Protocol):
    """A compiled program (``api.Compiled``): its function, vocabulary, build and weights, its
    eager reference, its domain and oracle, and the writers the backends load from."""

    fn: Callable[..., Any]
    vocab: Vocab
    domain: Callable[[], Iterable[str]] | None
    oracle: Callable[[str], str] | None

    @property
    def traced(self) -> TracedProgram: ...

    @property
    def build(self) -> Build: ...

    @property
    def weights(self) -> Machine: ...

    def reference_ids(self, ids: Sequence[int], max_new_tokens: int | None = None,
                      draft: Sequence[int] | None = None) -> list[int]: ...

    def save_pretrained(self, directory: str | os.PathLike) -> Path: ...

    def to_onnx(self, directory: str | os.PathLike, *,
                hf_dir: str | os.PathLike | None = None) -> Path: ...
