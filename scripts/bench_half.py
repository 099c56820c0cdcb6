"""Half precision against fp32, per example, in one run: ``python scripts/bench_half.py``.

Each example is compiled twice with default options (``precision="fp32"`` and
``precision="half"``; half's max_seq_len defaults to 128, fp32's to 512, so the fp32 build is
also compiled at 128 for a like-for-like row); for each build that compiles: layers, d_model,
d_head, parameters, the checkpoint's size, and transformers' greedy tokens/s over the
example's demo prompts (one torch thread, fp32 weights; the half build also in bf16). Writes
the section "## Half precision against fp32" of docs/benchmarks.md (the rest stays) and prints
it. llama.cpp's figures come from ``scripts/runtimes/check_llamacpp.py --precision half``
(its own venv) and are not measured here.
"""

from __future__ import annotations

import importlib
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import examples  # noqa: E402
import torchwright_fx as tw  # noqa: E402

HEADING = "## Half precision against fp32"


def _tok_s(directory: Path, prompts: list[str], dtype: torch.dtype) -> tuple[float, bool]:
    """Greedy tokens/s through transformers, and whether every answer was the oracle's."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(directory, dtype=dtype).eval()
    tok = AutoTokenizer.from_pretrained(directory)
    new, start, answers = 0, time.perf_counter(), []
    for prompt in prompts:
        enc = tok(prompt, return_tensors="pt")
        with torch.no_grad():
            out = model.generate(**enc, do_sample=False, max_length=
                                 model.config.max_position_embeddings)
        ids = out[0, enc["input_ids"].shape[1]:]
        new += len(ids)
        answers.append(tok.decode(ids, skip_special_tokens=True))
    return new / (time.perf_counter() - start), answers


def measure(name: str) -> list[dict]:
    module = importlib.import_module(f"examples.{name}")
    rows = []
    for label, options in (("fp32", {}), ("fp32 @128", {"max_seq_len": 128}),
                           ("half", {"precision": "half"})):
        row: dict = {"name": name, "build": label}
        try:
            start = time.perf_counter()
            program = module.make(**options).compile()
            row["seconds"] = time.perf_counter() - start
        except tw.CompileError as e:
            lines = [ln.strip() for ln in str(e).splitlines()]
            row["refused"] = next((ln for ln in lines if "precision='half'" in ln),
                                  lines[-1])[:110]
            rows.append(row)
            continue
        s = program.stats()
        row.update(layers=s["layers"], d_model=s["d_model"], d_head=s["d_head"],
                   parameters=s["parameters"], max_seq_len=s["max_seq_len"])
        with tempfile.TemporaryDirectory() as tmp:
            directory = program.save_pretrained(Path(tmp) / name)
            row["bytes"] = sum(p.stat().st_size for p in directory.iterdir() if p.is_file())
            want = [module.oracle(p) for p in module.DEMOS]
            row["tok_s"], got = _tok_s(directory, list(module.DEMOS), torch.float32)
            row["right"] = got == want
            if label == "half":
                row["tok_s_bf16"], got16 = _tok_s(directory, list(module.DEMOS),
                                                  torch.bfloat16)
                row["right"] &= got16 == want
        rows.append(row)
    return rows


def markdown(rows: list[dict]) -> str:
    md = [HEADING, "",
          "`python scripts/bench_half.py` (one run, one torch thread, this machine): every "
          "example compiled with default options in fp32 (max_seq_len 512, and again at 128 "
          "for a like-for-like row) and with `precision=\"half\"` (max_seq_len 128 by "
          "default); transformers' greedy tokens/s over the demo prompts with fp32 weights "
          "(and bf16 for half builds); `right`: every demo answer equals the oracle's in every "
          "dtype measured. Tokens/s are one short run each on a shared 2-core machine: "
          "compare rows of one example, not examples; the sizes are exact.", "",
          "| example | build | layers | d_model | d_head | parameters | size | tok/s fp32 | "
          "tok/s bf16 | right |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "refused" in r:
            md.append(f"| {r['name']} | {r['build']} | refused: {r['refused']} | | | | | | "
                      "| |")
            continue
        bf16 = f"{r['tok_s_bf16']:.0f}" if "tok_s_bf16" in r else ""
        md.append(f"| {r['name']} | {r['build']} | {r['layers']} | {r['d_model']} | "
                  f"{r['d_head']} | {r['parameters']:,} | {r['bytes'] / 1e6:.1f} MB | "
                  f"{r['tok_s']:.0f} | {bf16} | {'yes' if r['right'] else 'NO'} |")
    md += ["", "What half costs: d_head 64 (its score scale must be a power of two: sqrt(64) = "
           "8) instead of the fp32 build's 8, positions read by 15 cut heads, no residual "
           "column recycled (a column is cancelled by a head, which half does not certify "
           "yet), and the output decoded from one step column per token code. bf16 on this "
           "CPU runs transformers at about the fp32 speed or below; the point of half is the "
           "runtimes that compute in it (llama.cpp's defaults, vLLM's default dtype)."]
    return "\n".join(md) + "\n"


def write(text: str) -> None:
    """Replace (or append) this section of docs/benchmarks.md; the rest stays."""
    from bench import section  # scripts/bench.py: a section from its heading to the next

    path = ROOT / "docs" / "benchmarks.md"
    doc = path.read_text()
    old = section(doc, HEADING)
    if old is None:
        doc = doc.rstrip("\n") + "\n\n" + text
    else:  # a section before another keeps its blank line
        doc = doc.replace(old, text if doc.endswith(old) else text + "\n")
    path.write_text(doc)


def main() -> None:
    torch.set_num_threads(1)
    rows = []
    for name in sys.argv[1:] or examples.NAMES:
        rows += measure(name)
        print(rows[-1], flush=True)
    text = markdown(rows)
    write(text)
    print(text)


if __name__ == "__main__":
    main()
