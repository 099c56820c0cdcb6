"""Annotate every fx node with its width, dtype and its value at the BOS position.

Widths and dtypes come from running the eager semantics on a short example; the BOS row is
known at compile time because position 0 only ever sees the ``<bos>`` token (everything is
causal). Value ranges are derived during lowering, one rule per op (``families/``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from torchwright_fx.base.errors import CompileError, node_error
from torchwright_fx.capture.registry import checks_disabled, using_vocab
from torchwright_fx.vocab import Vocab

META_KEY = "tw"  # the one fx meta entry the compiler writes, like torch.fx's "tensor_meta"


@dataclass(frozen=True)
class NodeShape:
    """What running the eager semantics once tells about a node's stream."""

    width: int  # columns per position
    dtype: torch.dtype
    bos: torch.Tensor  # its value at position 0 (the <bos> row), known at compile time


def shape(node: torch.fx.Node) -> NodeShape | None:
    """The node's shape record (None: not a stream, e.g. a Python constant or a selector)."""
    record = node.meta.get(META_KEY)
    return record if isinstance(record, NodeShape) else None


class _Recorder(torch.fx.Interpreter):
    def run_node(self, n: torch.fx.Node) -> Any:
        try:
            value = super().run_node(n)
        except CompileError:
            raise
        except Exception as e:
            raise node_error(n, f"fails on an example input: {type(e).__name__}: {e}",
                             _advice(str(e))) from None
        if isinstance(value, torch.Tensor) and value.dim() >= 1:
            if value.dim() > 2:
                raise node_error(n, f"produces a {value.dim()}-D tensor {tuple(value.shape)}",
                                 "streams are [seq, width]: keep operations on the last dim")
            n.meta[META_KEY] = NodeShape(int(value.shape[1]) if value.dim() == 2 else 1,
                                         value.dtype, value[0].detach().clone())
        return value


def _advice(error: str) -> str:
    """What to do about the torch errors users meet most."""
    if ("bitwise_" in error or "logical" in error) and "Float" in error:
        return ("streams are float 0/1 (tw.is_token, comparisons' .float()): write "
                "`a.bool() & b.bool()` (also | ^ ~), or a * b for and")
    if "condition" in error and "bool" in error:
        return "torch.where needs a bool condition: pass `cond.bool()` (or `cond > 0.5`)"
    return ""


def example_ids(vocab: Vocab) -> list[int]:
    """<bos> then every token once: exercises every row of every per-token table."""
    return [vocab.bos_id, *range(len(vocab))]


def propagate(gm: torch.fx.GraphModule, vocab: Vocab) -> torch.fx.GraphModule:
    x = vocab.one_hot(example_ids(vocab))
    with using_vocab(vocab), checks_disabled(), torch.no_grad():
        recorder = _Recorder(gm)
        recorder.extra_traceback = False  # errors name the user's line; fx's graph dump would not
        recorder.run(x)
    return gm
