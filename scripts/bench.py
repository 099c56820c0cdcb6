"""Benchmarks: compile every example with the heuristic and with CP-SAT, write it as a Phi-3
directory, time greedy generation through transformers, and write docs/benchmarks.md and
docs/examples.md. The seed's figures are the ones measured on a machine like ours
(shared/seed/measured.md); ours are measured in this run.

Then the scaling section of docs/benchmarks.md, with its plots docs/scaling_compile.png and
docs/scaling_seq_len.png: compile seconds per stage and peak memory against the size of a
generated program (scripts/bigprog.py: 1k, 3k, 10k fx nodes with the heuristic, 1k and 3k
with CP-SAT), each in its own process; and layers, d_model, parameters, compile seconds and
tokens/s against max_seq_len for binary_increment and a small latch/shift program; and the
same against the operand width N for the calculators (scripts/bench_calc.py, with
docs/scaling_calculators.png).

Then the in-process runtime against transformers (``--runtime-only`` alone): ``.generate()``
(KV-cached) and ``save_pretrained`` + ``AutoModelForCausalLM`` greedy generate, in the same
run, on 2,000- and 8,000-token prompts of a program built for 8192 positions that answers in
two tokens (``tally``), and on a 4,000-token prompt whose answer fills the rest of 8192
positions (``repeat_last``).

    python scripts/bench.py [--only NAME ...] [--optimize N] [--no-scaling | --scaling-only |
                            --runtime-only]

``--only`` and ``--no-scaling`` keep the scaling section already in docs/benchmarks.md;
``--scaling-only`` rewrites that section (and the plots) and keeps the rest of the file;
``--runtime-only`` likewise for the runtime section. Every full run keeps the runtime section.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import examples  # noqa: E402
import torchwright_fx as tw  # noqa: E402

# The seed (torchwright 0.2.0), measured on a 2-core 24 GB CPU machine: layers opt0/opt1, d,
# params, safetensors bytes, generation tokens/s (low-high), correctness.
SEED = {
    "binary_increment": ("20 / 16", 512, "21.1 M", "84 MB", "39-62", "30/30"),
    "adder": ("18 / 14", 256, "5.6 M", "22 MB", "47-99", "89/100"),
    "caesar_cipher": ("9 / 7", 512, "6.8 M", "27 MB", "87-149", "5/5 (5 letters only)"),
    "fibonacci": ("9 / 7", 512, "7.5 M", "30 MB", "94-146", "3/3"),
    "sort_digits_v1": ("26 / 24", 512, "12.7 M", "51 MB", "-", "never emits <eos>"),
    "calculator_simple": ("29 / 22", 1024, "129 M", "517 MB", "12-21", "100/100"),
    "calculator_advanced": ("36 / 26", 1024, "160 M", "642 MB", "12-21", "100/100"),
    "calculator_scratchpad": ("16 / 10", 3072, "1.06 B", "4.2 GB", "~5", "8/8"),
    "calculator_memorize": ("11", 4096, "586 M", "2.3 GB", "6-10", "300/300"),
    "adder_1digit": ("not compilable", "-", "-", "-", "-", "-"),
    "adder_v2": ("not compilable", "-", "-", "-", "-", "-"),
    "range_printer": ("not compilable", "-", "-", "-", "-", "-"),
}


SEED_DOCS_NOTE = (
    "The seed columns are its figures measured on a machine like ours (opt0 / opt1, "
    "`shared/seed/measured.md`). Its own docs claim, at d = 8192 and optimize=2 (checkpoints "
    "of several GB, almost all zeros): calculator_simple 27 layers, calculator_advanced 29, "
    "calculator_scratchpad 18, calculator_memorize (N=2) 16. `on disk` is the whole "
    "directory (weights, config, tokenizer); `zeros` is the fraction of weights that are "
    "exactly 0.")


def _seed_best_layers(cell: str) -> int | None:
    numbers = [int(t) for t in cell.replace("/", " ").split() if t.isdigit()]
    return min(numbers) if numbers else None


def _seed_bytes(cell: str) -> float | None:
    units = {"kB": 1e3, "MB": 1e6, "GB": 1e9}
    parts = cell.split()
    return float(parts[0]) * units[parts[1]] if len(parts) == 2 and parts[1] in units else None


def versus_seed(rows: list[dict], level: int) -> str:
    """One sentence per outcome, computed from the table: where we beat the seed on layers and
    size at once, where we do not, and where the seed has no figure."""
    beat, behind, missing = [], [], []
    for r in rows:
        seed = SEED.get(r["name"])
        layers = _seed_best_layers(seed[0]) if seed else None
        size = _seed_bytes(seed[3]) if seed else None
        if layers is None or size is None:
            missing.append(r["name"])
        elif r[f"opt{level}"]["layers"] < layers and r["bytes"] < size:
            beat.append(r["name"])
        else:
            behind.append(r["name"])
    lines = [f"Fewer layers and a smaller checkpoint than the seed's best: "
             f"{', '.join(beat) or 'none'}."]
    if behind:
        lines.append(f"Not both: {', '.join(behind)}.")
    if missing:
        lines.append(f"No seed figure (its CLI cannot compile them): {', '.join(missing)}.")
    return " ".join(lines)


def _size(directory: Path) -> int:
    """Checkpoint size on disk: every file of the directory (weights, config, tokenizer)."""
    return sum(p.stat().st_size for p in directory.iterdir() if p.is_file())


def generate(directory: Path, prompts: list[str]) -> tuple[list[str], float]:
    """Greedy answers of a saved directory through transformers, and tokens/s."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(directory)
    answers, new, start = [], 0, time.perf_counter()
    for prompt in prompts:
        enc = tok(prompt, return_tensors="pt")
        with torch.no_grad():
            out = model.generate(**enc, do_sample=False,
                                 max_new_tokens=model.config.max_position_embeddings
                                 - enc["input_ids"].shape[1])
        ids = out[0, enc["input_ids"].shape[1]:]
        new += len(ids)
        answers.append(tok.decode(ids, skip_special_tokens=True))
    return answers, new / (time.perf_counter() - start)


