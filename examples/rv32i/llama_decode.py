"""Greedy decoding through llama.cpp (llama-cpp-python), for
``python -m examples.rv32i run --backend llama``. Runs in the project's llama venv
(``make runtime-llama`` builds .runtimes/llama/venv) as a subprocess, so the main venv needs no
llama.cpp: it reads ``{"gguf", "ids", "eos", "max_new_tokens", "threads", "n_ctx"}`` as JSON
on stdin and prints the new token ids (``<eos>`` not included) as JSON on stdout; ``n_ctx``
sizes the KV cache to the run (f32, about 39 KB a token for the default build)."""

from __future__ import annotations

import json
import sys

import numpy as np
from llama_cpp import Llama

GGML_TYPE_F32 = 0


def load(gguf: str, threads: int, half: bool = False, n_ctx: int = 0) -> Llama:
    # an fp32 build (the interpreter's default) needs llama.cpp's flash attention off and an
    # f32 KV cache (docs/runtimes.md); a half build runs at the defaults
    settings = {} if half else {"flash_attn": False, "type_k": GGML_TYPE_F32,
                                "type_v": GGML_TYPE_F32}
    return Llama(model_path=gguf, n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
                 logits_all=True, verbose=False, **settings)


def greedy(llm: Llama, ids: list[int], eos: int, max_new_tokens: int) -> list[int]:
    n_ctx = llm.n_ctx()  # (0 when loaded: the model's own context, max_seq_len)
    llm.eval(ids)
    out: list[int] = []
    while len(out) < max_new_tokens and len(ids) + len(out) < n_ctx:
        token = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        if token == eos:
            break
        out.append(token)
        llm.eval([token])
    return out


def decode(gguf: str, ids: list[int], eos: int, max_new_tokens: int, threads: int,
           half: bool = False, n_ctx: int = 0) -> list[int]:
    return greedy(load(gguf, threads, half, n_ctx), ids, eos, max_new_tokens)


if __name__ == "__main__":
    req = json.load(sys.stdin)
    print(json.dumps(decode(req["gguf"], req["ids"], req["eos"], req["max_new_tokens"],
                            req.get("threads", 2), req.get("half", False),
                            req.get("n_ctx", 0))))
