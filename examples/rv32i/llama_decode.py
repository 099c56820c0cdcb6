"""Greedy decoding through llama.cpp (llama-cpp-python), for
``python -m examples.rv32i run --backend llama``. Runs in the project's llama venv
(``make runtime-llama`` builds .runtimes/llama/venv) as a subprocess, so the main venv needs no
llama.cpp.

Two ways to call it:

- one request: ``{"gguf", "ids", "eos", "max_new_tokens", "threads", "n_ctx"}`` as JSON on
  stdin; it prints the new token ids (``<eos>`` not included) as JSON on stdout;
- ``--serve``: the model is loaded once, for a whole run of many contexts. The first line of
  stdin is ``{"gguf", "threads", "half", "n_ctx"}`` (n_ctx: the longest context); every further
  line is a request ``{"ids", "eos", "max_new_tokens"}``, answered by one line of new token ids.
  A context whose prompt starts like the last one's (every prompt starts with the program's
  image) keeps the KV cache of that common prefix instead of evaluating it again.

The KV cache is f32 (about 14 KB a token for the default build) and sized to ``n_ctx``.
"""

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
    """The greedy continuation of ``ids``. The KV cache of the longest prefix ``ids`` shares
    with what ``llm`` evaluated last is kept (at least the last prompt token is evaluated
    again, for its logits); the rest is dropped (``Llama.eval`` removes the cache from
    ``n_tokens`` on)."""
    n_ctx = llm.n_ctx()  # (0 when loaded: the model's own context, max_seq_len)
    common, limit = 0, min(llm.n_tokens, len(ids) - 1)
    while common < limit and int(llm.input_ids[common]) == ids[common]:
        common += 1
    llm.n_tokens = common
    llm.eval(ids[common:])
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


def serve() -> None:
    """Answer the requests of a whole run, one line each, with the model loaded once."""
    setup = json.loads(sys.stdin.readline())
    llm = load(setup["gguf"], setup.get("threads", 2), setup.get("half", False),
               setup.get("n_ctx", 0))
    for line in sys.stdin:
        req = json.loads(line)
        print(json.dumps(greedy(llm, req["ids"], req["eos"], req["max_new_tokens"])),
              flush=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        serve()
    else:
        req = json.load(sys.stdin)
        print(json.dumps(decode(req["gguf"], req["ids"], req["eos"], req["max_new_tokens"],
                                req.get("threads", 2), req.get("half", False),
                                req.get("n_ctx", 0))))
