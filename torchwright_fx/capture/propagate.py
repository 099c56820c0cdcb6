"""Annotate every fx node with its width, dtype and its value at the BOS position.

Widths and dtypes come from running the eager semantics on a short example; the BOS row is
known at compile time because position 0 only ever sees the ``<bos>`` token (everything is
causal). Value ranges are derived during lowering, one rule per op (``lower/table.py``).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx

from torchwright_fx.capture.errors import CompileError, node_error
from torchwright_fx.intrinsics import checks_disabled, using_vocab
from torchwright_fx.vocab import Vocab


class _Recorder(torch.fx.Interpreter):
    def run_node(self, n: torch.fx.Node) -> Any:
        try:
            value = super().run_node(n)
        except CompileError:
            raise
        except Exception as e:
            raise node_error(n, f"fails on an example input: {type(e).__name__}: {e}") from None
        if isinstance(value, torch.Tensor) and value.dim() >= 1:
            if value.dim() > 2:
                raise node_error(n, f"produces a {value.dim()}-D tensor {tuple(value.shape)}",
                                 "streams are [seq, width]: keep operations on the last dim")
            n.meta["tw_width"] = int(value.shape[1]) if value.dim() == 2 else 1
            n.meta["tw_dtype"] = value.dtype
            n.meta["tw_bos"] = value[0].detach().clone()
        return value


def example_ids(vocab: Vocab) -> list[int]:
    """<bos> then every token once: exercises every row of every per-token table."""
    return [vocab.bos_id, *range(len(vocab))]


def propagate(gm: torch.fx.GraphModule, vocab: Vocab) -> torch.fx.GraphModule:
    x = vocab.one_hot(example_ids(vocab))
    with using_vocab(vocab), checks_disabled(), torch.no_grad():
        _Recorder(gm).run(x)
    return gm
