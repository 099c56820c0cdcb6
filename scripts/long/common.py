"""What the long-context checks share (scripts/long/check_long*.py): their arguments, issue
37's acceptance program compiled at max_seq_len, the prompt and the reference's top token at
every position, and the one-line JSON result (exit status 1 on any wrong position)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
import long_programs  # noqa: E402

import torchwright_fx as tw  # noqa: E402


def arguments(description: str, tokens: int) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--max-seq-len", type=int, default=131072)
    ap.add_argument("--tokens", type=int, default=tokens)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--save", type=Path, default=Path("build/long"))
    ap.add_argument("--json", type=Path)
    return ap.parse_args()


def program(max_seq_len: int) -> tw.Compiled:
    return tw.compile(long_programs.memory_lines, vocab=long_programs.VOCAB,
                      max_seq_len=max_seq_len).compile()


def case(compiled: tw.Compiled, tokens: int, seed: int) -> tuple[list[int], list[int]]:
    """A prompt of ``tokens`` ids (<bos> included) and the reference's top token at each."""
    ids = long_programs.VOCAB.encode(long_programs.stream(tokens - 1, seed))
    return ids, compiled.printed_ids(ids).tolist()


def report(result: dict[str, Any], got: Any, want: list[int], json_path: Path | None) -> int:
    """Adds the wrong positions to ``result``, prints it and writes it to ``json_path``."""
    wrong = [i for i, (g, w) in enumerate(zip(list(got), want, strict=True)) if int(g) != w]
    result |= {"tokens": len(want), "wrong": len(wrong), "first_wrong": wrong[:10]}
    print(json.dumps(result), flush=True)
    if json_path:
        json_path.write_text(json.dumps(result, indent=1))
    return 1 if wrong else 0
