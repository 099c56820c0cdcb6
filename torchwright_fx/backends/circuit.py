"""The ground-truth circuit map, ``circuit.json`` beside the weights.

For every fx node of the user's program: its op and source line, the attention heads and MLP
lanes that compute it (with their rows and columns in the Phi-3 tensors), the residual columns
that hold its value, the nodes it reads, and the TransformerLens hook names where its work is
visible. These are the labels circuit-discovery work needs, and they are exact: the weights
were written from the same placement (``emit/placement.py``).

Phi-3 tensor layout, as written by ``backends/hf.py``: ``self_attn.qkv_proj`` stacks Q
(``n_heads * d_head`` rows, head h at rows ``h * d_head ..``), then K and V (``kv_heads *
d_head`` rows each: head h reads block ``h // (n_heads / kv_heads)``, which the heads of its
group share where ``kv_heads < n_heads``, schedule/kv_groups.py); ``self_attn.o_proj`` reads
head h from columns ``h * d_head ..``; ``mlp.gate_up_proj`` stacks gate then up, each ``d_ff``
rows, lane i at row i (gate) and ``d_ff + i`` (up); ``mlp.down_proj`` reads lane i from
column i.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch.fx

from torchwright_fx.base.errors import node_source, op_name
from torchwright_fx.emit.placement import Placement
from torchwright_fx.ir.graph import EMBED, Program
from torchwright_fx.schedule.cancels import is_cancel
from torchwright_fx.schedule.plan import MLP, Plan, layer_of, stage_parity

FORMAT = "torchwright_fx.circuit/1"
FILENAME = "circuit.json"


def _head_entry(layer: int, h: int, d_head: int, n_heads: int, n_kv: int) -> dict[str, Any]:
    """Head h's rows; its K and V rows are those of its K/V block, h // (n_heads / n_kv),
    which the other heads of its group share (schedule/kv_groups.py)."""
    width, kv_width = n_heads * d_head, n_kv * d_head
    rows = [h * d_head, (h + 1) * d_head]
    g = h // (n_heads // n_kv)
    kv = [g * d_head, (g + 1) * d_head]
    return {"layer": layer, "head": h,
            "qkv_proj_rows": {"q": rows, "k": [width + kv[0], width + kv[1]],
                              "v": [width + kv_width + kv[0], width + kv_width + kv[1]]},
            "o_proj_columns": rows,
            "hooks": [f"blocks.{layer}.attn.hook_pattern", f"blocks.{layer}.attn.hook_z"]}


def _signal_entry(prog: Program, plan: Plan, sid: int) -> dict[str, Any]:
    sig = prog.signals[sid]
    stage = plan.signal_stage(prog, sid)
    if stage < 0:
        written, hook = {"layer": -1, "sublayer": "embedding"}, "hook_embed"
    else:
        layer, mlp = layer_of(stage), stage_parity(stage) == MLP
        written = {"layer": layer, "sublayer": "mlp" if mlp else "attention"}
        hook = f"blocks.{layer}.hook_resid_{'post' if mlp else 'mid'}"
    cancel = plan.cancels.get(sid)
    return {"signal": sid, "column": plan.columns.get(sid), "written": written,
            "cancelled_at_layer": None if cancel is None else layer_of(cancel),
            "cancelled_in": None if cancel is None else
            ("mlp" if stage_parity(cancel) == MLP else "attention"),
            "range": [sig.range.lo, sig.range.hi], "integral": sig.range.integral,
            "hook": hook}


def circuit(gm: torch.fx.GraphModule, prog: Program, plan: Plan, placement: Placement,
            d_head: int, name: str) -> dict[str, Any]:
    """The map as a JSON-ready dict (see the module docstring)."""
    heads: dict[str, list[dict[str, Any]]] = {}
    lanes: dict[str, list[dict[str, Any]]] = {}
    for i, layer in enumerate(placement.layers):
        for h, head in enumerate(layer.heads[: len(layer.heads) - layer.n_cancel]):
            heads.setdefault(head.name, []).append(
                _head_entry(i, h, d_head, placement.n_heads, placement.kv_heads))
        for f in layer.ffns:
            if is_cancel(f):
                continue
            lanes.setdefault(f.name, []).append(
                {"layer": i, "lanes": sorted(set(layer.lanes_of(f))),
                 "hooks": [f"blocks.{i}.mlp.hook_post"]})

    def owner(sid: int) -> str:  # the fx node whose lowering made this signal
        sig = prog.signals[sid]
        if sig.producer == EMBED:
            return sig.name.split("[")[0]
        return prog.producers[sig.producer].name

    signals_of: dict[str, list[int]] = {}
    for sid in sorted(prog.live_signals()):
        signals_of.setdefault(owner(sid), []).append(sid)

    def reads(node_name: str) -> list[str]:
        ids: set[int] = set()
        for p in prog.producers.values():
            if p.name == node_name:
                ids |= p.reads()
        names = {owner(s) for s in ids if prog.signals[s].producer != EMBED}
        return sorted(names - {node_name})

    # fx nodes, then the shared sub-results some lowerings add (e.g. the position scalar
    # behind tw.position and tw.steps_since), named "<first user>.<what>"
    entries = [(n.name, op_name(n), node_source(n), [i.name for i in n.all_input_nodes])
               for n in gm.graph.nodes]
    fx_names = {e[0] for e in entries}
    for p in prog.producers.values():
        if p.name not in fx_names:
            fx_names.add(p.name)
            entries.append((p.name, "internal", p.source, []))
    nodes = []
    for node_name, op, source, inputs in entries:
        entry: dict[str, Any] = {
            "name": node_name, "op": op, "source": source, "inputs": inputs,
            "heads": heads.get(node_name, []), "mlp": lanes.get(node_name, []),
            "signals": [_signal_entry(prog, plan, s) for s in signals_of.get(node_name, [])],
            "reads": reads(node_name),
        }
        rec = prog.nodes.get(node_name)
        if rec is not None:  # its value, as affine forms over residual columns
            entry["value"] = [{"const": lin.const,
                               "columns": {str(plan.columns[s]): c for s, c in lin.terms.items()
                                           if s in plan.columns}} for lin in rec.columns]
        nodes.append(entry)
    cancels = [{"layer": i, "head": h, "columns": sorted(plan.columns[s] for s in head.outputs
                                                           if s in plan.columns)}
               for i, layer in enumerate(placement.layers)
               for h, head in enumerate(layer.heads)
               if h >= len(layer.heads) - layer.n_cancel]
    cancel_lanes = [{"layer": i, "lanes": sorted(set(layer.lanes_of(f))),
                     "columns": sorted(plan.columns[s] for s in f.outputs if s in plan.columns)}
                    for i, layer in enumerate(placement.layers)
                    for f in layer.ffns if is_cancel(f)]
    return {"format": FORMAT, "program": name, "n_layers": len(placement.layers),
            "d_model": plan.d_model, "n_heads": placement.n_heads,
            "kv_heads": placement.kv_heads, "d_head": d_head,
            "d_ff": placement.d_ff, "constant_column": plan.const_col,
            # a half build has no RMSNorm pin; its reserved column beside the constant, if
            # any, is a second constant column (schedule/columns.py)
            "pin_columns": [] if prog.precision.half else list(plan.pin_cols),
            **({"second_constant_columns": list(plan.pin_cols)} if prog.precision.half else {}),
            "nodes": nodes, "cancel_heads": cancels, "cancel_lanes": cancel_lanes}


def write(directory: str | os.PathLike, data: dict[str, Any]) -> Path:
    path = Path(directory) / FILENAME
    path.write_text(json.dumps(data, indent=1))
    return path


@dataclass
class Circuit:
    """``circuit.json`` read back: ``nodes`` by fx node name, in program order."""

    program: str
    n_layers: int
    d_model: int
    n_heads: int
    d_head: int
    d_ff: int
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    cancel_heads: list[dict[str, Any]] = field(default_factory=list)
    cancel_lanes: list[dict[str, Any]] = field(default_factory=list)

    def dependents(self, name: str) -> set[str]:
        """Every node that reads ``name``'s signals, directly or through others."""
        readers: dict[str, set[str]] = {}
        for n in self.nodes.values():
            for r in n["reads"]:
                readers.setdefault(r, set()).add(n["name"])
        out: set[str] = set()
        todo = [name]
        while todo:
            for r in readers.get(todo.pop(), ()):
                if r not in out:
                    out.add(r)
                    todo.append(r)
        return out


def load(directory: str | os.PathLike) -> Circuit:
    """Read ``circuit.json`` from a compiled directory."""
    path = Path(directory) / FILENAME
    data = json.loads(path.read_text())
    if data.get("format") != FORMAT:
        raise ValueError(f"{path}: not a torchwright_fx circuit map (format "
                         f"{data.get('format')!r}, expected {FORMAT!r})")
    return Circuit(data["program"], data["n_layers"], data["d_model"], data["n_heads"],
                   data["d_head"], data["d_ff"], {n["name"]: n for n in data["nodes"]},
                   data["cancel_heads"], data.get("cancel_lanes", []))

