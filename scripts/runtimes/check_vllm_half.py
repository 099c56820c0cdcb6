"""vLLM at its default dtype on half-precision builds (issue 32).

Two steps, two venvs (vLLM keeps its own torch and transformers in .runtimes/vllm):

    .venv/bin/python scripts/runtimes/check_vllm_half.py compile DIR [NAMES...]
    VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind \\
        .runtimes/vllm/bin/python scripts/runtimes/check_vllm_half.py run DIR

``compile-programs DIR`` writes the half selection, argmax and count programs of
tests/select_half_programs.py instead, with token-id streams and the reference's top token at
every position, which ``run`` compares with vLLM's prompt logprobs.

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


def compile_programs(out: Path) -> int:
    """The half selection, argmax and count programs (tests/select_half_programs.py), each
    with streams of token ids and the reference's top token at every position."""
    import torchwright_fx as tw
    from tests.select_half_programs import (
        ARGMAX_PROGRAMS,
        COUNT_LENGTH,
        COUNT_PROGRAMS,
        PROGRAMS,
        V,
        streams,
    )

    out.mkdir(parents=True, exist_ok=True)
    for fn, n in [(f, 128) for f in PROGRAMS + ARGMAX_PROGRAMS] + \
            [(f, COUNT_LENGTH) for f in COUNT_PROGRAMS]:
        program = tw.compile(fn, vocab=V, precision="half", max_seq_len=n).compile()
        # one token shorter than max_seq_len: vLLM counts the generated token in its length
        cases = [{"ids": s[:-1], "want": program.traced.run(s[:-1]).round().long().tolist()}
                 for s in streams(fn.__name__, n)]
        directory = program.save_pretrained(out / fn.__name__)
        (directory / "cases.json").write_text(json.dumps(cases))
        print(f"{fn.__name__}: {len(cases)} streams -> {directory}")
    return 0


def _run_streams(llm, cases: list[dict]) -> tuple[int, int]:
    """(right, total) top tokens at every position but <bos>'s, from vLLM's prompt logprobs."""
    from vllm import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=1)
    outs = llm.generate([{"prompt_token_ids": c["ids"]} for c in cases], params,
                        use_tqdm=False)
    right = total = 0
    for c, o in zip(cases, outs, strict=True):
        # prompt_logprobs[j] scores token j given tokens < j: the model's top token at j - 1
        for j in range(2, len(c["ids"])):
            top = next(t for t, lp in o.prompt_logprobs[j].items() if lp.rank == 1)
            right += top == c["want"][j - 1]
            total += 1
        right += o.outputs[0].token_ids[0] == c["want"][-1]  # greedy: the last position's
        total += 1
    return right, total


def run_all(out: Path) -> int:
    from vllm import LLM, SamplingParams

    failed = False
    for directory in sorted(p for p in out.iterdir() if (p / "cases.json").exists()):
        cases = json.loads((directory / "cases.json").read_text())
        config = json.loads((directory / "config.json").read_text())
        llm = LLM(model=str(directory), max_model_len=config["max_position_embeddings"],
                  seed=0)  # no dtype: vLLM's default
        dtype = str(llm.llm_engine.model_config.dtype)
        if "ids" in cases[0]:  # a program's streams: the top token at every position
            right, total = _run_streams(llm, cases)
            failed |= right != total
            print(f"| {directory.name} | {dtype} | {right}/{total} positions |", flush=True)
            del llm
            continue
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
    if mode == "compile-programs":
        sys.exit(compile_programs(out))
    sys.exit(compile_all(out, sys.argv[3:]) if mode == "compile" else run_all(out))
