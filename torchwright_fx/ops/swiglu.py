"""The SwiGLU op library (the Phi-3 machine, the default). Importing an op from here fixes the
program's machine to SwiGLU. Products and selects are exact; hinges (relu, abs, min/max, clamp,
piecewise) are within 0.2785/128 per unit of slope change of exact near their kinks. Same
names and signatures as ``ops.relu``; see ``base/numerics.py`` for the constants."""

from torchwright_fx.families.libraries import make_library

_ops = make_library("swiglu")
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
