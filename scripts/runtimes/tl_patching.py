"""Activation patching through TransformerLens' own hooks (issue 34; ``make interp-loaders``).

Run in .runtimes/tl (TransformerLens 4.3.0); it reads the saved directories only, not the
project. For every ``DIR/*/patching.json`` (written by ``scripts/attribution_check.py --save``:
clean/corrupted token ids, teacher-forced with the clean answer, and the first answer position)
the directory is booted as a ``TransformerBridge``; per pair, both runs are cached
(``run_with_cache``), then ``run_with_hooks`` replaces, one batch element per unit, each head's
``blocks.L.attn.hook_z[:, :, h]`` and each layer's whole ``blocks.L.mlp.hook_post`` in the clean
run by the corrupted run's. A unit's effect is the largest change of any answer logit over the
change the whole corruption makes; it is *found* when that reaches ``tau`` on some pair. The
found units go to ``DIR/<name>/tl_found.json``, which ``attribution_check.py --compare-tl``
scores against ``edges.json`` beside its own torch-hook patching.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch
from transformer_lens.model_bridge import TransformerBridge


def patch_hook(source: torch.Tensor, slots: list[tuple[int, int | None]]) -> Any:
    """A forward hook writing ``source`` (the corrupted run's activation, batch 1) into batch
    element j at head h (``hook_z``) or whole (h None: ``hook_post``), for each (j, h)."""
    def hook(act: torch.Tensor, hook: Any) -> torch.Tensor:
        act = act.clone()
        for j, h in slots:
            if h is None:
                act[j] = source[0]
            else:
                act[j, :, h] = source[0, :, h]
        return act
    return hook


def found_units(directory: Path) -> dict[str, Any]:
    spec = json.loads((directory / "patching.json").read_text())
    bridge = TransformerBridge.boot_transformers(str(directory), dtype=torch.float32,
                                                 device="cpu")
    cfg = bridge.cfg
    n_layers, n_heads = cfg.n_layers, cfg.n_heads
    units = [(f"a{layer}.h{h}", f"blocks.{layer}.attn.hook_z", h)
             for layer in range(n_layers) for h in range(n_heads)]
    units += [(f"m{layer}", f"blocks.{layer}.mlp.hook_post", None) for layer in range(n_layers)]
    names = sorted({hook for _, hook, _ in units})
    best = {u: 0.0 for u, _, _ in units}
    used = 0
    for pair in spec["pairs"]:
        clean = torch.tensor([pair["clean"]])
        corrupt = torch.tensor([pair["corrupt"]])
        start = pair["start"]
        with torch.no_grad():
            clean_logits = bridge(clean)[0]
            corrupt_logits, cache = bridge.run_with_cache(corrupt, names_filter=names)
        total = (corrupt_logits[0, start:] - clean_logits[start:]).abs().max().item()
        if total == 0:
            continue
        used += 1
        slots: dict[str, list[tuple[int, int | None]]] = {}
        for j, (_, hook, h) in enumerate(units, start=1):
            slots.setdefault(hook, []).append((j, h))
        hooks = [(hook, patch_hook(cache[hook], s)) for hook, s in slots.items()]
        with torch.no_grad():
            out = bridge.run_with_hooks(clean.repeat(1 + len(units), 1), fwd_hooks=hooks)
        out = out[:, start:]
        for j, (u, _, _) in enumerate(units, start=1):
            effect = (out[j] - out[0]).abs().max().item()
            best[u] = max(best[u], effect / total)
    tau = spec["tau"]
    return {"tau": tau, "pairs": len(spec["pairs"]), "used": used,
            "found": sorted(u for u, r in best.items() if r >= tau),
            "ratios": {u: r for u, r in best.items() if r > 0}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="a folder of saved directories")
    args = parser.parse_args(argv)
    torch.set_num_threads(2)
    dirs = sorted(p.parent for p in args.root.glob("*/patching.json"))
    if not dirs:
        print(f"no */patching.json under {args.root}: run attribution_check.py --save",
              file=sys.stderr)
        return 1
    for d in dirs:
        result = found_units(d)
        (d / "tl_found.json").write_text(json.dumps(result, indent=1))
        print(f"{d.name}: {len(result['found'])} units found on {result['used']}/"
              f"{result['pairs']} pairs", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
