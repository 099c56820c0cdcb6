"""torchwright_fx: compile torch functions over token streams into stock Phi-3 weights."""

from torchwright_fx.api import Compiled, InputError, Traced, compile, trace
from torchwright_fx.capture.errors import CompileError
from torchwright_fx.intrinsics import (
    argmax,
    argmin,
    check,
    claim,
    code,
    emit,
    gather,
    is_token,
    latch,
    lookup,
    mean,
    position,
    shift,
    steps_since,
    token,
    using_vocab,
)
from torchwright_fx.verify.verify import verify
from torchwright_fx.vocab import Vocab

__all__ = [
    "CompileError", "Compiled", "InputError", "Traced", "Vocab", "argmax", "argmin", "check",
    "claim",
    "code", "compile", "emit", "gather", "is_token", "latch", "lookup", "mean", "position",
    "shift", "steps_since", "token", "trace", "using_vocab", "verify",
]
