"""calculator_memorize: the calculator's I/O for single digits (``7*8\\n`` -> ``56``,
``1-5\\n`` -> ``-4``), computing nothing: every answer is a memorized fact.

A prompt is always ``a op b\\n``, so at the position j steps after the newline (where the
answer's j-th token is predicted) the three characters sit j+3, j+2 and j+1 places back.
Their codes make the key ``100*op + 10*a + b`` (op = 0, 1, 2 for ``+ - *``): a free linear
map of three shifted per-token tables. One lookup table per answer position maps the key to
that token. The table is switched off away from its position by adding 300 to the key (no
entries there, so it reads 0): the whole model is one layer, shifts then tables.

N = 2 is not offered: its 36,300 prompts (operands 0..99, written with 1 or 2 digits) would
need tables over ~10**4 keys for each of 4 answer positions, some 10**5 lanes.

report(); the seed's build was 11 layers at d=4096, 586M parameters:
  calculator_memorize: 1 layers (critical-path bound 1), d_model=16 (peak live width 12),
  d_head=32, 4 heads/layer (4 used), 742 lanes/layer, 44,400 parameters (88.0% zeros)
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import torch

import torchwright_fx as tw
from examples import _calc
from examples._calc import OPS, VOCAB, oracle

DEMOS = ["7*8\n", "1-5\n", "9+9\n", "0*5\n"]
EDGE_CASES = _calc.edge_cases(1)
ANSWER_LEN = 2  # longest answer: "-9", "18", "81"


def inputs() -> Iterator[str]:
    return _calc.inputs(1)


def sample(rng: random.Random) -> str:
    return f"{rng.randint(0, 9)}{rng.choice(OPS)}{rng.randint(0, 9)}\n"


def facts() -> dict[int, str]:
    """key -> answer, for all 300 prompts."""
    return {100 * OPS.index(op) + 10 * a + b: oracle(f"{a}{op}{b}\n")
            for op in OPS for a in range(10) for b in range(10)}


def make(**options: Any) -> tw.Compiled:
    eos = VOCAB["<eos>"]
    tables = [{key: VOCAB[ans[j]] - eos for key, ans in facts().items() if j < len(ans)}
              for j in range(ANSWER_LEN)]

    def calculator_memorize(x: torch.Tensor) -> torch.Tensor:
        newline = tw.is_token(x, "\n")
        digit = tw.lookup(x, {str(d): d for d in range(10)})
        op = tw.lookup(x, {o: i for i, o in enumerate(OPS)})
        seen = [torch.cat([digit, op, newline], -1)]
        seen += [tw.shift(seen[0], s) for s in range(1, ANSWER_LEN + 3)]
        out = torch.zeros_like(newline) + eos
        for j, table in enumerate(tables):
            key = 100 * seen[j + 2][:, 1:2] + 10 * seen[j + 3][:, 0:1] + seen[j + 1][:, 0:1]
            here = seen[j][:, 2:3]  # 1 at the position j steps after the newline
            # The answer's token j minus <eos> (0 where the answer is shorter, and off-position).
            out = out + tw.lookup(key + 300 * (1 - here), table, default=0)
        return out

    return tw.compile(calculator_memorize, vocab=VOCAB, **options).with_domain(inputs, oracle)


program = make()
