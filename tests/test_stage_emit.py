"""emit/ (placement and the emitter) alone, on a hand-built Program and a hand-made Plan, then
the Machine run by backends/runtime.py against values computed by hand.

The program, over a per-token table ``c`` (0 for the specials, 1, 2, 3 for a, b, c):

- stage 1 (layer 0 MLP): ``f`` = one lane of c times a down weight (SwiGLU: silu(c) * (c + 1),
  ReLU: relu(c - 1));
- stage 2 (layer 1 attention): ``h`` = a head whose score is ``SCORE * c`` of the key (a NoPE
  dim, no position), copying f: the softmax(SCORE * c)-weighted mean of f over the prefix;
  and a cancel head zeroing f's column, which f's last reader has read;
- stage 3 (layer 1 MLP): ``g`` = one lane of h, written into f's recycled column.

The output reads g.
"""

from __future__ import annotations

import pytest
import torch
from conftest import lin_value

from torchwright_fx.backends import runtime
from torchwright_fx.emit.emitter import data_energy, emit
from torchwright_fx.emit.placement import CANCEL, place
from torchwright_fx.emit.rmsnorm import choose_pins
from torchwright_fx.ir.graph import FFN, Head, Lane, Program
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import Interval
from torchwright_fx.ops.attention import Geometry
from torchwright_fx.schedule.plan import Plan
from torchwright_fx.vocab import Vocab

VOCAB = Vocab("abc")
TABLE = (0.0, 0.0, 0.0, 1.0, 2.0, 3.0)
DOWN, DOWN_G, SCORE = 0.5, 2.0, 1.5
GEOM = Geometry(16, 16)
NOPE = GEOM.rotary  # the first position-free dim of a head
D = 16
# columns chosen by hand (not by schedule/columns.py): constant 0, one pin (d = 16 = 2**4);
# g reuses f's column after the cancel at stage 2
COLUMNS = {"c": 5, "f": 9, "h": 3, "g": 9}
MACHINES = ["swiglu", "relu"]


def build(machine: str) -> tuple[Program, Plan, dict[str, int]]:
    prog = Program(VOCAB, machine)
    c = prog.embed(TABLE, Interval(0.0, 3.0, integral=True), "c", "table")
    if machine == "swiglu":
        lane, lane_g = Lane(c, c + 1.0), lambda h: Lane(h, Lin.constant(1.0))
    else:
        lane, lane_g = Lane(c - 1.0, Lin.constant(1.0)), lambda h: Lane(h, Lin.constant(1.0))
    rng = Interval(0.0, DOWN * 3.0 * 4.0)
    f = prog.new_signal(0, rng, "f", "lane")
    prog.add(FFN(0, [lane], {f: {0: DOWN}}, "f", "lane"))
    h = prog.new_signal(1, rng, "h", "head")
    q = [Lin.constant(0.0)] * GEOM.d_head
    k = list(q)
    q[NOPE], k[NOPE] = Lin.constant(SCORE), c
    prog.add(Head(1, q, k, [Lin.of(f)], [h], "h", "head"))
    g = prog.new_signal(2, Interval(-1.0, DOWN_G * 7.0), "g", "lane g")
    prog.add(FFN(2, [lane_g(Lin.of(h))], {g: {0: DOWN_G}}, "g", "lane g"))
    prog.output = Lin.of(g)
    prog.output_range = prog.signals[g].range
    sids = {"c": next(iter(c.signals())), "f": f, "h": h, "g": g}
    prog.live = frozenset(sids.values())  # what passes.dce would set
    plan = Plan(stage={0: 1, 1: 2, 2: 3}, columns={sids[n]: col for n, col in COLUMNS.items()},
                cancels={f: 2}, d_model=D, const_col=0, pin_cols=[1])
    plan.check(prog)
    return prog, plan, sids


