"""torchwright_fx: compile torch functions over token streams into stock Phi-3 weights."""

from torchwright_fx.api import Compiled, InputError, Traced, compile, trace
from torchwright_fx.capture.errors import CompileError
from torchwright_fx.intrinsics import (
    claim,
    code,
    emit,
    is_token,
    latch,
    lookup,
    shift,
    token,
    using_vocab,
)
from torchwright_fx.vocab import Vocab

__all__ = [
    "CompileError", "Compiled", "InputError", "Traced", "Vocab", "claim", "code", "compile",
    "emit", "is_token", "latch", "lookup", "shift", "token", "trace", "using_vocab",
]