def _tokens_per_second(directory: Path, prompts: list[str]) -> float:
    return generate(directory, prompts)[1]


def bench(name: str, level: int) -> dict:
    module = importlib.import_module(f"examples.{name}")
    row: dict = {"name": name}
    for opt in (0, level):
        program = module.make(optimize=opt)
        start = time.perf_counter()
        program.compile()
        s = program.stats()
        row[f"opt{opt}"] = s | {"seconds": time.perf_counter() - start}
    best = row[f"opt{level}"]
    with tempfile.TemporaryDirectory() as tmp:
        program = module.make(optimize=level)
        directory = program.save_pretrained(Path(tmp) / name)
        row["bytes"] = _size(directory)
        row["tokens_per_second"] = _tokens_per_second(directory, list(module.DEMOS))
    row["best"] = best
    row["d_head32"] = module.make(d_head=32).compile().stats()  # the shape vLLM takes
    return row


def _mb(n: int) -> str:
    return f"{n / 1e6:.2f} MB" if n >= 1e5 else f"{n / 1e3:.0f} kB"


def write(rows: list[dict], level: int, scaling: str | None = None) -> None:
    """docs/benchmarks.md and docs/examples.md from the example rows; ``scaling`` is the
    scaling section (None: the one already in docs/benchmarks.md, if any)."""
    bench_md = ["# Benchmarks", "",
                f"Generated by `scripts/bench.py` (heuristic vs optimize={level}); 2-core CPU, "
                "fp32, transformers `generate`, greedy. Seed figures: `shared/seed/measured.md`.",
                "", "Against tracr on its own library (15 RASP programs: layers, parameters, "
                "right answers, side by side): `docs/tracr.md` (`make bench-tracr`). Long "
                "contexts and their limits: `docs/attention.md`.", "",
                "| example | layers opt0 / opt1 / bound | CP-SAT status | solve s | "
                "d (opt0 / opt1) | params (opt0 / opt1) | compile s (opt0 / opt1) | "
                "tokens/s (ours) | tokens/s (seed) |",
                "|---|---|---|---|---|---|---|---|---|"]
    ex_md = ["# Examples: size and depth", "",
             "Generated by `scripts/bench.py`. `bound` is the critical-path lower bound on layers; "
             "parameters and size are for the optimize=1 build.", "",
             "| example | layers opt0 / opt1 | bound | d | d_head | heads/layer | lanes/layer | "
             "params | on disk | zeros | compile s (opt0 / opt1) | status | seed layers | seed d | "
             "seed params | seed size |", "|" + "---|" * 16]
    for r in rows:
        o0, o1 = r["opt0"], r[f"opt{level}"]
        seed = SEED.get(r["name"], ("-",) * 6)
        bench_md.append(f"| {r['name']} | {o0['layers']} / {o1['layers']} / "
                        f"{o1['critical_path_layers']} | {o1['status']} | "
                        f"{o1.get('solve_seconds', 0.0):.2f} | "
                        f"{o0['d_model']} / {o1['d_model']} | "
                        f"{o0['parameters']:,} / {o1['parameters']:,} | "
                        f"{o0['seconds']:.2f} / {o1['seconds']:.2f} | "
                        f"{r['tokens_per_second']:.0f} | {seed[4]} |")
        ex_md.append(
            f"| {r['name']} | {o0['layers']} / {o1['layers']} | {o1['critical_path_layers']} | "
            f"{o1['d_model']} | {o1['d_head']} | {o1['heads_per_layer']} | "
            f"{o1['lanes_per_layer']} | {o1['parameters']:,} | {_mb(r['bytes'])} | "
            f"{100 * o1['zero_fraction']:.1f}% | {o0['seconds']:.2f} / {o1['seconds']:.2f} | "
            f"{o1['status']} | {seed[0]} | {seed[1]} | "
            f"{seed[2]} | {seed[3]} |")
    bench_md += ["", PORTABLE, "",
                 "The default d_head is the least the program needs (8 for these), which "
                 "transformers and llama.cpp take; vLLM's attention takes 32 and up, and its CPU "
                 "kernels a width that is a multiple of 16. Each example built with `d_head=32` "
                 "against the default, heuristic scheduler:", "",
                 "| example | layers (default / 32) | heads/layer (default / 32) | d_model "
                 "(default / 32) | params default | params d_head 32 | ratio |",
                 "|---|---|---|---|---|---|---|"]
    for r in rows:
        o0, o32 = r["opt0"], r["d_head32"]
        bench_md.append(f"| {r['name']} | {o0['layers']} / {o32['layers']} | "
                        f"{o0['heads_per_layer']} / {o32['heads_per_layer']} | "
                        f"{o0['d_model']} / {o32['d_model']} | "
                        f"{o0['parameters']:,} | {o32['parameters']:,} | "
                        f"{o32['parameters'] / o0['parameters']:.2f} |")
    ex_md += ["", SEED_DOCS_NOTE, "", versus_seed(rows, level)]
    path = ROOT / "docs" / "benchmarks.md"
    old = path.read_text() if path.exists() else ""
    if scaling is None:
        scaling = scaling_section(old)
    # the sections other scripts write (bench_params.py, bench_long.py, ...) stay as they are
    kept = [part for part in re.split(r"(?m)^(?=## )", old)[1:]
            if part.split("\n", 1)[0] not in (PORTABLE, SCALING)]
    parts = ["\n".join(bench_md)] + [part.rstrip("\n") for part in (*kept, scaling) if part]
    path.write_text("\n\n".join(parts) + "\n")
    (ROOT / "docs" / "examples.md").write_text("\n".join(ex_md) + "\n")


