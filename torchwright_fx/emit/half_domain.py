"""The joint values of the signals an MLP bank or lane reads, for the half certificate
(``emit/certify_half.py``): every combination of their values that claims and facts leave.

The signals of the current token are taken jointly (the distinct rows of their per-token
values), every other signal independently (its set of values), and a point that a claim or a
node's facts (``Known.bounds``) rule out is dropped. The product is built one signal at a
time, a signal with one value costing nothing, and after each step every bound whose form
reads the new signal drops the partial points whose form cannot reach its interval whatever
values the signals still to come take (a sound prune: each point it drops, the final filter
drops too). So the points, and their order, are those of the whole product filtered at the
end, without building the whole product: several 0/1 indicators of which a claim keeps at most
one set (a selection's key feature) cost their few allowed combinations, not 2**k.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from torchwright_fx.base.errors import CompileError
from torchwright_fx.base.machines import half_parts
from torchwright_fx.base.numerics import HALF_CERTIFY_POINTS
from torchwright_fx.ir.graph import Producer, Signal
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import Interval

ADVICE = "compile with precision='fp32' (the default)"


@dataclass
class Known:
    """What the certificate knows of each signal: its value per token (a function of the
    current token) or its set of values."""

    per_token: dict[int, np.ndarray] = field(default_factory=dict)
    sets: dict[int, np.ndarray] = field(default_factory=dict)
    # what tw.claim declared of affine forms: points outside a claim are not in any domain
    claims: list[tuple[Lin, Interval]] = field(default_factory=list)
    # the facts of every node's columns of several signals (lowering's sound bounds): they
    # rule points out the same way (a sum of mutually exclusive terms, a 0/1 condition)
    facts: list[tuple[Lin, Interval]] = field(default_factory=list)
    _sorted: list[tuple[Lin, Interval]] = field(default_factory=list, repr=False)

    def bounds(self) -> list[tuple[Lin, Interval]]:
        """Claims and facts, the forms of most signals first (the first that covers part of
        a form is the one taken); sorted once."""
        if len(self._sorted) != len(self.claims) + len(self.facts):
            self._sorted = sorted(self.claims + self.facts, key=lambda f: -len(f[0].terms))
        return self._sorted


def stored(c: float) -> float:
    """A coefficient as the checkpoint stores it (float32)."""
    return float(np.float32(c))


def evaluate(lin: Lin, cols: dict[int, np.ndarray], n: int) -> tuple[np.ndarray, np.ndarray]:
    """``lin`` on the domain, and its terms [n, k + 1] (the constant included), with each
    coefficient as the checkpoint stores it (float32: lowering's float dust, such as a knot
    at 6.000000000000001, is not in the weights)."""
    const = stored(lin.const)
    parts = half_parts(const) or (const,)  # two constant columns where bf16 needs them
    terms = [np.full(n, p) for p in parts] + [stored(c) * cols[s] for s, c in lin.terms.items()]
    t = np.stack(terms, axis=1)
    return t.sum(axis=1), t


def _rows(known: Known, tok: list[int]) -> np.ndarray:
    """The distinct joint values of the signals of the current token (one row each)."""
    if not tok:
        return np.zeros((1, 0))
    return np.unique(np.stack([known.per_token[s] for s in tok], axis=1), axis=0)


def domain_size(known: Known, reads: list[int]) -> int:
    """The number of points in the product of the reads' values (before claims and facts)."""
    tok = [s for s in reads if s in known.per_token]
    size = len(_rows(known, tok)) if tok and len(tok) < len(reads) else 1
    return size * math.prod(len(known.sets[s]) for s in reads if s not in known.per_token)


def too_many(where: Signal | Producer, what: str) -> CompileError:
    """The refusal of a domain or a value set too large to replay (``what``: how large)."""
    return CompileError(
        f"{where.source}\n  {where.name}: precision='half' certifies an op by replaying it on "
        f"every value its inputs can take together, and {what}; narrow their ranges "
        f"(tw.claim), or {ADVICE}")


def _order(free: list[int], bounds: list[tuple[Lin, Interval]]) -> list[int]:
    """The free signals in the order their bounds complete soonest: the signals of the
    bound with the fewest of them first (its prune then bites early), and so on."""
    pending = set(free)
    order: list[int] = []
    for form, _ in sorted(bounds, key=lambda b: sum(s in pending for s in b[0].terms)):
        for s in form.terms:
            if s in pending:
                pending.discard(s)
                order.append(s)
    return order + [s for s in free if s in pending]


@dataclass
class _Bound:
    """A bound's form split for the prune: its constant with the one-valued signals folded
    in, and each free signal's term range [lo, hi] (the signals not yet in the product)."""

    form: Lin
    rng: Interval
    base: float
    span: dict[int, tuple[float, float]]


