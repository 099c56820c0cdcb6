"""The op families: one file per family of torch ops and ``tw.*`` intrinsics, holding its eager
semantics (for ``tw.*``; torch ops bring their own), its facts and its lowering. Importing the
package registers every op."""

from torchwright_fx.families import (  # noqa: F401  (each registers its ops)
    arithmetic,
    functions,
    intrinsics,
    libraries,
    linear,
    logic,
    piecewise,
    positional,
    rounding,
    selectors,
    tables,
)
