"""Trace a plain Python function over the token stream into an fx graph."""

from __future__ import annotations

import inspect
import math
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.fx

from torchwright_fx.base.errors import CompileError, is_user_file, user_frame_from_traceback
from torchwright_fx.capture.registry import INTRINSICS, using_vocab
from torchwright_fx.vocab import Vocab


class TwTracer(torch.fx.Tracer):
    """fx Tracer that keeps every ``tw.*`` intrinsic as one leaf node and records stacks."""

    def __init__(self) -> None:
        super().__init__(autowrap_modules=(math,), autowrap_functions=tuple(INTRINSICS))

    def create_node(self, *args: Any, **kwargs: Any) -> torch.fx.Node:
        # fx's own stack recording keeps only frames under a module's `forward` and symbolises
        # through the profiler (seconds on first use); a program is a plain function, so record
        # the user's own frames directly.
        node = super().create_node(*args, **kwargs)
        frames = [f for f in traceback.extract_stack() if is_user_file(f.filename)]
        node.stack_trace = "".join(traceback.format_list(frames)).strip()
        return node


_CONTROL_FLOW_ADVICE = (
    "a traced stream has no concrete value while compiling, so Python control flow "
    "(if/while/and/or/not, bool(), int(), len(), iteration) cannot depend on it; "
    "use torch.where(cond, a, b), & | ~, or a tw.* intrinsic instead"
)


def _one_argument(fn: Callable[..., Any]) -> Callable[[Any], Any]:
    def program(x: Any) -> Any:
        return fn(x)

    return program


def capture(fn: Callable[..., Any], vocab: Vocab) -> torch.fx.GraphModule:
    """Trace ``fn(x)`` where x is the one-hot token stream ``[seq, len(vocab)]``."""
    signature = inspect.signature(fn).parameters.values()
    params = [p for p in signature if p.default is inspect.Parameter.empty]
    if len(params) != 1 or params[0].kind in (inspect.Parameter.VAR_POSITIONAL,
                                              inspect.Parameter.VAR_KEYWORD):
        raise CompileError(f"{fn.__qualname__} must take exactly one argument (the token "
                           f"stream), got {len(params)} without a default; bind the others "
                           "with defaults (def f(x, k=1)) or a lambda (lambda x: f(x, 1))")
    # Parameters with defaults are constants of the program (k=1, op=torch.relu): trace a
    # one-argument call, so they keep their default values instead of becoming inputs.
    root = fn if len(signature) == 1 else _one_argument(fn)
    tracer = TwTracer()
    try:
        with using_vocab(vocab):
            graph = tracer.trace(root)
    except torch.fx.proxy.TraceError as e:
        raise CompileError(f"{user_frame_from_traceback(e.__traceback__)}\n  {e}\n  "
                           f"{_CONTROL_FLOW_ADVICE}") from None
    except (TypeError, RuntimeError, ValueError, KeyError) as e:
        raise CompileError(f"{user_frame_from_traceback(e.__traceback__)}\n  while tracing "
                           f"{fn.__qualname__}: {type(e).__name__}: {e}") from None
    return torch.fx.GraphModule(tracer.root, graph, fn.__name__)
