"""edges.json, components.json and tw.score_circuit (docs/circuits.md).

The exports are checked against the saved weights themselves: the edges at Q/K/V granularity
are exactly the pairs (writer, later reader) that share a residual column in the Phi-3
tensors (the constant and pin columns aside), and every hook a component names addresses a
real head or lane of the checkpoint. The attribution check (activation patching through
torch hooks, ``scripts/attribution_check.py``) recovers the circuit of one small program."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

import torchwright_fx as tw
from torchwright_fx.backends.circuit_exports import ROLES

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

UNIT = re.compile(r"^(input|logits|a\d+\.h\d+|m\d+|m\d+\.n\d+)$")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    from examples.rasp import sort  # cancel heads, column reuse, shared lanes

    program = sort.make(max_len=4)
    directory = program.save_pretrained(tmp_path_factory.mktemp("exports") / "sort")
    edges = json.loads((directory / "edges.json").read_text())
    comps = json.loads((directory / "components.json").read_text())
    return program, directory, edges, comps


def test_edges_schema(saved):
    program, _, edges, _ = saved
    assert edges["format"] == "torchwright_fx.edges/1" and edges["program"] == "sort"
    assert set(edges["kinds"]) == {"program", "cancel", "reuse", "end"}
    model = edges["model"]
    assert set(model) >= {"n_layers", "n_heads", "d_head", "d_model", "d_ff"}
    assert list(edges["granularities"]) == ["head", "qkv", "neuron"]
    for g in ("head", "qkv"):
        level = edges["granularities"][g]
        assert level["granularity"] == g
        assert {"input", "logits"} <= set(level["nodes"])
        for e in level["edges"]:
            assert set(e) == {"name", "parent", "child", "input", "kind", "fx", "signals"}
            assert UNIT.match(e["parent"]) and UNIT.match(e["child"])
            assert e["kind"] in edges["kinds"] and e["fx"] and e["signals"]
            assert e["parent"] in level["nodes"] and e["child"] in level["nodes"]
            if g == "head" or not e["child"].startswith("a"):
                assert e["input"] is None and e["name"] == f"{e['parent']}->{e['child']}"
            else:
                assert e["input"] in "qkv"
                assert e["name"] == f"{e['parent']}->{e['child']}<{e['input']}>"
        assert len({e["name"] for e in level["edges"]}) == len(level["edges"])
    neuron = edges["granularities"]["neuron"]
    assert neuron["granularity"] == "neuron" and neuron["flows"]
    for f in neuron["flows"]:
        assert set(f) == {"kind", "signal", "column", "fx", "from", "to"}
        assert all(UNIT.match(u) for u in f["from"])
        assert all(UNIT.match(re.sub(r"<[qkv]>$", "", u)) for u in f["to"])
    # the coarser levels are the finer ones with lanes merged and <q/k/v> dropped
    coarse = {(re.sub(r"\.n\d+$", "", w), re.sub(r"\.n\d+", "", r)) for f in neuron["flows"]
              for w in f["from"] for r in f["to"]}
    assert coarse == {(e["parent"], e["child"] + (f"<{e['input']}>" if e["input"] else ""))
                      for e in edges["granularities"]["qkv"]["edges"]}
    # the program's edges reach the logits; sort reuses columns, so there are reuse edges
    kinds = {e["kind"] for e in edges["granularities"]["qkv"]["edges"]}
    assert kinds == {"program", "cancel", "reuse", "end"}
    assert program.edges() == edges


def test_edges_are_the_weights_connectivity(saved):
    """Every (writer, later reader) pair sharing a residual column in the checkpoint is an
    edge at Q/K/V granularity, and every edge is such a pair."""
    _, directory, edges, _ = saved
    config = json.loads((directory / "config.json").read_text())
    circ = json.loads((directory / "circuit.json").read_text())
    w = load_file(str(directory / "model.safetensors"))
    n_layers, n_heads, d_head = (config["num_hidden_layers"], config["num_attention_heads"],
                                 config["head_dim"])
    d_ff, width = config["intermediate_size"], n_heads * d_head
    kv_heads = config["num_key_value_heads"]
    kv_width = kv_heads * d_head
    rotary = round(config["partial_rotary_factor"] * d_head)
    skip = {circ["constant_column"], *circ["pin_columns"]}

    def cols(m: torch.Tensor) -> set[int]:  # residual columns a [rows, d] block touches
        return {c for c in torch.nonzero(m.abs().sum(0)).flatten().tolist() if c not in skip}

    writers = [("input", -1, cols(w["model.embed_tokens.weight"]))]
    readers = [("logits", 2 * n_layers, cols(w["lm_head.weight"]))]
    for L in range(n_layers):
        p = f"model.layers.{L}."
        qkv, o = w[p + "self_attn.qkv_proj.weight"], w[p + "self_attn.o_proj.weight"]
        gu, down = w[p + "mlp.gate_up_proj.weight"], w[p + "mlp.down_proj.weight"]
        for h in range(n_heads):
            rows = slice(h * d_head, (h + 1) * d_head)
            writers.append((f"a{L}.h{h}", 2 * L, cols(o[:, rows].T)))
            # head h's K and V rows are those of its group's block (shared where kv_heads <
            # n_heads: schedule/kv_groups.py) that it uses: the K rows its Q meets (a rotary plane
            # as a whole), the V rows its O reads
            g = h // (n_heads // kv_heads)
            block = slice(g * d_head, (g + 1) * d_head)
            q = qkv[rows]
            used = q.ne(0).any(-1)
            used[:rotary] |= used[:rotary].roll(rotary // 2) if rotary else used[:rotary]
            keys = qkv[width:width + kv_width][block][used]
            values = qkv[width + kv_width:][block][o[:, rows].ne(0).any(0)]
            for x, read in zip("qkv", (q, keys, values), strict=True):
                readers.append((f"a{L}.h{h}<{x}>", 2 * L, cols(read)))
        for i in range(d_ff):
            writers.append((f"m{L}", 2 * L + 1, cols(down[:, i:i + 1].T)))
            gate_up = cols(gu[i:i + 1]) | cols(gu[d_ff + i:d_ff + i + 1])
            readers.append((f"m{L}", 2 * L + 1, gate_up))
    in_weights = {(a, b) for a, sa, ca in writers for b, sb, cb in readers if sa < sb and ca & cb}
    exported = {(e["parent"], e["child"] + (f"<{e['input']}>" if e["input"] else ""))
                for e in edges["granularities"]["qkv"]["edges"]}
    assert exported == in_weights


def test_components_schema_and_hooks_address_real_components(saved):
    _, directory, edges, comps = saved
    config = json.loads((directory / "config.json").read_text())
    circ = tw.load_circuit(directory)
    n_layers, n_heads, d_ff = (config["num_hidden_layers"], config["num_attention_heads"],
                               config["intermediate_size"])
    modules = dict(AutoModelForCausalLM.from_pretrained(directory).named_modules())
    assert comps["format"] == "torchwright_fx.components/1"
    assert comps["roles"] == ROLES and "def sort" in comps["program_source"]
    assert comps["model"] == edges["model"]
    ids = [c["id"] for c in comps["components"]]
    assert len(ids) == len(set(ids))
    for c in comps["components"]:
        assert c["role"] in ROLES and c["note"]
        assert 0 <= c["layer"] < n_layers
        if c["kind"] == "head":
            h = c["head"]
            assert 0 <= h < n_heads and c["id"] == f"a{c['layer']}.h{h}"
            assert c["hook"] == f"blocks.{c['layer']}.attn.hook_z" and c["index"] == h
            # its K/V block: hook_k and hook_v hold one entry a block
            rep = n_heads // config["num_key_value_heads"]
            assert c["kv_index"] == h // rep
            assert c["hook_legacy"] == f"blocks.{c['layer']}.attn.hook_result[{h}]"
            assert set(c["reads"]) == {"q", "k", "v"}
            listed = [(x["layer"], x["head"]) for x in circ.nodes.get(c["fx_node"] or "",
                                                                      {"heads": []})["heads"]]
        else:
            assert c["kind"] == "lanes" and c["lanes"] == sorted(set(c["lanes"]))
            assert all(0 <= i < d_ff for i in c["lanes"]) and c["index"] == c["lanes"]
            assert c["hook"] == f"blocks.{c['layer']}.mlp.hook_post"
            if c["role"] == "cancel":  # cancel lanes: circuit.json lists them apart
                lanes = [m["lanes"] for m in circ.cancel_lanes if m["layer"] == c["layer"]]
            else:
                lanes = [m["lanes"] for m in circ.nodes[c["fx_node"]]["mlp"]
                         if m["layer"] == c["layer"]]
            assert sorted({i for ls in lanes for i in ls}) == c["lanes"]
        for hook in [c["hook"], c["hook_bridge"], *c["hooks"].values()]:
            m = re.match(r"^blocks\.(\d+)\.(attn|mlp)\.", hook)
            assert m and int(m.group(1)) == c["layer"], hook
        # the same activation as a transformers module's input (nnsight, nnterp, torch hooks)
        module = modules[c["module"]]
        assert isinstance(module, torch.nn.Linear)
        if c["kind"] == "head":
            d_head = config["hidden_size"] // n_heads if "head_dim" not in config \
                else config["head_dim"]
            assert c["module"] == f"model.layers.{c['layer']}.self_attn.o_proj"
            assert c["module_columns"] == list(range(c["head"] * d_head, (c["head"] + 1) * d_head))
        else:
            assert c["module"] == f"model.layers.{c['layer']}.mlp.down_proj"
            assert c["module_columns"] == c["lanes"]
        assert max(c["module_columns"]) < module.in_features
        if c["role"] == "cancel":
            assert c["fx_node"] is None and c["cancels"]
        else:
            assert c["fx_node"] in circ.nodes and re.search(r":\d+: ", c["source"])
        if c["kind"] == "head" and c["role"] != "cancel":
            assert (c["layer"], c["head"]) in listed
    # every head of circuit.json is a component; the last one feeds the logits
    heads = {f"a{h['layer']}.h{h['head']}" for n in circ.nodes.values() for h in n["heads"]}
    assert heads <= set(ids)
    assert any(c["feeds_logits"] for c in comps["components"])
    assert any(c["shared_with"] for c in comps["components"] if c["kind"] == "lanes")


def test_score_circuit_perfect_empty_partial(saved):
    program, directory, edges, comps = saved
    truth = [e for e in edges["granularities"]["qkv"]["edges"] if e["kind"] == "program"]
    names = [e["name"] for e in truth]
    perfect = tw.score_circuit(names, directory)
    assert perfect["granularity"] == "qkv"
    for part in ("nodes", "edges"):
        assert perfect[part]["precision"] == perfect[part]["recall"] == perfect[part]["f1"] == 1
    head = tw.score_circuit(names, edges, granularity="head")  # coarsened
    assert head["edges"]["recall"] == 1 and head["edges"]["precision"] == 1

    empty = tw.score_circuit([], edges, granularity="head")
    assert empty["nodes"]["precision"] == empty["nodes"]["recall"] == 0.0
    assert empty["edges"] is None and empty["nodes"]["fn"] == len(empty["nodes"]["missed"]) > 0

    half = names[::2]
    partial = tw.score_circuit(half + ["a0.h0->logits"], edges)
    assert partial["edges"]["tp"] == len(half) and partial["edges"]["fp"] == 1
    assert partial["edges"]["false_positives"] == ["a0.h0->logits"]
    assert partial["edges"]["recall"] == pytest.approx(len(half) / len(names))
    assert partial["edges"]["precision"] == pytest.approx(len(half) / (len(half) + 1))

    # nodes only, as TransformerLens hooks, EAP-IG names and scores
    nodes = {n for e in truth for n in (e["parent"], e["child"])} - {"input", "logits"}
    heads = sorted(n for n in nodes if n.startswith("a"))
    layer, h = re.match(r"a(\d+)\.h(\d+)", heads[0]).groups()
    hooked = [f"blocks.{layer}.attn.hook_z[{h}]", *heads[1:],
              *(n for n in nodes if n.startswith("m"))]
    assert tw.score_circuit(hooked, edges)["nodes"]["f1"] == 1
    cancel = next(c["id"] for c in comps["components"]
                  if c["kind"] == "head" and c["role"] == "cancel")
    scores = {n: 0.9 for n in nodes} | {cancel: 0.001}  # a cancel head: ignored
    s = tw.score_circuit(scores, edges, threshold=0.5)
    assert s["nodes"]["f1"] == 1 and s["edges"] is None
    s = tw.score_circuit({cancel: 1.0, heads[0]: 1.0}, edges, threshold=0.5)
    assert s["nodes"]["precision"] == 1 and s["nodes"]["fp"] == 0  # bookkeeping is not penalised
    counted = tw.score_circuit({cancel: 1.0}, edges, threshold=0.5,
                               kinds=("program", "cancel", "reuse"), ignore=())
    assert counted["nodes"]["tp"] == 1
    # an EAP-IG / MIB graph JSON: in_graph flags, or scores with a threshold
    graph = {"nodes": {n: {"in_graph": True} for n in nodes | {"input", "logits"}},
             "edges": {e: {"score": 1.0, "in_graph": True} for e in names}
             | {"a0.h0->logits": {"score": 0.01, "in_graph": False}}}
    assert tw.score_circuit(graph, edges)["edges"]["f1"] == 1
    assert tw.score_circuit(graph, edges, threshold=0.001)["edges"]["fp"] == 1
    assert program.score_circuit(names)["edges"]["f1"] == 1

    with pytest.raises(ValueError, match="threshold"):
        tw.score_circuit({"a0.h0": 0.3}, edges)
    with pytest.raises(ValueError, match="not a node name"):
        tw.score_circuit(["layer 0 head 1"], edges)
    with pytest.raises(ValueError, match="names no <q>"):
        tw.score_circuit(["input->a0.h0"], edges, granularity="qkv")


def test_patching_recovers_the_circuit(tmp_path):
    import attribution_check as ac

    program = ac.build("shuffle_dyck", max_len=4)
    directory = program.save_pretrained(tmp_path / "hf")
    r = ac.check(program, directory, n_pairs=(12, 4))
    assert r.head["recall"] >= 0.9 and r.head["precision"] == 1.0, r
