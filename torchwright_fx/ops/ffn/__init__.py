"""FFN constructions (docs/design-notes.md §7), written once on top of ``Bank``.

Every non-linear op on one scalar is a piecewise-linear function of it, and every such
function is ``const + slope*x + sum_i w_i * relu(x - k_i)``: a ``Pwl``. ``emit`` writes one into
a bank column: one lane per knot inside x's range, the affine part kept *outside* the bank
(it rides in the readers' weights for free, exactly). The two machines differ only in the
hinge: exact on ReLU, ``SiLU(S*s*z)/(S*s)`` on SwiGLU (within HINGE_MAX_ERROR/(S*s) of relu,
exact once ``S*s*|z| >= SATURATION``; ``s`` is the hinge's sharpness).

Exactness rests on two facts:

- *Grids.* A value that is an affine form of integer-valued signals with rational
  coefficients lives on a lattice ``offset + n*spacing`` (``grid_of``). A step placed a
  quarter spacing from its lattice points (a ramp over the middle half of a gap) is exact at
  every lattice point on both machines, and tolerates input noise up to spacing/4.
- *Exact sums.* Lane values on a half-integer grid, summed with weights +-1, are exact in fp32
  while every partial sum stays below 2**23 (``EXACT_HALF_INTEGERS``). ``magnitude`` bounds
  the partial sums of a column (the sum of |lane| at the worst x); staircases over wide
  ranges are split into two stages to stay under it (docs/design-notes.md §7.3).

Functions taking ``(bank, out, ...)`` without returning an ``Emitted`` put the whole value in
the bank (lanes plus ``bank.const``): the older contract other modules rely on.

The package, one file per concern (imported here, so ``ffn.X`` names every construction):
``grids`` (lattices and mean fractions from the facts), ``pwl`` (piecewise-linear functions
and their lanes), ``fp32`` (exactness proofs and noise bounds), ``steps`` (steps,
staircases, rounding plans, lookups), ``elementwise`` (relu, gates, select, logic) and
``products`` (products, powers, reciprocals, knots for smooth functions) and ``snap``
(near-integers made exact).
"""

from torchwright_fx.base.errors import NotExact, RangeError  # noqa: F401  (read as ffn.X)
from torchwright_fx.base.numerics import GATE_GAP, RAMP_WIDTH  # noqa: F401  (read as ffn.X)
from torchwright_fx.ir.ranges import frac_gcd, rational  # noqa: F401  (re-exported)
from torchwright_fx.ops.ffn.elementwise import (  # noqa: F401
    abs_pwl,
    at_least,
    clamp_pwl,
    gated,
    relu_pwl,
    select,
)
from torchwright_fx.ops.ffn.fp32 import (  # noqa: F401
    Tables,
    exact_lanes,
    gate_rounding,
    hinge_error,
    pwl_noise,
    read_rounding,
    stored_total,
)
from torchwright_fx.ops.ffn.grids import (  # noqa: F401
    Fractions,
    Grid,
    fractions_of,
    grid_of,
    lin_lattice,
    need_finite,
)
from torchwright_fx.ops.ffn.products import (  # noqa: F401
    auto_knots,
    power_pwl,
    power_table_error,
    product,
    product_rounding,
    quarter_square_tables,
    reciprocal_knots,
    reciprocal_pwl,
    saturating_shift,
    sharpness_for,
    table_error,
    table_knots,
    with_sharpness,
)
from torchwright_fx.ops.ffn.pwl import (  # noqa: F401
    Emitted,
    Hinge,
    Pwl,
    emit,
    emit_into_bank,
    lane_count,
    lane_terms,
    linear,
    magnitude,
)
from torchwright_fx.ops.ffn.snap import (  # noqa: F401
    copy,
    copy_error,
    integer_sum_error,
    snap,
    snap_error,
    snapped_range,
)
from torchwright_fx.ops.ffn.steps import (  # noqa: F401
    COMPARE_ADVICE,
    ROUNDERS,
    StairPlan,
    Step,
    approximate,
    check_resolution,
    check_staircase,
    coarse_steps,
    lookup_function,
    lookup_pwl,
    plan_rounding,
    ramp,
    recording_approximations,
    remainder_grid,
    remainder_range,
    rounding_steps,
    staircase,
    step_ramp,
)
