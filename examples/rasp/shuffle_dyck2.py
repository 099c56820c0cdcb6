"""shuffle_dyck2 (tracr ``make_shuffle_dyck2()``, i.e. ``make_shuffle_dyck(["()", "{}"])``):
``({)}\\n`` -> ``1``, ``(){)}\\n`` -> ``0``: each kind of bracket balanced on its own.

The program is ``examples/rasp/shuffle_dyck.py`` with two pairs (see its docstring for the
adaptation): two balances, ``any_negative`` and ``all_zero`` over both.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import torchwright_fx as tw
from examples.rasp import _common as c
from examples.rasp import shuffle_dyck as dyck

MAX_LEN = 100
PAIRS = ["()", "{}"]
VOCAB = tw.Vocab("01" + "".join(PAIRS) + c.TRIGGER)
DEMOS = ["({)}\n", "(){)}\n", "{()}\n"]
EDGE_CASES = ["({)}\n", "(){)}\n", "{\n", "}\n", "{}\n", "}{\n", "({})\n", "({)\n",
              "{" * 50 + "}" * 50 + "\n", "({" * 25 + ")}" * 25 + "\n", "(" * 50 + "}" * 50 + "\n",
              "()" * 25 + "{}" * 24 + "}{\n", "(" * 100 + "\n"]


def oracle(prompt: str) -> str:
    return dyck.oracle(prompt, PAIRS)


def inputs(max_len: int = MAX_LEN) -> Iterator[str]:
    return dyck.inputs(max_len, PAIRS)


def random_input(rng: random.Random, n: int) -> str:
    return dyck.random_input(rng, n, PAIRS)


def sample(rng: random.Random, max_len: int = MAX_LEN) -> str:
    return random_input(rng, rng.randint(1, max_len))


def make(max_len: int = MAX_LEN, **options: Any) -> tw.Compiled:
    program = dyck.make(max_len, PAIRS, VOCAB, **options)
    program.fn.__name__ = "shuffle_dyck2"
    return program


program = make()
