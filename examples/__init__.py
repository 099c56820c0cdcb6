"""Example programs, one module each. Every example module defines:

- ``VOCAB``: its ``tw.Vocab``;
- ``make(**params) -> tw.Compiled`` and ``program = make()`` (the default build), with
  ``.with_domain(inputs, oracle)`` attached;
- ``oracle(prompt) -> str``: the expected output, in plain Python, independent of the program;
- ``inputs() -> Iterable[str]``: every prompt of the domain when it is small enough to
  enumerate (a few thousand), otherwise a representative enumeration;
- ``sample(rng: random.Random) -> str``: one random prompt from the domain;
- ``EDGE_CASES``: prompts that must be right (the longest inputs among them); ``DEMOS``.
"""

from __future__ import annotations

import pkgutil
from pathlib import Path


def _discover() -> list[str]:
    here = str(Path(__file__).parent)
    return sorted(m.name for m in pkgutil.iter_modules([here])
                  if not m.name.startswith("_") and m.name not in ("compile", "suite")
                  and not m.ispkg)


NAMES = _discover()
