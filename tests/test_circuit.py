"""circuit.json: the map from fx nodes to heads, lanes and residual columns is the truth.

Ablating the heads and lanes the map lists for one node (in the saved Phi-3 weights, through
transformers) must change that node's columns and leave every node that does not depend on it
bit for bit as it was."""

from __future__ import annotations

import json

import pytest
import torch

import torchwright_fx as tw
from tests.conftest import load_hf

VOCAB = tw.Vocab("0123456789+=\n")


def chain(x):
    nl = tw.is_token(x, "\n")
    d = tw.lookup(x, {str(k): k for k in range(10)})
    a = tw.shift(d, 3)  # first operand
    b = tw.shift(d, 1)  # second operand
    total = tw.latch(a + b, nl)
    tens = total // 10
    ones = total % 10
    first = torch.where(tens > 0, tens, ones)
    return tw.emit(nl, [tw.token("0") + first, tw.lookup(total, {t: str(t % 10) for t in
                                                                  range(10, 19)},
                                                         default="<eos>")])


PROMPTS = ["3+4\n", "9+9\n", "5+5\n", "0+0\n", "7+2\n", "1+9\n"]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    program = tw.compile(chain, vocab=VOCAB)
    directory = program.save_pretrained(tmp_path_factory.mktemp("circuit") / "hf")
    return program, directory


def _columns(model, tok, circ, prompt):
    """Each live signal's column, read after the layer that writes it: {(node, signal): [T]}."""
    enc = tok(prompt, return_tensors="pt")
    with torch.no_grad():
        states = model(**enc, output_hidden_states=True).hidden_states
    out = {}
    for node in circ.nodes.values():
        for s in node["signals"]:
            layer = s["written"]["layer"]
            out[node["name"], s["signal"]] = states[layer + 1][0, :, s["column"]].clone()
    return out


def _ablate(model, node):
    layers = model.model.layers
    for h in node["heads"]:
        lo, hi = h["o_proj_columns"]
        layers[h["layer"]].self_attn.o_proj.weight.data[:, lo:hi] = 0.0
    for m in node["mlp"]:
        layers[m["layer"]].mlp.down_proj.weight.data[:, m["lanes"]] = 0.0


def _components(node):
    return ({(h["layer"], "head", h["head"]) for h in node["heads"]}
            | {(m["layer"], "lane", i) for m in node["mlp"] for i in m["lanes"]})


def test_the_map_names_every_node_and_its_source(saved):
    program, directory = saved
    circ = tw.load_circuit(directory)
    names = [n.name for n in program.traced.graph.nodes]
    assert names == list(circ.nodes)[: len(names)]
    latch = circ.nodes["latch"]
    assert latch["op"] == "tw.latch" and "tw.latch(a + b, nl)" in latch["source"]
    assert latch["heads"] and latch["signals"]
    assert set(latch["reads"]) >= {"shift", "shift_1"}
    head = latch["heads"][0]
    assert head["hooks"] == [f"blocks.{head['layer']}.attn.hook_pattern",
                             f"blocks.{head['layer']}.attn.hook_z"]
    # the map's rows address real tensors of the checkpoint
    config = json.loads((directory / "config.json").read_text())
    assert (circ.n_heads, circ.d_head, circ.d_model) == (
        config["num_attention_heads"], config["head_dim"], config["hidden_size"])


@pytest.mark.parametrize("target", ["latch", "floordiv", "shift"])
def test_ablating_a_node_changes_exactly_its_dependents(saved, target):
    _, directory = saved
    circ = tw.load_circuit(directory)
    node = circ.nodes[target]
    assert node["heads"] or node["mlp"], f"{target} has no components"
    affected = {target} | circ.dependents(target)
    mine = _components(node)
    affected |= {n["name"] for n in circ.nodes.values() if _components(n) & mine}
    affected |= {d for n in list(affected) for d in circ.dependents(n)}

    model, tok = load_hf(directory)
    before = {p: _columns(model, tok, circ, p) for p in PROMPTS}
    _ablate(model, node)
    after = {p: _columns(model, tok, circ, p) for p in PROMPTS}

    changed_target = False
    for p in PROMPTS:
        for (name, sid), value in before[p].items():
            same = torch.equal(value, after[p][name, sid])
            if name == target:
                changed_target |= not same
            elif name not in affected:
                assert same, f"ablating {target} changed {name} (signal {sid}) on {p!r}"
    assert changed_target, f"ablating {target}'s listed components changed nothing"


def test_load_circuit_refuses_other_files(tmp_path):
    (tmp_path / "circuit.json").write_text(json.dumps({"format": "something/else"}))
    with pytest.raises(ValueError, match="not a torchwright_fx circuit map"):
        tw.load_circuit(tmp_path)
