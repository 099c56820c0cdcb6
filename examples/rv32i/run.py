"""Running an ELF on the compiled interpreter (``python -m examples.rv32i run``).

The prompt is the program's memory image (``trace.prompt``); the model's greedy output is parsed
back into records, whose OUT bytes are what the program wrote and whose EXIT is its status.
Backends: ``runtime`` (the in-process runtime of the compiled weights, built in this process)
and ``hf`` (transformers on the saved Phi-3 directory, cached under ``build/rv32i``).
``verify``: the reference proposes the records and the model confirms them teacher-forced,
context by context (its argmax at every position of the trace must be the trace's next token).

A run longer than one context goes through several (contexts.py): the model prints the state
the next context needs (the cells the program wrote) and a RESUME record, and the host copies
the first prompt (the image) and those tokens, unchanged, into the next prompt. The context
length is chosen from the program's footprint (``context_for``) unless ``--max-seq-len`` is
given; the dump position leaves room for the largest dump.

Today the model is ``model.py``'s: a program outside it (a fault, the M extension, memory
beyond its 64 KiB window, two words on one of its 4096 cells, a state too large for the
context) is refused before it runs, with the
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

from examples.rv32i import contexts, elf, trace
from examples.rv32i.lookup import DRAFT, Records
from examples.rv32i.reference import Fault, Machine, Step

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / "build" / "rv32i"
# --backend llama: the venv `make runtime-llama` builds, and its threads (the 2 cores here)
LLAMA_PY = ROOT / ".runtimes" / "llama" / "venv" / "bin" / "python"
LLAMA_THREADS = 2


class Refused(ValueError):
    """The program is outside what the compiled interpreter offers."""


# Runs that fit one context of MIN_CONTEXT tokens take one (no dump); longer ones take contexts
# of the length that decodes their instructions fastest (``context_for``), a multiple of
# CONTEXT_STEP. The cost model: a runtime decodes a token at context position n in a + k n (it
# reads the weights, then the KV cache of n positions); llama.cpp on 2 cores, the default
# build, decodes 813 tok/s after an empty context and 454 after 2,048 tokens
# (docs/benchmarks.md, "RV32I"), so a / k = (1/813) / ((1/454 - 1/813) / 2048) = 2,590
# positions.
MIN_CONTEXT, CONTEXT_STEP = 8192, 512
STEP_IN_POSITIONS = 2590


@dataclass
class Prepared:
    prompt: str  # the first context's
    records: list[trace.Record]  # what the reference executes (for --verify, and the checks)
    exited: bool
    max_seq_len: int  # the build's context
    dump_at: int  # ... and its dump position
    contexts: list[contexts.Context]  # the contexts the run goes through


def prepare(path: str, max_instructions: int | None, max_seq_len: int | None = None
            ) -> Prepared:
    return prepare_image(elf.load(path), max_instructions, max_seq_len)


def _state_tokens(recs: list[trace.Record]) -> int:
    """The most a dump of this run prints: a record per cell it writes (registers, memory,
    OUT, and the RESUME cell), and the RESUME record. The image's cells are not dumped: every
    prompt holds them."""
    cells = {r.target for r in recs} | {trace.RESUME}
    return trace.RECORD * (len(cells) + 1)


def _longest_write(recs: list[trace.Record]) -> int:
    """The most OUT records in a row (a dump waits for a write's bytes)."""
    best = run = 0
    for r in recs:
        run = run + 1 if r.target == trace.OUT else 0
        best = max(best, run)
    return best


def context_for(image: int, state: int, longest_write: int) -> int:
    """The context length that decodes a long run fastest, for a prompt of ``image`` tokens
    of the image and dumps of up to ``state`` tokens: each context reads the image and the
    last dump as its prompt, executes, and prints its dump (after the longest write, which a
    dump waits for), so short contexts spend most of themselves on the state and long ones pay
    for their KV cache at every token. Minimizes the cost (a + k n at position n, for every
    position past the image, whose KV cache the llama backend keeps from one context to the
    next) per executed token over the lengths a build takes."""
    prompt, slack = image + state, trace.RECORD * (longest_write + 2)

    def cost(n: int) -> float:
        executed = n - prompt - state - slack
        if executed <= 0:
            return float("inf")
        # every position past the image is evaluated (the last dump, read as the prompt, in a
        # batch that costs about as much a token on 2 cores): the image's KV cache is kept
        return ((n - image) * STEP_IN_POSITIONS + (n * n - image * image) / 2) / executed

    longest = _model().MAX_SEQ_LEN // CONTEXT_STEP * CONTEXT_STEP
    return min(range(CONTEXT_STEP, longest + 1, CONTEXT_STEP), key=cost)


def dump_position(max_seq_len: int, state: int, longest_write: int) -> int:
    """The dump position that leaves room for the largest dump after the longest write."""
    slack = trace.RECORD * (longest_write + 2)
    return (max_seq_len - state - slack) // trace.RECORD * trace.RECORD


def prepare_image(image: elf.Image, max_instructions: int | None,
                  max_seq_len: int | None = None) -> Prepared:
    m = Machine(image)
    steps: list[Step] = []
    try:
        exited = m.run(max_instructions, steps)
    except Fault as f:
        raise Refused(f"the reference refuses the program: {f}") from None
    check_cells(steps, image)
    text = trace.prompt(image)
    recs = trace.records(steps)
    first = trace.parse(text)
    state, longest = _state_tokens(recs), _longest_write(recs)
    whole = 1 + len(text) + trace.RECORD * len(recs) + 1  # the run in one context
    chosen = max_seq_len or (MIN_CONTEXT if whole <= MIN_CONTEXT
                             else context_for(len(text), state, longest))
    dump_at = dump_position(chosen, state, longest)
    if whole <= chosen:  # no dump: the run ends before the dump position (kept a live
        # comparison, so that every such build has the same shape)
        dump_at = max(dump_at, (chosen // trace.RECORD - 1) * trace.RECORD)
    need = trace.RECORD * (longest + 2) + len(text) + 2 * state + 1
    if dump_at <= len(text) + state:
        raise Refused(f"the program's image takes {len(text)} tokens of every prompt and its "
                      f"state up to {state} tokens a dump: max_seq_len "
                      f"{chosen} leaves no room to run between dumps; give --max-seq-len "
                      f"{need + 1024} or more")
    try:
        ctxs = contexts.schedule(first, recs, exited, dump_at, chosen)
    except contexts.TooLong as e:
        raise Refused(f"{e}; give a larger --max-seq-len") from None
    return Prepared(text, recs, exited, chosen, dump_at, ctxs)


def _nonzero_words(image: elf.Image) -> list[int]:
    mem = image.memory
    return [image.base + i for i in range(0, len(mem), 4) if any(mem[i:i + 4])]


def check_cells(steps: list[Step], image: elf.Image) -> None:
    """Refuses a run whose memory the compiled machine cannot hold: a word outside its 64 KiB
    window, two words on one cell (the window folds onto 16 KiB: trace.cell), a word on the
    registers' cells, or an instruction in the window's last word. Every word the run
    touches counts: the image's nonzero words, and each fetch, load, store and write
    buffer."""
    end = elf.BASE + 4 * _model().WINDOW_WORDS
    registers = elf.BASE + 4 * trace.PAGE_WORDS * trace.REGISTER_PAGE  # 0x13000
    ports = 4 * trace.PORTS  # the bytes of the registers' cells
    stack_floor = registers + 0xC000 + ports  # the stack's last free word below `end`
    fits = (f"a program fits when its code, data and bss stay below {registers:#x} (as "
            f"examples/rv32i/c/link.ld keeps them) and its stack within "
            f"{end - stack_floor:,} bytes below {end:#x} (down to {stack_floor:#x}): "
            f"make large local arrays static, or recurse less; any other layout fits where no "
            f"two words it touches are 16 KiB apart")

    def what(word: int) -> str:
        """An address, and how far below the window's end (where stacks start) if near it."""
        if word >= end - 0x4000:
            return f"{word:#x} ({end - word:,} bytes below {end:#x})"
        return f"{word:#x}"

    owner: dict[int, int] = {}  # cell -> the address of the first word found on it

    def touch(address: int, pc: int | None) -> None:
        where = f"pc {pc:#x}: " if pc is not None else "the image: "
        if not elf.BASE <= address < end:
            raise Refused(f"{where}address {address:#x}: the compiled machine holds "
                          f"{elf.BASE:#x}..{end:#x} only")
        word = address & ~3
        c = trace.cell(trace.index(word))
        if c < trace.PORTS:
            raise Refused(
                f"{where}the word at {what(word)} falls on the compiled machine's registers, "
                f"which it keeps at {registers:#x}..{registers + ports - 1:#x} and every 16 "
                f"KiB above (its 64 KiB window folds onto 16 KiB of cells): {fits}")
        first = owner.setdefault(c, word)
        if first != word:
            raise Refused(
                f"{where}the words at {what(first)} and {what(word)} fall on one cell of the "
                f"compiled machine (its 64 KiB window folds onto 16 KiB of cells: words 16 KiB "
                f"apart share one): {fits}")

    for w in _nonzero_words(image):
        touch(w, None)
    for s in steps:
        touch(s.pc, s.pc)
        if s.pc == end - 4:  # its pc + 4 (a JAL's or JALR's link) would be 0x20000
            raise Refused(f"pc {s.pc:#x}: an instruction in the window's last word, whose "
                          f"pc + 4 the compiled machine does not hold: end the code below it")
        if s.store:
            touch(s.store[0], s.pc)
        if s.reads and s.reads[1]:
            for a in range(s.reads[0] & ~3, s.reads[0] + s.reads[1], 4):
                touch(a, s.pc)
        if s.exit is None and not elf.BASE <= s.next_pc < end:
            touch(s.next_pc, s.pc)


_PROGRAMS: dict[tuple[int, int | None], object] = {}


def program(max_seq_len: int | None = None, dump_at: int | None = None):
    """The compiled interpreter for ``max_seq_len`` and ``dump_at`` (None: ``model.program``'s,
    and make's default dump position), built once."""
    model = _model()
    if dump_at is None and max_seq_len in (None, model.program.options.max_seq_len):
        return model.program
    max_seq_len = max_seq_len or model.program.options.max_seq_len
    if (max_seq_len, dump_at) not in _PROGRAMS:
        _PROGRAMS[max_seq_len, dump_at] = model.make(max_seq_len=max_seq_len, dump_at=dump_at)
    return _PROGRAMS[max_seq_len, dump_at]


def _model():
    from examples.rv32i import model
    return model


def load(backend: str, max_seq_len: int | None = None, dump_at: int | None = None,
         lookup: int = DRAFT):
    """The backend's model, built (or loaded from the cache) before any timing (``lookup``:
    the llama backend's guesses a pass)."""
    compiled = program(max_seq_len, dump_at)
    if backend == "runtime":
        return compiled.compile()
    if backend == "hf":
        import torch
        from transformers import AutoModelForCausalLM
        return AutoModelForCausalLM.from_pretrained(str(_saved(compiled, dump_at)),
                                                    dtype=torch.float32)
    if backend == "llama":
        if not LLAMA_PY.exists():
            raise Refused(f"--backend llama runs llama.cpp in the project's llama venv, "
                          f"{LLAMA_PY.parent.parent}: build it with `make runtime-llama`")
        n_ctx = compiled.options.max_seq_len
        return LlamaServer(_gguf(compiled, dump_at), n_ctx, compiled.options.precision == "half",
                           lookup, records(_model().dump_position(n_ctx, dump_at)))
    raise Refused(f"backend {backend!r} is not built yet (runtime, hf, llama)")


def records(dump_at: int) -> Records:
    """The trace's token format, as lookup speculation guesses from it (lookup.py): the A_hi
    tokens of the three alphabets, the cells after which no dump starts (a write's byte, EXIT),
    RESUME's record, and the build's dump position."""
    model = _model()
    vocab = model.VOCAB
    page = {vocab[alphabet[h]]: (kind, h) for kind, alphabet in
            (("addr", trace.ADDR), ("dump", trace.DUMP), ("image", trace.IMAGE))
            for h in model.HI}
    return Records(trace.RECORD, dump_at, page, {h: vocab[trace.DUMP[h]] for h in model.HI},
                   frozenset((c >> 8, vocab[trace.BYTE[c & 255]])
                             for c in (trace.OUT, trace.EXIT)),
                   tuple(vocab.encode(trace.Record(trace.RESUME, 0, 0).text())[1:-2]))


class LlamaServer:
    """llama.cpp in a subprocess of the llama venv (``llama_decode.py --serve``), started on the
    first request and kept for the whole run: the model is loaded once, its KV cache sized to
    the build's context, and each context keeps the cache of the prompt it shares with the
    last (the image). ``lookup``: guesses evaluated with each token (``lookup.py``), which
    knows the trace's format from ``records``."""

    def __init__(self, gguf: Path, n_ctx: int, half: bool = False, lookup: int = DRAFT,
                 records: Records | None = None) -> None:
        self.gguf, self.n_ctx, self.half, self.lookup = gguf, n_ctx, half, lookup
        self.records = records
        self._proc: subprocess.Popen[str] | None = None

    def greedy(self, ids: list[int], eos: int, max_new_tokens: int) -> list[int]:
        if self._proc is None:
            self._proc = subprocess.Popen(
                [str(LLAMA_PY), str(Path(__file__).with_name("llama_decode.py")), "--serve"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            self._send({"gguf": str(self.gguf), "threads": LLAMA_THREADS, "half": self.half,
                        "n_ctx": self.n_ctx, "draft": self.lookup,
                        "records": self.records and self.records.to_json()})
        self._send({"ids": ids, "eos": eos, "max_new_tokens": max_new_tokens})
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            err = self.close()
            raise Refused(f"llama.cpp failed: {err.strip().splitlines()[-1:]}")
        return json.loads(line)

    def _send(self, message: dict) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        self._proc.stdin.write(json.dumps(message) + "\n")
        self._proc.stdin.flush()

    def close(self) -> str:
        """Ends the subprocess; what it wrote on stderr."""
        if self._proc is None:
            return ""
        proc, self._proc = self._proc, None
        _, err = proc.communicate()
        return err


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
        return model.VOCAB.decode(loaded.greedy(ids, model.VOCAB.eos_id, max_new_tokens))
    raise Refused(f"backend {backend!r} is not built yet (runtime, hf, llama)")


def _digest() -> str:
    """The build's key: model.py and the compiler's sources (a new compiler, a new build)."""
    h = hashlib.sha256((Path(__file__).parent / "model.py").read_bytes())
    for f in sorted((ROOT / "torchwright_fx").rglob("*.py")):
        h.update(f.read_bytes())
    return h.hexdigest()[:12]


def _tag(compiled, dump_at: int | None) -> str:
    return f"{_digest()}-{compiled.options.max_seq_len}-{dump_at or 'default'}"


def _gguf(compiled, dump_at: int | None = None) -> Path:
    """The F32 GGUF of the current model.py at this length, written once (as ``_saved``)."""
    out = CACHE / f"gguf-{_tag(compiled, dump_at)}.gguf"
    if not out.exists():
        print(f"rv32i: writing the GGUF {out}", file=sys.stderr)
        out.parent.mkdir(parents=True, exist_ok=True)
        compiled.compile().save_gguf(out)
    return out


def _saved(compiled, dump_at: int | None = None) -> Path:
    """The Phi-3 directory of the current model.py at this length and dump position, saved
    once (keyed by the source, the compiler's, max_seq_len and dump_at)."""
    out = CACHE / f"hf-{_tag(compiled, dump_at)}"
    if not (out / "config.json").exists():
        print(f"rv32i: building the checkpoint into {out}", file=sys.stderr)
        compiled.compile().save_pretrained(out)
    return out


SLOTS = ("A_hi", "A_lo", "V0", "V1", "V2", "V3", "P_hi", "P_lo")  # a record's tokens (trace.py)


def verify(compiled, prepared: Prepared) -> str | None:
    """Where the model's argmax first differs from the reference's next token, described (the
    context, counted from 1, the record within what it prints, the slot, the model's token and
    the reference's), or None when it confirms every context's records (teacher-forced, a
    pass per context)."""
    model = _model()
    total = len(prepared.contexts)
    for n, ctx in enumerate(prepared.contexts):
        prompt = trace.text(ctx.prompt)
        ids = model.VOCAB.encode(prompt + trace.text(ctx.printed))
        if ctx.stops:
            ids.append(model.VOCAB.eos_id)
        logits = compiled.logits(ids[:-1])
        start = len(prompt)  # the position that predicts the first printed token (<bos> is 0)
        picked = logits[start:].argmax(-1).tolist()
        for k, (got, want) in enumerate(zip(picked, ids[start + 1:], strict=True)):
            if got != want:
                r = k // trace.RECORD
                if r == len(ctx.printed):
                    where = "after its last record, where the reference ends the context"
                else:
                    where = (f"at its record {r} ({ctx.printed[r].describe()}), token "
                             f"{SLOTS[k % trace.RECORD]}")
                return (f"in context {n + 1} of {total} {where}: the model's argmax is "
                        f"{_token(got)} where the reference's trace has {_token(want)}")
        _progress(n, total, "confirmed")
    return None


def _token(tid: int) -> str:
    """A token of the trace, as a person reads it: a byte's value, an A_hi's alphabet and page,
    or <eos>."""
    model = _model()
    if tid == model.VOCAB.eos_id:
        return "<eos>"
    c = model.VOCAB.decode([tid])
    if len(c) != 1:
        return repr(c)
    for name, alphabet in (("byte", trace.BYTE), ("A_hi", trace.ADDR),
                           ("dump A_hi", trace.DUMP), ("image A_hi", trace.IMAGE)):
        if c in alphabet:
            return f"{name} {alphabet.index(c):#04x}"
    return repr(c)


def _progress(n: int, total: int, what: str) -> None:
    if total > 1:
        print(f"rv32i: context {n + 1}/{total} {what}", file=sys.stderr, flush=True)


def decode(loaded, prepared: Prepared, backend: str
           ) -> tuple[list[trace.Record], int, str | None]:
    """Greedy decoding through as many contexts as the model asks for: where it ends a context
    with a dump and RESUME, the dump's tokens become the next prompt. Each context decodes at
    most what the reference's schedule says it prints (and <eos> after EXIT or RESUME), and
    what it prints is compared with that, record by record. Returns the executed records, how
    many tokens were printed (dumps included), and where the model first departs from the
    reference's trace (None where it never does)."""
    executed: list[trace.Record] = []
    printed = 0
    prompt = prepared.prompt
    for n, ctx in enumerate(prepared.contexts):
        limit = trace.RECORD * len(ctx.printed) + int(ctx.stops)
        got, tail = _records(generate(loaded, prompt, backend, limit))
        printed += trace.RECORD * len(got)
        _progress(n, len(prepared.contexts), "decoded")
        dump = next((i for i, r in enumerate(got) if r.dump), len(got))
        executed += got[:dump]
        # the first record that differs; where all agree, the end of the shorter (the model
        # printed at most the limit, so only fewer records, or a cut one, can remain)
        k = next((i for i, (g, w) in enumerate(zip(got, ctx.printed, strict=False)) if g != w),
                 None if len(got) == len(ctx.printed) else len(got))
        if k is not None:
            said = got[k].describe() if k < len(got) else tail or "<eos>"
            return executed, printed, (f"in context {n + 1} of {len(prepared.contexts)} at "
                                       f"its record {k} the model printed {said} where the "
                                       f"reference prints {ctx.printed[k].describe()}")
        if ctx.printed and not ctx.printed[-1].dump and ctx.printed[-1].target == trace.RESUME:
            # the first prompt's image, then the dump and RESUME, copied as they are
            prompt = prepared.prompt + trace.text(got[dump:])
    return executed, printed, None


def _records(generated: str) -> tuple[list[trace.Record], str | None]:
    """The whole, well-formed records at the start of ``generated``, and what follows them
    when that is not one (a record cut short or malformed), described."""
    whole = len(generated) // trace.RECORD * trace.RECORD
    recs: list[trace.Record] = []
    for k in range(0, whole, trace.RECORD):
        try:
            recs += trace.parse(generated[k:k + trace.RECORD])
        except ValueError:
            return recs, f"the malformed record {generated[k:k + trace.RECORD]!r}"
    rest = generated[whole:]
    return recs, (f"{len(rest)} tokens of a record ({rest!r}) before the limit" if rest
                  else None)


def main(path: str, backend: str, max_instructions: int | None, check: bool,
         max_seq_len: int | None = None, lookup: int = DRAFT) -> int:
    try:
        prepared = prepare(path, max_instructions, max_seq_len)
    except (OSError, elf.ElfError, Refused) as e:
        print(f"rv32i: {e}", file=sys.stderr)
        return 2
    try:
        loaded = load("runtime" if check else backend, prepared.max_seq_len, prepared.dump_at,
                      lookup)
    except Refused as e:
        print(f"rv32i: {e}", file=sys.stderr)
        return 2
    n_ctx = len(prepared.contexts)
    print(f"rv32i: {n_ctx} context{'s' if n_ctx > 1 else ''} of up to {prepared.max_seq_len} "
          f"tokens (the state dumped from position {prepared.dump_at})", file=sys.stderr)
    start = time.perf_counter()
    if check:
        bad = verify(loaded, prepared)
        if bad is not None:
            print(f"rv32i: the model diverges from the reference {bad}", file=sys.stderr)
            return 3
        recs = prepared.records
    else:
        try:
            recs, tokens, wrong = decode(loaded, prepared, backend)
        except Refused as e:
            print(f"rv32i: {e}", file=sys.stderr)
            return 2
        finally:
            if isinstance(loaded, LlamaServer):
                loaded.close()
        if wrong is not None:
            print(f"rv32i: the model diverges from the reference: {wrong}", file=sys.stderr)
            return 3
    seconds = time.perf_counter() - start
    out, status = trace.output(recs)
    sys.stdout.buffer.write(out)
    sys.stdout.flush()
    if check:
        tokens = sum(trace.RECORD * len(c.printed) for c in prepared.contexts)
    how = "confirmed teacher-forced" if check else f"decoded by {backend}"
    print(f"rv32i: {len(recs)} records ({tokens} tokens) {how} in {seconds:.1f} s "
          f"({tokens / max(seconds, 1e-9):.0f} tok/s), exit status {status}", file=sys.stderr)
    return 124 if status is None else status
