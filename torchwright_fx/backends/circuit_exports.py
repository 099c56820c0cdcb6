"""The ground truth in the formats circuit-discovery work reads: ``edges.json``,
``components.json`` and ``score_circuit`` (docs/circuits.md documents every field).

Both files are derived from the same placement the weights were written from (as
``circuit.json`` is), at the level of single signals: a signal is one residual column written
by one producer (the embedding, a head, some MLP lanes) and read by later heads (through Q, K
or V), MLP lanes (through gate or up) and the unembedding. Node names follow EAP-IG and MIB
(``input``, ``a{L}.h{H}``, ``m{L}``, ``logits``; an edge ``PARENT->CHILD`` with ``<q>``,
``<k>`` or ``<v>`` when the child is a head), with MLP lanes as ``m{L}.n{i}`` (lane i of layer
L's ``mlp.hook_post``, i.e. a column of ``down_proj``).

Edge kinds: ``program`` (a value the program computes, from its writer to its reader),
``cancel`` (a column's value read by the cancel head or cancel lanes that zero it after its
last read), ``reuse`` (a column written again after a cancel: every earlier writer of the
column, and the cancel head or lanes, feed the new value's readers in the residual
decomposition, and these contributions sum to exactly zero) and ``end`` (the end-of-context
flag, ops/end.py: one head and a ramp that make the model print ``<eos>`` at its last certified
position; it is 0, and changes nothing, at every earlier position). ``score_circuit`` counts
``program`` edges as the truth by default and neither rewards nor penalises the bookkeeping
kinds.
"""

from __future__ import annotations

import inspect
import json
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch.fx

from torchwright_fx.base.errors import node_source, op_name
from torchwright_fx.emit.placement import CANCEL, Placement
from torchwright_fx.ir.graph import EMBED, FFN, Head, Program
from torchwright_fx.ops.end import NAME as END_NAME
from torchwright_fx.schedule.cancels import is_cancel
from torchwright_fx.schedule.plan import Plan

EDGES_FORMAT = "torchwright_fx.edges/1"
COMPONENTS_FORMAT = "torchwright_fx.components/1"
EDGES_FILE = "edges.json"
COMPONENTS_FILE = "components.json"
GRANULARITIES = ("head", "qkv", "neuron")
KINDS = ("program", "cancel", "reuse", "end")  # by precedence, when a coarser edge merges several
INPUT, LOGITS = "input", "logits"
END = f".{END_NAME}"  # in the names of the end-of-context flag's producers

# -- the role taxonomy ----------------------------------------------------------------------------
ROLES: dict[str, str] = {
    "shift": "attention copying a value from a fixed distance back (tw.shift)",
    "latch": "attention copying the value at the latest position where a condition held "
             "(tw.latch, tw.select_latest)",
    "gather": "attention copying a value from a computed position or from the best-scoring "
              "one (tw.gather, tw.argmax, tw.argmin)",
    "aggregate": "attention averaging a value over the positions a selector keeps "
                 "(tw.aggregate, tw.mean)",
    "count": "a selector width: the attention that measures how many positions a selector "
             "keeps and the MLP lanes that decode the count (tw.selector_width, '.width')",
    "position": "the position and distances: tw.position, tw.steps_since and the shared "
                "position sub-results ('.position', '.inverse_count', '.position_squared')",
    "select": "MLP features a selector's query and key compare ('.indicator')",
    "lookup": "an MLP table from values to values (tw.lookup, tw.lookup2, tw.is_token, "
              "tw.piecewise, tw.reciprocal, tw.number_to_digits)",
    "compare": "comparisons and boolean logic (==, <, >=, torch.where, all, any, ...)",
    "arithmetic": "other MLP arithmetic (*, //, %, floor, abs, min, max, digits_to_number, ...)",
    "output": "the output's final choice of token (tw.emit)",
    "cancel": "bookkeeping: a head or MLP lanes that zero finished columns so they can be "
              "reused",
    "end": "bookkeeping: the flag that makes the model print <eos> at its last certified "
           "position ('.end_of_context')",
    "other": "an op outside the cases above",
}
_OP_ROLES = {
    "tw.shift": "shift", "tw.latch": "latch", "tw.select_latest": "latch",
    "tw.gather": "gather", "tw.argmax": "gather", "tw.argmin": "gather",
    "tw.aggregate": "aggregate", "tw.mean": "aggregate", "tw.selector_width": "count",
    "tw.position": "position", "tw.steps_since": "position", "tw.select": "select",
    "tw.lookup": "lookup", "tw.lookup2": "lookup", "tw.is_token": "lookup",
    "tw.piecewise": "lookup", "tw.reciprocal": "lookup", "tw.number_to_digits": "lookup",
    "tw.code": "lookup", "tw.token": "lookup", "tw.equals": "compare",
    "tw.digits_to_number": "arithmetic", "tw.emit": "output",
}
_INTERNAL_ROLES = {"width": "count", "position": "position", "inverse_count": "position",
                   "position_squared": "position", "indicator": "select"}
