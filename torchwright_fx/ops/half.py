"""Constructions of the half-precision target (``precision="half"``; docs/half-precision.md).

In half precision every residual value and every weight must be a number fp16 and bf16 both
hold (whole numbers up to 256 in bf16, 2048 in fp16, or short dyadic fractions), and every
intermediate of a sublayer must land on such numbers too; then each runtime's arithmetic,
whatever its order and its accumulator, computes the exact value. ``emit/certify_half.py``
replays the build in each format and refuses what does not.

The output. fp32 builds decode the output code c with a quadratic lm_head whose logits grow
as V**2 (docs/half-precision.md Q5: wrong from V = 32 in bf16). Here the code is first turned
into the step columns ``u_t = [c >= t]`` (one MLP sublayer, two hinges per step with corners on
the whole numbers, so every gate is 128 times a whole number: exact in bf16 while |c - t| <=
256) and lm_head gives token t the logit ``G * (u_t - u_{t+1})``: G for the code, 0 for every
other token (measured exact to V = 256 in every runtime, Q5's one-hot row).
"""

from __future__ import annotations

from torchwright_fx.base.errors import CompileError
from torchwright_fx.base.numerics import HALF_CODE_SPAN
from torchwright_fx.ir.graph import Program
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import BOOL, Interval
from torchwright_fx.ops.lanes import Bank


def output_steps(prog: Program, code: Lin, rng: Interval, name: str, source: str) -> None:
    """Set ``prog.output_steps`` to the columns ``u_t = [code >= t]`` for t = lo+1 .. hi (the
    reachable codes lo..hi; ``u_lo`` is 1 and ``u_{hi+1}`` is 0) and ``prog.output_codes``."""
    lo, hi = max(0, int(rng.lo)), min(len(prog.vocab) - 1, int(rng.hi))
    if hi - lo > HALF_CODE_SPAN:
        raise CompileError(
            f"{source}\n  the output codes span {lo}..{hi}: precision='half' decodes at most "
            f"{HALF_CODE_SPAN + 1} neighbouring codes (a step's gate must stay a bf16 whole "
            "number); use a smaller vocabulary or precision='fp32'")
    bank = Bank(prog.machine, hi - lo)
    for j, t in enumerate(range(lo + 1, hi + 1)):
        # [c >= t] = relu(c - t + 1) - relu(c - t) on whole numbers c
        bank.hinge(j, code - (t - 1), 1.0)
        bank.hinge(j, code - t, -1.0)
    steps = bank.finish(prog, [BOOL] * (hi - lo), f"{name}.decode", source) if hi > lo else []
    prog.output_steps, prog.output_codes = tuple(steps), (lo, hi)
