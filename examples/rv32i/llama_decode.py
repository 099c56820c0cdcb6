"""Greedy decoding through llama.cpp (llama-cpp-python), for
``python -m examples.rv32i run --backend llama``. Runs in the project's llama venv
(``make runtime-llama`` builds .runtimes/llama/venv) as a subprocess, so the main venv needs no
llama.cpp.

Two ways to call it:

- one request: ``{"gguf", "ids", "eos", "max_new_tokens", "threads", "n_ctx", "draft"}`` as
  JSON on stdin; it prints the new token ids (``<eos>`` not included) as JSON on stdout;
- ``--serve``: the model is loaded once, for a whole run of many contexts. The first line of
  stdin is ``{"gguf", "threads", "half", "n_ctx", "draft", "records"}`` (n_ctx: the longest
  context; draft: the guesses of lookup speculation, ``lookup.py``; records: the trace's
  format it guesses from, ``lookup.Records``); every further line is a request
  ``{"ids", "eos", "max_new_tokens"}``, answered by one line of new token ids. A context whose
  prompt starts like the last one's (every prompt starts with the program's image) keeps the
  KV cache of that common prefix instead of evaluating it again.

Either way the output is greedy decoding's. The KV cache is f32 (9 KB a token for the default
build) and sized to ``n_ctx``.
"""

from __future__ import annotations

import json
import sys

import numpy as np
from llama_cpp import Llama

# run as a script in the llama venv (or imported from this folder): lookup.py is beside it
from lookup import DRAFT, Lookup, Records  # type: ignore[import-not-found]

GGML_TYPE_F32 = 0


def load(gguf: str, threads: int, half: bool = False, n_ctx: int = 0) -> Llama:
    # an fp32 build (the interpreter's default) needs llama.cpp's flash attention off and an
    # f32 KV cache (docs/runtimes.md); a half build runs at the defaults
    settings = {} if half else {"flash_attn": False, "type_k": GGML_TYPE_F32,
                                "type_v": GGML_TYPE_F32}
    return Llama(model_path=gguf, n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
                 logits_all=True, verbose=False, **settings)


def greedy(llm: Llama, ids: list[int], eos: int, max_new_tokens: int, draft: int = DRAFT,
           records: Records | None = None) -> list[int]:
    """The greedy continuation of ``ids``. The KV cache of the longest prefix ``ids`` shares
    with what ``llm`` evaluated last is kept (at least the last prompt token is evaluated
    again, for its logits); the rest is dropped (``Llama.eval`` removes the cache from
    ``n_tokens`` on).

    Lookup speculation (``draft`` > 0): after each token, up to ``draft`` more are guessed from
    the context itself (``Lookup``, with ``records``: the trace's format) and evaluated in the
    same batch as it. The guesses that the model's own argmax confirms are kept, in order, up
    to the first it does not; that position's argmax is the next token. Every kept token is
    the argmax after exactly the tokens before it, so the output is greedy decoding's, token
    for token; only the number of forward passes changes (a batch of 9 tokens costs about 4
    passes of one on 2 cores: each pass reads every weight and the whole KV cache)."""
    n_ctx = llm.n_ctx()  # (0 when loaded: the model's own context, max_seq_len)
    common, limit = 0, min(llm.n_tokens, len(ids) - 1)
    while common < limit and int(llm.input_ids[common]) == ids[common]:
        common += 1
    llm.n_tokens = common
    llm.eval(ids[common:])
    seq = list(ids)
    lookup = Lookup(seq, records)
    out: list[int] = []
    while len(out) < max_new_tokens and len(seq) < n_ctx:
        token = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        if token == eos:
            break
        out.append(token)
        seq.append(token)
        # room: the new tokens stop at max_new_tokens and at the context's last position
        room = min(draft, max_new_tokens - len(out), n_ctx - 1 - len(seq))
        guess = lookup.guess(seq, room) if room > 0 else []
        row = llm.n_tokens  # the row of ``token``
        llm.eval([token, *guess])
        kept = 0
        while kept < len(guess) and guess[kept] != eos and \
                int(np.argmax(llm.scores[row + kept])) == guess[kept]:
            kept += 1
        out += guess[:kept]
        seq += guess[:kept]
        llm.n_tokens = row + 1 + kept  # the next eval drops the rejected guesses' cache
        lookup.learn(seq)
    return out


def decode(gguf: str, ids: list[int], eos: int, max_new_tokens: int, threads: int,
           half: bool = False, n_ctx: int = 0, draft: int = DRAFT) -> list[int]:
    return greedy(load(gguf, threads, half, n_ctx), ids, eos, max_new_tokens, draft)


def serve() -> None:
    """Answer the requests of a whole run, one line each, with the model loaded once."""
    setup = json.loads(sys.stdin.readline())
    llm = load(setup["gguf"], setup.get("threads", 2), setup.get("half", False),
               setup.get("n_ctx", 0))
    records = Records.from_json(setup["records"]) if setup.get("records") else None
    for line in sys.stdin:
        req = json.loads(line)
        print(json.dumps(greedy(llm, req["ids"], req["eos"], req["max_new_tokens"],
                                setup.get("draft", DRAFT), records)),
              flush=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        serve()
    else:
        req = json.load(sys.stdin)
        print(json.dumps(decode(req["gguf"], req["ids"], req["eos"], req["max_new_tokens"],
                                req.get("threads", 2), req.get("half", False),
                                req.get("n_ctx", 0), req.get("draft", DRAFT))))
