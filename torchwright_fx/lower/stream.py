"""A lowered value: one affine form and one interval per column."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import BOOL, Interval


@dataclass
class Stream:
    cols: list[Lin]
    ranges: list[Interval]
    is_bool: bool = False

    def __post_init__(self) -> None:
        assert len(self.cols) == len(self.ranges)

    @property
    def width(self) -> int:
        return len(self.cols)

    @staticmethod
    def const(values: Sequence[float], is_bool: bool = False) -> Stream:
        return Stream([Lin.constant(v) for v in values], [Interval.point(v) for v in values],
                      is_bool)

    def as_bool(self) -> Stream:
        return Stream(self.cols, [r if r.is_bool else BOOL for r in self.ranges], True)

    def broadcast(self, width: int) -> Stream:
        if self.width == width:
            return self
        if self.width != 1:
            raise ValueError(f"cannot broadcast a stream of width {self.width} to {width}")
        return Stream(self.cols * width, self.ranges * width, self.is_bool)


Value = Stream | float | int | bool | torch.Tensor | str | None | list | tuple


def const_vector(value: object, width: int) -> list[float]:
    """A Python number or a constant tensor of shape [], [w], [1, w] as ``width`` floats."""
    if isinstance(value, (bool, int, float)):
        return [float(value)] * width
    if isinstance(value, torch.Tensor):
        flat = value.detach().to(torch.float64).reshape(-1)
        if value.dim() > 2 or (value.dim() == 2 and value.shape[0] != 1):
            raise ValueError(f"a constant of shape {tuple(value.shape)} does not act per position; "
                             "constants must have shape [], [w] or [1, w]")
        if flat.numel() == 1:
            return [float(flat[0])] * width
        if flat.numel() != width:
            raise ValueError(f"a constant of width {flat.numel()} does not match width {width}")
        return [float(v) for v in flat]
    raise TypeError(f"expected a stream or a constant, got {type(value).__name__}")


def is_const(value: object) -> bool:
    return isinstance(value, (bool, int, float, torch.Tensor))


def to_stream(value: object, width: int) -> Stream:
    if isinstance(value, Stream):
        return value.broadcast(width)
    is_bool = isinstance(value, bool) or (isinstance(value, torch.Tensor)
                                          and value.dtype == torch.bool)
    return Stream.const(const_vector(value, width), is_bool)
