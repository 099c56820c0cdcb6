"""Bugs found by the differential fuzzer (``tests/fuzzgen.py``, ``scripts/fuzz.py``), shrunk.

Each case is a program's source and the prompts it failed on. The contract: the program is
refused at compile time with ``tw.CompileError`` (an actionable message), or the compiled
model (in-process runtime) generates exactly the reference's ids on every listed prompt. Any
other exception while compiling or generating is a bug too.
"""

from __future__ import annotations

import fuzzgen
import pytest

import torchwright_fx as tw

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.one_thread


def refused_or_equal(source: str, prompts: list[str], chars: str = "ab01\n",
                     machine: str = "swiglu", max_seq_len: int = 16, optimize: int = 0) -> None:
    prog = fuzzgen.Program(source, chars, machine, max_seq_len, optimize, answer_len=0)
    try:
        compiled = prog.compile().compile()
    except tw.CompileError:
        return
    vocab = prog.vocab
    wrong = []
    for p in prompts:
        ids = vocab.encode(p)
        try:
            want = compiled.reference_ids(ids)
        except ValueError as e:  # outside the domain (prints <bos>): the model refuses too
            with pytest.raises(ValueError, match="<bos>"):
                compiled.generate_ids(ids)
            assert "<bos>" in str(e)
            continue
        got = compiled.generate_ids(ids)
        if want != got:
            wrong.append((p, [vocab.tokens[i] for i in want], [vocab.tokens[i] for i in got]))
    assert not wrong, f"(prompt, reference, compiled): {wrong}"


# -- 1. steps_since with a marker that is 1 at <bos> -------------------------------------------
# (found as `1 - tw.is_token(x, 'a')` and `tw.is_token(x, [..., "<bos>"])`; the compiled
# steps counted from <bos> whatever the later markers)
STEPS_NOT_A = """\
def prog(x):
    v1 = 1 - tw.is_token(x, 'a')
    v2 = tw.steps_since(v1)
    return tw.token("0") + v2 % 10
"""

STEPS_BOS_LIST = """\
def prog(x):
    v5 = tw.is_token(x, ['6', "<bos>"])
    v6 = tw.steps_since(v5)
    v9 = tw.is_token(x, "\\n")
    return tw.emit(v9, ['a', 'a', tw.token("0") + v6 % 10])
"""

STEPS_LATCHED_MARKER = """\
def prog(x):
    v0 = tw.is_token(x, ['1', "<bos>"])
    v1 = tw.latch(v0, v0)
    v2 = tw.steps_since(v1)
    return tw.token("0") + torch.clamp(v2, 0, 1)
"""


@pytest.mark.parametrize("machine", ["swiglu", "relu"])
def test_steps_since_marker_one_at_bos(machine):
    # reference '0000000', compiled '0123456' (8 positions, every one a marker)
    refused_or_equal(STEPS_NOT_A, ["", "b", "bba", "ab"], chars="ab0123456789\n",
                     machine=machine, max_seq_len=8)


@pytest.mark.parametrize("machine", ["swiglu", "relu"])
def test_steps_since_marker_list_with_bos(machine):
    # '6\n': the latest marker is the '6' at position 1, so at position 4 the reference says
    # 3 steps; compiled 4 (counted from <bos>)
    refused_or_equal(STEPS_BOS_LIST, ["6\n", "a6a\n", "66\n"], chars="ab0123456789\n",
                     machine=machine, max_seq_len=8)


def test_steps_since_of_a_latched_marker():
    # 'c\n': reference '0000000000000', compiled '1111111111111'
    refused_or_equal(STEPS_LATCHED_MARKER, ["c\n", "01a0acaaa1a11\n", "a\n\na01\n00c\n"],
                     chars="abc01\n")


# -- 2. a <bos> printed mid-sequence -----------------------------------------------------------
# The reference reads a generated <bos> as an ordinary token at its position; the compiled
# position (a <bos> average) and everything built on it (gather, steps_since) then drift.
BOS_THEN_POSITION = """\
def prog(x):
    nl = tw.is_token(x, "\\n")
    return tw.emit(nl, ["<bos>", tw.token("0") + torch.clamp(tw.position(x) - 3, 0, 1)])
"""

BOS_FROM_SHIFT_GATHER = """\
def prog(x):
    v1 = tw.shift(tw.code(x), 4)
    v2 = tw.gather(v1, v1)
    v3 = tw.is_token(x, "\\n")
    return tw.emit(v3, [v2, tw.token("0") + torch.clamp(v2, 0, 1)])
"""


@pytest.mark.parametrize("machine", ["swiglu", "relu"])
def test_printed_bos_then_position(machine):
    # '00\n': reference ids [<bos>, '1'], compiled [<bos>, '0']
    refused_or_equal(BOS_THEN_POSITION, ["00\n", "000\n", "0\n"], machine=machine)


def test_printed_bos_from_a_shift_then_gather():
    # '000\n': shift(code, 4) at the newline is the <bos> row (code 0), printed; then
    # gather(v1, v1) at the printed <bos>: reference '1', compiled '0'
    refused_or_equal(BOS_FROM_SHIFT_GATHER, ["000\n"])


# -- 3. tw.is_token with a repeated token ------------------------------------------------------
# The reference sums one column per listed token (2 where the token is listed twice); the
# compiler takes the set of ids (1), and ranges the value as 0/1.
DUPLICATE_IS_TOKEN = """\
def prog(x):
    return tw.token("0") + tw.is_token(x, ["a", "a"])
"""

@pytest.mark.parametrize("machine", ["swiglu", "relu"])
def test_is_token_with_a_repeated_token(machine):
    # 'a': reference '200000', compiled '100000'
    refused_or_equal(DUPLICATE_IS_TOKEN, ["a", "b", "ba"], chars="ab012\n", machine=machine,
                     max_seq_len=8)


# -- 4. compile crashes that are not a CompileError --------------------------------------------
# Returning a constant (a token name, or tw.token(...)) crashed in lowering with KeyError.
@pytest.mark.parametrize("ret", ["'1'", "tw.token('1')", "5.0"])
def test_returning_a_constant(ret):
    refused_or_equal(f"def prog(x):\n    return {ret}\n", ["", "0", "a1"])


# -- 5. x % m on a lattice that does not pass through 0 ------------------------------------------
# 10*v + 5 lies on 10Z + 5; its residues mod 10 are {5}. The range rule took the residues'
# lattice through 0 and gave the interval [0, 0], a point off the lattice: the digit printed
# was '0' (and the clamp after it sized on the wrong range).
MOD_OFF_LATTICE = """\
def prog(x):
    v0 = tw.lookup(x, {'a': 202, 'b': 695, '0': 233, '1': 218, '2': 603, '7': 143, '9': 477,
                       '\\n': 133}, default=2)
    v3 = 10 * v0 + 5
    v13 = tw.is_token(x, "\\n")
    v14 = tw.latch(v3, v13)
    return tw.emit(v13, [tw.token("0") + v14 % 10, tw.token("0") + torch.clamp(v14, 0, 9)])
"""


@pytest.mark.parametrize("machine", ["swiglu", "relu"])
def test_mod_of_a_value_off_the_zero_lattice(machine):
    # 'a\n': reference '59', compiled '5\n5\n5'; '': reference '', compiled '0000000'
    refused_or_equal(MOD_OFF_LATTICE, ["", "a", "a\n", "\n", "b0\n"],
                     chars="ab0123456789\n", machine=machine, max_seq_len=8)
