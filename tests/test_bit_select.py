"""tw.select(keys, queries, "==") on bit vectors (families/bit_select.py): compiled equals the
eager reference and a plain-Python oracle at every position of random streams, through the
runtime and the Phi-3 checkpoint; a 12-bit address matched by its bits needs no digit
staircase; what is not a bit vector is refused with the way out."""

from __future__ import annotations

import random

import pytest
import torch
from conftest import lin_value, load_hf

import torchwright_fx as tw

HEX = "0123456789abcdef"
VOCAB = tw.Vocab(HEX + ";")
MAX_LEN = 200


def _bits(x: torch.Tensor, n: int = 4) -> torch.Tensor:
    return torch.cat([tw.lookup(x, {c: int(c, 16) >> b & 1 for c in HEX}) for b in range(n)], -1)


def _digit(x: torch.Tensor) -> torch.Tensor:
    return tw.lookup(x, {c: int(c, 16) for c in HEX})


def latest_after_same(x):  # the digit after the latest earlier key two back with these bits
    return tw.select_latest(tw.select(tw.shift(_bits(x), 2), _bits(x), "=="),
                            tw.shift(_digit(x), 1), default=0.0)


def width_same(x):  # how many tokens so far have this token's bits
    return tw.selector_width(tw.select(_bits(x), _bits(x), "=="))


def mean_shifted_bits(x):  # keys' bits 0..2 against the query's bits 1..3
    b = _bits(x)
    return tw.aggregate(tw.select(b[:, 0:3], b[:, 1:4], "=="), _digit(x))


def joined(x):  # bits joined by & to a plain selection, on the previous token's digit
    b, high = _bits(x), _digit(x) // 4
    return tw.select_latest(tw.select(tw.shift(b, 1)[:, 0:2], b[:, 0:2], "==")
                            & tw.select(tw.shift(high, 1), high, "=="),
                            _digit(x), default=15.0)


def constant_query(x):  # a fixed address: the latest token whose bits are 1 0 1 1 (= "d")
    q = torch.cat([torch.ones_like(_digit(x)), torch.zeros_like(_digit(x)),
                   torch.ones_like(_digit(x)), torch.ones_like(_digit(x))], -1)
    return tw.select_latest(tw.select(_bits(x), q, "=="), tw.shift(_digit(x), 1), default=0.0)


def compared_query(x):  # query bits from comparisons (a SiLU's tail of noise), used as they are
    d = _digit(x)
    q = torch.cat([(torch.remainder(torch.floor(d / 2 ** b), 2) == 1).float() for b in range(4)],
                  -1)
    return tw.select_latest(tw.select(_bits(x), q, "=="), tw.shift(d, 1), default=0.0)


PROGRAMS = [latest_after_same, width_same, mean_shifted_bits, joined, constant_query,
            compared_query]


def _oracle(name: str, codes: list[int]) -> list[float]:
    """Plain Python, j over 1..i: b the token's digit (0 for ';' and <bos>, whose lookups are
    0), a shift's rows before the stream read <bos>."""
    b = [int(VOCAB.tokens[c], 16) if VOCAB.tokens[c] in HEX else 0 for c in codes]
    back = lambda j, k: b[max(j - k, 0)]  # noqa: E731
    sel = {"latest_after_same": lambda i, j: back(j, 2) == b[i],
           "width_same": lambda i, j: b[j] == b[i],
           "mean_shifted_bits": lambda i, j: b[j] & 7 == b[i] >> 1,
           "joined": lambda i, j: back(j, 1) & 3 == b[i] & 3 and back(j, 1) // 4 == b[i] // 4,
           "constant_query": lambda i, j: b[j] == 13,
           "compared_query": lambda i, j: b[j] == b[i]}[name]
    out = []
    for i in range(len(codes)):
        chosen = [j for j in range(1, i + 1) if sel(i, j)]
        if name == "width_same":
            out.append(float(len(chosen)))
        elif name == "mean_shifted_bits":
            out.append(sum(b[j] for j in chosen) / len(chosen) if chosen else 0.0)
        elif not chosen:
            out.append(15.0 if name == "joined" else 0.0)
        else:
            j = chosen[-1]
            out.append(float(back(j, 1) if name in ("latest_after_same", "constant_query",
                                                    "compared_query") else b[j]))
    return out