def _bound(known: Known, form: Lin, rng: Interval, fixed: dict[int, float]) -> _Bound:
    base = stored(form.const) + sum(stored(c) * fixed[s] for s, c in form.terms.items()
                                    if s in fixed)
    span = {}
    for s, c in form.terms.items():
        if s in known.sets and s not in fixed:
            v = stored(c) * known.sets[s]
            span[s] = (float(v.min()), float(v.max()))
    return _Bound(form, rng, base, span)


def _prune(b: _Bound, value: dict[int, np.ndarray], n: int) -> np.ndarray:
    """The partial points (``value``: the columns placed so far) whose form can still land in
    the bound's interval, whatever the signals not yet placed take."""
    partial = np.full(n, b.base)
    lo_rest = hi_rest = 0.0
    scale = abs(b.base)
    for s, c in b.form.terms.items():
        if s in value:
            partial += stored(c) * value[s]
            scale += float(np.abs(stored(c) * value[s]).max(initial=0.0))
        elif s in b.span:
            lo, hi = b.span[s]
            scale += max(abs(lo), abs(hi))
            lo_rest, hi_rest = lo_rest + lo, hi_rest + hi
    slack = 1e-9 * (1.0 + scale)  # float64 sums in another order: far within this
    return (partial + hi_rest >= b.rng.lo - slack) & (partial + lo_rest <= b.rng.hi + slack)


def domain(known: Known, reads: list[int], n_tokens: int, where: Signal | Producer
           ) -> tuple[dict[int, np.ndarray], bool]:
    """Every joint value of ``reads``: column per signal; True when the points are the tokens
    in order (every read a function of the current token). Refused when more than
    HALF_CERTIFY_POINTS points are left at a step of the product."""
    tok = [s for s in reads if s in known.per_token]
    other = [s for s in reads if s not in known.per_token]
    if not other:
        return ({s: known.per_token[s] for s in tok} or {}), True
    rows = _rows(known, tok)
    read_set = set(reads)
    bounds = [(f, r) for f, r in known.bounds()
              if f.terms and set(f.terms) <= read_set and r.finite]
    fixed = {s: float(known.sets[s][0]) for s in other if len(known.sets[s]) == 1}
    free = _order([s for s in other if s not in fixed], bounds)
    by_signal: dict[int, list[_Bound]] = {}
    for f, r in bounds:
        b = _bound(known, f, r, fixed)
        for s in b.span:
            by_signal.setdefault(s, []).append(b)
    # the product as indices: into the rows (every signal of the token), and into each set
    at: dict[int, np.ndarray] = {-1: np.arange(len(rows), dtype=np.int64)}  # -1: the row
    raw = domain_size(known, reads)
    for s in free:
        k, n = len(known.sets[s]), len(at[-1])
        if n * k > HALF_CERTIFY_POINTS:
            raise too_many(where, f"this op's inputs take {raw:,} combinations (more than "
                                  f"{HALF_CERTIFY_POINTS:,})")
        at = {t: np.repeat(c, k) for t, c in at.items()}
        at[s] = np.tile(np.arange(k, dtype=np.int64), n)
        if s in by_signal:
            value = {t: rows[at[-1], c] for c, t in enumerate(tok)}
            value.update({t: known.sets[t][at[t]] for t in at if t != -1})
            keep = np.ones(n * k, dtype=bool)
            for b in by_signal[s]:
                keep &= _prune(b, value, n * k)
            if not keep.all():
                at = {t: c[keep] for t, c in at.items()}
    if len(at[-1]):
        # the points in the order of the whole product: the row, then each set in read order
        order = np.lexsort([at[s] for s in reversed(other) if s in at] + [at[-1]])
        at = {t: c[order] for t, c in at.items()}
    n = len(at[-1])
    out = {s: rows[at[-1], c] for c, s in enumerate(tok)}
    for s in other:
        out[s] = known.sets[s][at[s]].astype(np.float64) if s in at else \
            np.broadcast_to(np.float64(fixed[s]), (n,))  # (a one-valued signal: no copies)
    keep = np.ones(n, dtype=bool)
    for form, rng in bounds:  # points a claim or a node's facts rule out never occur
        value_, _ = evaluate(form, out, n)
        keep &= (value_ >= rng.lo) & (value_ <= rng.hi)
        if rng.step:
            q = (value_ - float(rng.offset)) / float(rng.step)
            keep &= np.abs(q - np.round(q)) < 1e-9
    if not keep.any():  # (an empty domain: keep the product's first point, so shapes stay
        # defined)
        return ({s: rows[:1, c] for c, s in enumerate(tok)} |
                {s: known.sets[s][:1].astype(np.float64) for s in other}), False
    return {s: v[keep] for s, v in out.items()}, False
