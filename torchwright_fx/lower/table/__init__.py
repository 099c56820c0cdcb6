"""The lowering table: each fx target (torch function, Tensor method, Python operator) mapped
to one rule ``rule(ctx, *args, **kwargs) -> Stream``. A rule builds the output's affine forms
(linear ops: no producer at all) or FFN banks (non-linear ops), and derives the output's value
ranges from its inputs' ranges. Intrinsics carry their own rule (``intrinsics.py``,
``tables.py``, ``functions.py``, ``positional.py``, ``selectors.py``). The constructions
themselves are in ``ops/ffn/``.

One file per op family: ``base`` (the registry, facts helpers, ``Columns``), ``linear``,
``arithmetic`` (products, powers, reciprocals, division), ``rounding``, ``logic``
(comparisons, logic, where) and ``piecewise`` (relu, abs, clamp, max/min). Importing the
package registers every rule.
"""

from torchwright_fx.lower.table import (
    linear,  # noqa: F401  (registers its rules)
    piecewise,  # noqa: F401  (registers its rules)
)
from torchwright_fx.lower.table.arithmetic import (  # noqa: F401
    power,
    product,
    reciprocal,
)
from torchwright_fx.lower.table.base import (  # noqa: F401
    FUNCTIONS,
    METHODS,
    Columns,
    Rule,
    grid,
    pwl_stream,
    read_noise,
    rule,
    snapped,
    user_errors,
    value_set,
)
from torchwright_fx.lower.table.logic import (  # noqa: F401
    COMPARE_ADVICE,
    _count_pwl,
)
from torchwright_fx.lower.table.rounding import (  # noqa: F401
    rounded,
)
