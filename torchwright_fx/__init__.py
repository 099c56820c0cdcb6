"""torchwright_fx: compile torch functions over token streams into stock Phi-3 weights."""

from torchwright_fx.api import Compiled, InputError, Traced, compile, trace
from torchwright_fx.backends.circuit import Circuit
from torchwright_fx.backends.circuit import load as load_circuit
from torchwright_fx.backends.circuit_score import score_circuit
from torchwright_fx.base.errors import CompileError, TorchwrightError
from torchwright_fx.capture.registry import using_vocab
from torchwright_fx.families import functions as functions  # tw.functions, as before
from torchwright_fx.families import intrinsics as intrinsics
from torchwright_fx.families import libraries as libraries
from torchwright_fx.families import positional as positional
from torchwright_fx.families import selectors as selectors
from torchwright_fx.families import tables as tables
from torchwright_fx.families.functions import piecewise, reciprocal
from torchwright_fx.families.gather import gather
from torchwright_fx.families.intrinsics import (
    check,
    claim,
    code,
    emit,
    is_token,
    latch,
    shift,
    token,
)
from torchwright_fx.families.positional import argmax, argmin, mean, position, steps_since
from torchwright_fx.families.selectors import aggregate, select, select_latest, selector_width
from torchwright_fx.families.tables import (
    digits_to_number,
    equals,
    lookup,
    lookup2,
    number_to_digits,
)
from torchwright_fx.verify.verify import verify
from torchwright_fx.vocab import Vocab

__all__ = [
    "Circuit", "CompileError", "Compiled", "InputError", "Traced", "Vocab", "argmax", "argmin",
    "check", "claim", "code", "compile", "digits_to_number", "emit", "equals", "gather",
    "is_token", "latch", "load_circuit", "lookup", "lookup2", "mean", "number_to_digits",
    "piecewise", "position", "reciprocal", "aggregate", "score_circuit", "select",
    "select_latest",
    "selector_width", "shift", "steps_since", "token", "trace",
    "TorchwrightError", "using_vocab", "verify",
]
