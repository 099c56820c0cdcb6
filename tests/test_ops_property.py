"""Property: a random small program built from supported torch ops over integer-valued
token-derived streams compiles, on either machine, to weights whose output equals the eager
reference at every position (integer-valued inputs keep every construction on its exact grid;
magnitudes are kept small so ReLU product tables have a knot at every integer)."""

from __future__ import annotations

from typing import Any

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_ops_helpers import read_lin

import torchwright_fx as tw
from torchwright_fx.backends import runtime
from torchwright_fx.ir.graph import MachineKind

VOCAB = tw.Vocab("0123456789")
DIGITS = {str(d): d for d in range(10)}
PRODUCT_LIMIT = 40  # |factor| bound for products and squares (tables stay on every integer)

Plan = tuple[Any, ...]
UNARY = ["neg", "abs", "relu", "scale", "shift", "floor_div", "mod", "floordiv", "clamp",
         "sign", "square", "gt", "eq"]
BINARY = ["add", "sub", "mul", "maximum", "minimum", "where", "ge", "and_or"]


def plans() -> st.SearchStrategy[Plan]:
    leaves = st.tuples(st.just("leaf"), st.integers(0, 2))

    def extend(children: st.SearchStrategy[Plan]) -> st.SearchStrategy[Plan]:
        unary = st.tuples(st.just("un"), st.sampled_from(UNARY), st.integers(-3, 4), children)
        binary = st.tuples(st.just("bin"), st.sampled_from(BINARY), children, children)
        return unary | binary

    return st.recursive(leaves, extend, max_leaves=5)


def magnitude(p: Plan) -> float:
    """A bound on |value| of a plan (leaves are digits)."""
    kind = p[0]
    if kind == "leaf":
        return 9.0
    if kind == "un":
        _, name, k, child = p
        m = magnitude(child)
        return {"scale": m * max(abs(k), 1), "shift": m + abs(k), "mod": 4.0, "clamp": 4.0,
                "sign": 1.0, "gt": 1.0, "eq": 1.0, "square": m * m}.get(name, m)
    _, name, a, b = p
    ma, mb = magnitude(a), magnitude(b)
    if name in ("ge", "and_or"):
        return 1.0
    if name == "mul":
        return ma * mb
    return ma + mb if name in ("add", "sub") else max(ma, mb)


def peak(p: Plan) -> float:
    """A bound on |value| of every intermediate of a plan: fp32 rounding is relative to the
    largest value a chain carries (x*x % 2 keeps the product's rounding, 1e-7 * 81)."""
    children = [] if p[0] == "leaf" else [p[3]] if p[0] == "un" else [p[2], p[3]]
    return max([magnitude(p), *map(peak, children)])


def build(p: Plan, leaves: list[torch.Tensor]) -> torch.Tensor:
    if p[0] == "leaf":
        return leaves[p[1]]
    if p[0] == "un":
        return _unary(p[1], p[2], build(p[3], leaves), magnitude(p[3]))
    return _binary(p[1], build(p[2], leaves), build(p[3], leaves),
                   max(magnitude(p[2]), magnitude(p[3])))


def _unary(name: str, k: int, x: torch.Tensor, m: float) -> torch.Tensor:
    d = max(abs(k), 2)  # a divisor or modulus
    ops = {
        "neg": lambda: -x, "abs": lambda: torch.abs(x), "relu": lambda: torch.relu(x),
        "scale": lambda: x * k, "shift": lambda: x + k,
        "floor_div": lambda: torch.floor(x / d), "mod": lambda: x % d,
        "floordiv": lambda: x // d, "clamp": lambda: torch.clamp(x, -d, d),
        "sign": lambda: torch.sign(x),
        "square": lambda: x * x if m <= PRODUCT_LIMIT else x + 1,
        "gt": lambda: (x > k).float(), "eq": lambda: (x == k).float(),
    }
    return ops[name]()


def _binary(name: str, a: torch.Tensor, b: torch.Tensor, m: float) -> torch.Tensor:
    ops = {
        "add": lambda: a + b, "sub": lambda: a - b,
        "mul": lambda: a * b if m <= PRODUCT_LIMIT else a - b,
        "maximum": lambda: torch.maximum(a, b), "minimum": lambda: torch.minimum(a, b),
        "where": lambda: torch.where(a > b, a, b - 1),
        "ge": lambda: (a >= b).float(), "and_or": lambda: ((a > 0) & (b > 1) | (a < b)).float(),
    }
    return ops[name]()


def program_of(plan: Plan):
    def random_program(x: torch.Tensor) -> torch.Tensor:
        digit = tw.lookup(x, DIGITS)
        return build(plan, [digit, tw.shift(digit, 1), tw.shift(digit, 2)])

    return random_program


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=plans(), machine=st.sampled_from(["swiglu", "relu"]),
       text=st.text("0123456789", min_size=1, max_size=14))
def test_random_program_compiles_to_its_reference(plan: Plan, machine: MachineKind,
                                                  text: str):
    compiled = tw.compile(program_of(plan), vocab=VOCAB, max_seq_len=16, machine=machine,
                          output="value")  # any integer, read from the residual stream
    ids = VOCAB.encode(text)
    want = compiled.traced.run(ids).double()
    _, states = runtime.forward(compiled.weights, ids, capture=True)
    got = read_lin(compiled, compiled.build.program.output, states)
    tol = 1e-6 * max(peak(plan), 1.0)
    assert torch.all((got - want).abs() <= tol), (plan, machine, text, got, want)
