"""Running an ELF on the compiled interpreter (``python -m examples.rv32i run``).

The prompt is the program's memory image (``trace.prompt``); the model's greedy output is parsed
back into records, whose OUT bytes are what the program wrote and whose EXIT is its status.
Backends: ``runtime`` (the in-process runtime of the compiled weights, built in this process)
and ``hf`` (transformers on the saved Phi-3 directory, cached under ``build/rv32i``).
``verify``: the reference proposes the records and the model confirms them in one
teacher-forced pass (its argmax at every position of the trace must be the trace's next token).

Today the model is ``model.py``'s: a program outside it (a fault, the M extension, memory
beyond its 15 KiB, a run longer than ``max_seq_len``) is refused before it runs, with the
reason (the reference runs it first, so a program that never exits needs
``--max-instructions``).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from examples.rv32i import elf, trace
from examples.rv32i.reference import Fault, Machine, Step

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / "build" / "rv32i"
# --backend llama: the venv `make runtime-llama` builds, and its threads (the 2 cores here)
LLAMA_PY = ROOT / ".runtimes" / "llama" / "venv" / "bin" / "python"
LLAMA_THREADS = 2


class Refused(ValueError):
    """The program is outside what the compiled interpreter offers."""


@dataclass
class Prepared:
    prompt: str
    records: list[trace.Record]  # what the reference prints (for --verify, and the checks)
    exited: bool


def prepare(path: str, max_instructions: int | None, max_seq_len: int) -> Prepared:
    return prepare_image(elf.load(path), max_instructions, max_seq_len)


def prepare_image(image: elf.Image, max_instructions: int | None, max_seq_len: int
                  ) -> Prepared:
    m = Machine(image)
    steps: list[Step] = []
    try:
        exited = m.run(max_instructions, steps)
    except Fault as f:
        raise Refused(f"the reference refuses the program: {f}") from None
    end = elf.BASE + 4 * _model().MEM_WORDS
    window = f"the compiled machine holds {elf.BASE:#x}..{end:#x} only"
    for s in steps:
        if s.next_pc >= end or (s.store and s.store[0] >= end) or \
                (s.reads and s.reads[1] and s.reads[0] + s.reads[1] > end):
            raise Refused(f"pc {s.pc:#x}: {window}")
    text = trace.prompt(image)
    if any(w >= end for w in _nonzero_words(image)):
        raise Refused(f"the image has nonzero words beyond {end:#x}: {window}")
    recs = trace.records(steps)
    length = 1 + len(text) + trace.RECORD * len(recs)
    if length > max_seq_len:
        raise Refused(f"the run takes {length} tokens, over the model's max_seq_len "
                      f"{max_seq_len} (the continuation is not built yet)")
    return Prepared(text, recs, exited)


def _nonzero_words(image: elf.Image) -> list[int]:
    mem = image.memory
    return [image.base + i for i in range(0, len(mem), 4) if any(mem[i:i + 4])]


_PROGRAMS: dict[int, object] = {}


def program(max_seq_len: int | None = None):
    """The compiled interpreter at ``max_seq_len`` (None: ``model.program``'s), built once."""
    model = _model()
    if max_seq_len is None or max_seq_len == model.program.options.max_seq_len:
        return model.program
    if max_seq_len not in _PROGRAMS:
        _PROGRAMS[max_seq_len] = model.make(max_seq_len=max_seq_len)
    return _PROGRAMS[max_seq_len]


def _model():
    from examples.rv32i import model
    return model


def load(backend: str, max_seq_len: int | None = None):
    """The backend's model, built (or loaded from the cache) before any timing."""
    compiled = program(max_seq_len)
    if backend == "runtime":
        return compiled.compile()
    if backend == "hf":
        import torch
        from transformers import AutoModelForCausalLM
        return AutoModelForCausalLM.from_pretrained(str(_saved(compiled)), dtype=torch.float32)
    if backend == "llama":
        if not LLAMA_PY.exists():
            raise Refused(f"--backend llama runs llama.cpp in the project's llama venv, "
                          f"{LLAMA_PY.parent.parent}: build it with `make runtime-llama`")
        return _gguf(compiled)
    raise Refused(f"backend {backend!r} is not built yet (runtime, hf, llama)")


def generate(loaded, prompt: str, backend: str, max_new_tokens: int) -> str:
    """The model's greedy continuation of the prompt, as text (``<eos>`` not included)."""
    model = _model()
    ids = model.VOCAB.encode(prompt)
    if backend == "runtime":
        return model.VOCAB.decode(loaded.generate_ids(ids, max_new_tokens))
    if backend == "hf":
        import torch
        hf = loaded
        with torch.no_grad():
            got = hf.generate(torch.tensor([ids]), max_new_tokens=max_new_tokens,
                              do_sample=False, eos_token_id=model.VOCAB.eos_id,
                              pad_token_id=model.VOCAB.eos_id)
        new = got[0, len(ids):].tolist()
        if model.VOCAB.eos_id in new:
            new = new[:new.index(model.VOCAB.eos_id)]
        return model.VOCAB.decode(new)
    if backend == "llama":  # a subprocess in the llama venv (examples/rv32i/llama_decode.py)
        request = {"gguf": str(loaded), "ids": ids, "eos": model.VOCAB.eos_id,
                   "max_new_tokens": max_new_tokens, "threads": LLAMA_THREADS,
                   "n_ctx": len(ids) + max_new_tokens,  # the KV cache this run uses
                   "half": model.program.options.precision == "half"}
        done = subprocess.run([str(LLAMA_PY), str(Path(__file__).with_name("llama_decode.py"))],
                              input=json.dumps(request), capture_output=True, text=True,
                              check=False)
        if done.returncode:
            raise Refused(f"llama.cpp failed: {done.stderr.strip().splitlines()[-1:]}")
        return model.VOCAB.decode(json.loads(done.stdout))
    raise Refused(f"backend {backend!r} is not built yet (runtime, hf, llama)")


def _digest() -> str:
    """The build's key: model.py and the compiler's sources (a new compiler, a new build)."""
    h = hashlib.sha256((Path(__file__).parent / "model.py").read_bytes())
    for f in sorted((ROOT / "torchwright_fx").rglob("*.py")):
        h.update(f.read_bytes())
    return h.hexdigest()[:12]


def _gguf(compiled) -> Path:
    """The F32 GGUF of the current model.py at this length, written once (as ``_saved``)."""
    digest = _digest()
    out = CACHE / f"gguf-{digest}-{compiled.options.max_seq_len}.gguf"
    if not out.exists():
        print(f"rv32i: writing the GGUF {out}", file=sys.stderr)
        out.parent.mkdir(parents=True, exist_ok=True)
        compiled.compile().save_gguf(out)
    return out


def _saved(compiled) -> Path:
    """The Phi-3 directory of the current model.py at this length, saved once (keyed by the
    source, the compiler's and max_seq_len)."""
    digest = _digest()
    out = CACHE / f"hf-{digest}-{compiled.options.max_seq_len}"
    if not (out / "config.json").exists():
        print(f"rv32i: building the checkpoint into {out}", file=sys.stderr)
        compiled.compile().save_pretrained(out)
    return out


def verify(compiled, prepared: Prepared) -> int | None:
    """The first trace position (0-based, in records) whose argmax is not the reference's next
    token, or None when the model confirms the whole trace (teacher-forced, one pass)."""
    model = _model()
    text = trace.text(prepared.records)
    ids = model.VOCAB.encode(prepared.prompt + text)
    if prepared.exited:
        ids.append(model.VOCAB.eos_id)
    logits = compiled.logits(ids[:-1])
    start = 1 + len(prepared.prompt) - 1  # the position that predicts the first trace token
    picked = logits[start:].argmax(-1).tolist()
    for k, (got, want) in enumerate(zip(picked, ids[start + 1:], strict=True)):
        if got != want:
            return k // trace.RECORD
    return None


def main(path: str, backend: str, max_instructions: int | None, check: bool,
         max_seq_len: int | None = None) -> int:
    chosen = max_seq_len
    max_seq_len = program(chosen).options.max_seq_len
    try:
        prepared = prepare(path, max_instructions, max_seq_len)
    except (OSError, elf.ElfError, Refused) as e:
        print(f"rv32i: {e}", file=sys.stderr)
        return 2
    try:
        loaded = load("runtime" if check else backend, chosen)
    except Refused as e:
        print(f"rv32i: {e}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    if check:
        bad = verify(loaded, prepared)
        if bad is not None:
            want = prepared.records[bad] if bad < len(prepared.records) else "<eos>"
            print(f"rv32i: the model diverges from the reference at record {bad} "
                  f"({want.describe() if isinstance(want, trace.Record) else want})",
                  file=sys.stderr)
            return 3
        recs = prepared.records
    else:
        # the reference's run (which fits max_seq_len), and one more token: <eos>
        limit = trace.RECORD * len(prepared.records) + 1
        try:
            recs = trace.parse(generate(loaded, prepared.prompt, backend, limit))
        except ValueError as e:
            print(f"rv32i: the model printed a malformed trace: {e}", file=sys.stderr)
            return 3
    seconds = time.perf_counter() - start
    out, status = trace.output(recs)
    sys.stdout.buffer.write(out)
    sys.stdout.flush()
    tokens = trace.RECORD * len(recs)
    how = "confirmed teacher-forced" if check else f"decoded by {backend}"
    print(f"rv32i: {len(recs)} records ({tokens} tokens) {how} in {seconds:.1f} s "
          f"({tokens / max(seconds, 1e-9):.0f} tok/s), exit status {status}", file=sys.stderr)
    return 124 if status is None else status
