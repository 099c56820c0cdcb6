"""Heads sharing K/V blocks (schedule/kv_groups.py; Phi-3's num_key_value_heads): the merge rule on
hand-made heads, then whole programs built with and without sharing: the same tokens, the
same residual after every sublayer and the same logits up to fp32's reordering of a dot
product, fewer parameters; and transformers reads the shared layout (llama.cpp's arithmetic:
tests/test_gguf.py, whose adder_1digit shares one block)."""

from __future__ import annotations

import dataclasses
import importlib

import pytest
import torch

from torchwright_fx.api import Compiled
from torchwright_fx.backends import runtime
from torchwright_fx.emit.emitter import emit
from torchwright_fx.emit.placement import place
from torchwright_fx.ir.graph import Head
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ops.attention import Geometry
from torchwright_fx.schedule.kv_groups import choose, merge

D_HEAD, ROTARY = 8, 4  # planes (0, 2) and (1, 3); NoPE dims 4..7
ZERO = Lin()


def _head(q: dict[int, Lin], k: dict[int, Lin], v: list[Lin], hid: int = 0) -> Head:
    return Head(hid, [q.get(r, ZERO) for r in range(D_HEAD)],
                [k.get(r, ZERO) for r in range(D_HEAD)], v, [100 + hid * 10 + i
                                                              for i in range(len(v))],
                f"h{hid}", "test")


def test_equal_keys_share_a_row_and_each_query_moves_with_its_key():
    a = _head({4: Lin.of(1)}, {4: Lin.of(7)}, [Lin.of(8)], 0)
    b = _head({5: Lin.of(2)}, {5: Lin.of(7)}, [Lin.of(9)], 1)  # the same key, another dim
    g = merge([a, b], D_HEAD, ROTARY)
    assert g is not None
    assert [k for k in g.k if k is not None] == [Lin.of(7)]  # one row
    assert g.q[0][4] == Lin.of(1) and g.q[1][4] == Lin.of(2)
    assert g.v[:2] == (Lin.of(8), Lin.of(9)) and g.o == (((0, 100),), ((1, 110),))


def test_a_query_is_kept_off_the_keys_it_does_not_meet():
    # a's Q on dim 5 meets no key of its own: moving b's key there would add to a's scores
    a = _head({4: Lin.of(1), 5: Lin.of(3)}, {4: Lin.of(7)}, [Lin.of(8)], 0)
    b = _head({5: Lin.of(2)}, {5: Lin.of(6)}, [Lin.of(8)], 1)
    g = merge([a, b], D_HEAD, ROTARY)
    assert g is not None
    rows_a = {r for r, q in enumerate(g.q[0]) if q is not None}
    assert rows_a == {4} and g.k[4] == Lin.of(7) and g.k[5] == Lin.of(6)
    assert g.v.count(Lin.of(8)) == 1 and g.o[0][0][0] == g.o[1][0][0]  # one shared V row


def test_rotary_planes_stay_in_place_and_must_agree():
    plane = {0: Lin.of(1), 2: Lin.of(2)}
    a = _head(plane, {0: Lin.constant(1.0)}, [Lin.of(8)], 0)
    same = _head(plane, {0: Lin.constant(1.0)}, [Lin.of(9)], 1)
    other = _head(plane, {0: Lin.constant(2.0)}, [Lin.of(9)], 1)
    assert merge([a, same], D_HEAD, ROTARY) is not None
    assert merge([a, other], D_HEAD, ROTARY) is None  # plane 0 holds two different keys
    elsewhere = _head({1: Lin.of(1)}, {3: Lin.constant(2.0)}, [Lin.of(9)], 1)
    assert merge([a, elsewhere], D_HEAD, ROTARY) is not None  # plane 1 is free


