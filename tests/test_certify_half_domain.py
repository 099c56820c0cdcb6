"""The half certificate's joint domains (``emit/half_domain.py``): the product of what a lane
reads is built with claims and facts pruning it as it grows, so that many 0/1 indicators of
which a claim keeps at most one set cost their few allowed combinations, and a domain too
large is refused at once rather than built. The program that hung (fuzz seed 51, program 452:
a select_latest on OR'ed selectors over pairs of token codes, whose key features sum ~200
indicator columns and are multiplied by the position's digits) compiles in seconds and is
right in fp32, fp16 and bf16."""

from __future__ import annotations

import random
import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

import torchwright_fx as tw
from torchwright_fx.base.numerics import HALF_CERTIFY_POINTS
from torchwright_fx.emit.certify_half import _lane_points
from torchwright_fx.emit.half_domain import Known, domain
from torchwright_fx.ir.graph import Lane
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import Interval

VOCAB = tw.Vocab("ab01\n")


def ored_selectors(x: torch.Tensor) -> torch.Tensor:
    """fuzz --precision half --seed 51 --first 452 (max_seq_len 128), as plain source."""
    v0 = tw.code(x)
    v5 = tw.shift(v0, 1)
    v8 = tw.is_token(x, "b")
    v9 = tw.code(x)
    v11 = tw.code(x)
    v12 = tw.select_latest((tw.select(v5, v8, lambda k, q: (k + q) % 3 == 0) |
                            (tw.select(v11, v9, "<") &
                             tw.select(v11, v8, lambda k, q: abs(k - q) <= 1))), v5, default=3)
    v13 = tw.is_token(x, "\n")
    v14 = tw.is_token(x, ["1", "a"])
    return tw.emit(v13, [torch.clamp(v12, min=1),
                         torch.where(v14.bool(), tw.token("a"), tw.token("b"))])


def test_ored_selectors_compile_in_seconds_and_are_right_in_every_dtype(tmp_path):
    start = time.perf_counter()
    compiled = tw.compile(ored_selectors, vocab=VOCAB, max_seq_len=128,
                          precision="half").compile()
    assert time.perf_counter() - start < 30  # unfinished after 25 minutes before
    assert compiled.stats()["certified"] == ["fp32", "fp16", "bf16"]
    compiled.save_pretrained(tmp_path)
    rng = random.Random(452)
    streams = [[VOCAB.bos_id] + [VOCAB[rng.choice(chars)] for _ in range(127)]
               for chars in ("ab01\n", "b\n0", "a1")]
    wants = [compiled.traced.run(s).round().long().tolist() for s in streams]
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        model = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=dtype,
                                                     attn_implementation="eager")
        for s, want in zip(streams, wants, strict=True):
            with torch.no_grad():
                got = model(torch.tensor([s])).logits[0].argmax(-1).tolist()
            assert got[1:] == want[1:], dtype


WHERE = SimpleNamespace(source="here.py:1: op", name="op")


def _brute(known: Known, reads: list[int]) -> set[tuple[float, ...]]:
    """The joint values by the whole product, filtered at the end (what the prune keeps)."""
    grids = np.meshgrid(*[known.sets[s] for s in reads], indexing="ij")
    cols = {s: g.ravel() for s, g in zip(reads, grids, strict=True)}
    keep = np.ones(grids[0].size, dtype=bool)
    for form, rng in known.bounds():
        value = sum((c * cols[s] for s, c in form.terms.items()), np.full(keep.size, form.const))
        keep &= (value >= rng.lo) & (value <= rng.hi)
    return set(zip(*[cols[s][keep] for s in reads], strict=True))


def test_one_hot_indicators_under_a_claim_cost_their_allowed_combinations():
    # 24 0/1 columns claimed to sum to at most 1, times a 0..15 digit: 2**28 points in the
    # product, 25 * 16 in the domain
    known = Known(sets={s: np.array([0.0, 1.0]) for s in range(24)},
                  claims=[(Lin({s: 1.0 for s in range(24)}), Interval(0, 1, True))])
    known.sets[24] = np.arange(16.0)
    start = time.perf_counter()
    cols, by_token = domain(known, list(range(25)), 0, WHERE)
    assert time.perf_counter() - start < 5 and not by_token
    assert len(cols[24]) == 25 * 16
    assert (sum(cols[s] for s in range(24)) <= 1).all()


