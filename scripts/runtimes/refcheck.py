"""Shared by check_vllm.py and check_tl.py (run in their own venvs, with numpy, torch and
transformers only): the reference written by compile_checkpoints.py, transformers' greedy
speed measured in the same venv, the comparison and the table."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPEATS = 3  # timed passes over the prompts; the best counts


@dataclass
class Case:
    prompt: str
    prompt_ids: list[int]
    new_ids: list[int]  # transformers' greedy answer, <eos> included when it stopped there
    text: str
    oracle: str
    logits: np.ndarray  # [len(prompt_ids) + len(new_ids), vocab]: over prompt + answer


@dataclass
class Example:
    name: str
    directory: Path
    max_seq_len: int
    vocab_size: int
    cases: list[Case]


@dataclass
class Row:
    name: str
    total: int
    right: int = 0
    max_diff: float = 0.0
    tok_s: float = 0.0
    hf_tok_s: float = 0.0
    extra: dict[str, str] = field(default_factory=dict)
    wrong: list[str] = field(default_factory=list)

    def compare(self, case: Case, new_ids: list[int], text: str, eos: int) -> bool:
        """Right: the same ids as transformers (a trailing <eos> aside, some runtimes drop
        it), the same text, and the oracle's answer."""
        ok = (strip(new_ids, eos) == strip(case.new_ids, eos) and text == case.text
              and text == case.oracle)
        if ok:
            self.right += 1
        else:
            self.wrong.append(f"{self.name} {case.prompt!r}: {text!r} {strip(new_ids, eos)}, "
                              f"transformers {case.text!r} {strip(case.new_ids, eos)}, "
                              f"oracle {case.oracle!r}")
        return ok

    def diff(self, got: np.ndarray, want: np.ndarray) -> None:
        if got.shape != want.shape:
            raise ValueError(f"{self.name}: logits {got.shape}, reference {want.shape}")
        d = np.abs(got.astype(np.float64) - want)
        worst = float(np.max(d, initial=0.0)) if np.isfinite(d).all() else float("inf")
        self.max_diff = max(self.max_diff, worst)


def strip(ids: list[int], eos: int) -> list[int]:
    return list(ids[:-1]) if ids and ids[-1] == eos else list(ids)


def load(root: str | Path, names: list[str] | None = None) -> list[Example]:
    root = Path(root)
    names = names or json.loads((root / "index.json").read_text())
    out = []
    for name in names:
        meta = json.loads((root / f"{name}_ref.json").read_text())
        cases = [Case(p["prompt"], p["prompt_ids"], p["new_ids"], p["text"], p["oracle"],
                      np.load(root / p["logits"])) for p in meta["prompts"]]
        out.append(Example(name, (root / meta["directory"]).resolve(), meta["max_seq_len"],
                           meta["vocab_size"], cases))
    return out


def eos_id(directory: Path) -> int:
    return int(json.loads((directory / "config.json").read_text())["eos_token_id"])


def best_rate(run: Callable[[], int], repeats: int = REPEATS) -> float:
    """Tokens/s of ``run()`` (which returns how many tokens it generated): the best of
    ``repeats`` timed runs, as the machine is shared and the models are tiny."""
    best = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        tokens = run()
        best = max(best, tokens / (time.perf_counter() - start))
    return best


def transformers_speed(ex: Example) -> float:
    """Greedy tokens/s of transformers (default attention, fp32, batch 1, one prompt after
    another) in this venv, after one warm-up; checks that it still gives the reference."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(ex.directory, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(ex.directory)
    eos = eos_id(ex.directory)

    def generate(case: Case) -> list[int]:
        ids = tok(case.prompt, return_tensors="pt")["input_ids"]
        out = model.generate(ids, do_sample=False,
                             max_new_tokens=ex.max_seq_len - ids.shape[1])
        return out[0, ids.shape[1]:].tolist()

    with torch.no_grad():
        for case in ex.cases:
            new = generate(case)
            if strip(new, eos) != strip(case.new_ids, eos):
                raise AssertionError(f"{ex.name} {case.prompt!r}: transformers in this venv "
                                     f"gives {new}, the reference {case.new_ids}")
        return best_rate(lambda: sum(len(generate(c)) for c in ex.cases))


def table(runtime: str, rows: list[Row]) -> str:
    extra = list(dict.fromkeys(k for r in rows for k in r.extra))
    head = ["example", "right/total", "max \\|logit diff\\|", f"tok/s ({runtime})",
            "tok/s (transformers)", *extra]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r.name, f"{r.right}/{r.total}", f"{r.max_diff:.3g}", f"{r.tok_s:.0f}",
                 f"{r.hf_tok_s:.0f}", *(r.extra.get(k, "") for k in extra)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def finish(runtime: str, rows: list[Row]) -> int:
    print()
    print(table(runtime, rows))
    wrong = [w for r in rows for w in r.wrong]
    for w in wrong:
        print("WRONG", w)
    right, total = sum(r.right for r in rows), sum(r.total for r in rows)
    print(f"\n{runtime}: {right}/{total} greedy outputs right, max |logit diff| "
          f"{max((r.max_diff for r in rows), default=0.0):.3g}")
    return 1 if wrong else 0


def arguments(doc: str) -> argparse.ArgumentParser:
    """The command line every runtime check shares: the compiled folder, optional names."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("root", help="the --out folder of compile_checkpoints.py")
    parser.add_argument("names", nargs="*")
    return parser