def test_a_group_holds_at_most_d_head_keys_and_values():
    wide = _head({r: Lin.of(r) for r in range(4, 8)}, {r: Lin.of(10 + r) for r in range(4, 8)},
                 [Lin.of(20 + i) for i in range(D_HEAD)], 0)
    one_more_key = _head({4: Lin.of(1)}, {4: Lin.of(99)}, [], 1)
    one_more_value = _head({}, {}, [Lin.of(98)], 1)
    assert merge([wide, one_more_key], D_HEAD, ROTARY) is None
    assert merge([wide, one_more_value], D_HEAD, ROTARY) is None
    # choose takes the fewest heads + groups that fit, or a block a head
    heads, n, groups = choose([[wide, one_more_key]], 2, D_HEAD, ROTARY)
    assert (heads, n, groups) == (2, 2, None)
    idle = _head({}, {}, [], 1)
    heads, n, groups = choose([[wide, idle, one_more_key, one_more_value]], 4, D_HEAD, ROTARY)
    assert (heads, n) == (4, 2) and groups is not None and len(groups[0]) == 2


def test_a_layer_is_padded_where_more_slots_divide_better():
    # five heads of two keys each: two fit a block (four NoPE rows), three do not. Five slots
    # divide into 1 or 5 groups (cost 5 + 5); six slots into 3 groups of two (6 + 3)
    heads5 = [_head({4: Lin.of(i), 5: Lin.of(i)}, {4: Lin.of(10 + 2 * i), 5: Lin.of(11 + 2 * i)},
                    [Lin.of(50 + i)], i) for i in range(5)]
    heads, n, groups = choose([heads5], 5, D_HEAD, ROTARY)
    assert (heads, n) == (6, 3) and groups is not None and len(groups[0]) == 3


# examples whose heads share: fibonacci (10 heads, one block), adder_v2 (12 heads, two blocks:
# groups of six), caesar_cipher (6 heads, one block)
SHARING = ["fibonacci", "adder_v2", "caesar_cipher"]


@pytest.fixture(scope="module", params=SHARING)
def pair(request):
    """The example's build, and its plan emitted with a K/V block a head (the same columns,
    so the residuals compare position by position)."""
    module = importlib.import_module(f"examples.{request.param}")
    shared = module.program.compile()
    b, m = shared.build, shared.weights
    plain = emit(b.program, b.plan, Geometry(m.d_head, m.max_seq_len),
                 place(b.program, b.plan, Geometry(m.d_head, m.max_seq_len), share_kv=False))
    return module, shared, plain


def test_sharing_keeps_every_token_residual_and_logit(pair):
    module, shared, mp = pair
    ms = shared.weights
    assert ms.kv_heads < ms.n_heads == mp.n_heads == mp.kv_heads
    assert ms.n_heads % ms.kv_heads == 0
    assert ms.parameters() < mp.parameters()
    assert ms.nonzero_weights() <= mp.nonzero_weights()
    for text in module.DEMOS:
        ids = shared.vocab.encode(text)
        seq = ids + shared.generate_ids(ids)
        (a, pa), (b, pb) = runtime.forward(ms, seq, capture=True), \
            runtime.forward(mp, seq, capture=True)
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-4)
        assert torch.equal(a.argmax(-1), b.argmax(-1))
        for x, y in zip(pa, pb, strict=True):  # every sublayer writes the same residual
            assert torch.allclose(x, y, rtol=1e-5, atol=1e-3)
        assert shared.generate(text) == shared.reference(text)


def test_share_kv_false_builds_a_block_a_head(pair):
    module, shared, _ = pair
    plain = Compiled(shared.fn, shared.vocab,
                     dataclasses.replace(shared.options, share_kv=False)).compile()
    assert plain.weights.kv_heads == plain.weights.n_heads
    for text in module.DEMOS:
        assert plain.generate(text) == shared.reference(text)


def test_transformers_reads_the_shared_layout(pair, tmp_path):
    transformers = pytest.importorskip("transformers")
    module, shared, _ = pair
    shared.save_pretrained(tmp_path / "m")
    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "m",
                                                               dtype=torch.float32)
    assert model.config.num_key_value_heads == shared.weights.kv_heads
    for text in module.DEMOS[:2]:
        ids = shared.vocab.encode(text)
        with torch.no_grad():
            got = model(torch.tensor([ids])).logits[0]
        assert torch.allclose(got, runtime.forward(shared.weights, ids)[0], rtol=1e-5,
                              atol=1e-4)
