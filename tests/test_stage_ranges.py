"""ir/ranges.py (Interval: the facts of one column) and ir/linear.py (Lin: affine forms), alone.

Every Interval rule is checked against brute force: the exact result of the operation on
sampled points of its operands (every lattice point of an integral or lattice operand, random
rationals of a real one) lies in the result's [lo, hi] and on its lattice, and the ends are
attained (each rule here is monotone in every operand on a box, so its extremes sit at
corners). The arithmetic is exact (Fractions): a float computation would hide off-by-one-ulp
bounds.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable
from fractions import Fraction

import pytest

from torchwright_fx.ir.linear import Lin, lin_sum
from torchwright_fx.ir.ranges import (
    BOOL,
    EXACT,
    INEXACT,
    ONCE,
    Interval,
    join,
    lattice_product,
    lattice_sum,
    read_float,
)

# -- operands -------------------------------------------------------------------------------------

OPERANDS: dict[str, Interval] = {
    "int[-3,5]": Interval(-3.0, 5.0, integral=True),
    "int[2,7]": Interval(2.0, 7.0, integral=True),
    "int[-4,-1]": Interval(-4.0, -1.0, integral=True),
    "quarter+half*n[-1.25,2.75]": Interval.of(-1.25, 2.75, (Fraction(1, 2), Fraction(1, 4))),
    "3n[0,3]": Interval.of(0.0, 3.0, (Fraction(3), Fraction(0))),
    "point 2.5": Interval.point(2.5),
    "bool": BOOL,
    "real[-1.5,0.5]": Interval(-1.5, 0.5),
}


def points(r: Interval, n_real: int = 12, seed: int = 0) -> list[Fraction]:
    """Values the facts allow: every lattice point in [lo, hi], else both ends and random
    rationals between them."""
    lo, hi = Fraction(r.lo), Fraction(r.hi)
    if r.step is not None:
        if r.step == 0:
            return [r.offset]
        first = r.offset + math.ceil((lo - r.offset) / r.step) * r.step
        out = []
        v = first
        while v <= hi:
            out.append(v)
            v += r.step
        return out
    rng = random.Random(seed)
    zero = [Fraction(0)] if lo <= 0 <= hi else []  # where |x|, x * y and the like turn
    return [lo, hi, *zero] + [lo + (hi - lo) * Fraction(rng.randrange(1, 1000), 1000)
                       for _ in range(n_real)]


def check_result(out: Interval, values: list[Fraction], tight: bool = True) -> None:
    """Every value in [out.lo, out.hi] and on out's lattice; with ``tight``, the ends are
    attained."""
    assert values
    lo, hi = Fraction(out.lo), Fraction(out.hi)
    outside = [v for v in values if not lo <= v <= hi]
    assert not outside, f"{out}: {[float(v) for v in outside[:5]]} outside [{out.lo}, {out.hi}]"
    if out.step is not None:
        off_lattice = [v for v in values if (out.step == 0 and v != out.offset)
                       or (out.step != 0 and ((v - out.offset) / out.step).denominator != 1)]
        assert not off_lattice, f"{[float(v) for v in off_lattice[:5]]} off the lattice " \
                                f"{out.offset} + {out.step}Z"
    if tight:
        assert min(values) == lo and max(values) == hi, (float(min(values)), float(max(values)),
                                                         out.lo, out.hi)


BINARY: dict[str, tuple[Callable[[Interval, Interval], Interval],
                        Callable[[Fraction, Fraction], Fraction]]] = {
    "add": (lambda a, b: a + b, lambda x, y: x + y),
    "sub": (lambda a, b: a - b, lambda x, y: x - y),
    "mul": (lambda a, b: a * b, lambda x, y: x * y),
    "max": (lambda a, b: a.extremum(b, 1.0), max),
    "min": (lambda a, b: a.extremum(b, -1.0), min),
}

PAIRS = list(itertools.product(OPERANDS, repeat=2))


@pytest.mark.parametrize("op", list(BINARY))
@pytest.mark.parametrize(("a", "b"), PAIRS)
def test_binary_rule_holds_every_result(op: str, a: str, b: str) -> None:
    rule, exact = BINARY[op]
    ra, rb = OPERANDS[a], OPERANDS[b]
    values = [exact(x, y) for x in points(ra, seed=1) for y in points(rb, seed=2)]
    check_result(rule(ra, rb), values)


@pytest.mark.parametrize(("a", "b"), PAIRS)
def test_hull_holds_both_operands(a: str, b: str) -> None:
    ra, rb = OPERANDS[a], OPERANDS[b]
    check_result(ra.hull(rb), points(ra, seed=1) + points(rb, seed=2))


# dyadic factors: the float ends are then exact and the rule must be tight
SCALES = [2.0, -3.0, 0.5, -0.25, 0.0, 1.0]


@pytest.mark.parametrize("k", SCALES)
@pytest.mark.parametrize("name", list(OPERANDS))
def test_scale(name: str, k: float) -> None:
    r = OPERANDS[name]
    check_result(r.scale(k), [x * Fraction(k) for x in points(r)])


@pytest.mark.parametrize("name", list(OPERANDS))
def test_scale_by_a_decimal_reads_it_as_the_decimal(name: str) -> None:
    """x * 0.1: the lattice is read with 0.1 = 1/10 (what thresholds compare against); the
    float ends are within rounding of the exact ones."""
    r = OPERANDS[name]
    out = r.scale(0.1)
    values = [x * Fraction(1, 10) for x in points(r)]
    slack = Fraction(1, 10 ** 12)
    assert all(Fraction(out.lo) - slack <= v <= Fraction(out.hi) + slack for v in values)
    if out.step is not None and r.step:
        assert out.step == r.step / 10
        assert all(((v - out.offset) / out.step).denominator == 1 for v in values)


@pytest.mark.parametrize("c", [1.0, -0.5, 0.25, 3.0])
@pytest.mark.parametrize("name", list(OPERANDS))
def test_shift(name: str, c: float) -> None:
    r = OPERANDS[name]
    check_result(r.shift(c), [x + Fraction(c) for x in points(r)])


@pytest.mark.parametrize("name", list(OPERANDS))
def test_neg_and_absolute(name: str) -> None:
    r = OPERANDS[name]
    check_result(-r, [-x for x in points(r)])
    values = [abs(x) for x in points(r)]
    out = r.absolute()
    check_result(out, values, tight=False)
    assert Fraction(out.hi) == max(values)
    # the least |x| is attained when 0 is a value or the sign is fixed; a lattice that skips
    # 0 (1/4 + Z/2 over [-1.25, 2.75]) gets the sound but loose bound 0
    if 0 in values or r.lo >= 0 or r.hi <= 0:
        assert Fraction(out.lo) == min(values)
    else:
        assert out.lo == 0.0


@pytest.mark.parametrize(("lo", "hi"), [(0.0, 2.0), (-10.0, 10.0), (3.0, 4.0), (-2.0, -2.0),
                                        (-math.inf, 1.0), (0.5, math.inf)])
@pytest.mark.parametrize("name", list(OPERANDS))
def test_clamp(name: str, lo: float, hi: float) -> None:
    r = OPERANDS[name]
    values = [min(max(x, Fraction(lo)) if math.isfinite(lo) else x, Fraction(hi))
              if math.isfinite(hi) else (max(x, Fraction(lo)) if math.isfinite(lo) else x)
              for x in points(r)]
    check_result(r.clamp(lo, hi), values)


@pytest.mark.parametrize("k", [2.0, 4.0, -8.0])
@pytest.mark.parametrize("name", list(OPERANDS))
def test_divided_by_a_power_of_two(name: str, k: float) -> None:
    r = OPERANDS[name]
    check_result(r.divided(k), [x / Fraction(k) for x in points(r)])


def test_noise_composes() -> None:
    a = Interval(0.0, 2.0, integral=True).with_noise(0.01)
    b = Interval(-1.0, 3.0, integral=True).with_noise(0.02)
    assert (a + b).noise == pytest.approx(0.03)
    assert (a - b).noise == pytest.approx(0.03)
    assert a.scale(-4.0).noise == pytest.approx(0.04)
    # |x y - x0 y0| <= |x0| e_y + |y0| e_x + e_x e_y with |x0| <= 2, |y0| <= 3
    assert (a * b).noise == pytest.approx(2 * 0.02 + 3 * 0.01 + 0.01 * 0.02)
    assert a.hull(b).noise == 0.02 and a.extremum(b, 1.0).noise == 0.02
    assert a.shift(1.0).noise == 0.01 and a.clamp(0.0, 1.0).noise == 0.01
    assert a.exact().noise == 0.0 and a.exact().lattice == a.lattice


def test_multiplying_by_a_real_loses_the_lattice() -> None:
    real = OPERANDS["real[-1.5,0.5]"]
    assert real.step is None
    assert (OPERANDS["int[-3,5]"] * real).step is None
    assert (OPERANDS["int[-3,5]"] + real).step is None
    # the hull of an integral and a real value is real: no lattice may be claimed
    assert OPERANDS["int[-3,5]"].hull(real).step is None


# -- constructors and properties ------------------------------------------------------------------


def test_constructor_normalises_the_lattice() -> None:
    r = Interval(-3.0, 5.0, integral=True)
    assert (r.step, r.offset, r.integral) == (1, 0, True)
    s = Interval.of(1.0, 7.0, (Fraction(2), Fraction(9)))  # 9 mod 2 = 1
    assert (s.step, s.offset, s.integral) == (2, 1, True)
    half = Interval.of(0.0, 1.0, (Fraction(1, 2), Fraction(0)))
    assert not half.integral and not half.is_bool
    assert BOOL.is_bool and BOOL.integral and not Interval(0.0, 2.0, integral=True).is_bool
    p = Interval.point(-4.0)
    assert (p.lo, p.hi, p.step, p.offset, p.integral) == (-4.0, -4.0, 0, -4, True)
    assert Interval(-1.0, 3.0).magnitude == 3.0 and Interval(-5.0, 3.0).magnitude == 5.0
    assert not Interval(0.0, math.inf).finite and Interval(0.0, 1.0).finite


def test_constructor_refuses_empty_and_inconsistent_facts() -> None:
    with pytest.raises(ValueError, match="empty"):
        Interval(2.0, 1.0)
    with pytest.raises(AssertionError, match="inconsistent facts"):
        Interval.of(0.2, 0.8, (Fraction(1), Fraction(0)))  # no integer in [0.2, 0.8]


def test_point_rounding() -> None:
    assert Interval.point(0.5).rounding == EXACT
    assert Interval.point(3.0).rounding == EXACT
    assert Interval.point(0.1).rounding == ONCE  # fp32 does not hold 1/10
    assert Interval.point(0.1).offset == Fraction(1, 10)


def test_of_values_reads_decimals() -> None:
    r = Interval.of_values([0.1, 0.3, 0.7])
    assert (r.lo, r.hi) == (0.1, 0.7)
    assert r.step == Fraction(1, 5) and r.offset == Fraction(1, 10)
    assert r.rounding == ONCE
    ints = Interval.of_values([4.0, 10.0, -2.0])
    assert (ints.lo, ints.hi, ints.step, ints.offset % 6) == (-2.0, 10.0, 6, 4)
    assert ints.rounding == EXACT


def test_rounding_rules() -> None:
    once = Interval.point(0.1)
    exact = Interval(0.0, 3.0, integral=True)
    assert (exact + exact).rounding == EXACT
    assert (exact + once).rounding != EXACT
    assert (once + once).rounding != EXACT
    assert (once + Interval.point(0.0)).rounding == ONCE  # adding 0 changes nothing
    assert exact.scale(4.0).rounding == EXACT
    assert exact.scale(0.3).rounding == INEXACT
    assert exact.divided(10.0).rounding == ONCE  # one correctly rounded division
    assert (exact * BOOL).rounding == EXACT and (once * BOOL).rounding == ONCE


def test_lattice_helpers() -> None:
    f = Fraction
    assert join((f(2), f(0)), (f(3), f(1))) == (f(1), f(0))
    assert join((f(0), f(1, 2)), (f(0), f(3, 2))) == (f(1), f(1, 2))
    assert join(None, (f(1), f(0))) is None
    assert lattice_sum((f(1, 2), f(1, 4)), (f(1, 3), f(0))) == (f(1, 6), f(1, 12))
    # (1 + 2n)(1 + 2m) is odd: step 2 through 1
    assert lattice_product((f(2), f(1)), (f(2), f(1))) == (f(2), f(1))
    assert read_float(0.1) == f(1, 10) and read_float(0.5) == f(1, 2)
    assert read_float(math.pi / 10) == Fraction(math.pi / 10)


# -- Lin ------------------------------------------------------------------------------------------


def value(lin: Lin, env: dict[int, Fraction]) -> Fraction:
    return Fraction(lin.const) + sum((Fraction(c) * env[s] for s, c in lin.terms.items()),
                                     Fraction(0))


LINS = [
    Lin.of(0),
    Lin.of(1, -2.0) + 3.0,
    Lin({0: 0.5, 2: 4.0}, -1.0),
    Lin.constant(7.0),
    Lin(),
]


@pytest.mark.parametrize(("i", "j"), list(itertools.product(range(len(LINS)), repeat=2)))
def test_lin_algebra_against_evaluation(i: int, j: int) -> None:
    a, b = LINS[i], LINS[j]
    rng = random.Random(i * 10 + j)
    for _ in range(5):
        env = {s: Fraction(rng.randrange(-20, 21), 4) for s in range(3)}
        va, vb = value(a, env), value(b, env)
        assert value(a + b, env) == va + vb
        assert value(a - b, env) == va - vb
        assert value(-a, env) == -va
        assert value(a * 3.0, env) == 3 * va and value(0.5 * a, env) == va / 2
        assert value(a + 2.5, env) == va + Fraction(5, 2)
        assert value(2.5 + a, env) == va + Fraction(5, 2)
        assert value(1.0 - a, env) == 1 - va
        assert value(a.divided(4.0), env) == va / 4
        assert value(lin_sum([a, b, a]), env) == 2 * va + vb


def test_lin_drops_cancelled_terms_and_compares_by_value() -> None:
    x, y = Lin.of(0), Lin.of(1)
    assert (x + y - x).terms == {1: 1.0}
    assert (x - x).is_const and (x - x).signals() == set()
    assert (x * 0.0) == Lin() and (x * 0.0).signals() == set()
    assert x + y == y + x and hash(x + y) == hash(y + x)
    assert {x + y: "a"}[y + x] == "a"  # lanes and heads are merged by this identity
    assert x + 1.0 != x and x * 2.0 != x
    assert (3.0 * x + 2.0).signals() == {0} and not (3.0 * x).is_const
    assert Lin.constant(2.0).is_const and Lin.constant(2.0).const == 2.0
    assert lin_sum([]) == Lin()


def test_lin_divided_is_correctly_rounded() -> None:
    """10 * (1/7) is one ulp off 10/7; ``divided`` divides each coefficient."""
    assert (Lin.of(0, 10.0).divided(7.0)).terms[0] == 10.0 / 7.0
    assert (Lin.of(0, 10.0).divided(7.0)).terms[0] != 10.0 * (1.0 / 7.0)
    assert Lin.constant(10.0).divided(7.0).const == 10.0 / 7.0


def test_lin_is_immutable() -> None:
    x = Lin.of(0)
    y = x + Lin.of(1)
    _ = y + x
    assert x.terms == {0: 1.0} and y.terms == {0: 1.0, 1: 1.0}
