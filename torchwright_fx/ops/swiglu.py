"""The SwiGLU op library (the Phi-3 machine, the default). Importing an op from here fixes the
program's machine to SwiGLU. See ``ops/numerics.py`` for the constructions' constants."""

from torchwright_fx.ops.library import make_library

_ops = make_library("swiglu")
mul = _ops["mul"]
select = _ops["select"]
relu = _ops["relu"]
compare = _ops["compare"]

__all__ = ["compare", "mul", "relu", "select"]