_COMPARE = re.compile(r"\.(eq|ne|lt|le|gt|ge|where|all|any|and_|or_|xor|invert|not_|"
                      r"logical_\w+|sign|bitwise_\w+)$")


def role_of(op: str, name: str, attention: bool) -> str:
    """The role tag of a component computing fx node ``name`` (op ``op``)."""
    if name == CANCEL:
        return "cancel"
    if op == "internal":
        if END in name:
            return "end"
        return _INTERNAL_ROLES.get(name.split(".", 1)[-1], "other")
    if op in _OP_ROLES:
        return _OP_ROLES[op]
    if _COMPARE.search(op):
        return "compare"
    return "other" if attention else "arithmetic"


# -- the signal-level graph -----------------------------------------------------------------------
@dataclass
class Flow:
    """One signal's (or one column's) contributions: every writer unit to every reader unit.
    Units: ``input``, ``a{L}.h{H}``, ``m{L}.n{i}``, ``logits``; a reader is (unit, input) with
    input "q", "k", "v" for heads, None otherwise."""

    kind: str
    signal: int
    column: int
    fx: str
    writers: list[str]
    readers: list[tuple[str, str | None]]


@dataclass
class Truth:
    """What both exports are written from."""

    flows: list[Flow]
    heads: list[tuple[int, int, Head]]  # (layer, head index, head), cancel heads included
    ffns: list[tuple[int, FFN, list[int]]]  # (layer, ffn, its lane indices)
    first_cancel: dict[int, int] = field(default_factory=dict)  # layer -> its first cancel head


def _owner(prog: Program, sid: int) -> str:
    """The fx node whose lowering made signal ``sid``; the token input's name for every
    embedding column (one-hot tokens and the per-token tables folded into the embedding)."""
    sig = prog.signals[sid]
    if sig.producer == EMBED:
        m = re.match(r"(?:embed\()?(\w+)", sig.name)
        return m.group(1) if m else sig.name
    return prog.producers[sig.producer].name


def _only_feeding(units: set[str], writers: dict[int, list[str]],
                  readers: dict[int, list[tuple[str, str | None]]]) -> set[str]:
    """The units whose every written value is read only by ``units`` (or by them after
    others of this kind): a shared position head kept alive only by the end-of-context flag."""
    found = set(units)
    writes: dict[str, set[int]] = {}
    for s, ws in writers.items():
        for w in ws:
            if w != INPUT:
                writes.setdefault(w, set()).add(s)
    changed = True
    while changed:
        changed = False
        for unit, sigs in writes.items():
            if unit not in found and all(readers.get(s) and
                                         all(r in found for r, _ in readers[s]) for s in sigs):
                found.add(unit)
                changed = True
    return found


