"""Walk the annotated fx graph once, turning every node into a ``Stream`` by its rule."""

from __future__ import annotations

from typing import Any

import torch
import torch.fx

from torchwright_fx.capture.errors import CompileError, node_error, node_source
from torchwright_fx.intrinsics import info, using_vocab
from torchwright_fx.ir.graph import MachineKind, Program
from torchwright_fx.ir.ranges import BOOL
from torchwright_fx.lower import table
from torchwright_fx.lower.context import LowerCtx
from torchwright_fx.lower.stream import Stream
from torchwright_fx.ops.attention import Geometry
from torchwright_fx.vocab import Vocab


def choose_machine(gm: torch.fx.GraphModule, requested: MachineKind | None) -> MachineKind:
    """One op library per program: the one its library ops name, else the requested one."""
    first_use: dict[str, torch.fx.Node] = {}
    for node in gm.graph.nodes:
        meta = info(node.target) if node.op == "call_function" else None
        if meta is not None and meta.machine is not None:
            first_use.setdefault(meta.machine, node)
    if len(first_use) > 1:
        (m1, n1), (m2, n2) = list(first_use.items())[:2]
        raise CompileError(
            "the program mixes the two op libraries; a program compiles for one machine:\n"
            f"  {m1}: {node_source(n1)}\n  {m2}: {node_source(n2)}\n"
            "  use torchwright_fx.ops.swiglu or torchwright_fx.ops.relu, not both")
    if first_use:
        (used, node), = first_use.items()
        if requested is not None and requested != used:
            raise node_error(node, f"a {used} library op in a program compiled for the "
                                   f"{requested} machine")
        return used  # type: ignore[return-value]
    return requested or "swiglu"


def _rule(node: torch.fx.Node) -> Any:
    if node.op == "call_function":
        meta = info(node.target)
        if meta is not None:
            return meta.lower
        return table.FUNCTIONS.get(node.target)
    return table.METHODS.get(str(node.target))


def _has_stream(value: Any) -> bool:
    if isinstance(value, Stream):
        return True
    if isinstance(value, (list, tuple)):
        return any(_has_stream(v) for v in value)
    if isinstance(value, dict):
        return any(_has_stream(v) for v in value.values())
    return False


def _run_eagerly(node: torch.fx.Node, args: Any, kwargs: Any) -> Any:
    if node.op == "call_function":
        return node.target(*args, **kwargs)  # type: ignore[operator]
    return getattr(args[0], str(node.target))(*args[1:], **kwargs)


def _op_name(node: torch.fx.Node) -> str:
    if node.op == "call_method":
        return f"Tensor.{node.target}"
    target = node.target
    module = getattr(target, "__module__", None) or ""
    name = getattr(target, "__name__", str(target))
    return f"{module}.{name}" if module else name


def lower(gm: torch.fx.GraphModule, vocab: Vocab, geom: Geometry,
          machine: MachineKind | None = None) -> Program:
    prog = Program(vocab, choose_machine(gm, machine))
    env: dict[torch.fx.Node, Any] = {}
    with using_vocab(vocab):
        for node in gm.graph.nodes:
            env[node] = _lower_node(gm, prog, geom, vocab, node, env)
    return prog


def _lower_node(gm: torch.fx.GraphModule, prog: Program, geom: Geometry, vocab: Vocab,
                node: torch.fx.Node, env: dict[torch.fx.Node, Any]) -> Any:
    if node.op == "placeholder":
        cols = [prog.embed(tuple(float(i == t) for i in range(len(vocab))), BOOL,
                           f"x[{vocab.tokens[t]!r}]", "<token stream>") for t in range(len(vocab))]
        value: Any = Stream(cols, [BOOL] * len(vocab))
        node.meta["tw_stream"] = value
    elif node.op == "get_attr":
        value = gm
        for part in str(node.target).split("."):
            value = getattr(value, part)
    elif node.op == "output":
        value = env[node.args[0]]  # type: ignore[index]
        if not isinstance(value, Stream) or value.width != 1:
            raise node_error(node, "the program must return one code stream of width 1",
                             "return tw.emit(trigger, [...]) or a [seq, 1] stream of token codes")
        prog.output = value.cols[0]
        return value
    else:
        args = torch.fx.node.map_arg(node.args, lambda n: env[n])
        kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: env[n])
        if not _has_stream((args, kwargs)):
            return _run_eagerly(node, args, kwargs)
        rule = _rule(node)
        if rule is None:
            raise node_error(node, f"no lowering for {_op_name(node)}",
                             "see docs/ops.md for the supported torch ops and tw intrinsics")
        ctx = LowerCtx(prog, geom, vocab, node)
        try:
            value = rule(ctx, *args, **kwargs)
        except (CompileError, AssertionError):
            raise
        except (ValueError, TypeError, IndexError, KeyError) as e:
            raise node_error(node, f"{type(e).__name__}: {e}") from None
    if isinstance(value, Stream):
        prog.views[node.name] = value.cols
        prog.sources[node.name] = node_source(node)
    return value
