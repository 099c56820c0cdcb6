"""Regenerate the op table in docs/architecture.md from the op registry.

    python scripts/op_table.py          # rewrite the table between its markers
    python scripts/op_table.py --check  # exit 1 if the doc is stale
"""

from __future__ import annotations

import sys
from pathlib import Path

import torchwright_fx.ops.relu  # noqa: F401  (registers the library ops)
import torchwright_fx.ops.swiglu  # noqa: F401
from torchwright_fx.families.catalog import op_table

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
BEGIN, END = "<!-- op-table:begin (scripts/op_table.py) -->", "<!-- op-table:end -->"


def rewritten(text: str) -> str:
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{op_table()}{END}{tail}"


def main() -> int:
    text = DOC.read_text()
    new = rewritten(text)
    if "--check" in sys.argv[1:]:
        if new != text:
            print(f"{DOC} is stale: run python scripts/op_table.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
