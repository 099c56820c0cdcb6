"""vLLM at its default dtype on half-precision builds (issue 32).

Two steps, two venvs (vLLM keeps its own torch and transformers in .runtimes/vllm):

    .venv/bin/python scripts/runtimes/check_vllm_half.py compile DIR [NAMES...]
    VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind \\
        .runtimes/vllm/bin/python scripts/runtimes/check_vllm_half.py run DIR

``compile`` writes each example that half holds (``precision="half"``) as a Phi-3 directory
under DIR with a ``cases.json`` of prompts (edge cases, demos, a seeded sample) and the
reference answers (which equal the oracle's: checked there). ``run`` loads every directory
with ``LLM(model=dir)`` and no ``dtype`` (vLLM's default: bfloat16 on CPU), generates greedily
and compares every answer; exits 1 on any wrong one. (``make runtime-vllm-half``.)
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path


def compile_all(out: Path, names: list[str]) -> int:
    import importlib

    import torchwright_fx as tw
    from examples import NAMES

    out.mkdir(parents=True, exist_ok=True)
    for name in names or NAMES:
        module = importlib.import_module(f"examples.{name}")
        try:
            program = module.make(precision="half").compile()
        except tw.CompileError as e:
            print(f"{name}: refused in half ({str(e).splitlines()[-1].strip()[:100]})")
            continue
        rng = random.Random(32)
        prompts = list(dict.fromkeys([*getattr(module, "EDGE_CASES", []), *module.DEMOS,
                                      *(module.sample(rng) for _ in range(8))]))
        cases = []
        for p in prompts:
            want = program.reference(p)
            assert want == module.oracle(p), (name, p, want)
            cases.append({"prompt": p, "answer": want})
        directory = program.save_pretrained(out / name)
        (directory / "cases.json").write_text(json.dumps(cases))
        print(f"{name}: {len(cases)} prompts -> {directory}")
    return 0


def run_all(out: Path) -> int:
    from vllm import LLM, SamplingParams

    failed = False
    for directory in sorted(p for p in out.iterdir() if (p / "cases.json").exists()):
        cases = json.loads((directory / "cases.json").read_text())
        config = json.loads((directory / "config.json").read_text())
        llm = LLM(model=str(directory), max_model_len=config["max_position_embeddings"],
                  seed=0)  # no dtype: vLLM's default
        dtype = str(llm.llm_engine.model_config.dtype)
        params = SamplingParams(temperature=0.0, max_tokens=64)
        outs = llm.generate([c["prompt"] for c in cases], params, use_tqdm=False)
        wrong = [(c["prompt"], c["answer"], o.outputs[0].text)
                 for c, o in zip(cases, outs, strict=True) if o.outputs[0].text != c["answer"]]
        failed |= bool(wrong)
        print(f"| {directory.name} | {dtype} | {len(cases) - len(wrong)}/{len(cases)} |",
              flush=True)
        for p, want, got in wrong[:3]:
            print(f"    {p!r}: want {want!r}, vLLM {got!r}")
        del llm
    return 1 if failed else 0


if __name__ == "__main__":
    mode, out = sys.argv[1], Path(sys.argv[2])
    sys.exit(compile_all(out, sys.argv[3:]) if mode == "compile" else run_all(out))
