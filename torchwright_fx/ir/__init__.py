"""The primitive graph: signals (residual columns), affine reads of them, and producers."""

from torchwright_fx.ir.graph import (
    FFN,
    Head,
    Lane,
    Program,
    Signal,
)
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import Interval

__all__ = ["FFN", "Head", "Interval", "Lane", "Lin", "Program", "Signal"]
