"""Compile every example for the runtime checks (``make runtime-vllm``, ``make runtime-tl``).

Run with the project's venv (.venv). For each example it writes, under ``--out``:

- ``<name>_hf/``: the Phi-3 directory, compiled with ``d_head=32``: vLLM's CPU attention
  supports head sizes 32, 64, 80, ... only (32 is also the default now; it is passed
  explicitly so that the check does not depend on the default);
- ``<name>_ref.json``: the prompts (the demos, the edge cases and a seeded sample of the
  domain), their token ids, the oracle's answer and transformers' greedy output;
- ``<name>_ref/<i>.npy``: transformers' logits over prompt + answer (``[len, vocab]``, fp32,
  eager attention), the reference the runtimes are compared with.

Examples built for ``machine="relu"`` are skipped: vLLM's Phi-3 MLP is silu-only
("Unsupported activation: relu. Only silu is supported for now.").

The runtime venvs need none of the project: they read these files only.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import json
import random
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import examples  # noqa: E402
from torchwright_fx.base.machines import machine_kind  # noqa: E402

D_HEAD = 32
SAMPLES = 12  # seeded prompts from the domain, besides the demos and the edge cases
ENUMERATE_LIMIT = 3000


def prompts_for(module, samples: int = SAMPLES, seed: int = 0) -> list[str]:
    pool = list(itertools.islice(module.inputs(), ENUMERATE_LIMIT + 1))
    rng = random.Random(seed)
    if len(pool) > ENUMERATE_LIMIT:
        extra = [module.sample(rng) for _ in range(samples)]
    else:
        extra = rng.sample(pool, min(samples, len(pool)))
    return list(dict.fromkeys([*module.DEMOS, *module.EDGE_CASES, *extra]))


def reference(directory: Path, prompts: list[str]) -> tuple[list[dict], list[np.ndarray]]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    tok = AutoTokenizer.from_pretrained(directory)
    max_len = model.config.max_position_embeddings
    rows, logits = [], []
    with torch.no_grad():
        for prompt in prompts:
            ids = tok(prompt, return_tensors="pt")["input_ids"]
            out = model.generate(ids, do_sample=False, max_new_tokens=max_len - ids.shape[1])
            new = out[0, ids.shape[1]:].tolist()
            logits.append(model(out).logits[0].numpy().astype(np.float32))
            rows.append({"prompt": prompt, "prompt_ids": ids[0].tolist(), "new_ids": new,
                         "text": tok.decode(new, skip_special_tokens=True)})
    return rows, logits


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="build/runtimes")
    parser.add_argument("names", nargs="*", default=examples.NAMES)
    args = parser.parse_args(argv)
    torch.set_num_threads(2)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    index, bad = [], []
    for name in args.names:
        module = importlib.import_module(f"examples.{name}")
        start = time.perf_counter()
        program = module.make(d_head=D_HEAD).compile()
        stats = program.stats()
        if not machine_kind(stats["machine"]).vllm:
            print(f"{name}: skipped (machine=relu; vLLM's Phi-3 MLP is silu-only)")
            continue
        directory = program.save_pretrained(out / f"{name}_hf")
        prompts = prompts_for(module)
        rows, logits = reference(directory, prompts)
        ref_dir = out / f"{name}_ref"
        shutil.rmtree(ref_dir, ignore_errors=True)
        ref_dir.mkdir()
        for i, (row, lg) in enumerate(zip(rows, logits, strict=True)):
            row["oracle"] = module.oracle(row["prompt"])
            row["logits"] = f"{ref_dir.name}/{i}.npy"
            np.save(ref_dir / f"{i}.npy", lg)
        wrong = [r for r in rows if r["text"] != r["oracle"]]
        bad += [(name, r["prompt"], r["text"], r["oracle"]) for r in wrong]
        meta = {"name": name, "directory": directory.name, "d_head": stats["d_head"],
                "heads": stats["heads_per_layer"], "layers": stats["layers"],
                "d_model": stats["d_model"], "max_seq_len": stats["max_seq_len"],
                "vocab_size": stats["vocab_size"], "prompts": rows}
        (out / f"{name}_ref.json").write_text(json.dumps(meta, indent=1))
        index.append(name)
        print(f"{name}: {stats['layers']} layers, d_model={stats['d_model']}, "
              f"{stats['heads_per_layer']} heads x {stats['d_head']}, {len(rows)} prompts, "
              f"transformers right on {len(rows) - len(wrong)}/{len(rows)} "
              f"({time.perf_counter() - start:.1f}s)", flush=True)
    (out / "index.json").write_text(json.dumps(index))
    for name, prompt, got, want in bad:
        print(f"REFERENCE WRONG {name} {prompt!r}: {got!r}, oracle {want!r}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
