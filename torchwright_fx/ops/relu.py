"""The ReLU op library (a plain ReLU machine: act = ReLU, up = 1). Products need a boolean
factor or a declared range; selects gate with an offset sized from the operands' ranges."""

from torchwright_fx.ops.library import make_library

_ops = make_library("relu")
mul = _ops["mul"]
select = _ops["select"]
relu = _ops["relu"]
compare = _ops["compare"]

__all__ = ["compare", "mul", "relu", "select"]
