"""Affine forms over signals.

Linear maps never cost a sublayer: every reader of the residual stream (embedding rows aside,
an attention Q/K/V map, an MLP gate/up map, the ``lm_head``) already applies a matrix, so a
value that is an affine function of materialised signals is kept as that function and folded
into its readers' weights. ``Lin`` is that function: ``sum(coef * signal) + const``; constants
ride on the residual column that is 1.0 at every position.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Lin:
    terms: Mapping[int, float] = field(default_factory=dict)  # signal id -> coefficient
    const: float = 0.0

    @staticmethod
    def of(signal_id: int, coef: float = 1.0) -> Lin:
        return Lin({signal_id: float(coef)})

    @staticmethod
    def constant(value: float) -> Lin:
        return Lin({}, float(value))

    def __add__(self, other: Lin | float) -> Lin:
        if not isinstance(other, Lin):
            return Lin(self.terms, self.const + float(other))
        terms = dict(self.terms)
        for s, c in other.terms.items():
            terms[s] = terms.get(s, 0.0) + c
        return Lin({s: c for s, c in terms.items() if c != 0.0}, self.const + other.const)

    __radd__ = __add__

    def __neg__(self) -> Lin:
        return self * -1.0

    def __sub__(self, other: Lin | float) -> Lin:
        return self + (-other)

    def __rsub__(self, other: float) -> Lin:
        return (-self) + other

    def __mul__(self, k: float) -> Lin:
        k = float(k)
        if k == 0.0:
            return Lin()
        return Lin({s: c * k for s, c in self.terms.items()}, self.const * k)

    __rmul__ = __mul__

    def divided(self, k: float) -> Lin:
        """self / k with each coefficient divided (correctly rounded), not multiplied by
        1/k: 10 * (1/7) is one ulp off 10/7, and the facts read the coefficients as the
        short rationals their doubles round (ir/ranges.read_float)."""
        k = float(k)
        return Lin({s: c / k for s, c in self.terms.items()}, self.const / k)

    @property
    def is_const(self) -> bool:
        return not self.terms

    def signals(self) -> set[int]:
        return set(self.terms)

    def key(self) -> tuple:
        """A hashable identity, for merging identical lanes and heads."""
        return (tuple(sorted(self.terms.items())), self.const)

    def __hash__(self) -> int:
        return hash(self.key())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Lin) and self.key() == other.key()


def lin_sum(items: Iterable[Lin]) -> Lin:
    out = Lin()
    for item in items:
        out = out + item
    return out