def truth(prog: Program, plan: Plan, placement: Placement) -> Truth:
    """Every signal's writers and readers (and every reused column's), from the placement the
    weights were written from."""
    cols = plan.columns
    writers: dict[int, list[str]] = {}
    readers: dict[int, list[tuple[str, str | None]]] = {}
    cancel_of: dict[int, list[str]] = {}  # signal -> the cancel head or lanes that zero it
    heads, ffns, first_cancel = [], [], {}
    program_lanes: set[str] = set()  # the lanes of the program's FFNs (not only a cancel's)
    end_units: set[str] = set()  # the units of the end-of-context flag (ops/end.py)

    def read(lins: Iterable[Any], unit: str, inp: str | None) -> None:
        seen: set[int] = set()
        for lin in lins:
            seen |= {s for s, c in lin.terms.items() if c != 0.0 and s in cols}
        for s in sorted(seen):
            readers.setdefault(s, []).append((unit, inp))

    for sid in cols:
        if prog.signals[sid].producer == EMBED:
            writers[sid] = [INPUT]
    for i, layer in enumerate(placement.layers):
        first = len(layer.heads) - layer.n_cancel
        first_cancel[i] = first
        for h, head in enumerate(layer.heads):
            unit = f"a{i}.h{h}"
            heads.append((i, h, head))
            if END in head.name:
                end_units.add(unit)
            for letter, lins in (("q", head.q), ("k", head.k), ("v", head.v)):
                read(lins, unit, letter)
            for s in head.outputs:
                if s in cols:
                    if h >= first:
                        cancel_of.setdefault(s, []).append(unit)
                    else:
                        writers.setdefault(s, []).append(unit)
        for lane, idx in sorted(layer.lane_index.items(), key=lambda kv: kv[1]):
            read((lane.gate, lane.up), f"m{i}.n{idx}", None)
        for f in layer.ffns:
            local = layer.lanes_of(f)
            ffns.append((i, f, local))
            if END in f.name:
                end_units.update(f"m{i}.n{j}" for j in local)
            if not is_cancel(f):
                program_lanes.update(f"m{i}.n{j}" for j in local)
            for s, weights in f.outputs.items():
                if s in cols and is_cancel(f):
                    cancel_of.setdefault(s, []).extend(f"m{i}.n{local[j]}" for j in weights)
                elif s in cols:
                    writers.setdefault(s, []).extend(
                        f"m{i}.n{local[j]}" for j, w in sorted(weights.items()) if w != 0.0)
    read([prog.output], LOGITS, None)
    if prog.end_flag is not None:
        read([prog.end_flag], LOGITS, None)
        end_units |= _only_feeding(end_units, writers, readers)

    flows: list[Flow] = []
    for s in sorted(cols):
        w = sorted(set(writers.get(s, [])), key=_unit_order)
        r = readers.get(s, [])
        cancel = cancel_of.get(s, [])
        # a cancel lane identical to a program lane of its layer is placed once: its read is
        # the program's too
        prog_readers = [x for x in r if x[0] not in cancel or x[0] in program_lanes]
        # what the end-of-context flag reads (a shared position head, <bos>) and writes
        ends = [x for x in prog_readers if x[0] in end_units or END in _owner(prog, s)]
        others = [x for x in prog_readers if x not in ends]
        if others:
            flows.append(Flow("program", s, cols[s], _owner(prog, s), w, others))
        if ends:
            flows.append(Flow("end", s, cols[s], _owner(prog, s), w, ends))
        if cancel:
            flows.append(Flow("cancel", s, cols[s], _owner(prog, s), w,
                              [x for x in r if x[0] in cancel]))
    # column reuse: every earlier occupant's writers and cancel head feed a later one's readers
    by_column: dict[int, list[int]] = {}
    for s in cols:
        by_column.setdefault(cols[s], []).append(s)
    for col, sids in by_column.items():
        sids.sort(key=lambda s: (plan.signal_stage(prog, s), s))
        before: list[str] = []
        for s in sids:
            if before and readers.get(s):
                flows.append(Flow("reuse", s, col, _owner(prog, s),
                                  sorted(set(before), key=_unit_order), readers[s]))
            before += writers.get(s, [])
            before += cancel_of.get(s, [])
    return Truth(flows, heads, ffns, first_cancel)