# -- scaling ---------------------------------------------------------------------------------

SCALING = "## Scaling"
PORTABLE = "## The portable shape: d_head 32"
COMPILE_SIZES = {0: (1000, 3000, 10000), 1: (1000, 3000)}  # optimize level -> fx nodes
SEQ_LENS = (64, 256, 512, 1024, 2048, 4096, 8192, 16384)
QUICK_SEQ_LEN = 4096  # beyond: one compile and one timed generation (minutes each)
STAGES = ("trace", "lower", "passes", "schedule", "columns", "emit", "bounds")

REPEAT_VOCAB = tw.Vocab("abc\n")
REPEAT_PROMPTS = ["abcab\n"]


def repeat_last(x: torch.Tensor) -> torch.Tensor:
    """A small latch/shift program: after the newline, the letter before it, again and again
    until max_seq_len (``a`` for an empty line); <eos> before any newline. Its answers fill
    the context, so its tokens/s is decoding at every length up to max_seq_len."""
    newline = tw.is_token(x, "\n")
    letter = tw.lookup(x, {c: c for c in "abc"}, default="a")
    held = tw.latch(tw.shift(letter, 1), newline)
    seen = tw.latch(newline, newline)  # 0 until the first newline (the <bos> row's value)
    return torch.where(seen.bool(), held, tw.token("<eos>"))


BALANCE_VOCAB = tw.Vocab("ab")
BALANCE_PROMPTS = ["ab"]


def balance(x: torch.Tensor) -> torch.Tensor:
    """A whole-context mean decided at every step: 'a' while the a's are under half of the rows
    so far (<bos> included), else 'b'. Its answer alternates and fills the context, and the
    mean sits exactly on 1/2 at every other step: from 2048 positions it is built from exact
    counts (families/counts.py), and any rounding the wrong way would show in the answer."""
    under = tw.mean(tw.is_token(x, "a")) < 0.5
    return torch.where(under, tw.token("a"), tw.token("b"))


