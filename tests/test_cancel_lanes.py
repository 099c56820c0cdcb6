"""Cancel lanes (``schedule/cancels.py``): a recycled column zeroed by MLP lanes instead of a
cancel head, where a layer has spare lanes. The column must read exactly 0 after the lanes,
at every position, in transformers' own forward pass, and the program must stay exact."""

from __future__ import annotations

import random

import pytest
import torch

from examples.rasp import sort


def _layer_outputs(model, ids: list[int]) -> list[torch.Tensor]:
    """The residual stream after each decoder layer (its MLP), one [T, d] tensor a layer."""
    out: list[torch.Tensor] = []
    hooks = [layer.register_forward_hook(
        lambda _m, _i, o: out.append((o[0] if isinstance(o, tuple) else o)[0].detach()))
        for layer in model.model.layers]
    try:
        with torch.no_grad():
            model(torch.tensor([ids]))
    finally:
        for h in hooks:
            h.remove()
    return out


@pytest.mark.parametrize("machine", ["swiglu", "relu"])
def test_a_column_zeroed_by_lanes_is_exactly_zero_and_the_program_exact(machine, tmp_path):
    from transformers import AutoModelForCausalLM

    # a K/V block a head (share_kv=False): with shared blocks, every cancel of this program
    # fits the blocks' spare value rows, and none is left for the lanes
    compiled = sort.make(max_len=6, machine=machine, share_kv=False).compile()
    plan, placement = compiled.build.plan, compiled.build.placement
    by_lanes = {s: st for s, st in plan.cancels.items() if st % 2 == 1}
    assert by_lanes, "sort at length 6 recycles columns in a layer with spare lanes"
    per_cancel = 1 if machine == "swiglu" else 2
    for i, layer in enumerate(placement.layers):  # the lanes are placed where the plan says
        zeroed = [s for f in layer.ffns if f.name == "cancel" for s in f.outputs]
        assert sorted(zeroed) == sorted(s for s, st in by_lanes.items() if st // 2 == i)
        assert sum(len(f.lanes) for f in layer.ffns if f.name == "cancel") \
            == per_cancel * len(zeroed)

    directory = compiled.save_pretrained(tmp_path / "sort")
    model = AutoModelForCausalLM.from_pretrained(directory, torch_dtype=torch.float32)
    rng = random.Random(6)
    prompts = [sort.sample(rng, 6) for _ in range(12)] + ["4321\n", "1\n", "444111\n"]
    for prompt in prompts:
        answer = compiled.generate(prompt)
        ids = compiled.vocab.encode(prompt + answer)
        residual = _layer_outputs(model, ids)
        for s, stage in by_lanes.items():
            column = residual[stage // 2][:, plan.columns[s]]
            assert torch.equal(column, torch.zeros_like(column)), (prompt, s, stage)
    report = compiled.verify(prompts, backend="hf")
    assert report.ok, report


def test_a_program_lane_shared_with_a_cancel_keeps_its_program_edge():
    """On the ReLU machine a cancel lane, relu(v), is a program's hinge at 0 too: placed once,
    its read stays a program edge in the ground truth (and is a cancel's as well)."""
    from examples.rasp import shift_by
    from torchwright_fx.backends import circuit_exports
    from torchwright_fx.schedule.cancels import is_cancel

    compiled = shift_by.make(max_len=5, machine="relu").compile()
    prog, plan, placement = compiled.build.program, compiled.build.plan, compiled.build.placement
    flows = circuit_exports.truth(prog, plan, placement).flows
    program_reads = {(f.signal, unit) for f in flows if f.kind in ("program", "end")
                     for unit, _ in f.readers}
    shared = 0
    for i, layer in enumerate(placement.layers):
        cancel_lanes = {j for f in layer.ffns if is_cancel(f) for j in layer.lanes_of(f)}
        for f in layer.ffns:
            if is_cancel(f):
                continue
            for lane, j in zip(f.lanes, layer.lanes_of(f), strict=True):
                shared += j in cancel_lanes
                for s in lane.gate.signals() | lane.up.signals():
                    if s in plan.columns:
                        assert (s, f"m{i}.n{j}") in program_reads, (f.name, s, i, j)
    assert shared, "the build shares a cancel lane with a program lane"
