"""The calculators against their operand width N (part of scripts/bench.py's scaling section):
layers, d_model, parameters, compile seconds, tokens/s through transformers, and whether the
Phi-3 directory's greedy answers equal the oracle on seeded samples with the largest operands.

    python scripts/bench_calc.py        # prints the table (bench.py writes it and the plot)
"""

from __future__ import annotations

import importlib
import random
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CALCULATORS = {  # name -> operand widths measured
    "calculator_simple": (2, 4, 6, 8, 10, 12, 16),
    "calculator_advanced": (2, 4, 6, 8, 10, 12, 16),
    "calculator_scratchpad": (2, 4, 6, 8, 10, 12, 16),
}  # calculator_memorize is N = 1 only (its module says why N = 2 is not offered)
SAMPLES = 4  # seeded prompts per width, plus the largest operands of each operator


def _prompts(n: int) -> list[str]:
    from examples import _calc

    rng = random.Random(1000 + n)
    top = "9" * n
    return [_calc.sample(rng, n) for _ in range(SAMPLES)] + [f"{top}*{top}\n", f"{top}+{top}\n",
                                                              f"0-{top}\n"]


def _through_transformers(directory: Path, prompts: list[str]) -> tuple[list[str], float]:
    """Greedy answers of the saved directory on one torch thread, and tokens/s."""
    from bench import generate

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return generate(directory, prompts)
    finally:
        torch.set_num_threads(threads)


def calc_scaling() -> list[dict]:
    rows = []
    for name, widths in CALCULATORS.items():
        module = importlib.import_module(f"examples.{name}")
        for n in widths:
            program = module.make(n)
            start = time.perf_counter()
            program.compile()
            seconds = time.perf_counter() - start
            prompts = _prompts(n)
            with tempfile.TemporaryDirectory() as tmp:
                answers, tps = _through_transformers(program.save_pretrained(Path(tmp) / "m"),
                                                     prompts)
            right = sum(a == program.reference(p) for a, p in zip(answers, prompts, strict=True))
            row = {"program": name, "n": n, "seconds": seconds, "tokens_per_second": tps,
                   "right": right, "prompts": len(prompts)} | program.stats()
            print(f"{name} N={n}: {row['layers']} layers, d={row['d_model']}, "
                  f"{row['parameters']:,} params, {seconds:.1f}s, {tps:.0f} tok/s, "
                  f"{right}/{len(prompts)} right", flush=True)
            rows.append(row)
    return rows


def calc_markdown(rows: list[dict]) -> list[str]:
    md = ["", "The calculators against their operand width N (heuristic scheduler; answers "
          f"through transformers on {SAMPLES} seeded prompts and the largest operands of `*`, "
          "`+` and `-` per width, compared with the eager reference; tokens/s on one torch "
          "thread, one run):", "",
          "![layers, parameters and tokens/s of the calculators against N]"
          "(scaling_calculators.png)", "",
          "| program | N | layers | d | parameters | compile s | tokens/s | right |",
          "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        md.append(f"| {r['program']} | {r['n']} | {r['layers']} | {r['d_model']} | "
                  f"{r['parameters']:,} | {r['seconds']:.1f} | {r['tokens_per_second']:.0f} | "
                  f"{r['right']}/{r['prompts']} |")
    return md


def calc_plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(15, 3.8))
    for name in dict.fromkeys(r["program"] for r in rows):
        mine = [r for r in rows if r["program"] == name]
        for ax, key in zip(axes, ("layers", "parameters", "seconds", "tokens_per_second"),
                           strict=True):
            ax.plot([r["n"] for r in mine], [r[key] for r in mine], "o-",
                    label=name.removeprefix("calculator_"))
    for ax, title in zip(axes, ("layers", "parameters", "compile seconds",
                                "tokens/s (transformers)"), strict=True):
        if title == "parameters":
            ax.set_yscale("log")
        ax.set_xlabel("operand digits N")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    print("\n".join(calc_markdown(calc_scaling())))
