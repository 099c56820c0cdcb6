"""``torchwright-fx suite`` (examples/suite.py, issue 34): tracr's library then fuzzer programs,
each saved with its ground truth and clean/corrupted prompt pairs whose answers the saved
model computes."""

from __future__ import annotations

import json

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from examples import suite
from torchwright_fx.cli import main


def test_suite_writes_programs_with_ground_truth_and_pairs(tmp_path):
    n = len(suite.rasp_names()) + 2
    assert main(["suite", str(tmp_path), "--n", str(n), "--seed", "3", "--pairs", "4"]) == 0
    index = json.loads((tmp_path / "suite.json").read_text())
    names = [p["name"] for p in index["programs"]]
    assert len(names) == n and names[:-2] == suite.rasp_names()
    assert all(name.startswith("fuzz_") for name in names[-2:])
    for entry in index["programs"]:
        directory = tmp_path / entry["directory"]
        for f in ("config.json", "model.safetensors", "edges.json", "components.json",
                  "circuit.json", "pairs.json", "patching.json"):
            assert (directory / f).is_file(), (entry, f)
        chosen = json.loads((directory / "pairs.json").read_text())["pairs"]
        assert chosen and len(chosen) == entry["pairs"]
        ids = json.loads((directory / "patching.json").read_text())["pairs"]
        assert len(ids) == len(chosen)
        for pair, run in zip(chosen, ids, strict=True):
            clean, corrupt, i = pair["clean"], pair["corrupt"], int(pair["position"])
            if pair["kind"] == "substitute":
                assert len(clean) == len(corrupt)
                assert [j for j, (a, b) in enumerate(zip(clean, corrupt, strict=True))
                        if a != b] == [i]
            else:
                assert pair["kind"] == "insert" and corrupt[:i] + corrupt[i + 1:] == clean
            # teacher-forced with the clean answer, both runs one length
            assert len(run["clean"]) == len(run["corrupt"]) and run["start"] == len(clean)
    # the answers are what the saved model prints (a tracr program and a fuzzer program)
    for name in (names[0], names[-1]):
        directory = tmp_path / name
        model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
        tok = AutoTokenizer.from_pretrained(directory)
        for pair in json.loads((directory / "pairs.json").read_text())["pairs"]:
            ids = tok(pair["clean"], return_tensors="pt")["input_ids"]
            out = model.generate(ids, do_sample=False)
            assert tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True) == \
                pair["answer"], (name, pair)


def test_suite_pairs_that_move_an_answer_come_first():
    """A pair whose corruption leaves every answer position's output alone shows nothing to a
    patching method: such pairs only fill up after every moving one."""
    for name, program, chosen, _ in suite.programs(len(suite.rasp_names()) + 1, 0, 4, 8):
        moves = [suite._moves(program, p) for p in chosen]
        assert moves == sorted(moves, reverse=True), name


def test_suite_is_deterministic(tmp_path):
    a = [(n, p["clean"], p["corrupt"]) for n, _, ps, _ in suite.programs(17, 5, 4, 3) for p in ps]
    b = [(n, p["clean"], p["corrupt"]) for n, _, ps, _ in suite.programs(17, 5, 4, 3) for p in ps]
    assert a == b
