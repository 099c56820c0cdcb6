"""The machines and the arithmetic, as objects: what every construction and certificate asks
instead of comparing names.

A *machine kind* is the MLP a checkpoint has. Every MLP lane is ``act(gate) * up``:

- SwiGLU (Phi-3's own MLP): ``act`` is SiLU and ``up`` carries a value, so a product of two
  streams is one lane and a select needs no range; a hinge is ``SiLU(S*z) / S``, which errs
  near its knot (the *corner*; design-notes §6) and is exact once ``S*|z|`` saturates.
- ReLU (a gated ReLU MLP): ``up`` is the constant 1, so a hinge is exact and a product is a
  table (the quarter-square identity; exact on its knots only).

A *float format* is the arithmetic a runtime computes in: its significand bits fix which
whole numbers it holds exactly and how far one rounding may move a value.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Literal

MachineName = Literal["swiglu", "relu"]


@dataclass(frozen=True)
class MachineKind:
    """One kind of MLP. ``name``: the user's spelling (``machine="swiglu"``); ``act``: the
    activation as Phi-3's config names it (``hidden_act``)."""

    name: MachineName
    act: Literal["silu", "relu"]
    # the up projection carries a stream value: a product of two streams is one exact lane,
    # a select gates its value directly (SwiGLU); else up is the constant 1 (ReLU)
    gated_up: bool
    # the hinge is SiLU(S*z)/S with a corner error near its knot (SwiGLU); else exact relu
    smooth_hinge: bool
    # llama.cpp's Phi-3 graph runs this MLP (its GGUF writer refuses the others)
    llama_cpp: bool
    # vLLM's Phi-3 MLP runs it (silu only)
    vllm: bool

    def __str__(self) -> str:
        return self.name


SWIGLU = MachineKind("swiglu", "silu", gated_up=True, smooth_hinge=True, llama_cpp=True,
                     vllm=True)
RELU = MachineKind("relu", "relu", gated_up=False, smooth_hinge=False, llama_cpp=False,
                   vllm=False)
MACHINES: dict[str, MachineKind] = {m.name: m for m in (SWIGLU, RELU)}


def machine_kind(kind: MachineKind | str) -> MachineKind:
    """The machine kind named ``kind`` (a ``MachineKind`` is returned as it is)."""
    if isinstance(kind, MachineKind):
        return kind
    try:
        return MACHINES[kind]
    except KeyError:
        raise ValueError(f"machine={kind!r}: choose one of "
                         f"{', '.join(repr(k) for k in MACHINES)}") from None


def machine_of_act(act: str) -> MachineKind:
    """The machine kind whose MLP activation is ``act`` (a checkpoint's ``hidden_act``)."""
    for m in MACHINES.values():
        if m.act == act:
            return m
    raise ValueError(f"no machine kind has the activation {act!r}")


@dataclass(frozen=True)
class FloatFormat:
    """An IEEE-style binary float format: ``significand_bits`` counts the implicit bit."""

    name: str
    significand_bits: int
    max_finite: float
    min_normal: float  # the smallest normal number: below it, subnormals keep fewer bits

    def holds(self, x: float) -> bool:
        """Whether ``x`` is a number of this format (finite, not rounded by it)."""
        if x == 0.0:
            return True
        if not math.isfinite(x) or abs(x) > self.max_finite:
            return False
        _, e = math.frexp(abs(x))  # |x| = m * 2**e, m in [0.5, 1)
        quantum = max(math.ldexp(1.0, e - self.significand_bits),
                      math.ldexp(self.min_normal, 1 - self.significand_bits))
        return (x / quantum).is_integer()

    @property
    def exact_integers(self) -> int:
        """Every whole number of magnitude up to this is exact (2**significand_bits)."""
        return 2 ** self.significand_bits

    @property
    def unit_roundoff(self) -> float:
        """The largest relative error of one round-to-nearest: 2**-significand_bits."""
        return 2.0 ** -self.significand_bits

    def __str__(self) -> str:
        return self.name


FP32 = FloatFormat("fp32", 24, 3.4028234663852886e38, 2.0 ** -126)
FP16 = FloatFormat("fp16", 11, 65504.0, 2.0 ** -14)
BF16 = FloatFormat("bf16", 8, 3.3895313892515355e38, 2.0 ** -126)
FORMATS: dict[str, FloatFormat] = {f.name: f for f in (FP32, FP16, BF16)}


def half_holds(x: float) -> bool:
    """Whether ``x`` is a number both fp16 and bf16 hold (a half build's every weight)."""
    return FP16.holds(x) and BF16.holds(x)


def half_parts(x: float) -> tuple[float, ...]:
    """``x`` as at most two numbers fp16 and bf16 both hold whose sum is exactly ``x`` (and
    stays exact in an fp32 accumulator: both are multiples of x's last bit), or () when there
    are none: the first is x cut to bf16's 8 significant bits, the second the rest. A half
    build's constant that bf16 does not hold (a step at 259 reads ``128 * 259``) is read from
    two constant columns this way (``emit/emitter.py``)."""
    if half_holds(x):
        return (x,)
    if not math.isfinite(x):
        return ()
    _, e = math.frexp(abs(x))
    quantum = math.ldexp(1.0, e - BF16.significand_bits)
    high = math.copysign(math.floor(abs(x) / quantum) * quantum, x)
    parts = (high, x - high)
    return parts if all(half_holds(p) for p in parts) else ()


@dataclass(frozen=True)
class Precision:
    """A compile target: the arithmetics a build is certified for. ``fp32``: today's
    constructions, exact in fp32 only. ``half``: every weight and every residual value exact
    in fp16 and bf16 as well, certified by replaying the build in each format
    (``certify/half.py``; docs/half-precision.md)."""

    name: Literal["fp32", "half"]
    formats: tuple[FloatFormat, ...]

    @property
    def half(self) -> bool:
        return FP16 in self.formats

    def __str__(self) -> str:
        return self.name


FULL = Precision("fp32", (FP32,))
HALF = Precision("half", (FP32, FP16, BF16))
PRECISIONS: dict[str, Precision] = {p.name: p for p in (FULL, HALF)}


def precision_of(p: Precision | str) -> Precision:
    """The precision named ``p`` (a ``Precision`` is returned as it is)."""
    if isinstance(p, Precision):
        return p
    try:
        return PRECISIONS[p]
    except KeyError:
        raise ValueError(f"precision={p!r}: choose one of "
                         f"{', '.join(repr(k) for k in PRECISIONS)}") from None


# The precision the constructions being lowered are built for: set by lowering for the whole
# of one lowering (``arithmetic``), read where a construction differs in half precision (a
# step's corners sit on its lattice points there, not a quarter spacing off them).
_CURRENT: ContextVar[Precision] = ContextVar("precision", default=FULL)


def current_precision() -> Precision:
    return _CURRENT.get()


@contextmanager
def arithmetic(p: Precision) -> Iterator[None]:
    token = _CURRENT.set(p)
    try:
        yield
    finally:
        _CURRENT.reset(token)