_UNIT = re.compile(r"^(?:a(\d+)\.h(\d+)|m(\d+)(?:\.n(\d+))?)$")


def _unit_order(unit: str) -> tuple[int, int, int]:
    """Forward order: input, then per layer its heads, then its MLP, then logits."""
    if unit == INPUT:
        return (-1, 0, 0)
    if unit == LOGITS:
        return (1 << 30, 0, 0)
    m = _UNIT.match(unit)
    if m is None:
        return (1 << 29, 0, 0)
    if m.group(1) is not None:
        return (int(m.group(1)), 0, int(m.group(2)))
    return (int(m.group(3)), 1, int(m.group(4) or 0))


def coarsen(unit: str, granularity: str) -> str:
    """A neuron-granularity unit at ``granularity``: lanes ``m{L}.n{i}`` become ``m{L}``."""
    if granularity != "neuron" and unit.startswith("m") and ".n" in unit:
        return unit.split(".", 1)[0]
    return unit


def edge_name(parent: str, child: str, inp: str | None) -> str:
    return f"{parent}->{child}" + (f"<{inp}>" if inp else "")


# -- edges.json -----------------------------------------------------------------------------------
def _model(placement: Placement, plan: Plan, d_head: int) -> dict[str, Any]:
    return {"architecture": "Phi3ForCausalLM", "n_layers": len(placement.layers),
            "n_heads": placement.n_heads, "kv_heads": placement.kv_heads, "d_head": d_head,
            "d_model": plan.d_model,
            "d_ff": placement.d_ff, "parallel_attn_mlp": False}


def _edge_level(t: Truth, granularity: str) -> dict[str, Any]:
    edges: dict[str, dict[str, Any]] = {}
    for f in t.flows:
        for w in f.writers:
            for r, inp in f.readers:
                p, c = coarsen(w, granularity), coarsen(r, granularity)
                qkv = inp if granularity != "head" else None
                name = edge_name(p, c, qkv)
                e = edges.get(name)
                if e is None:
                    e = edges[name] = {"name": name, "parent": p, "child": c, "input": qkv,
                                       "kind": f.kind, "fx": [], "signals": []}
                elif KINDS.index(f.kind) < KINDS.index(e["kind"]):
                    e["kind"] = f.kind
                if f.fx not in e["fx"]:
                    e["fx"].append(f.fx)
                if f.signal not in e["signals"]:
                    e["signals"].append(f.signal)
    out = sorted(edges.values(), key=lambda e: (_unit_order(e["child"]), e["input"] or "",
                                                _unit_order(e["parent"])))
    nodes = sorted({e["parent"] for e in out} | {e["child"] for e in out} | {INPUT, LOGITS},
                   key=_unit_order)
    return {"granularity": granularity, "nodes": nodes, "edges": out}


def _neuron_level(t: Truth) -> dict[str, Any]:
    flows = [{"kind": f.kind, "signal": f.signal, "column": f.column, "fx": f.fx,
              "from": f.writers, "to": [edge_name("", r, inp)[2:] for r, inp in f.readers]}
             for f in t.flows]
    nodes = sorted({u for f in t.flows for u in f.writers}
                   | {r for f in t.flows for r, _ in f.readers} | {INPUT, LOGITS},
                   key=_unit_order)
    n_edges = len({(w, r) for f in t.flows for w in f.writers for r in f.readers})
    return {"granularity": "neuron", "nodes": nodes, "n_edges": n_edges, "flows": flows}


def edges(prog: Program, plan: Plan, placement: Placement, d_head: int, name: str,
          t: Truth | None = None) -> dict[str, Any]:
    """The edge lists at the three granularities, as a JSON-ready dict."""
    t = t or truth(prog, plan, placement)
    return {"format": EDGES_FORMAT, "program": name, "model": _model(placement, plan, d_head),
            "kinds": {"program": "a value of the program, from its writer to its reader",
                      "cancel": "a finished value, to the cancel head or lanes that zero its "
                                "column",
                      "reuse": "a reused column: earlier writers and cancel heads or lanes "
                               "to the new "
                               "value's readers (their contributions sum to zero)",
                      "end": "the end-of-context flag (prints <eos> at the last certified "
                             "position; 0 at every earlier one)"},
            "granularities": {"head": _edge_level(t, "head"), "qkv": _edge_level(t, "qkv"),
                              "neuron": _neuron_level(t)}}


