"""The end of the context: the compiled model prints ``<eos>`` at its last certified position.

A saved directory's generation config then needs no total length: transformers, llama.cpp
and vLLM stop at ``<eos>`` whatever ``max_new_tokens`` a caller passes, and a call never runs
past max_seq_len (backends/hf.py writes ``max_new_tokens`` instead of ``max_length``).

The flag. The averaging head of tw.position (ops/position.py) outputs y_i = fl(1/(i+1)), shared
when the program built it. One MLP ramp turns y into E = [i = n - 1] (n = max_seq_len):

    E = relu(s (t1 - y)) - relu(s (t2 - y)),  t1 = y_last + 3g/4, t2 = y_last + g/4, s = 2/g

with g = y_{n-2} - y_{n-1}. At the last position the arguments are 1.5 and 0.5 (E = 1 up to
rounding); at every earlier one (y >= y_{n-2}) both are <= -0.5, so each hinge is exactly 0
(SwiGLU: SiLU(k z) with k z <= -UNDERFLOW underflows to 0). E is exactly 0 there, so lm_head's
``B * E`` on the ``<eos>`` row changes no other logit by a single bit, and the output's own
certificate (ops/decode.py) holds unchanged at those positions.

The certificate (``flag_error``): the arguments' fp32 error near the threshold, from y's own
rounding (relative ``END_Y_ERROR``) and the lanes' dot products, must stay below
``END_ARGUMENT_SLACK`` of the 0.5 margin; ``decode.end_gain`` then sizes B so that at the last
position ``<eos>`` beats every token by DECODE_GAIN / 2 with E as low as the bound allows. When
either cannot be certified (a very long context, a huge vocabulary) the flag is not built and
the directory keeps its ``max_length`` cap instead (``Program.end_flag`` None).
"""

from __future__ import annotations

from torchwright_fx.base.numerics import (
    END_ARGUMENT_SLACK,
    END_MARGIN,
    END_Y_ERROR,
    FP32_UNIT,
    SILU_SCALE,
    UNDERFLOW,
)
from torchwright_fx.ir.graph import Program
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import Interval
from torchwright_fx.ops import attention
from torchwright_fx.ops.attention import Geometry
from torchwright_fx.ops.lanes import Bank
from torchwright_fx.ops.position import samples

NAME = "end_of_context"


def _ramp(n: int) -> tuple[float, float, float, float]:
    """(y at the last position, t1, t2, s) in float64 from the fp32 samples."""
    y = samples(n).double()
    last, before = float(y[n - 1]), float(y[n - 2])
    g = before - last
    return last, last + 0.75 * g, last + 0.25 * g, 2.0 / g


def flag_error(n: int) -> float:
    """A bound on the ramp arguments' fp32 error at the last two positions, in units of the
    arguments (the ramp's corners sit END_MARGIN from the points that must be exact)."""
    last, t1, _, s = _ramp(n)
    y = last + 2.0 / s  # y_{n-2} = y_{n-1} + g, the larger
    # y within END_Y_ERROR (relative) of fl(1/(i+1)); each lane is a dot product of its stored
    # weights with the normalised residual plus its constant: a few roundings of its terms
    terms = s * y + s * t1
    return s * END_Y_ERROR * y + 4 * FP32_UNIT * terms


def certified(n: int) -> bool:
    """Whether the flag is exactly 0 before the last position and near 1 at it."""
    return n >= 2 and flag_error(n) <= END_ARGUMENT_SLACK * END_MARGIN


def sharpness() -> float:
    """The SwiGLU hinge's sharpness: an argument at -(1 - slack) * END_MARGIN (or lower)
    underflows to exactly 0, with 5 % to spare."""
    return 1.05 * UNDERFLOW / (SILU_SCALE * END_MARGIN * (1.0 - END_ARGUMENT_SLACK))


def lowest_at_end() -> float:
    """The least E at the last position the certificate allows: each argument errs by at
    most slack * margin; a saturated SiLU's own rounding (a few units of 1.5) is below 8 u."""
    return 1.0 - 2 * END_ARGUMENT_SLACK * END_MARGIN - 8 * FP32_UNIT


def flag_range() -> Interval:
    """E's facts: 0 exactly before the last position, near 1 at it."""
    return Interval(0.0, 2.0 - lowest_at_end())


def end_flag(prog: Program, geom: Geometry, bos: Lin, name: str, source: str) -> Lin | None:
    """E = [i = max_seq_len - 1] as one column, or None when not certified at this length;
    its producers are named after ``name``, the fx node the program returns (``source``)."""
    n = geom.max_seq_len
    if not certified(n):
        return None
    inverse = prog.shared.inverse_position
    if inverse is None:
        (inverse,) = attention.mean(prog, geom, [bos], [Interval(0.0, 1.0)], Lin.constant(1.0),
                                    f"{name}.{NAME}.inverse_count", source)
        prog.shared.inverse_position = inverse
    _, t1, t2, s = _ramp(n)
    bank = Bank(prog.machine, 1)
    sharp = sharpness()
    bank.hinge(0, (t1 - inverse) * s, 1.0, sharp)
    bank.hinge(0, (t2 - inverse) * s, -1.0, sharp)
    (flag,) = bank.finish(prog, [flag_range()], f"{name}.{NAME}", source)
    assert flag.const == 0.0
    return flag
