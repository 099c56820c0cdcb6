"""Unbounded runs of the rv32i interpreter (examples/rv32i/contexts.py): the host's schedule
of contexts against the reference, and the compiled model printing each context's state dump
exactly (teacher-forced here; greedy through the command line in the slow tests)."""

from __future__ import annotations

import pytest

from examples.rv32i import asm, contexts, run, trace
from examples.rv32i.trace import MEM, OUT, RECORD, RESUME, Record

ELF_DIR = run.ROOT / "examples" / "rv32i" / "elf"
# x1 counts down from 40 while x2 sums it into a memory word: registers and a cell that change
# every few records, over many contexts of a small build; exit with the low byte of the sum
DATA = 0x10100
LOOP = [*asm.li(3, DATA), asm.addi(1, 0, 40), asm.lw(2, 3, 0), asm.add(2, 2, 1),
        asm.sw(2, 3, 0), asm.addi(1, 1, -1), asm.bne(1, 0, -16), asm.lw("a0", 3, 0),
        *asm.exit_with("a0")]


def test_a_dump_lists_each_cell_once_newest_first_record_first():
    ctx = [Record(MEM + 5, 7, 0), Record(3, 1, 1), Record(MEM + 5, 9, 2), Record(4, 2, 3),
           Record(3, 6, 4)]
    assert contexts.dump(ctx, 4) == [
        Record(4, 2, 4, dump=True), Record(3, 6, 4, dump=True), Record(MEM + 5, 9, 4, dump=True),
        Record(RESUME, 0, 4)]


def test_a_dump_leaves_out_the_cells_only_the_image_holds():
    """Every prompt starts with the image, so a dump lists only the cells the program wrote: an
    image cell it stored into, but not one it only read."""
    image = [Record(MEM, 0x13, 0, image=True), Record(MEM + 1, 5, 0, image=True)]
    ctx = [*image, Record(3, 1, 1), Record(MEM + 1, 9, 2)]
    assert contexts.dump(ctx, 2) == [Record(MEM + 1, 9, 2, dump=True), Record(3, 1, 2, dump=True),
                                     Record(RESUME, 0, 2)]


def test_the_schedule_replays_the_reference_across_contexts():
    image = asm.image(LOOP)
    prompt, recs = trace.run(image)
    first = trace.parse(prompt)
    ctxs = contexts.schedule(first, recs, True, 512, 1024)
    assert len(ctxs) > 3
    executed = [r for c in ctxs for r in c.printed if not r.dump and r.target != RESUME]
    assert executed == recs
    for before, after in zip(ctxs[:-1], ctxs[1:], strict=True):  # the image, the last dump
        n = len(after.prompt) - len(first)
        assert after.prompt == first + before.printed[-n:] and after.prompt[-1].target == RESUME
        assert all(r.image for r in first) and not any(r.image for r in before.printed)
        assert RECORD * (len(before.prompt) + len(before.printed) - n) >= 512
    assert all(c.tokens <= 1024 for c in ctxs) and ctxs[-1].stops


def test_a_dump_waits_for_a_write_to_finish():
    out = [Record(OUT, 65 | (k + 1) << 8, 9) for k in range(6)]
    recs = [Record(1, 1, 1), *out, Record(10, 6, 10), Record(0, 0, 11)]
    ctxs = contexts.schedule([Record(MEM, 0x13, 0)], recs, False, 48, 1024)
    first = ctxs[0].printed
    # the dump was due at the write's fourth byte; it starts after the write's last record
    assert [r.target for r in first[:8]] == [1, *[OUT] * 6, 10]
    assert first[8].dump


def test_a_state_too_large_is_refused_with_a_length_that_runs():
    with pytest.raises(run.Refused, match=r"give --max-seq-len (\d+)") as e:
        run.prepare(str(ELF_DIR / "sum.elf"), None, 1088)
    need = int(e.value.args[0].rsplit("--max-seq-len ", 1)[1].split()[0])
    assert len(run.prepare(str(ELF_DIR / "sum.elf"), None, need).contexts) > 1


@pytest.fixture(scope="module")
def small():
    """The interpreter built for contexts of 1024 tokens that dump from position 512, run on
    one thread (decoding is many small steps)."""
    import torch

    from examples.rv32i import model
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield model.make(max_seq_len=1024, dump_at=512).compile()
    torch.set_num_threads(before)


