"""Shared by the RASP examples (tracr's ``lib.py`` in our language): the prompt layout, the
selectors every program needs, and the printer that writes numbers after the trigger.

The layout. A prompt is the RASP input, one token per element, then ``\\n`` (the trigger):
``<bos>`` is position 0, the input is at 1..n, the trigger at n + 1. RASP evaluates every
position with the whole input in view; a causal model sees only the past, so each program
computes its answer at or after the trigger, where the whole input is behind it, and prints
it one token per step. The answer ends with ``<eos>``; before the trigger the program
predicts ``<eos>`` (nothing to print yet).

Sequences of numbers are printed as decimal integers separated by ``,`` (``abac\\n`` ->
``2,1,2,1`` for ``hist``): element ``e`` is being printed once ``e`` separators have been
printed (a ``tw.selector_width`` over the separators), character ``d`` of it is the one
``d`` steps after the latest separator or the trigger (``tw.steps_since``). A single value
is printed once, its character ``d`` counted by the characters printed so far (a selector
width over their tokens, which the input does not hold). Either way one table
(``tw.lookup2`` on character index and value) gives the token. The printed characters come
first in each ``VOCAB``: low codes, close together, give that table its logit margin.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch

import torchwright_fx as tw

TRIGGER = "\n"
SEP = ","
DIGITS = "0123456789"


# -- the prompt layout ---------------------------------------------------------------------------
@dataclass
class Layout:
    """Streams every program reads: the trigger, which side of it a position is on, and the
    step of the answer being printed."""

    trigger: torch.Tensor  # 1 at the trigger
    after: torch.Tensor    # 1 at the trigger and every position after it (exact 0/1)
    step: torch.Tensor     # k at the trigger + k (the k-th answer token is predicted there)


def layout(x: torch.Tensor) -> Layout:
    trigger = tw.is_token(x, TRIGGER)
    # the trigger's value at the latest trigger: 0 before it (<bos> counts, with 0), 1 after.
    # A latch of a token read is exact, so `after` can be a select key.
    after = tw.latch(trigger, trigger)
    return Layout(trigger, after, tw.steps_since(trigger))


def input_only(lay: Layout) -> torch.Tensor:
    """A selector factor: keys j on the input (before the trigger), for any query."""
    return tw.select(lay.after, lay.after, lambda k, q: k == 0)


def length(lay: Layout) -> torch.Tensor:
    """RASP's ``length`` (SelectorWidth of an all-true Select), at and after the trigger: the
    number of input positions."""
    return tw.selector_width(input_only(lay))


def count_tokens(x: torch.Tensor, alphabet: str) -> torch.Tensor:
    """How many positions so far hold a token of ``alphabet`` (a selector width keyed on the
    token alone): at and after the trigger, the input's length when the input is written in
    ``alphabet`` and the answer is not (a TRUE select would count the trigger and the printed
    characters too)."""
    codes = [float(tw.token(t)) for t in alphabet]
    return tw.selector_width(tw.select(x, x, lambda k, q: k in codes))


def eos_before_trigger(lay: Layout, code: torch.Tensor) -> torch.Tensor:
    eos = torch.full_like(code, float(tw.token("<eos>")))
    return torch.where(lay.after.bool(), code, eos)


# -- printing ------------------------------------------------------------------------------------
# A number is printed by one table on (value, character index): two MLP stages after the value
# and the step are known (clamp the step, then the table), whatever the number of digits.
def _char_table(lo: int, hi: int, end: Callable[[int], str],
                text: Callable[[int], str] = str) -> tuple[dict, int]:
    """{(b, v - lo): token}: b < w is character b of text(v) (w = the longest), b == w the
    token after the number (``end(v)``); with 2 (w + 2) columns, the second half for the last
    element; the index w + 1 (before the trigger) is ``<eos>``."""
    w = max(len(text(v)) for v in range(lo, hi + 1))
    table = {}
    for v in range(lo, hi + 1):
        s = text(v)
        for last in (0, 1):
            for b in range(w + 2):
                tok = s[b] if b < len(s) else ("<eos>" if last or b == w + 1 else end(v))
                table[(b + last * (w + 2), v - lo)] = tok
    return table, w


def _char_index(d: torch.Tensor, lay: Layout, w: int) -> torch.Tensor:
    """min(d, w + 1), or w + 1 before the trigger (d is then the position; nothing is
    printed). A table rather than a clamp: its steps are flat at every whole number, so the
    index is exact even though d, decoded from positions, is not."""
    return tw.lookup(d + (w + 1) * (1 - lay.after), {k: k for k in range(w + 1)},
                     default=w + 1)


def print_one(x: torch.Tensor, lay: Layout, value: torch.Tensor, lo: int, hi: int,
              text: Callable[[int], str] = str) -> torch.Tensor:
    """The output stream printing ``text(value)`` (``value`` a whole number in [lo, hi]; by
    default in decimal) after the trigger, then ``<eos>``. The input must not hold the
    characters printed: those printed so far are counted by their tokens (one selector width,
    read in the same layer as ``value``'s), which saves the layers that ``steps_since`` and
    the index table take."""
    table, w = _char_table(lo, hi, lambda v: "<eos>", text)
    value = tw.claim(value, lo, hi, integral=True)
    chars = [float(tw.token(t)) for t in sorted({t for v in range(lo, hi + 1) for t in text(v)})]
    printed = tw.claim(tw.selector_width(tw.select(x, x, lambda k, q: k in chars)), 0, w,
                       integral=True)
    index = printed + (w + 1) * (1 - lay.after)  # w + 1 before the trigger: <eos>
    return tw.lookup2(index, value - lo, table, default="<eos>")


def print_sequence(x: torch.Tensor, lay: Layout, count: torch.Tensor, lo: int, hi: int,
                   element: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """The output stream printing ``count`` whole numbers in [lo, hi] separated by ``,``:
    element e is ``element(e)``, computed at every step of the answer from the element index
    e (the number of separators printed so far)."""
    sep = float(tw.token(SEP))
    e = tw.selector_width(tw.select(x, x, lambda k, q: k == sep))
    d = tw.steps_since(tw.is_token(x, [TRIGGER, SEP]))
    table, w = _char_table(lo, hi, lambda v: SEP)
    last = (e - count >= -1).float()
    index = _char_index(d, lay, w) + (w + 2) * last
    value = tw.claim(element(e), lo, hi, integral=True)
    return tw.lookup2(index, value - lo, table, default="<eos>")


def answered(lay: Layout, count: torch.Tensor) -> torch.Tensor:
    """1 once ``count`` tokens are printed after the trigger, and before the trigger (where
    the step counts from <bos>)."""
    return torch.maximum((lay.step - count >= 0).float(), 1 - lay.after)


def print_tokens(lay: Layout, count: torch.Tensor, token: torch.Tensor) -> torch.Tensor:
    """The output stream printing ``count`` tokens after the trigger: at step k, ``token``
    (a code stream, computed at every step from ``lay.step``), then ``<eos>``."""
    return torch.where(answered(lay, count).bool(), float(tw.token("<eos>")), token)


def value_at(v: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``v`` at input element ``index`` (0-based; position index + 1)."""
    return tw.gather(v, index + 1)


# -- oracles and prompts -------------------------------------------------------------------------
def parse(prompt: str) -> str:
    assert prompt.endswith(TRIGGER) and TRIGGER not in prompt[:-1], prompt
    return prompt[:-1]


def numbers(values: Sequence[int]) -> str:
    return SEP.join(str(v) for v in values)


def all_prompts(alphabet: str, max_len: int, longest: int, shortest: int = 1) -> Iterator[str]:
    """Every input over ``alphabet`` of ``shortest`` to ``min(max_len, longest)`` tokens,
    shortest first, each followed by the trigger: a program's ``inputs()``."""
    for n in range(shortest, min(max_len, longest) + 1):
        for t in itertools.product(alphabet, repeat=n):
            yield "".join(t) + TRIGGER


def random_prompt(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n)) + TRIGGER
