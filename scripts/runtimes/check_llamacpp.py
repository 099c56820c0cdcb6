"""Every example through GGUF in llama.cpp (llama-cpp-python), against transformers.

Run by ``make runtime-llama`` with the venv it builds in .runtimes/llama and the repository on
PYTHONPATH. Each example is compiled with default options and written twice, as a Phi-3
directory and as a GGUF (``torchwright_fx.backends.gguf``). For each prompt (the example's
DEMOS and EDGE_CASES plus a few seeded samples) it compares:

- tokenization: llama.cpp's ids against the HF tokenizer's;
- greedy output: token by token through llama.cpp's KV cache (argmax of the logits) against
  ``model.generate(do_sample=False)``, and ``create_completion(temperature=0)``'s text;
- logits over the whole sequence (prompt + answer): llama.cpp in one batched decode and along
  the token-by-token path, against one transformers forward (eager attention); the table shows
  the largest |difference| of either path.

Exits 1 if any greedy output, tokenization or completion differs.
"""

from __future__ import annotations

import argparse
import importlib
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from llama_cpp import Llama
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging as hf_logging

from examples import NAMES
from torchwright_fx.backends.gguf import layout, save_gguf
from torchwright_fx.base.errors import CompileError
from torchwright_fx.base.machines import machine_of_act

GGML_TYPE_F32 = 0


@dataclass
class Result:
    name: str
    right: int = 0
    total: int = 0
    max_diff: float = 0.0
    llama_tokens: int = 0
    llama_seconds: float = 0.0
    hf_tokens: int = 0
    hf_seconds: float = 0.0
    wrong: list[str] = field(default_factory=list)


def prompts_for(module, samples: int) -> list[str]:
    rng = random.Random(0)
    drawn = [module.sample(rng) for _ in range(samples)]
    return list(dict.fromkeys([*module.DEMOS, *module.EDGE_CASES, *drawn]))


def llama_greedy(llm: Llama, ids: list[int], eos: int, limit: int) -> list[int]:
    """Greedy decoding through llama.cpp's KV cache: one eval per new token."""
    llm.reset()
    llm.eval(ids)
    seq = list(ids)
    while len(seq) < limit:
        token = int(np.argmax(llm.scores[len(seq) - 1]))
        seq.append(token)
        if token == eos:
            break
        llm.eval([token])
    return seq


