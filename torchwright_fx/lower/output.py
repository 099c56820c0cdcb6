"""The output's proof obligation at lowering: a whole token code at every position."""

from __future__ import annotations

from torchwright_fx.base import numerics
from torchwright_fx.base.errors import CompileError
from torchwright_fx.ir.graph import Program
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import Interval
from torchwright_fx.lower.context import LowerCtx
from torchwright_fx.lower.stream import Stream
from torchwright_fx.ops import decode, end, ffn
from torchwright_fx.ops.attention import Geometry


def certify_output(prog: Program, source: str = "", origin: str = "") -> Interval:
    """Refuse an output that is not provably a whole token code at every position
    (``origin``: where its noise comes from, ``rules.noise_origin``)."""
    r = prog.output_range
    where = f"{source}\n  " if source else ""
    if not r.integral or not r.finite:
        raise CompileError(
            f"{where}the program's output must be a whole token code at every position, but "
            f"its values are only known to lie in [{r.lo:.6g}, {r.hi:.6g}]"
            f"{' on the lattice ' + str(r.step) + 'Z + ' + str(r.offset) if r.lattice else ''}; "
            "map the result to codes with tw.lookup(v, {value: token}), tw.token(...) plus a "
            "whole number, or torch.round over a declared range, and return it (usually "
            "through tw.emit)")
    if r.noise >= numerics.OUTPUT_NOISE_LIMIT:
        raise CompileError(
            f"{where}the output code may be off by {r.noise:.3g} in the compiled model, more "
            "than a quarter of a step, so it cannot be snapped onto whole codes and the token "
            "is not certain; copy a table's result with torch.where(flag, v, 0) before a step "
            "or a large multiple reads it (fp32 rounds a large multiple of the table's column "
            "where it is read), or lower max_seq_len when the noise comes from tw.mean or "
            "tw.position (it grows with the length)"
            f"{origin or '; the noise comes from a mean, a position or an approximate table'}")
    return r


def decodable(ctx: LowerCtx, value: Stream) -> Stream:
    """The output as lm_head will read it: as it is when its decoding is certified, else
    first summed into one column by an MLP pass-through (two lanes: hinge(c) - hinge(-c)),
    whose own rounding is the gate's dot product, a few ulps of the terms' magnitudes."""
    prog = ctx.prog
    col, rng = value.cols[0], value.ranges[0]
    if decode.margin(prog, col, rng) > 0 or len(col.terms) <= 1:
        return value
    bank = ctx.bank(1)
    exact = ffn.integer_sum_error(col, lambda sid: prog.signals[sid].range)
    if exact is not None:  # whole numbers: the gate is exact, the lanes round the code alone
        ffn.linear(bank, 0, col, 1.0)
        out = rng.with_noise(exact + 3 * numerics.FP32_UNIT * rng.magnitude)
        (summed,) = ctx.finish(bank, [out])
        return Stream([summed], [out])
    ffn.linear(bank, 0, col - col.const, 1.0)
    terms = [prog.signals[s].range for s in col.terms]
    rounding = (len(terms) + 2) * numerics.FP32_UNIT * sum(
        abs(c) * (r.magnitude + r.noise) for c, r in zip(col.terms.values(), terms, strict=True))
    out = rng.with_noise(rng.noise + rounding)
    (summed,) = ctx.finish(bank, [out.shift(-col.const)])
    return Stream([summed + col.const], [out])


def end_of_context(prog: Program, geom: Geometry, bos: Lin, name: str, source: str) -> None:
    """Make the model print <eos> at the last certified position (ops/end.py), where the flag
    and lm_head's gain for it are certified at this length and vocabulary; else leave the
    program as it is (the directory then caps generation with max_length)."""
    gain = decode.end_gain(prog)
    if gain is None:
        return
    flag = end.end_flag(prog, geom, bos, name, source)
    if flag is not None:
        prog.end_flag, prog.end_gain = flag, gain
