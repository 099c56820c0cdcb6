"""The op registry: one ``OpSpec`` per op (torch function, Tensor method or ``tw.*``
intrinsic) holding its eager semantics, its facts rule and its lowering rule; how a ``tw.*``
function becomes one fx node while tracing and its eager semantics otherwise; and the context
the eager semantics run in (the vocabulary token names resolve against; whether ``tw.check`` /
``tw.claim`` assert).

Registering, in the op's family file (``torchwright_fx/families/``):

- a torch op: ``@lowering(torch.floor, methods=("floor",))`` on its lowering rule and
  ``@facts(torch.floor, methods=("floor",))`` on its facts rule (torch is its eager semantics);
- a ``tw.*`` intrinsic: ``@intrinsic(lower=rule, facts=rule)`` on its eager function (or
  ``@intrinsic`` alone and ``@lowering(fn)`` / ``@facts(fn)`` on rules defined after it);
- an alias whose certificate is the same op's: ``alias(new_target, existing_target)``.

The analysis and lowering interpreters find an fx node's spec with ``spec_of(node)``. Nothing
here knows how an op lowers.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import torch
import torch.fx

from torchwright_fx.vocab import Vocab

F = TypeVar("F", bound=Callable[..., Any])

_VOCAB: contextvars.ContextVar[Vocab | None] = contextvars.ContextVar("tw_vocab", default=None)


@contextlib.contextmanager
def using_vocab(vocab: Vocab) -> Iterator[None]:
    """Make ``vocab`` the one that token names resolve against (set by trace and reference)."""
    token = _VOCAB.set(vocab)
    try:
        yield
    finally:
        _VOCAB.reset(token)


_CHECKS_ON: contextvars.ContextVar[bool] = contextvars.ContextVar("tw_checks", default=True)


@contextlib.contextmanager
def checks_disabled() -> Iterator[None]:
    """Skip tw.check / tw.claim assertions (compile-time shape runs use inputs outside the
    program's domain)."""
    token = _CHECKS_ON.set(False)
    try:
        yield
    finally:
        _CHECKS_ON.reset(token)


def current_vocab() -> Vocab:
    vocab = _VOCAB.get()
    if vocab is None:
        raise RuntimeError("token names need a vocabulary: run the program through tw.trace, "
                           "tw.compile or .reference(), or inside tw.using_vocab(vocab)")
    return vocab


Rule = Callable[..., Any]


@dataclass(frozen=True)
class OpSpec:
    """Everything the compiler knows of one op. ``eager``: the reference semantics (a torch
    function is its own); ``lower(ctx, *args, **kwargs) -> Stream``; ``facts(ctx, *args,
    **kwargs)``: the output's facts from the inputs' (facts/analysis.py); ``machine``: set for
    the ops of one op library (``ops.swiglu`` / ``ops.relu``)."""

    name: str
    eager: Callable[..., Any] | None = None
    lower: Rule | None = None
    facts: Rule | None = None
    machine: str | None = None
    intrinsic: bool = False


# Keys: a callable (torch function, operator, intrinsic) or ("method", name) for Tensor methods.
OPS: dict[object, OpSpec] = {}
INTRINSICS: list[Callable[..., Any]] = []


def _key(target: object) -> object:
    return ("method", target) if isinstance(target, str) else target


# where torch and Python keep functions, as users spell them
_SPELLED = {"torch._VariableFunctionsClass": "torch", "torch._C._nn": "F",
            "torch.nn.functional": "F", "_operator": "operator", "builtins": ""}


def _op_name(target: object) -> str:
    """How a user spells ``target``: ``torch.floor``, ``Tensor.floor``, ``operator.mod``..."""
    if isinstance(target, str):
        return f"Tensor.{target}"
    name = str(getattr(target, "__name__", None) or repr(target))
    qualname = str(getattr(target, "__qualname__", None) or name)
    module = getattr(target, "__module__", None) or ""
    if qualname.startswith("_VariableFunctionsClass."):
        module = "torch._VariableFunctionsClass"
    prefix = _SPELLED.get(module, module)
    return f"{prefix}.{name}" if prefix else name


def register(target: object, **fields: Any) -> OpSpec:
    """Set ``fields`` of ``target``'s spec (created on first use); returns the new spec."""
    key = _key(target)
    old = OPS.get(key) or OpSpec(_op_name(target),
                                 eager=None if isinstance(target, str) else target)  # type: ignore[arg-type]
    OPS[key] = spec = dataclasses.replace(old, **fields)
    return spec


def _registering(field_name: str, targets: tuple[object, ...],
                 methods: tuple[str, ...]) -> Callable[[Rule], Rule]:
    def deco(fn: Rule) -> Rule:
        for t in (*targets, *methods):
            register(t, **{field_name: fn})
        return fn

    return deco


def lowering(*targets: object, methods: tuple[str, ...] = ()) -> Callable[[Rule], Rule]:
    """Register the decorated function as the lowering rule of ``targets`` and ``methods``."""
    return _registering("lower", targets, methods)


def facts(*targets: object, methods: tuple[str, ...] = ()) -> Callable[[Rule], Rule]:
    """Register the decorated function as the facts rule of ``targets`` and ``methods``."""
    return _registering("facts", targets, methods)


def alias(target: object, same_as: object) -> None:
    """``target`` is lowered and analysed as ``same_as`` (its certificate is unchanged)."""
    base = OPS[_key(same_as)]
    register(target, lower=base.lower, facts=base.facts, machine=base.machine)


def spec_of(node: torch.fx.Node) -> OpSpec | None:
    """The registered spec of an fx node's target (None: no rule, or not an op)."""
    if node.op == "call_function":
        return OPS.get(node.target)
    if node.op == "call_method":
        return OPS.get(("method", str(node.target)))
    return None


def _find_proxy(obj: object) -> torch.fx.Proxy | None:
    if isinstance(obj, torch.fx.Proxy):
        return obj
    if isinstance(obj, (list, tuple)):
        for item in obj:
            found = _find_proxy(item)
            if found is not None:
                return found
    if isinstance(obj, dict):
        return _find_proxy(list(obj.values()))
    return None


# fx graphs hold only plain data as arguments; a Python callable passed to an intrinsic (a
# tw.check predicate) is stored here and referred to by a string key.
_CALLABLES: dict[str, Callable[..., Any]] = {}
_CALLABLE_PREFIX = "<tw-callable:"


def _refer_callables(obj: Any) -> Any:
    if callable(obj) and not isinstance(obj, (torch.Tensor, torch.fx.Proxy)):
        key = f"{_CALLABLE_PREFIX}{id(obj)}>"
        _CALLABLES[key] = obj
        return key
    if isinstance(obj, (list, tuple)):
        return type(obj)(_refer_callables(o) for o in obj)
    if isinstance(obj, dict):
        return {k: _refer_callables(v) for k, v in obj.items()}
    return obj


def resolve_callables(obj: Any) -> Any:
    if isinstance(obj, str) and obj.startswith(_CALLABLE_PREFIX):
        return _CALLABLES[obj]
    if isinstance(obj, (list, tuple)):
        return type(obj)(resolve_callables(o) for o in obj)
    if isinstance(obj, dict):
        return {k: resolve_callables(v) for k, v in obj.items()}
    return obj


def intrinsic(lower: Rule | None = None, machine: str | None = None,
              facts: Rule | None = None) -> Callable[[F], F]:
    """Declare ``eager`` as an intrinsic (one fx node when traced, ``eager`` otherwise) lowered
    by ``lower(ctx, *args, **kwargs)`` and analysed by ``facts``."""

    def deco(eager: F) -> F:
        @functools.wraps(eager)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            proxy = _find_proxy((args, kwargs))
            if proxy is not None:
                args, kwargs = _refer_callables(args), _refer_callables(kwargs)
                return proxy.tracer.create_proxy("call_function", wrapper, args, kwargs)
            return eager(*resolve_callables(args), **resolve_callables(kwargs))

        wrapper.__tw_intrinsic__ = True  # type: ignore[attr-defined]
        fields = {"lower": lower, "facts": facts}
        register(wrapper, name=f"{machine or 'tw'}.{eager.__name__}", eager=eager, machine=machine,
                 intrinsic=True, **{k: v for k, v in fields.items() if v is not None})
        INTRINSICS.append(wrapper)
        return cast(F, wrapper)

    return deco


def info(target: object) -> OpSpec | None:
    """The spec of an intrinsic (None for anything else)."""
    spec = OPS.get(target) if getattr(target, "__tw_intrinsic__", False) else None
    return spec


def checks_on() -> bool:
    """Whether tw.check / tw.claim assert (False inside ``checks_disabled``)."""
    return _CHECKS_ON.get()


def token_value(value: str | float | int) -> float:
    """A table entry or default as a number: a token name is its code in the current vocabulary."""
    return float(current_vocab()[value]) if isinstance(value, str) else float(value)