def section(text: str, heading: str) -> str | None:
    """A section of a benchmarks.md, from its heading to the next ``## ``."""
    start = text.find(f"\n{heading}\n")
    if start < 0:
        return None
    end = text.find("\n## ", start + 1)
    return text[start + 1:] if end < 0 else text[start + 1:end + 1]


def replace_section(heading: str, text: str, path: Path = ROOT / "docs" / "benchmarks.md"
                    ) -> None:
    """Write ``text`` (a section starting with ``heading``) into ``path`` in the place of the
    section of that heading, or at the end; the other sections stay as they are."""
    old = path.read_text()
    pattern = re.compile(rf"^{re.escape(heading)}\n.*?(?=^## |\Z)", re.S | re.M)
    path.write_text(pattern.sub(lambda _: text + "\n", old) if pattern.search(old) else
                    old.rstrip("\n") + "\n\n" + text)


def scaling_section(text: str) -> str | None:
    """The scaling section of a benchmarks.md (from its heading to the next ``## ``)."""
    return section(text, SCALING)


def _measure(n: int, level: int) -> dict:
    """One compile in a fresh process (its own peak RSS), on one torch thread: emit's large
    tensor ops otherwise wait on each other's threads when the 2 cores are shared."""
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "bigprog.py"), str(n),
                           "--measure", "--optimize", str(level)], capture_output=True, text=True,
                          env=env)
    if done.returncode:
        raise RuntimeError(f"bigprog {n} optimize={level} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def compile_scaling() -> list[dict]:
    """scripts/bigprog.py --measure at every size, one process each (peak RSS is per
    process); the heuristic's the faster of two runs (CP-SAT runs on its time budget)."""
    rows = []
    for level, sizes in COMPILE_SIZES.items():
        for n in sizes:
            runs = [_measure(n, level) for _ in range(1 if level else 2)]
            row = min(runs, key=lambda r: r["total_seconds"])
            print(f"bigprog {row['fx_nodes']} fx nodes, optimize={level}: "
                  f"{row['total_seconds']:.2f}s, peak RSS {row['peak_rss_mb']:.0f} MB, "
                  f"{row['status']}", flush=True)
            rows.append(row)
    return rows


def _best_tokens_per_second(directory: Path, prompts: list[str], runs: int = 5) -> float:
    """``_tokens_per_second`` on one torch thread, after a warm-up generation, best of
    ``runs``: on a shared 2-core machine two threads wait on each other and single runs vary
    several-fold (these models are small: one thread loses little)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _tokens_per_second(directory, prompts[:1])
        return max(_tokens_per_second(directory, prompts) for _ in range(runs))
    finally:
        torch.set_num_threads(threads)


def _refusal(e: Exception) -> str:
    """The gist of a refusal: the largest length that works, when the message names one."""
    works = re.search(r"max_seq_len=(\d+) works", str(e))
    if "attention margin" in str(e) and works:
        return f"refused: attention margin (max_seq_len={works.group(1)} works)"
    return "refused: " + str(e).splitlines()[-1].strip()[:80]


def _clear_geometry_caches() -> None:
    """The fp32 replays (attention margins, position decoder) are cached per process."""
    from torchwright_fx.ops import attention, position

    for cached in (attention.lobe, attention._gap, attention._certified,
                   position.measured_error, position.knots, position.pieces,
                   position.chord_error, position.two_stages, position.error_at_bos):
        cached.cache_clear()


def seq_len_scaling() -> list[dict]:
    """binary_increment (its default 8 bits) and ``repeat_last`` at every max_seq_len: the
    build's size, its compile seconds (best of 3), and tokens/s through transformers on the
    same prompts at every length (binary_increment's DEMOS: 2-5 tokens each; repeat_last's
    answer runs to max_seq_len)."""
    from examples import binary_increment

    programs: dict[str, tuple[Any, list[str]]] = {
        "binary_increment": (lambda n: binary_increment.make(max_seq_len=n),
                             list(binary_increment.DEMOS)),
        "repeat_last (latch/shift)": (lambda n: tw.compile(repeat_last, vocab=REPEAT_VOCAB,
                                                           max_seq_len=n), REPEAT_PROMPTS),
        "balance (mean)": (lambda n: tw.compile(balance, vocab=BALANCE_VOCAB, max_seq_len=n),
                           BALANCE_PROMPTS)}
    rows = []
    for name, (make, prompts) in programs.items():
        for n in SEQ_LENS:
            seconds = []
            for _ in range(3 if n <= QUICK_SEQ_LEN else 1):
                _clear_geometry_caches()  # each compile replays its margins and decoder
                program = make(n)
                start = time.perf_counter()
                try:
                    program.compile()
                except tw.CompileError as e:
                    refused = _refusal(e)
                    break
                seconds.append(time.perf_counter() - start)
            else:
                refused = ""
            if refused:
                rows.append({"program": name, "max_seq_len": n, "refused": refused})
                print(f"{name} at {n}: {refused}", flush=True)
                continue
            row = {"program": name, "max_seq_len": n} | program.stats() | {"seconds": min(seconds)}
            with tempfile.TemporaryDirectory() as tmp:
                directory = program.save_pretrained(Path(tmp) / "model")
                row["tokens_per_second"] = _best_tokens_per_second(
                    directory, prompts, 5 if n <= QUICK_SEQ_LEN else 1)
                answers = generate(directory, prompts)[0]
            row["right"] = answers == [program.reference(p) for p in prompts]
            print(f"{name} at {n}: {row['layers']} layers, d={row['d_model']}, "
                  f"{row['parameters']:,} params, {row['seconds']:.2f}s, "
                  f"{row['tokens_per_second']:.0f} tok/s, right: {row['right']}", flush=True)
            rows.append(row)
    return rows


def _cpsat(r: dict) -> str:
    if r["optimize"] == 0:
        return "-"
    bound = "-" if r["proven_bound"] is None else str(r["proven_bound"])
    return f"{r['status']} / {bound} / {r['solve_seconds']:.1f}"


def scaling_markdown(compile_rows: list[dict], seq_rows: list[dict]) -> str:
    md = [SCALING, "",
          "Generated by `scripts/bench.py` (`make bench`); 2-core CPU, one process per "
          "compile on one torch thread (the heuristic's: the faster of two runs). Programs "
          "from `scripts/bigprog.py` (seed 0: chains of is_token, lookup, comparisons, "
          "small-integer arithmetic, torch.where, shift, latch, mean and emit; max_seq_len "
          "32), compiled stage by stage as `pipeline.build` runs them; stage columns are "
          "wall-clock seconds, `CPU s` the process's CPU time over all stages (steadier when "
          "the machine is shared). "
          "`peak RSS` is the process's high-water mark; `compile's own` subtracts what it "
          "held before tracing (Python, torch, the imports). CP-SAT: status / proven layer "
          "bound / solve seconds (optimize=1: 5 deterministic seconds, a 15 s wall-clock "
          "cap).", "",
          "![compile seconds and peak memory against fx nodes](scaling_compile.png)", "",
          "| fx nodes | scheduler | " + " | ".join(STAGES) + " | total s | CPU s | "
          "peak RSS MB | compile's own MB | layers | d | parameters | CP-SAT |",
          "|" + "---|" * (len(STAGES) + 10)]
    for r in compile_rows:
        md.append(f"| {r['fx_nodes']:,} | {'CP-SAT' if r['optimize'] else 'heuristic'} | "
                  + " | ".join(f"{r['seconds'][s]:.2f}" for s in STAGES)
                  + f" | {r['total_seconds']:.2f} | {r['total_cpu_seconds']:.2f} | "
                  f"{r['peak_rss_mb']:,.0f} | "
                  f"{r['peak_rss_mb'] - r['start_rss_mb']:,.0f} | {r['layers']} | "
                  f"{r['d_model']} | {r['parameters']:,} | {_cpsat(r)} |")
    md += ["", "Against max_seq_len: binary_increment (8 bits), `repeat_last` in "
           "`scripts/bench.py` (a latch of a shift: after the newline, the letter before it "
           "until max_seq_len) and `balance` (a whole-context mean compared with 1/2 at every "
           "step, exactly on it at every other step; counted from 2048), heuristic scheduler, "
           "compile seconds best of 3 (one compile beyond 4096); tokens/s through transformers "
           "on one torch thread, best of 5 after a warm-up (one run beyond 4096), on the same "
           "prompts at every length (binary_increment's demos answer 2-5 tokens, so per-call "
           "overhead weighs; repeat_last's and balance's answers fill the context). `right`: "
           "every answer equals the reference.", "",
           "![size, compile seconds and tokens/s against max_seq_len](scaling_seq_len.png)", "",
           "| program | max_seq_len | layers | d | heads/layer | lanes/layer | parameters | "
           "compile s | tokens/s | right |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in seq_rows:
        if "refused" in r:
            md.append(f"| {r['program']} | {r['max_seq_len']} | {r['refused']} ||||||||")
            continue
        md.append(f"| {r['program']} | {r['max_seq_len']} | {r['layers']} | {r['d_model']} | "
                  f"{r['heads_per_layer']} | {r['lanes_per_layer']} | {r['parameters']:,} | "
                  f"{r['seconds']:.2f} | {r['tokens_per_second']:.0f} | "
                  f"{'yes' if r['right'] else 'NO'} |")
    return "\n".join(md) + "\n"


def scaling_plots(compile_rows: list[dict], seq_rows: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 4.2))
    for level, label, color in ((0, "heuristic", "C0"), (1, "CP-SAT (optimize=1)", "C1")):
        rows = [r for r in compile_rows if r["optimize"] == level]
        nodes = [r["fx_nodes"] for r in rows]
        ax_t.plot(nodes, [r["total_seconds"] for r in rows], "o-", color=color,
                  label=f"{label}: total")
        ax_m.plot(nodes, [r["peak_rss_mb"] for r in rows], "o-", color=color,
                  label=f"{label}: peak RSS")
        ax_m.plot(nodes, [r["peak_rss_mb"] - r["start_rss_mb"] for r in rows], "s--",
                  color=color, label=f"{label}: compile's own")
    ax_t.axhline(30, color="grey", linestyle="--", linewidth=0.8, label="target: 30 s at 10k")
    heuristic = [r for r in compile_rows if r["optimize"] == 0]
    for i, stage in enumerate(STAGES):
        ax_t.plot([r["fx_nodes"] for r in heuristic], [r["seconds"][stage] for r in heuristic],
                  ".:", color=f"C{i + 2}", label=f"heuristic: {stage}")
    for ax, what in ((ax_t, "compile seconds"), (ax_m, "MB")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("fx nodes (scripts/bigprog.py)")
        ax.set_ylabel(what)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    ax_t.set_title("Compile time by stage")
    ax_m.set_title("Peak memory")
    fig.tight_layout()
    fig.savefig(ROOT / "docs" / "scaling_compile.png", dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(1, 4, figsize=(15, 3.8))
    for name in dict.fromkeys(r["program"] for r in seq_rows):
        rows = [r for r in seq_rows if r["program"] == name and "refused" not in r]
        lengths = [r["max_seq_len"] for r in rows]
        for ax, key in zip(axes, ("parameters", "lanes_per_layer", "seconds",
                                  "tokens_per_second"), strict=True):
            ax.plot(lengths, [r[key] for r in rows], "o-", label=name)
    titles = ("parameters", "MLP lanes per layer", "compile seconds", "tokens/s (transformers)")
    for ax, title in zip(axes, titles, strict=True):
        ax.set_xscale("log", base=2)
        if ax is not axes[-1]:
            ax.set_yscale("log")
        ax.set_xlabel("max_seq_len")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    refused = [f"{r['program'].split()[0]} at {r['max_seq_len']}" for r in seq_rows
               if "refused" in r]
    if refused:
        fig.suptitle(f"refused: {', '.join(refused)} (see the table)", fontsize=9)
    fig.tight_layout()
    fig.savefig(ROOT / "docs" / "scaling_seq_len.png", dpi=110)
    plt.close(fig)


def scaling() -> str:
    from bench_calc import calc_markdown, calc_plot, calc_scaling

    compile_rows, seq_rows, calc_rows = compile_scaling(), seq_len_scaling(), calc_scaling()
    scaling_plots(compile_rows, seq_rows)
    calc_plot(calc_rows, ROOT / "docs" / "scaling_calculators.png")
    return scaling_markdown(compile_rows, seq_rows) + "\n".join(calc_markdown(calc_rows)) + "\n"


# -- the in-process runtime against transformers ---------------------------------------------

RUNTIME = "## The in-process runtime against transformers"
TALLY_VOCAB = tw.Vocab("0123456789ab\n?")
RUNTIME_LENGTHS = (2000, 8000)
RUNTIME_RUNS = 3


def tally(x: torch.Tensor) -> torch.Tensor:
    """A short answer after a long prompt: at the closing '?', 'a' if the a's are at least as
    many as the b's (a whole-context mean), else 'b'; then the digit before the '?' (a latch
    of a shift; 0 for a letter); then <eos>."""
    end = tw.is_token(x, "?")
    digit = tw.lookup(x, {str(i): i for i in range(10)}, default=0)
    held = tw.latch(tw.shift(digit, 1), end)
    more_a = tw.mean(tw.is_token(x, "a")) >= tw.mean(tw.is_token(x, "b"))
    letter = torch.where(more_a, tw.token("a"), tw.token("b"))
    return torch.where(end.bool(), letter,
                       torch.where(tw.shift(end, 1).bool(), tw.token("0") + held,
                                   tw.token("<eos>")))


def tally_prompt(n: int, seed: int = 0) -> str:
    """n tokens with <bos>: lines of random digits and letters, then '?'."""
    import random

    rng, out = random.Random(seed), []
    while len(out) < n - 2:
        out.extend(rng.choice("0123456789ab") for _ in range(rng.randint(1, 300)))
        out.append("\n")
    return "".join(out[:n - 2]) + "?"


def repeat_prompt(n: int, seed: int = 0) -> str:
    """n tokens with <bos> for ``repeat_last``: random letters, then a newline."""
    import random

    rng = random.Random(seed)
    return "".join(rng.choice("abc") for _ in range(n - 2)) + "\n"


def _clock(fn: Any) -> tuple[Any, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def _hf_generate(model: Any, ids: list[int], room: int) -> list[int]:
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=room,
                             pad_token_id=model.config.eos_token_id)
    new = out[0, len(ids):].tolist()
    eos = model.config.eos_token_id
    return new[: new.index(eos)] if eos in new else new


def _runtime_case(label: str, program: Any, prompt: str, eager: bool) -> dict:
    """Best of RUNTIME_RUNS (ours and transformers' sdpa alternating), one run of
    transformers' eager attention (the arithmetic the runtime replays) when ``eager``, and
    the reference with and without a draft."""
    from transformers import AutoModelForCausalLM

    ids = program.vocab.encode(prompt)
    room = program.options.max_seq_len - len(ids)
    with tempfile.TemporaryDirectory() as tmp:
        directory = program.save_pretrained(Path(tmp) / "m")
        sdpa = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
        ours_runs, hf_runs = [], []
        for _ in range(RUNTIME_RUNS):
            ours_runs.append(_clock(lambda: program.generate_ids(ids)))
            hf_runs.append(_clock(lambda: _hf_generate(sdpa, ids, room)))
        eager_run = None
        if eager:
            model = AutoModelForCausalLM.from_pretrained(
                directory, dtype=torch.float32, attn_implementation="eager").eval()
            eager_run = _clock(lambda: _hf_generate(model, ids, room))
    default = _clock(lambda: program.reference_ids(ids))
    program.DRAFT_SECONDS = 0.0  # always drafted by the runtime
    drafted = _clock(lambda: program.reference_ids(ids))
    program.DRAFT_AFTER = 10**9  # one eager run per token, as before
    alone = _clock(lambda: program.reference_ids(ids))
    del program.DRAFT_AFTER, program.DRAFT_SECONDS
    ours, hf = min(ours_runs, key=lambda r: r[1]), min(hf_runs, key=lambda r: r[1])
    answers = {ours[0] == hf[0] == default[0] == drafted[0] == alone[0]}
    if eager_run is not None:
        answers.add(eager_run[0] == ours[0])
    return {"label": label, "prompt": len(ids), "new": len(ours[0]),
            "ours": ours[1], "ours_cpu": ours[2], "hf": hf[1], "hf_cpu": hf[2],
            "eager": None if eager_run is None else eager_run[1],
            "reference": default[1], "reference_drafted": drafted[1],
            "reference_alone": alone[1], "same": answers == {True}}


def runtime_bench() -> list[dict]:
    import transformers

    transformers.logging.set_verbosity_error()  # max_new_tokens beside the saved max_length
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rows = []
        program = tw.compile(tally, vocab=TALLY_VOCAB, max_seq_len=8192).compile()
        for n in RUNTIME_LENGTHS:
            rows.append(_runtime_case(f"tally, max_seq_len 8192, {n:,}-token prompt", program,
                                      tally_prompt(n), eager=True))
            print(f"runtime bench {rows[-1]}", flush=True)
        program = tw.compile(repeat_last, vocab=REPEAT_VOCAB, max_seq_len=8192).compile()
        rows.append(_runtime_case("repeat_last, max_seq_len 8192, 4,000-token prompt, answer "
                                  "to the end", program, repeat_prompt(4000), eager=False))
        print(f"runtime bench {rows[-1]}", flush=True)
        return rows
    finally:
        torch.set_num_threads(threads)


def runtime_markdown(rows: list[dict]) -> str:
    md = [RUNTIME, "",
          "Generated by `scripts/bench.py --runtime-only`; 2-core CPU shared with other work, "
          "one torch thread, fp32. `Compiled.generate()` (the in-process runtime: one forward "
          "over the prompt fills a K/V cache, then one position per new token) against the "
          "same build saved with `save_pretrained` and run by `AutoModelForCausalLM` greedy "
          "`generate` (default sdpa attention), in the same run: wall seconds, best of "
          f"{RUNTIME_RUNS} alternating runs (process CPU seconds in brackets: steadier on a "
          "shared machine); `ratio` is ours over transformers' (the target: at most 2). "
          "`eager`: transformers with `attn_implementation=\"eager\"`, one run: the "
          "arithmetic the runtime replays op for op (its dense n x n scores are what the "
          "runtime's blocked causal prefill avoids). `reference`: `.reference_ids()`, the "
          "eager Python function: as it runs by default / always drafted by the runtime (one "
          "eager run checks the whole drafted answer) / one eager run over the sequence per "
          "new token, as before (the default drafts only when runs take over `DRAFT_SECONDS`, "
          "3 ms, on average: these programs' runs take about 1 ms even at 8,192 positions, "
          "so drafting would cost more than it saves). `same`: every answer equal.",
          "",
          "| case | prompt tokens | new tokens | runtime s | transformers s | ratio | "
          "eager s | reference ms (default / drafted / per token) | same |",
          "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        eager = "-" if r["eager"] is None else f"{r['eager']:.2f}"
        md.append(f"| {r['label']} | {r['prompt']:,} | {r['new']:,} | "
                  f"{r['ours']:.2f} ({r['ours_cpu']:.2f}) | {r['hf']:.2f} ({r['hf_cpu']:.2f}) | "
                  f"{r['ours'] / r['hf']:.2f} | {eager} | "
                  f"{1e3 * r['reference']:.0f} / {1e3 * r['reference_drafted']:.0f} / "
                  f"{1e3 * r['reference_alone']:.0f} | "
                  f"{'yes' if r['same'] else 'NO'} |")
    md += ["", "The runtime's logits are the uncached loop's (a full-sequence forward per new "
           "token) bit for bit, and with `dtype=torch.bfloat16` or `torch.float16` they equal "
           "`AutoModelForCausalLM.from_pretrained(dir, dtype=..., "
           "attn_implementation=\"eager\")`'s bit for bit, measured on every example "
           "(`tests/test_runtime_cache.py`). Two torch threads on a busy 2-core machine make "
           "both runtimes several times slower (OpenMP threads wait on each other): one "
           "thread is the steadier measure."]
    return "\n".join(md) + "\n"


def write_runtime_section(markdown: str) -> None:
    """Replace (or add, before the scaling section) the runtime section of
    docs/benchmarks.md; the rest of the file stays."""
    path = ROOT / "docs" / "benchmarks.md"
    text = path.read_text()
    old, scaling = section(text, RUNTIME), scaling_section(text)
    markdown = markdown.rstrip("\n") + "\n"
    if old:
        after = text[text.index(old) + len(old):]
        text = text.replace(old, markdown + ("\n" if after else ""))
    elif scaling:
        text = text.replace(scaling, markdown + "\n" + scaling)
    else:
        text = text.rstrip("\n") + "\n\n" + markdown
    path.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--optimize", type=int, default=1)
    parser.add_argument("--no-scaling", action="store_true",
                        help="skip the scaling section (the one in docs/benchmarks.md stays)")
    parser.add_argument("--scaling-only", action="store_true",
                        help="only the scaling section and its plots")
    parser.add_argument("--runtime-only", action="store_true",
                        help="only the in-process runtime against transformers")
    args = parser.parse_args()
    torch.set_num_threads(2)
    if args.runtime_only:
        write_runtime_section(runtime_markdown(runtime_bench()))
        return
    if args.scaling_only:
        path = ROOT / "docs" / "benchmarks.md"
        text = path.read_text()
        old = scaling_section(text)
        body = text.replace(old, "") if old else text
        path.write_text(body.rstrip("\n") + "\n\n" + scaling())
        return
    section = None if args.no_scaling or args.only else scaling()
    rows = []
    for name in args.only or examples.NAMES:
        row = bench(name, args.optimize)
        print(f"{name}: {row['opt0']['layers']} / {row[f'opt{args.optimize}']['layers']} layers "
              f"(bound {row['best']['critical_path_layers']}, {row['best']['status']}, "
              f"solve {row['best'].get('solve_seconds', 0.0):.2f}s), "
              f"d={row['best']['d_model']}, {row['best']['parameters']:,} params, "
              f"{_mb(row['bytes'])}, {row['tokens_per_second']:.0f} tok/s", flush=True)
        rows.append(row)
    write(rows, args.optimize, section)


if __name__ == "__main__":
    main()
