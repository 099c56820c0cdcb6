"""Scoring a circuit-discovery method's output against the ground truth (``edges.json``):
``score_circuit``, its input formats and the name normalisation (docs/circuits.md)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from torchwright_fx.backends.circuit_exports import (
    _UNIT,
    EDGES_FILE,
    EDGES_FORMAT,
    GRANULARITIES,
    INPUT,
    LOGITS,
    _unit_order,
    coarsen,
    edge_name,
)

# -- scoring --------------------------------------------------------------------------------------
_HOOK = re.compile(r"^blocks\.(\d+)\.(attn|mlp)\.(?:hook_\w+|o\.hook_in|out\.hook_in)"
                   r"(?:\[([\d, ]*)\])?$")
_EDGE = re.compile(r"^(.+?)->(.+?)(?:<([qkv])>)?$")


def node_name(name: str | tuple[str, Any]) -> list[str]:
    """Our node name(s) for a found node: an EAP-IG name (``a1.h2``, ``m0``, ``m0.n5``), a
    TransformerLens hook with its index (``blocks.1.attn.hook_z[2]``,
    ``blocks.1.attn.hook_result[2]``, ``blocks.0.mlp.hook_post[3, 4]``,
    ``blocks.0.hook_mlp_out``) or a (hook, index) pair."""
    if isinstance(name, tuple):
        hook, index = name
        idx = index if isinstance(index, list | tuple) else [index]
        name = f"{hook}[{', '.join(str(i) for i in idx)}]"
    if _UNIT.match(name) or name in (INPUT, LOGITS):
        return [name]
    m = re.match(r"^blocks\.(\d+)\.hook_mlp_out$", name)
    if m:
        return [f"m{m.group(1)}"]
    m = _HOOK.match(name)
    if m is None:
        raise ValueError(f"not a node name: {name!r} (expected input, a1.h2, m0, m0.n5, logits "
                         "or a TransformerLens hook such as blocks.1.attn.hook_z[2])")
    layer, sub, listed = m.group(1), m.group(2), m.group(3)
    indices = [int(i) for i in listed.split(",") if i.strip()] if listed else []
    if sub == "attn":
        if len(indices) != 1:
            raise ValueError(f"{name!r}: name one head, e.g. blocks.{layer}.attn.hook_z[0]")
        return [f"a{layer}.h{indices[0]}"]
    return [f"m{layer}.n{i}" for i in indices] if indices else [f"m{layer}"]


def _selected(items: Any, threshold: float | None) -> tuple[list[Any], bool]:
    """The names a found collection selects, and whether it was scored (a dict)."""
    if isinstance(items, Mapping):
        chosen = []
        for k, v in items.items():
            if isinstance(v, Mapping):  # EAP-IG / MIB: {"score": x, "in_graph": b}
                if threshold is not None and v.get("score") is not None:
                    keep = abs(float(v["score"])) >= threshold
                else:
                    keep = bool(v.get("in_graph", True))
            elif isinstance(v, bool):
                keep = v
            else:
                if threshold is None:
                    raise ValueError("found holds scores: pass threshold= (|score| >= "
                                     "threshold is found)")
                keep = abs(float(v)) >= threshold
            if keep:
                chosen.append(k)
        return chosen, True
    return list(items), False


def _is_edge(x: Any) -> bool:
    return (isinstance(x, str) and "->" in x) or (isinstance(x, tuple) and len(x) in (2, 3)
                                                   and all(isinstance(y, str | None) for y in x)
                                                   and not re.match(r"^blocks\.", str(x[0])))


def _parse_edge(x: Any) -> tuple[str, str, str | None]:
    if isinstance(x, str):
        m = _EDGE.match(x)
        if m is None:
            raise ValueError(f"not an edge: {x!r} (expected PARENT->CHILD or PARENT->CHILD<q>)")
        return m.group(1), m.group(2), m.group(3)
    return (x[0], x[1], x[2] if len(x) == 3 else None)


def _load_truth(truth: Any) -> dict[str, Any]:
    if isinstance(truth, str | os.PathLike):
        p = Path(truth)
        truth = json.loads((p / EDGES_FILE if p.is_dir() else p).read_text())
    elif hasattr(truth, "edges") and callable(truth.edges):  # a Compiled
        truth = truth.edges()
    if not isinstance(truth, Mapping) or truth.get("format") != EDGES_FORMAT:
        raise ValueError(f"truth: an {EDGES_FILE} (its dict, its path or its directory) or a "
                         "compiled program")
    return dict(truth)


def _truth_edges(level: dict[str, Any]) -> list[tuple[str, str, str | None, str]]:
    if "edges" in level:
        return [(e["parent"], e["child"], e["input"], e["kind"]) for e in level["edges"]]
    out = set()
    for f in level["flows"]:
        for w in f["from"]:
            for r in f["to"]:
                child, _, inp = r.partition("<")
                out.add((w, child, inp.rstrip(">") or None, f["kind"]))
    return list(out)


def _prf(found: set[Any], true: set[Any], ignored: set[Any]) -> dict[str, Any]:
    found = found - (ignored - true)
    tp = len(found & true)
    p = tp / len(found) if found else 0.0
    r = tp / len(true) if true else 0.0
    f1 = 2 * p * r / (p + r) if p + r else 0.0

    def names(xs: set[Any]) -> list[str]:
        return sorted((x if isinstance(x, str) else edge_name(*x) for x in xs),
                      key=lambda n: (_unit_order(n.split("->")[0]), n))

    return {"precision": p, "recall": r, "f1": f1, "tp": tp, "fp": len(found - true),
            "fn": len(true - found), "false_positives": names(found - true),
            "missed": names(true - found)}


def score_circuit(found: Any, truth: Any, granularity: str | None = None,
                  threshold: float | None = None,
                  kinds: Iterable[str] = ("program",),
                  ignore: Iterable[str] = ("cancel", "reuse", "end")) -> dict[str, Any]:
    """Precision, recall and F1 of a discovered circuit against the ground truth, over nodes
    and (when ``found`` names edges) over edges, at one granularity (docs/circuits.md).

    ``found``: a collection of node names and/or edge names (``a0.h1``, ``m2``, ``m2.n7``,
    ``blocks.1.attn.hook_z[2]``; ``a0.h1->a1.h0<q>``, ``(parent, child[, input])``); a dict of
    such names to scores (with ``threshold``: |score| >= threshold is found) or to booleans;
    ``{"nodes": ..., "edges": ...}`` with either of those; or an EAP-IG / MIB graph JSON
    (``{"nodes": {name: {"in_graph": ...}}, "edges": {name: {"score": ..., "in_graph":
    ...}}}``; ``threshold`` then overrides ``in_graph``). ``truth``: an ``edges.json`` dict,
    its path, its directory or a compiled program. ``granularity``: ``head``, ``qkv`` or
    ``neuron`` (default: the finest that ``found`` names; finer names are coarsened).
    ``kinds``: the edge kinds that are the truth; edges and nodes only of the ``ignore``
    kinds are neither found nor missed. ``input`` and ``logits`` are not scored as nodes."""
    data = _load_truth(truth)
    if isinstance(found, Mapping) and ("nodes" in found or "edges" in found):
        node_items, scored_n = _selected(found.get("nodes", []), threshold)
        edge_items, scored_e = _selected(found.get("edges", []), threshold)
        has_edges = "edges" in found
    else:
        items, _ = _selected(found, threshold)
        node_items = [x for x in items if not _is_edge(x)]
        edge_items = [x for x in items if _is_edge(x)]
        has_edges = bool(edge_items)
    found_nodes = {n for x in node_items for n in node_name(x)}
    found_edges = {_parse_edge(x) for x in edge_items}
    for p, c, _ in list(found_edges):
        found_nodes |= {*node_name(p), *node_name(c)}
    if granularity is None:
        every = found_nodes | {u for p, c, _ in found_edges for u in (p, c)}
        granularity = ("neuron" if any(".n" in u for u in every) else
                       "qkv" if any(i for _, _, i in found_edges) else "head")
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity: one of {GRANULARITIES}, not {granularity!r}")
    if granularity in ("qkv", "neuron") and found_edges and \
            any(i is None and _UNIT.match(c) and c.startswith("a") for _, c, i in found_edges):
        raise ValueError(f"an edge into a head names no <q>, <k> or <v>: score at "
                         f"granularity='head', not {granularity!r}")
    kinds, ignore = set(kinds), set(ignore)

    def level(x: str) -> str:
        return coarsen(x, granularity)

    found_nodes = {level(n) for n in found_nodes} - {INPUT, LOGITS}
    found_edges = {(level(p), level(c), i if granularity != "head" else None)
                   for p, c, i in found_edges}
    t_edges = _truth_edges(data["granularities"][granularity])
    true_e = {(p, c, i) for p, c, i, k in t_edges if k in kinds}
    ign_e = {(p, c, i) for p, c, i, k in t_edges if k in ignore}
    true_n = {u for p, c, _ in true_e for u in (p, c)} - {INPUT, LOGITS}
    ign_n = {u for p, c, _ in ign_e for u in (p, c)} - {INPUT, LOGITS}
    return {"granularity": granularity, "kinds": sorted(kinds),
            "nodes": _prf(found_nodes, true_n, ign_n),
            "edges": _prf(found_edges, true_e, ign_e) if has_edges else None}