def test_the_pruned_domain_is_the_filtered_product_in_its_order():
    rng = np.random.default_rng(0)
    for _ in range(20):
        reads = list(range(6))
        known = Known(sets={s: np.unique(rng.integers(-3, 4, size=3)).astype(float)
                            for s in reads})
        known.claims = [(Lin({s: float(rng.integers(-2, 3)) or 1.0 for s in reads[:4]}, 1.0),
                         Interval(-2, 3, True)),
                        (Lin({3: 1.0, 4: -1.0, 5: 2.0}), Interval(-1, 4, True))]
        cols, _ = domain(known, reads, 0, WHERE)
        got = list(zip(*[cols[s] for s in reads], strict=True))
        want = _brute(known, reads) or {tuple(known.sets[s][0] for s in reads)}
        assert set(got) == want and got == sorted(got)  # (none: the product's first point)


def test_a_domain_too_large_after_its_claims_is_refused_before_it_is_built():
    known = Known(sets={s: np.array([0.0, 1.0]) for s in range(40)})
    start = time.perf_counter()
    with pytest.raises(tw.CompileError) as e:
        domain(known, list(range(40)), 0, WHERE)
    assert time.perf_counter() - start < 5
    assert f"{HALF_CERTIFY_POINTS:,}" in str(e.value) and "precision='fp32'" in str(e.value)


def test_a_lane_on_a_large_joint_domain_is_replayed_on_its_pairs_or_else_jointly():
    """gate 17 + 47 x and up 255 x (x 0/1; the up also reads 17 0/1 columns claimed to sum to
    0): 2**18 points in the product, so the pairs of the gate's and the up's values come
    first; there 17 * 255 is not a bf16 number, so the lane is replayed on its joint values,
    where it is exact (17 * 0, 64 * 255)."""
    zs = list(range(1, 18))
    known = Known(sets={s: np.array([0.0, 1.0]) for s in [0, *zs]},
                  claims=[(Lin({s: 1.0 for s in zs}), Interval(0, 0, True))])
    lane = Lane(Lin({0: 47.0}, 17.0), Lin({0: 255.0} | {s: 1.0 for s in zs}))
    prog = SimpleNamespace(machine=SimpleNamespace(act="silu"),
                           vocab=SimpleNamespace(tokens=["a"]))
    gate, up = _lane_points(prog, known, lane, WHERE)
    assert sorted(zip(gate[:, 0], up[:, 0], strict=True)) == [(17.0, 0.0), (64.0, 255.0)]
    # a lane exact on every pair is replayed on the pairs (each by its claim)
    lane = Lane(Lin({0: 47.0}, 17.0), Lin({0: 2.0} | {s: 1.0 for s in zs}))
    gate, up = _lane_points(prog, known, lane, WHERE)
    assert sorted(zip(gate[:, 0], up[:, 0], strict=True)) == [(17.0, 0.0), (17.0, 2.0),
                                                               (64.0, 0.0), (64.0, 2.0)]


def test_a_bank_beyond_the_work_budget_is_refused_naming_the_line(monkeypatch):
    """Lanes each within HALF_CERTIFY_POINTS but many of them: refused once their terms'
    values in all pass HALF_CERTIFY_WORK (here lowered, so that a small program meets it)."""
    from torchwright_fx.emit import certify_half

    monkeypatch.setattr(certify_half, "HALF_CERTIFY_WORK", 5000)
    with pytest.raises(tw.CompileError) as e:
        tw.compile(ored_selectors, vocab=VOCAB, max_seq_len=128, precision="half").compile()
    text = str(e.value)
    assert "test_certify_half_domain.py" in text and "5,000" in text, text
    assert "precision='fp32'" in text, text
