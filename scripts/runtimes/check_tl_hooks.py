"""Check that every hook named in components.json exists in TransformerLens 4.x
(``make interp-loaders``; docs/circuits.md).

Run in .runtimes/tl (TransformerLens 4.3.0, built by ``make runtime-tl``); it reads the
saved directories only, not the project. For every ``DIR/*/components.json`` under the
folder given: ``TransformerBridge.boot_transformers(dir, dtype=float32)``, one
``run_with_cache`` on a short prompt, then for each component its ``hook`` (``hook_z`` of a
head, ``hook_post`` of MLP lanes), its bridge name (``hook_bridge``) and its other hooks
(``hooks``): the name must be a hook of the bridge, and the cached activation must have the
axis the index addresses (head < n_heads on axis 2 of ``hook_z``; a head's ``kv_index`` on
axis 2 of ``hook_k`` and ``hook_v``, which hold one entry a K/V block; lanes < d_ff on the
last axis of ``hook_post``). A name the bridge lacks at first is looked up again after
``enable_compatibility_mode(no_processing=True)``, which registers the legacy aliases; the
table says which needed it. Exits 1 if any name is missing in both.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch
from transformer_lens.model_bridge import TransformerBridge


def names_and_cache(bridge: Any, tokens: torch.Tensor) -> tuple[set[str], dict[str, Any]]:
    with torch.no_grad():
        _, cache = bridge.run_with_cache(tokens)
    names = set(getattr(bridge, "hook_dict", {}))
    names |= set(cache.keys())
    aliases = getattr(bridge, "_hook_alias_registry", None) or {}
    names |= set(aliases)
    return names, cache


def axis_ok(hook: str, index: Any, cache: dict[str, Any]) -> bool | None:
    """Whether the cached activation has the axis ``index`` addresses (None: not cached)."""
    if hook not in cache:
        return None
    shape = tuple(cache[hook].shape)
    if hook.endswith(("hook_z", "hook_k", "hook_v")):
        return len(shape) == 4 and 0 <= index < shape[2]
    return all(0 <= i < shape[-1] for i in index)


def check(directory: Path) -> list[str]:
    comps = json.loads((directory / "components.json").read_text())
    bridge = TransformerBridge.boot_transformers(str(directory), dtype=torch.float32,
                                                 device="cpu")
    tokens = bridge.to_tokens("\n")
    names, cache = names_and_cache(bridge, tokens)
    wanted: list[tuple[str, str, Any]] = []
    for c in comps["components"]:
        wanted.append((c["id"], c["hook"], c["index"]))
        wanted.append((c["id"], c["hook_bridge"], None))
        wanted += [(c["id"], h, c["kv_index"] if key in ("k", "v") and "kv_index" in c else None)
                   for key, h in c["hooks"].items()]
    missing = [w for w in wanted if w[1] not in names]
    compat: set[str] = set()
    if missing:
        bridge.enable_compatibility_mode(no_processing=True)
        more, cache2 = names_and_cache(bridge, tokens)
        compat = {h for _, h, _ in missing if h in more}
        names |= more
        cache = {**cache2, **dict(cache.items())}
    problems = []
    for cid, hook, index in wanted:
        if hook not in names:
            problems.append(f"{directory.name} {cid}: no hook {hook}")
        elif index is not None and axis_ok(hook, index, cache) is False:
            problems.append(f"{directory.name} {cid}: {hook} has no index {index} "
                            f"(shape {tuple(cache[hook].shape)})")
    n = len({h for _, h, _ in wanted})
    print(f"{directory.name}: {len(comps['components'])} components, {n} hook names, "
          f"{len(problems)} problems"
          + (f"; after compatibility mode only: {sorted(compat)}" if compat else ""),
          flush=True)
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="a folder of saved directories")
    args = parser.parse_args(argv)
    torch.set_num_threads(2)
    problems = []
    dirs = sorted(p.parent for p in args.root.glob("*/components.json"))
    if not dirs:
        print(f"no */components.json under {args.root}", file=sys.stderr)
        return 1
    for d in dirs:
        try:
            problems += check(d)
        except Exception as e:  # report it and go on with the next directory
            problems.append(f"{d.name}: {e!r}")
    for p in problems:
        print("  " + p)
    print(f"TransformerLens hooks: {len(dirs)} directories, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
