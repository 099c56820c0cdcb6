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


FP32 = FloatFormat("fp32", 24, 3.4028234663852886e38)
FP16 = FloatFormat("fp16", 11, 65504.0)
BF16 = FloatFormat("bf16", 8, 3.3895313892515355e38)
FORMATS: dict[str, FloatFormat] = {f.name: f for f in (FP32, FP16, BF16)}