def act(machine: str, x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.silu(x) if machine == "swiglu" else torch.relu(x)


def expected(machine: str, ids: list[int]) -> dict[str, torch.Tensor]:
    """f, h, g by hand: f and g in fp32 as the runtime's op order gives them, h in float64."""
    c = torch.tensor([TABLE[i] for i in ids])
    f = (act(machine, c) * (c + 1.0) if machine == "swiglu" else act(machine, c - 1.0)) * DOWN
    h = torch.zeros(len(ids), dtype=torch.float64)
    for t in range(len(ids)):
        w = torch.softmax(SCORE * c[: t + 1].double(), 0)
        h[t] = (w * f[: t + 1].double()).sum()
    g = act(machine, h) * DOWN_G
    return {"c": c, "f": f, "h": h, "g": g}


@pytest.mark.parametrize("machine", MACHINES)
def test_placement(machine: str) -> None:
    prog, plan, sids = build(machine)
    placed = place(prog, plan, GEOM)
    assert len(placed.layers) == 2
    first, second = placed.layers
    assert first.heads == () and [f.id for f in first.ffns] == [0]
    assert first.lanes_of(prog.producers[0]) == [0]  # type: ignore[arg-type]
    # the program's head first, then the cancel head reading f at its own position
    assert [h.id for h in second.heads] == [1, -1] and second.n_cancel == 1
    cancel = second.heads[1]
    assert cancel.name == CANCEL and cancel.v == [Lin.of(sids["f"])]
    assert cancel.outputs == [sids["f"]]
    assert [f.id for f in second.ffns] == [2] and second.lanes_of(prog.producers[2]) == [0]
    assert (placed.n_heads, placed.d_ff) == (2, 1)


@pytest.mark.parametrize("machine", MACHINES)
def test_weights_sit_where_the_plan_says(machine: str) -> None:
    prog, plan, sids = build(machine)
    m = emit(prog, plan, GEOM, place(prog, plan, GEOM))
    col = {n: plan.columns[s] for n, s in sids.items()}
    pins = choose_pins(D, data_energy(prog))
    dh, width = GEOM.d_head, 2 * GEOM.d_head
    assert m.act == ("silu" if machine == "swiglu" else "relu")
    assert (m.d_model, m.n_layers, m.n_heads, m.d_ff, m.vocab_size) == (D, 2, 2, 1, len(VOCAB))

    # embedding: constant, pin, the table; nothing else
    assert torch.equal(m.embed[:, 0], torch.ones(len(VOCAB)))
    assert torch.equal(m.embed[:, 1], torch.full((len(VOCAB),), pins.values[0]))
    assert m.meta["pin_exponent"] == pins.gain_exponent
    assert torch.equal(m.embed[:, col["c"]], torch.tensor(TABLE))
    others = [j for j in range(D) if j not in (0, 1, col["c"])]
    assert not m.embed[:, others].any()

    # layer 0: no heads; gate row 0 and up row d_ff + 0 read c (and the constant); down -> f
    assert not m.layers[0].qkv.any() and not m.layers[0].o.any()
    gate, up = m.layers[0].gate_up
    want_gate, want_up = torch.zeros(D), torch.zeros(D)
    if machine == "swiglu":
        want_gate[col["c"]] = 1.0
        want_up[col["c"]], want_up[0] = 1.0, 1.0
    else:
        want_gate[col["c"]], want_gate[0] = 1.0, -1.0
        want_up[0] = 1.0
    assert torch.equal(gate, want_gate) and torch.equal(up, want_up)
    want_down = torch.zeros(D, 1)
    want_down[col["f"], 0] = DOWN
    assert torch.equal(m.layers[0].down, want_down)

    # layer 1 attention, head 0: Q is the constant SCORE (times sqrt(d_head): Phi-3 divides
    # the logits by it) on the NoPE dim, K reads c there, V reads f, O writes h
    qkv, o = m.layers[1].qkv, m.layers[1].o
    # the cancel head (below) shares head 0's K/V block (schedule/kv_groups.py): its key is on the
    # rotary planes, head 0's on a NoPE dim, and both move f
    assert m.kv_heads == 1
    assert qkv.shape == ((2 + 2) * dh, D) and o.shape == (D, width)
    want_q, want_k, want_v = torch.zeros(dh, D), torch.zeros(dh, D), torch.zeros(dh, D)
    want_q[NOPE, 0] = SCORE * dh ** 0.5
    want_k[NOPE, col["c"]] = 1.0
    want_v[0, col["f"]] = 1.0
    assert torch.equal(qkv[:dh], want_q)
    keys = qkv[width:width + dh]
    assert torch.equal(keys[GEOM.rotary:], want_k[GEOM.rotary:])
    assert torch.equal(qkv[width + dh:], want_v)  # one V row, f, that both heads read
    # head 1 (the cancel) reads f at its own position: its query is on the rotary planes only
    assert not qkv[dh + GEOM.rotary:2 * dh].any() and keys[:GEOM.rotary].any()
    want_o = torch.zeros(D, width)
    want_o[col["h"], 0] = 1.0
    want_o[col["f"], dh] = -1.0
    assert torch.equal(o, want_o)

    # layer 1 MLP: one lane of h, written into the recycled column
    gate, up = m.layers[1].gate_up
    want_gate, want_up = torch.zeros(D), torch.zeros(D)
    want_gate[col["h"]], want_up[0] = 1.0, 1.0
    assert torch.equal(gate, want_gate) and torch.equal(up, want_up)
    want_down = torch.zeros(D, 1)
    want_down[col["g"], 0] = DOWN_G
    assert torch.equal(m.layers[1].down, want_down)

    # every norm's gain is the pins' gain; the final one ignores the pin column
    for layer in m.layers:
        assert torch.equal(layer.norm_attn, torch.full((D,), pins.gain))
        assert torch.equal(layer.norm_mlp, torch.full((D,), pins.gain))
    assert m.final_norm[1] == 0.0
    assert torch.equal(m.final_norm[2:], torch.full((D - 2,), pins.gain))


@pytest.mark.parametrize("machine", MACHINES)
@pytest.mark.parametrize("text", ["a", "cab", "bbcca", "c<>a", "abcabcabcabcabc"])
def test_runtime_computes_the_program(machine: str, text: str) -> None:
    prog, plan, sids = build(machine)
    m = emit(prog, plan, GEOM)
    ids = VOCAB.encode(text)
    want = expected(machine, ids)
    _, states = runtime.forward(m, ids, capture=True)
    # states[s + 1] is the residual after stage s: [embed, attn 0, mlp 0, attn 1, mlp 1]
    assert len(states) == 5
    col = {n: plan.columns[s] for n, s in sids.items()}
    assert torch.equal(states[0][:, col["c"]], want["c"])
    assert not states[1][:, col["f"]].any()  # not written before its stage
    assert torch.allclose(states[2][:, col["f"]], want["f"], rtol=1e-6, atol=0.0)
    assert not states[2][:, col["h"]].any()
    h = states[3][:, col["h"]].double()
    assert torch.allclose(h, want["h"], rtol=1e-5, atol=1e-6), (h, want["h"])
    # the cancel head leaves exact zeros in f's column, which g then takes
    assert not states[3][:, col["f"]].any(), states[3][:, col["f"]]
    g = states[4][:, col["g"]]
    assert torch.allclose(g.double(), act(machine, h) * DOWN_G, rtol=1e-6, atol=1e-7)
    assert torch.allclose(g.double(), want["g"], rtol=1e-4, atol=1e-6)
    # the output form read off the final residual is g
    assert torch.equal(lin_value(prog.output, plan, states[-1]), g.double())
    # the columns nobody writes stay zero at every stage
    unused = [j for j in range(D) if j not in (0, 1, *col.values())]
    assert all(not s[:, unused].any() for s in states)