def check(name: str, work: Path, samples: int, threads: int, options: dict) -> Result | str:
    module = importlib.import_module(f"examples.{name}")
    program = module.make(**options) if options else module.program
    try:
        m = program.weights
    except CompileError as e:  # precision="half" refuses what it cannot certify yet
        return f"{name}: refused ({str(e).splitlines()[-1].strip()[:120]})"
    if not machine_of_act(m.act).llama_cpp:
        return f"{name}: skipped, compiled for machine='relu' (llama.cpp has no gated-ReLU arch)"
    print(f"{name}: GGUF arch {layout(m)[0]}, d_head {m.d_head}, max_seq_len {m.max_seq_len}",
          flush=True)
    hf_dir = program.save_pretrained(work / f"{name}_hf")
    path = save_gguf(m, program.vocab, work / f"{name}.gguf", description=program.model_card(),
                     name=name)
    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    tokenizer = AutoTokenizer.from_pretrained(hf_dir)
    # a half build (an F16 GGUF) runs at llama.cpp's default context parameters: flash
    # attention auto (on for the CPU), an f16 KV cache; an fp32 build needs them off and f32
    settings = {} if options.get("precision") == "half" else dict(
        flash_attn=False, type_k=GGML_TYPE_F32, type_v=GGML_TYPE_F32)
    llm = Llama(model_path=str(path), n_ctx=m.max_seq_len, n_threads=threads,
                n_threads_batch=threads, logits_all=True, verbose=False, **settings)
    result = Result(name)
    for prompt in prompts_for(module, samples):
        result.total += 1
        ids = tokenizer(prompt)["input_ids"]
        start = time.perf_counter()
        with torch.no_grad():
            hf_seq = model.generate(torch.tensor([ids]), attention_mask=torch.ones_like(
                torch.tensor([ids])), do_sample=False, max_new_tokens=m.max_seq_len - len(ids)
            )[0].tolist()
        result.hf_seconds += time.perf_counter() - start
        result.hf_tokens += len(hf_seq) - len(ids)

        llama_ids = llm.tokenize(prompt.encode(), add_bos=True, special=False)
        start = time.perf_counter()
        seq = llama_greedy(llm, ids, m.eos_id, m.max_seq_len)
        result.llama_seconds += time.perf_counter() - start
        result.llama_tokens += len(seq) - len(ids)
        stepwise = np.array(llm.scores[: len(seq) - 1])  # logits of every position but the last

        with torch.no_grad():
            want = model(torch.tensor([hf_seq])).logits[0].numpy()
        llm.reset()
        llm.eval(hf_seq)
        batched = np.array(llm.scores[: len(hf_seq)])
        if batched.shape == want.shape:
            result.max_diff = max(result.max_diff, float(np.abs(batched - want).max()))
        if stepwise.shape == want[:-1].shape:
            result.max_diff = max(result.max_diff, float(np.abs(stepwise - want[:-1]).max()))

        completion = llm.create_completion(prompt, max_tokens=m.max_seq_len - len(ids),
                                           temperature=0.0)["choices"][0]["text"]
        hf_text = tokenizer.decode(hf_seq[len(ids):], skip_special_tokens=True)
        problems = [what for what, bad in (
            ("tokenization", llama_ids != ids), ("greedy ids", seq != hf_seq),
            ("create_completion", completion != hf_text),
            ("HF vs oracle", hf_text != module.oracle(prompt))) if bad]
        if problems:
            result.wrong.append(f"{prompt!r}: {', '.join(problems)} (HF {hf_text!r}, llama.cpp "
                                f"{program.vocab.decode(seq[len(ids):])!r}, completion "
                                f"{completion!r})")
        else:
            result.right += 1
    llm.close()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", default=NAMES, help="examples (default: all)")
    parser.add_argument("--samples", type=int, default=4, help="seeded samples per example")
    # One thread each: these models are tiny, and on a 2-core machine shared with other work two
    # threads (ggml's spin-waiting workers especially) ran both runtimes 5-100x slower.
    parser.add_argument("--threads", type=int, default=1, help="threads for both runtimes")
    parser.add_argument("--d-head", type=int, help="compile with this d_head (64 at max_seq_len "
                        "512 overflows llama's fp32 freq_base, so the GGUF is nanbeige)")
    parser.add_argument("--precision", choices=["fp32", "half"], default="fp32",
                        help="half: compile certified in fp16/bf16, write an F16 GGUF and run "
                             "it at llama.cpp's default context parameters")
    args = parser.parse_args(argv)
    options = {"d_head": args.d_head} if args.d_head else {}
    if args.precision == "half":
        options["precision"] = "half"
    torch.set_num_threads(args.threads)
    hf_logging.disable_progress_bar()
    rows, notes, failed = [], [], False
    with tempfile.TemporaryDirectory(prefix="check_llamacpp.") as tmp:
        for name in args.names:
            r = check(name, Path(tmp), args.samples, args.threads, options)
            if isinstance(r, str):
                notes.append(r)
                print(r, flush=True)
                continue
            failed |= r.right != r.total
            notes += [f"{name}: {w}" for w in r.wrong]
            rows.append(f"| {name} | {r.right}/{r.total} | {r.max_diff:.3g} | "
                        f"{r.llama_tokens / r.llama_seconds:.0f} | "
                        f"{r.hf_tokens / r.hf_seconds:.0f} |")
            print(rows[-1], flush=True)
    print("\n| example | right/total | max \\|logit diff\\| | llama.cpp tok/s | "
          "transformers tok/s |\n|---|---|---|---|---|")
    print("\n".join(rows))
    if notes:
        print("\n" + "\n".join(notes))
    print("\nright: llama.cpp's tokenization, greedy ids and create_completion text equal "
          "transformers' (and the oracle)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