def _confirm(compiled, ctxs: list[contexts.Context]) -> None:
    from examples.rv32i import model
    for n, c in enumerate(ctxs):
        prompt = trace.text(c.prompt)
        ids = model.VOCAB.encode(prompt + trace.text(c.printed)) + [model.VOCAB.eos_id]
        picked = compiled.logits(ids[:-1])[len(prompt):].argmax(-1).tolist()
        assert picked == ids[len(prompt) + 1:], f"context {n}"


def test_the_model_prints_every_context_of_a_loop(small):
    prompt, recs = trace.run(asm.image(LOOP))
    ctxs = contexts.schedule(trace.parse(prompt), recs, True, 512, 1024)
    assert len(ctxs) > 3
    _confirm(small, ctxs)
    assert trace.output(recs) == (b"", sum(range(41)) & 255)


def test_the_model_prints_every_context_of_a_writer(small):
    """Writes of 3 bytes cross the dump position: each dump waits for its write's last byte."""
    words = [asm.addi(1, 0, 25), *asm.li("a1", DATA), asm.addi("a2", 0, 3),
             asm.addi("a0", 0, 1), asm.addi("a7", 0, 64), asm.ECALL, asm.addi(1, 1, -1),
             asm.bne(1, 0, -16), *asm.exit_with(1)]
    prompt, recs = trace.run(asm.image(words, {DATA: b"ab\n"}))
    ctxs = contexts.schedule(trace.parse(prompt), recs, True, 512, 1024)
    assert len(ctxs) > 3
    starts = [RECORD * (len(c.prompt) + next(i for i, r in enumerate(c.printed) if r.dump))
              for c in ctxs[:-1]]
    assert any(t > 512 for t in starts)  # a dump that waited for a write
    _confirm(small, ctxs)
    assert trace.output(recs) == (b"ab\n" * 25, 0)


def test_a_long_write_that_fits_one_context_runs_in_one():
    n = 900  # bytes in one write: its OUT records alone outgrow four times the state
    words = [*asm.li("a1", DATA), *asm.li("a2", n), asm.addi("a0", 0, 1),
             asm.addi("a7", 0, 64), asm.ECALL, *asm.exit_with(0)]
    p = run.prepare_image(asm.image(words, {DATA: b"x" * n}), None)
    assert len(p.contexts) == 1 and p.contexts[0].tokens <= p.max_seq_len


def test_greedy_decoding_follows_the_dumps_and_stops_at_an_instruction_limit(small):
    """run.decode through the in-process runtime: every context's dump becomes the next
    prompt; a run cut by --max-instructions decodes exactly the records it asks for."""
    for limit in (None, 60):
        prompt, recs = trace.run(asm.image(LOOP), limit)
        exited = limit is None
        ctxs = contexts.schedule(trace.parse(prompt), recs, exited, 512, 1024)
        prepared = run.Prepared(prompt, recs, exited, 1024, 512, ctxs)
        got, printed, wrong = run.decode(small, prepared, "runtime")
        assert (got, wrong) == (recs, None)
        assert printed == sum(RECORD * len(c.printed) for c in ctxs)


def test_link_ld_puts_the_stack_at_the_window_end_and_data_below_the_registers():
    """c/link.ld starts the stack where the compiled machine's 64 KiB window ends and keeps
    code, data and bss below the registers' cells (0x13000), so that nothing of a C program
    that keeps its stack within 3.8 KiB falls on a register or on another word's cell
    (examples/rv32i/README.md)."""
    import re

    from examples.rv32i import elf

    text = (run.ROOT / "examples" / "rv32i" / "c" / "link.ld").read_text()
    end = int(re.search(r"WINDOW_END = (0x[0-9A-Fa-f]+);", text).group(1), 16)
    data_end = int(re.search(r"DATA_END = (0x[0-9A-Fa-f]+);", text).group(1), 16)
    assert end == elf.BASE + 4 * run._model().WINDOW_WORDS
    assert data_end == elf.BASE + 4 * trace.PAGE_WORDS * trace.REGISTER_PAGE
    for path in ELF_DIR.glob("*.elf"):  # the committed images were linked with it
        assert elf.load(path).symbols["__stack_top"] == end, path.name