# -- components.json ------------------------------------------------------------------------------
def _head_hooks(layer: int, h: int, d_head: int, kv: int) -> dict[str, Any]:
    """``kv``: the head's K/V block, the index of its hook_k and hook_v (heads of a layer may
    share one: schedule/kv_groups.py)."""
    a = f"blocks.{layer}.attn"
    return {"hook": f"{a}.hook_z", "index": h, "kv_index": kv,
            "selector": f"{a}.hook_z[:, :, {h}]",
            "module": f"model.layers.{layer}.self_attn.o_proj",
            "module_columns": list(range(h * d_head, (h + 1) * d_head)),
            "hook_bridge": f"{a}.o.hook_in", "hook_legacy": f"{a}.hook_result[{h}]",
            "hooks": {"q": f"{a}.hook_q", "k": f"{a}.hook_k", "v": f"{a}.hook_v",
                      "pattern": f"{a}.hook_pattern", "z": f"{a}.hook_z"}}


def _lane_hooks(layer: int, lanes: list[int]) -> dict[str, Any]:
    m = f"blocks.{layer}.mlp"
    return {"hook": f"{m}.hook_post", "index": lanes,
            "module": f"model.layers.{layer}.mlp.down_proj", "module_columns": list(lanes),
            "selector": f"{m}.hook_post[:, :, {lanes}]", "hook_bridge": f"{m}.out.hook_in",
            "hook_legacy": f"{m}.hook_post{lanes}",
            "hooks": {"gate": f"{m}.hook_pre", "up": f"{m}.hook_pre_linear",
                      "post": f"{m}.hook_post"}}


