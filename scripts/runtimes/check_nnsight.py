"""Check that every component of components.json is addressed in nnsight as it is in plain
transformers (``make interp-loaders``; docs/circuits.md, "Loading the exports in nnsight").

Run in .runtimes/nnsight (nnsight 0.8, built by ``make interp-loaders``); it reads the saved
directories only, not the project. For every ``DIR/*/components.json`` under the folder given:
one nnsight trace of a prompt that saves the input of each component's ``module``
(``lm.model.layers[L].self_attn.o_proj.input``, ``lm.model.layers[L].mlp.down_proj.input``),
and one plain ``transformers`` forward with a pre-hook on the same modules (an independent
path to the same activation). Every ``module`` must exist, every ``module_columns`` index the
last axis, and the two captures must be equal column for column. Exits 1 on any problem.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch
from nnsight import LanguageModel
from transformers import AutoModelForCausalLM, AutoTokenizer


def _module(root: Any, path: str) -> Any:
    for part in path.split("."):
        root = root[int(part)] if part.isdigit() else getattr(root, part)
    return root


def plain_inputs(directory: Path, ids: torch.Tensor, paths: list[str]) -> dict[str, torch.Tensor]:
    """Each module's input in a plain transformers forward (forward pre-hooks)."""
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
    seen: dict[str, torch.Tensor] = {}
    handles = [_module(model, p).register_forward_pre_hook(
        lambda _m, args, p=p: seen.__setitem__(p, args[0].detach().clone())) for p in paths]
    with torch.no_grad():
        model(ids)
    for h in handles:
        h.remove()
    return seen


def check(directory: Path, prompt: str) -> tuple[int, list[str]]:
    comps = json.loads((directory / "components.json").read_text())["components"]
    # in execution order: nnsight 0.8 reads a module's input as the model reaches it
    paths = sorted({c["module"] for c in comps},
                   key=lambda p: (int(p.split(".")[2]), ".mlp." in p))
    ids = AutoTokenizer.from_pretrained(directory)(prompt, return_tensors="pt")["input_ids"]
    want = plain_inputs(directory, ids, paths)
    lm = LanguageModel(str(directory), dispatch=True, dtype=torch.float32)
    saved: dict[str, Any] = {}
    with torch.no_grad(), lm.trace(ids):
        for p in paths:
            saved[p] = _module(lm, p).input.save()
    problems = []
    for c in comps:
        got, ref = saved[c["module"]], want[c["module"]]
        cols = c["module_columns"]
        if not cols or max(cols) >= got.shape[-1]:
            problems.append(f"{c['id']}: columns {cols[:3]}... outside {c['module']}'s "
                            f"{got.shape[-1]}")
        elif not torch.equal(got[..., cols], ref[..., cols]):
            problems.append(f"{c['id']}: nnsight's {c['module']} input differs from transformers'")
    return len(comps), problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path, help="a folder of saved directories (build/interp)")
    ap.add_argument("--prompt", default="\n", help="the text traced (default: a newline)")
    args = ap.parse_args(argv)
    dirs = sorted(p.parent for p in args.folder.glob("*/components.json"))
    failed = 0
    for d in dirs:
        n, problems = check(d, args.prompt)
        print(f"{d.name}: {n} components, {len(problems)} problems")
        for p in problems:
            print("  " + p)
        failed += bool(problems)
    print(f"nnsight: {len(dirs)} directories, {failed} with problems")
    return 1 if failed or not dirs else 0


if __name__ == "__main__":
    sys.exit(main())
