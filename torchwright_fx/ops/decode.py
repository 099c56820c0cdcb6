"""Output decoding: ``lm_head`` turns the output code c into logits, with a certificate.

Token t gets ``G * ((t - m) * (c - m) - (t - m)**2 / 2)`` (G = DECODE_GAIN, m the middle of the
reachable codes): up to a term that does not depend on t this is ``G * (t*c - t*t/2)``, which
is largest at the token nearest c. Centring on m keeps every logit below G * span**2 / 2.

The certificate. For an exact code c0 and a compiled code c = c0 + e with |e| <= noise (the
output column's facts), token c0 beats t = c0 - d by ``G * d * (d/2 + e) >= G * (1/2 - noise)``.
The logits themselves are fp32 dot products of lm_head rows with the normalised residual; a
row's result errs by at most ``(k + 1) * 2**-24 * sum_i |w_i| * |h_i|`` (k nonzero terms, one
rounding each, plus the rounding of the stored weights), with |h_i| bounded by the facts; or,
when every weight and every column is a whole number (up to tiny noise) and no sum reaches
2**24, by the noise alone (``_integer_error``). The build is refused unless the smaller bound,
counted for both tokens, stays below the gap.
"""

from __future__ import annotations

import math

import torch

from torchwright_fx.base.numerics import DECODE_GAIN, END_LEAD, FP32_UNIT
from torchwright_fx.ir.graph import Program
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import Interval


def reachable_codes(prog: Program, rng: Interval | None = None) -> tuple[int, int]:
    """The token ids the output can take (its facts, clipped to the vocabulary)."""
    r = prog.output_range if rng is None else rng
    top = len(prog.vocab.tokens) - 1
    lo, hi = max(0, math.ceil(r.lo)), min(top, math.floor(r.hi))
    return (lo, hi) if lo <= hi else (0, top)


def _weights(prog: Program, out: Lin, rng: Interval) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Per token: the weights on the output's signals [vocab, k] and on the constant [vocab]."""
    lo, hi = reachable_codes(prog, rng)
    m = float((lo + hi) // 2)
    ids = torch.arange(len(prog.vocab.tokens), dtype=torch.float64) - m
    coefs = torch.tensor(list(out.terms.values()), dtype=torch.float64)
    on_signals = DECODE_GAIN * ids[:, None] * coefs[None, :]
    on_const = DECODE_GAIN * (ids * (out.const - m) - ids ** 2 / 2)
    return on_signals, on_const, m


def _integer_error(w: torch.Tensor, w0: torch.Tensor, mags: torch.Tensor, noise: torch.Tensor,
                   integral: bool) -> float | None:
    """The rounding bound when every term is an integer up to tiny noise, else None.

    If each weight is an integer, each column is an integer I plus at most ``noise``, and every
    sum of |w * I| stays below 2**24, then every exact partial sum (in any order) is an fp32
    integer. A partial sum off its integer by e < 2**-24 rounds to a value within (1 + u) e of
    that integer (the integer itself is a candidate, and beyond |I| >= 1 it is the nearest),
    so the error never exceeds (1 + u)**k * sum |w| * noise while that stays below 2**-24."""
    if not integral or not bool((w == w.round()).all()) or not bool((w0 == w0.round()).all()):
        return None
    if float(((w.abs() * mags[None, :]).sum(dim=1) + w0.abs()).max()) >= 2.0 ** 24:
        return None
    terms = w.shape[1] + 1
    bound = (1 + FP32_UNIT) ** (2 * terms) * float((w.abs() * noise[None, :]).sum(dim=1).max())
    return bound if bound < FP32_UNIT else None


def _magnitudes(prog: Program, out: Lin) -> torch.Tensor:
    """|h_i| bounds of the output's terms, from their facts (noise included)."""
    return torch.tensor([prog.signals[s].range.magnitude + prog.signals[s].range.noise
                         for s in out.terms], dtype=torch.float64)


def _row_error(w: torch.Tensor, w0: torch.Tensor, mags: torch.Tensor, roundings: int) -> float:
    """A bound on any logit row's fp32 error: ``roundings * u * (sum_i |w_i| |h_i| + |w0|)``."""
    return float((roundings * FP32_UNIT * ((w.abs() * mags[None, :]).sum(dim=1)
                                           + w0.abs())).max())


def margin(prog: Program, out: Lin, rng: Interval) -> float:
    """The certified logit margin of decoding ``out`` (facts ``rng``): <= 0 if none."""
    if rng.noise >= 0.5:
        return -math.inf
    w, w0, _ = _weights(prog, out, rng)
    facts = [prog.signals[s].range for s in out.terms]
    noise = torch.tensor([r.noise for r in facts], dtype=torch.float64)
    mags = _magnitudes(prog, out)
    error = _row_error(w, w0, mags, len(facts) + 2)
    exact = _integer_error(w, w0, mags, noise, all(r.integral for r in facts))
    if exact is not None:
        error = min(error, exact)
    return DECODE_GAIN * (0.5 - rng.noise) - 2.0 * error


def end_gain(prog: Program) -> float | None:
    """B, the gain on the end-of-context flag E in <eos>'s row (ops/end.py), or None.

    At the last position token t's logit is ``L_t(c) + [t = eos] B E``. For an output code c
    (exact or within its noise), ``L_t(c) - L_eos(c) = G (c - eos)**2 / 2`` at most (t = c), so
    with E at its least and each logit's fp32 error err (``margin``'s bound, plus B's own
    (k + 2) u B E) <eos> leads by END_LEAD * G when ``B E - G d**2 / 2 - 2 err >= END_LEAD G``.
    Before the last position E is exactly 0 and B E adds nothing to any logit."""
    from torchwright_fx.ops import end

    r, out = prog.output_range, prog.output
    eos = prog.vocab.eos_id
    if not (r.finite and math.isfinite(r.noise)):
        return None
    d = max(abs(r.lo - r.noise - eos), abs(r.hi + r.noise - eos))
    k = len(out.terms) + 2  # the output's terms, its constant and E
    w, w0, _ = _weights(prog, out, r)
    err = _row_error(w, w0, _magnitudes(prog, out), k)
    low, high = end.lowest_at_end(), end.flag_range().hi
    room = low - 2 * k * FP32_UNIT * high
    if room <= low / 2:
        return None
    return (END_LEAD * DECODE_GAIN + DECODE_GAIN * d * d / 2 + 2 * err) / room


def lm_head(prog: Program, row: torch.Tensor, const_col: int,
            end_row: torch.Tensor | None = None) -> torch.Tensor:
    """The lm_head matrix [vocab, d]; ``row`` reads the output code from the normalised
    residual (its constant on const_col), ``end_row`` the end-of-context flag. Certified by
    ``margin`` and ``end_gain`` at lowering."""
    _, _, m = _weights(prog, prog.output, prog.output_range)
    ids = torch.arange(len(prog.vocab.tokens), dtype=torch.float64) - m
    centred = row.clone()
    centred[const_col] -= m
    head = DECODE_GAIN * ids[:, None] * centred[None, :]
    head[:, const_col] -= DECODE_GAIN * ids ** 2 / 2
    if end_row is not None:
        head[prog.vocab.eos_id] += prog.end_gain * end_row
    return head