def components(gm: torch.fx.GraphModule, prog: Program, plan: Plan, placement: Placement,
               d_head: int, name: str, fn: Callable[..., Any] | None = None,
               t: Truth | None = None) -> dict[str, Any]:
    """The component list (one per head, one per MLP lane group of an fx node), as a dict."""
    t = t or truth(prog, plan, placement)
    fx = {n.name: (op_name(n), node_source(n)) for n in gm.graph.nodes
          if n.op not in ("placeholder", "output")}
    for p in prog.producers.values():
        fx.setdefault(p.name, ("internal", p.source))
    parents: dict[str, dict[str | None, set[str]]] = {}  # unit -> input -> parent fx nodes
    feeds_logits: set[str] = set()
    for f in t.flows:
        if f.kind == "reuse":
            continue
        for r, inp in f.readers:
            parents.setdefault(r, {}).setdefault(inp, set()).add(f.fx)
            if r == LOGITS:
                feeds_logits.update(f.writers)
    writes: dict[str, list[dict[str, Any]]] = {}
    for f in t.flows:
        if f.kind in ("program", "end") or (f.kind == "cancel" and f.writers):
            for w in f.writers:
                entry = {"signal": f.signal, "column": f.column, "fx": f.fx}
                if entry not in writes.setdefault(w, []):
                    writes[w].append(entry)

    out: list[dict[str, Any]] = []
    rep = placement.n_heads // placement.kv_heads  # query heads a K/V block
    for layer, h, head in t.heads:
        unit = f"a{layer}.h{h}"
        cancel = h >= t.first_cancel[layer]
        node = CANCEL if cancel else head.name
        op, source = ("", "") if cancel else fx.get(node, ("internal", head.source))
        comp: dict[str, Any] = {"id": unit, "kind": "head", "layer": layer, "head": h,
                                **_head_hooks(layer, h, d_head, h // rep),
                                "role": role_of(op, node, True),
                                "fx_node": None if cancel else node, "op": op or None,
                                "source": source or None}
        reads = parents.get(unit, {})
        comp["reads"] = {x: sorted(reads.get(x, ())) for x in "qkv"}
        if cancel:
            comp["cancels"] = [{"signal": s, "column": plan.columns[s], "fx": _owner(prog, s)}
                               for s in head.outputs if s in plan.columns]
            comp["writes"] = []
            comp["note"] = ("zeroes " + ", ".join(sorted({c["fx"] for c in comp["cancels"]}))
                            + " after the last read")
        else:
            comp["writes"] = writes.get(unit, [])
            comp["note"] = _note(comp)
        comp["feeds_logits"] = unit in feeds_logits
        out.append(comp)
    groups: dict[tuple[int, str], list[int]] = {}
    for layer, ffn, local in t.ffns:
        groups.setdefault((layer, ffn.name), []).extend(local)
    owners: dict[tuple[int, int], set[str]] = {}
    for (layer, node), lanes in groups.items():
        for i in lanes:
            owners.setdefault((layer, i), set()).add(node)
    for (layer, node), lanes in sorted(groups.items()):
        lanes = sorted(set(lanes))
        units = [f"m{layer}.n{i}" for i in lanes]
        op, source = fx.get(node, ("internal", ""))
        lane_reads: set[str] = set()
        for u in units:
            lane_reads |= parents.get(u, {}).get(None, set())
        shared = sorted({o for i in lanes for o in owners[layer, i]} - {node})
        comp = {"id": f"m{layer}:{node}", "kind": "lanes", "layer": layer, "lanes": lanes,
                **_lane_hooks(layer, lanes), "role": role_of(op, node, False),
                "fx_node": node, "op": op, "source": source or None,
                "reads": {"gate_up": sorted(lane_reads)},
                "writes": [w for u in units for w in writes.get(u, []) if w["fx"] == node],
                "shared_with": shared, "feeds_logits": any(u in feeds_logits for u in units)}
        comp["writes"] = [dict(x) for x in {(w["signal"], w["column"], w["fx"]): w
                                            for w in comp["writes"]}.values()]
        comp["note"] = _note(comp)
        if node == CANCEL:  # cancel lanes (schedule/cancels.py), as a cancel head's entry
            zeroed = sorted({s for la, f, _ in t.ffns if la == layer and is_cancel(f)
                             for s in f.outputs if s in plan.columns})
            comp.update(fx_node=None, op=None, source=None, cancels=[
                {"signal": s, "column": plan.columns[s], "fx": _owner(prog, s)} for s in zeroed])
            comp["note"] = ("zeroes " + ", ".join(sorted({c["fx"] for c in comp["cancels"]}))
                            + " after the last read")
        out.append(comp)
    source_code = None
    if fn is not None:
        try:
            source_code = inspect.getsource(fn)
        except (OSError, TypeError):
            pass
    return {"format": COMPONENTS_FORMAT, "program": name,
            "model": _model(placement, plan, d_head), "roles": ROLES,
            "program_source": source_code, "components": out}


def _note(comp: dict[str, Any]) -> str:
    reads = comp["reads"]
    parts = [f"{k} reads {', '.join(v)}" for k, v in reads.items() if v]
    what = f"{comp['op']} `{comp['fx_node']}`" if comp["op"] != "internal" else \
        f"`{comp['fx_node']}`"
    cols = sorted({w["column"] for w in comp["writes"]})
    text = f"{what}, role {comp['role']}"
    if parts:
        text += "; " + "; ".join(parts)
    if cols:
        text += f"; writes column{'s' if len(cols) > 1 else ''} {', '.join(map(str, cols))}"
    return text + ("; read by the unembedding" if comp.get("feeds_logits") else "")


def write(directory: str | os.PathLike, edge_data: dict[str, Any],
          component_data: dict[str, Any]) -> tuple[Path, Path]:
    d = Path(directory)
    (d / EDGES_FILE).write_text(json.dumps(edge_data, indent=1))
    (d / COMPONENTS_FILE).write_text(json.dumps(component_data, indent=1))
    return d / EDGES_FILE, d / COMPONENTS_FILE
