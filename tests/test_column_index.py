"""Indexing a stream's columns as torch does (families/linear.py ``_getitem``): a list of floats
(token codes) is truncated to ints, a list of bools is a mask; a bad index is refused with
the line, not a bare Python error."""

from __future__ import annotations

import pytest
import torch

import torchwright_fx as tw

VOCAB = tw.Vocab("abcd\n")


def _codes_onehot(x: torch.Tensor) -> torch.Tensor:
    codes = [tw.token(c) for c in "abcd"]  # floats
    return x[:, codes].sum(-1, keepdim=True) * tw.token("a")


def _mask(x: torch.Tensor) -> torch.Tensor:
    keep = [i in (VOCAB["a"], VOCAB["c"]) for i in range(len(VOCAB))]
    return x[:, keep].sum(-1, keepdim=True) * tw.token("b") + (1 - x[:, keep].sum(
        -1, keepdim=True)) * tw.token("d")


@pytest.mark.parametrize("fn", [_codes_onehot, _mask])
def test_list_indices_match_torch(fn):
    program = tw.compile(fn, vocab=VOCAB, max_seq_len=16).compile()
    ids = VOCAB.encode("abcdcba\nab")
    assert torch.equal(program.logits(ids).argmax(-1), program.printed_ids(ids))


def test_an_index_out_of_range_is_refused_naming_the_line():
    def bad(x: torch.Tensor) -> torch.Tensor:
        return x[:, [0, 99]].sum(-1, keepdim=True)

    with pytest.raises(tw.CompileError) as e:
        tw.compile(bad, vocab=VOCAB, max_seq_len=16).compile()
    assert "out of bounds" in str(e.value) and "test_column_index.py:" in str(e.value)



def test_following_the_advice_compiles():
    """An index out of range is refused naming the columns there are; indexing within them,
    as the advice says, compiles and is right (a float inside a list is truncated, as torch
    does)."""
    def out_of_range(x: torch.Tensor) -> torch.Tensor:
        return tw.token("a") + x[:, [0, 99]].sum(-1, keepdim=True)

    def within(x: torch.Tensor) -> torch.Tensor:
        return tw.token("a") + x[:, [0, 2.5]].sum(-1, keepdim=True)

    with pytest.raises(tw.CompileError):
        tw.compile(out_of_range, vocab=VOCAB, max_seq_len=16).compile()
    program = tw.compile(within, vocab=VOCAB, max_seq_len=16).compile()
    ids = VOCAB.encode("abcd\nabca")
    assert torch.equal(program.logits(ids).argmax(-1), program.printed_ids(ids))
