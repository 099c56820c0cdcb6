"""The intrinsic registry: how a ``tw.*`` function becomes one fx node while tracing and its
eager semantics otherwise, and the context the eager semantics run in (the vocabulary token
names resolve against; whether ``tw.check`` / ``tw.claim`` assert).

Op families (``intrinsics.py``, ``tables.py``, ``functions.py``, ``positional.py``,
``selectors.py``, ``libraries.py``) declare their intrinsics here with
``@intrinsic(lowering_rule)``; capture and lowering look them up with ``info(target)``.
Nothing here knows how an op lowers.
"""

from __future__ import annotations

import contextlib
import contextvars
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


@dataclass(frozen=True)
class IntrinsicInfo:
    eager: Callable[..., Any]
    lower: Callable[..., Any]
    machine: str | None = None  # set for ops that belong to one op library


INTRINSICS: list[Callable[..., Any]] = []


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


def intrinsic(lower: Callable[..., Any], machine: str | None = None) -> Callable[[F], F]:
    """Declare ``eager`` as an intrinsic lowered by ``lower(ctx, *args, **kwargs)``."""

    def deco(eager: F) -> F:
        @functools.wraps(eager)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            proxy = _find_proxy((args, kwargs))
            if proxy is not None:
                args, kwargs = _refer_callables(args), _refer_callables(kwargs)
                return proxy.tracer.create_proxy("call_function", wrapper, args, kwargs)
            return eager(*resolve_callables(args), **resolve_callables(kwargs))

        wrapper.__tw_intrinsic__ = IntrinsicInfo(eager, lower, machine)  # type: ignore[attr-defined]
        INTRINSICS.append(wrapper)
        return cast(F, wrapper)

    return deco


def info(target: object) -> IntrinsicInfo | None:
    return getattr(target, "__tw_intrinsic__", None)


def checks_on() -> bool:
    """Whether tw.check / tw.claim assert (False inside ``checks_disabled``)."""
    return _CHECKS_ON.get()


def token_value(value: str | float | int) -> float:
    """A table entry or default as a number: a token name is its code in the current vocabulary."""
    return float(current_vocab()[value]) if isinstance(value, str) else float(value)