def _stream(length: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    few = [VOCAB[c] for c in "3bd;"]  # many repeats: many selected keys
    pick = (lambda: rng.choice(few)) if seed % 2 else (lambda: VOCAB[rng.choice(HEX + ";")])
    return [VOCAB.bos_id] + [pick() for _ in range(length - 1)]


@pytest.fixture(scope="module")
def compiled():
    return {f.__name__: tw.compile(f, vocab=VOCAB, max_seq_len=MAX_LEN, output="value").compile()
            for f in PROGRAMS}


@pytest.mark.parametrize("name", [f.__name__ for f in PROGRAMS])
def test_compiled_equals_reference_and_oracle_at_every_position(compiled, name):
    program = compiled[name]
    for length in (1, 2, 17, 90, MAX_LEN):
        for seed in (length, length + 1):
            ids = _stream(length, seed)
            ref = program.traced.run(ids).double().reshape(-1)
            oracle = torch.tensor(_oracle(name, ids), dtype=torch.float64)
            assert torch.allclose(ref, oracle, atol=1e-6), (name, length, ref, oracle)
            _, states = tw.backends.runtime.forward(program.weights, ids, capture=True)
            got = lin_value(program.build.program.output, program.build.plan, states[-1])
            tol = max(program.build.program.output_range.noise, 1e-6)
            assert (got - ref).abs().max() <= tol, (name, length, got[:8], ref[:8])


def test_the_checkpoint_reads_a_bit_matched_address(tmp_path):
    """A token output through transformers: the digit after the latest same token."""
    def after_same(x):
        return tw.token("0") + tw.select_latest(tw.select(_bits(x), _bits(x), "=="),
                                                tw.shift(_digit(x), 1) % 10, default=0.0)

    program = tw.compile(after_same, vocab=VOCAB, max_seq_len=MAX_LEN).compile()
    model, _ = load_hf(program.save_pretrained(tmp_path / "m"))
    for length in (5, 60, MAX_LEN):
        ids = _stream(length, 7 + length)
        want = program.printed_ids(ids).reshape(-1)
        with torch.no_grad():
            got = model(torch.tensor([ids])).logits[0].argmax(-1)
        assert torch.equal(got[1:], want[1:]), (length, torch.nonzero(got != want)[:5])


def _twelve_bit_reads(as_bits: bool):
    """A 4096-cell memory: each record ``addr_hi addr_mid addr_lo value`` (hex digits) writes
    a cell; a query ``; hi mid lo`` reads the latest write. Matched by its 12 bits, or as one
    number digit by digit."""
    def memory(x):
        parts = [tw.shift(_bits(x), k) for k in (3, 2, 1)]  # hi, mid, lo of a record at ...
        query = [tw.shift(_bits(x), k) for k in (2, 1, 0)]  # ... and of a query ending here
        value = _digit(x)
        if as_bits:
            key, q = torch.cat(parts, -1), torch.cat(query, -1)
        else:
            key = sum(tw.shift(_digit(x), k) * 16.0 ** (3 - k) for k in (3, 2, 1))
            q = sum(tw.shift(_digit(x), k) * 16.0 ** (2 - k) for k in (2, 1, 0))
        return tw.select_latest(tw.select(key, q, "=="), value, default=0.0)
    return tw.compile(memory, vocab=VOCAB, max_seq_len=256, output="value").compile()


def test_an_address_held_as_bits_needs_no_digit_staircase():
    bits, digits = _twelve_bit_reads(True), _twelve_bit_reads(False)
    sb, sd = bits.stats(), digits.stats()
    assert sb["lanes_total"] < sd["lanes_total"] / 10, (sb["lanes_total"], sd["lanes_total"])
    assert sb["d_head"] <= 32 < sd["d_head"]
    rng = random.Random(3)
    ids = [VOCAB.bos_id] + [VOCAB[rng.choice("01" if i % 5 else HEX)] for i in range(255)]
    for program in (bits, digits):
        ref = program.traced.run(ids).double().reshape(-1)
        _, states = tw.backends.runtime.forward(program.weights, ids, capture=True)
        got = lin_value(program.build.program.output, program.build.plan, states[-1])
        assert torch.equal(got, ref)
    assert torch.equal(bits.traced.run(ids), digits.traced.run(ids))


def test_columns_that_are_not_bits_are_refused_with_the_way_out():
    def wide(x):
        b = torch.cat([_bits(x), _digit(x)], -1)
        return tw.select_latest(tw.select(b, b, "=="), _digit(x))

    with pytest.raises(tw.CompileError) as e:
        tw.compile(wide, vocab=VOCAB, max_seq_len=64).compile()
    assert "column 4" in str(e.value) and "exact 0/1" in str(e.value)

    def wide_as_bits(x):  # the advice: the digit as 0/1 columns (its bits) instead
        b = torch.cat([_bits(x), _bits(x)], -1)
        return tw.select_latest(tw.select(b, b, "=="), _digit(x))

    tw.compile(wide_as_bits, vocab=VOCAB, max_seq_len=64).compile()

    def widths(x):
        return tw.select_latest(tw.select(_bits(x), _bits(x, 3), "=="), _digit(x))

    with pytest.raises(tw.CompileError) as e:
        tw.compile(widths, vocab=VOCAB, max_seq_len=64).compile()
    assert "4 columns and the queries 3" in str(e.value) and "zeros" in str(e.value)

    def padded(x):  # the advice: the shorter side padded with a zero column
        q = _bits(x, 3)
        q = torch.cat([q, torch.zeros_like(q[:, :1])], -1)
        return tw.select_latest(tw.select(_bits(x), q, "=="), _digit(x))

    tw.compile(padded, vocab=VOCAB, max_seq_len=64).compile()
