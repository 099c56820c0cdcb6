"""The ReLU op library (a plain ReLU machine: act = ReLU, up = 1). Importing an op from here
fixes the program's machine to ReLU. Products of two non-boolean streams are piecewise-linear
tables over the declared ranges (exact on integer-valued inputs); selects gate with an offset
sized from the operands' ranges. Same names and signatures as ``ops.swiglu``."""

from torchwright_fx.families.libraries import make_library

_ops = make_library("relu")
abs = _ops["abs"]
ceil = _ops["ceil"]
clamp = _ops["clamp"]
compare = _ops["compare"]
floor = _ops["floor"]
maximum = _ops["maximum"]
minimum = _ops["minimum"]
mod = _ops["mod"]
mul = _ops["mul"]
piecewise = _ops["piecewise"]
reciprocal = _ops["reciprocal"]
relu = _ops["relu"]
round = _ops["round"]
select = _ops["select"]
square = _ops["square"]

__all__ = ["abs", "ceil", "clamp", "compare", "floor", "maximum", "minimum", "mod", "mul",
           "piecewise", "reciprocal", "relu", "round", "select", "square"]
