"""The first compiled piece of the rv32i interpreter (examples/rv32i/model.py): compiled, its
greedy output (the in-process runtime of the compiled weights) equals the records the reference
interpreter's steps print (examples/rv32i/trace.py), on hand-assembled programs of its subset
and on the C program hello.elf; and `python -m examples.rv32i run` refuses what is outside it.

The compiled checks are slow (about 2 minutes on 2 cores: the build, hello's 688 tokens in
47 s): `make test-all` runs them."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from examples.rv32i import asm, elf, run, trace

ELF_DIR = run.ROOT / "examples" / "rv32i" / "elf"

ALU = [asm.addi(1, 0, 5), asm.addi(2, 0, -3), asm.add(3, 1, 2), asm.sub(4, 2, 1),
       asm.xori(5, 4, 0x7F), asm.slt(6, 2, 1), asm.sltu(7, 2, 1), asm.lui(8, 0xABCDE),
       asm.auipc(9, 1), asm.andi(10, 8, -256), asm.ori(11, 3, 0x700), asm.sltiu(12, 2, 7),
       asm.slti(13, 2, -2), asm.xor(14, 8, 4), asm.or_(15, 5, 8), asm.and_(16, 9, 10),
       asm.addi(0, 1, 9), *asm.exit_with(3)]
# 1 + 2 + ... + 6 by a backward branch, then exit with the sum (21)
LOOP = [asm.addi(1, 0, 6), asm.addi(2, 0, 0), asm.add(2, 2, 1), asm.addi(1, 1, -1),
        asm.blt(0, 1, -8), *asm.exit_with(2)]
# every branch, taken and not: x3 counts the ones not taken (exit 6)
BRANCHES = [asm.addi(1, 0, -1), asm.addi(2, 0, 1), asm.addi(3, 0, 0)]
for op, a, b in [("beq", 1, 1), ("beq", 1, 2), ("bne", 1, 2), ("bne", 2, 2), ("blt", 1, 2),
                 ("blt", 2, 1), ("bge", 2, 1), ("bge", 1, 2), ("bltu", 2, 1), ("bltu", 1, 2),
                 ("bgeu", 1, 2), ("bgeu", 2, 1)]:
    BRANCHES += [getattr(asm, op)(a, b, 8), asm.addi(3, 3, 1)]
BRANCHES += asm.exit_with(3)
# a call and a return through JAL/JALR (the callee doubles a0), exit 2 * 21
CALL = [asm.addi("a0", 0, 21), asm.jal("ra", 16), *asm.exit_with("a0"),
        asm.add("a0", "a0", "a0"), asm.jalr(0, "ra", 0)]
# loads and stores of bytes, halves and words, and a write of 3 bytes; exits with the low
# byte of the word SH and SB leave (0x007F7F01)
DATA = 0x10200
MEMORY = [*asm.li(1, DATA), *asm.li(2, 0x80FF7F01), asm.sw(2, 1, 0), asm.lb(3, 1, 1),
          asm.lbu(4, 1, 3), asm.lh(5, 1, 2), asm.lhu(6, 1, 0), asm.lw(7, 1, 0), asm.sb(3, 1, 6),
          asm.sh(2, 1, 4), asm.lw(8, 1, 4), asm.addi("a0", 0, 1), asm.addi("a1", 1, 8),
          asm.addi("a2", 0, 3), asm.addi("a7", 0, 64), asm.ECALL, *asm.exit_with(8)]
# write(2, "err", 3) (its bytes go nowhere, a0 = 3), write(1, "hi!", 3), then exit_group
# (a7 = 94) with a0 + 4 = 7, as a C runtime's _exit does
SYSCALLS = [*asm.li("a1", DATA + 8), asm.addi("a0", 0, 2), asm.addi("a2", 0, 3),
            asm.addi("a7", 0, 64), asm.ECALL, asm.addi("s0", "a0", 4), asm.addi("a0", 0, 1),
            asm.ECALL, asm.addi("a0", "s0", 0), asm.addi("a7", 0, 94), asm.ECALL]
# the whole 64 KiB window: a call into code at 0x1D000 (P_hi 0x34), which stores a word and a
# byte at 0x1FF00 (folded onto page 15 of the cells) and reads them back, stores a word at
# 0x1F100 (on the registers' page, past their cells: it prints as they do, A_hi 0x00) and adds
# it in, counts a loop down, jumps to 0x1D0FC, whose JAL's link (0x1D100) carries into the
# pc's second byte, and returns; exit with the low byte of link ^ word
HIGH = 0x1D000
WINDOW = [*asm.li(1, HIGH), asm.jalr("ra", 1, 0), *asm.exit_with("a0")]
HIGH_CODE = [*asm.li(2, 0x1FF00), *asm.li(3, 0x12345678), asm.sw(3, 2, 0), asm.lw(4, 2, 0),
             asm.sb(4, 2, 1), asm.lw(7, 2, 0), *asm.li(9, 0x1F100), asm.sw(7, 9, 0),
             asm.lw(8, 9, 0), asm.add(7, 7, 8), asm.addi(5, 0, 3), asm.addi(5, 5, -1),
             asm.bne(5, 0, -4)]
HIGH_CODE.append(asm.jal(0, 0xFC - 4 * len(HIGH_CODE)))
HIGH_CODE += [0] * (0xFC // 4 - len(HIGH_CODE))
HIGH_CODE += [asm.jal(6, 8), asm.addi("a0", 0, 99), asm.xor("a0", 6, 7), asm.jalr(0, "ra", 0)]
PROGRAMS = {"alu": ALU, "loop": LOOP, "branches": BRANCHES, "call": CALL, "memory": MEMORY,
            "syscalls": SYSCALLS, "window": WINDOW}
DATA_OF = {"memory": {DATA + 8: b"hi!"}, "syscalls": {DATA + 8: b"hi!"},
           "window": {HIGH: b"".join((w & 0xFFFFFFFF).to_bytes(4, "little") for w in HIGH_CODE)}}
IMAGES = {name: asm.image(words, DATA_OF.get(name)) for name, words in PROGRAMS.items()}


@pytest.fixture(scope="module")
def compiled():
    """The build, run on one thread (conftest's two threads on a busy 2-core machine made each
    generated token many times slower)."""
    import torch

    from examples.rv32i import model
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield model.program.compile()
    torch.set_num_threads(before)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_generated_records_equal_the_reference(compiled, name):
    prompt, want = trace.run(IMAGES[name])
    got = compiled.generate(prompt)
    assert trace.parse(got) == want
    out, status = trace.output(want)
    assert status is not None and trace.output(trace.parse(got)) == (out, status)


def test_exit_statuses():
    assert [trace.output(trace.run(IMAGES[n])[1])
            for n in ("loop", "branches", "call", "memory", "syscalls", "window")
            ] == [(b"", 21), (b"", 6), (b"", 42), (b"hi!", 1), (b"hi!", 7), (b"", 0xF0)]


@pytest.mark.slow
def test_hello_runs_through_the_checkpoint(compiled):
    prompt, want = trace.run(elf.load(ELF_DIR / "hello.elf"))
    got = trace.parse(compiled.generate(prompt))
    assert got == want
    assert trace.output(got) == (b"Hello, world!\n", 0)


@pytest.mark.slow
def test_greedy_decoding_names_where_the_model_departs_from_the_reference(compiled):
    """`run` compares what the model prints with the reference's trace, record by record, and
    names the first difference instead of printing a wrong output (here the reference's trace
    is altered: the loop's sum written one too high)."""
    prepared = run.prepare_image(IMAGES["loop"], None)
    ctx = prepared.contexts[0]
    k = next(i for i, r in enumerate(ctx.printed) if r.target == 2 and r.value == 6)
    wrong = dataclasses.replace(ctx.printed[k], value=7)
    ctx.printed[k] = wrong
    _, _, said = run.decode(compiled, prepared, "runtime")
    assert said == (f"in context 1 of 1 at its record {k} the model printed x2=0x6 "
                    f"pc={wrong.pc:#x} where the reference prints {wrong.describe()}")


@pytest.mark.slow
def test_verify_names_the_token_where_the_model_departs_from_the_reference(compiled):
    """`--verify` (teacher-forced) names the context (from 1, as its progress lines count),
    the record, the token's slot, the model's own token and the reference's."""
    prepared = run.prepare_image(IMAGES["loop"], None)
    ctx = prepared.contexts[0]
    k = next(i for i, r in enumerate(ctx.printed) if r.target == 2 and r.value == 6)
    wrong = dataclasses.replace(ctx.printed[k], value=7)
    ctx.printed[k] = wrong
    said = run.verify(compiled, prepared)
    assert said == (f"in context 1 of 1 at its record {k} ({wrong.describe()}), token V0: the "
                    f"model's argmax is byte 0x06 where the reference's trace has byte 0x07")
    ctx.printed[k] = dataclasses.replace(wrong, value=6)
    assert run.verify(compiled, prepared) is None


def test_run_refuses_what_the_model_lacks():
    far = asm.image([*asm.li(1, 0x20000), asm.sw(1, 1, 0), *asm.exit_with(0)])
    with pytest.raises(run.Refused, match=r"store of 4 bytes at 0x20000, outside memory "
                                          r"0x10000..0x20000"):
        run.prepare_image(far, None, 10 ** 6)
    # a load of a word that folds onto the registers' cells (0x13000 + 4 r, and every 16 KiB
    # above) would read a register: refused, saying where they are
    registers = asm.image([*asm.li(1, 0x1F008), asm.lw(2, 1, 0), *asm.exit_with(0)])
    with pytest.raises(run.Refused, match=r"the word at 0x1f008 \(4,088 bytes below 0x20000\) "
                                          r"falls on the compiled machine's registers, which it "
                                          r"keeps at 0x13000..0x1308b and every 16 KiB above"):
        run.prepare_image(registers, None, 10 ** 6)
    # two words 16 KiB apart share a cell: refused, naming both
    shared = asm.image([*asm.li(1, 0x14400), asm.sw(1, 1, 0), *asm.li(1, 0x18400),
                        asm.sw(1, 1, 0), *asm.exit_with(0)])
    with pytest.raises(run.Refused, match="the words at 0x14400 and 0x18400 fall on one cell"):
        run.prepare_image(shared, None, 10 ** 6)
    # ... the image's code too (its page is page 0 of the cells)
    code = asm.image([*asm.li(1, 0x1C000), asm.lw(2, 1, 0), *asm.exit_with(0)])
    with pytest.raises(run.Refused, match=r"the words at 0x10000 and 0x1c000 \(16,384 bytes below "
                                          r"0x20000\) fall on one cell.*stack within 3,956 "
                                          r"bytes below 0x20000 \(down to 0x1f08c\)"):
        run.prepare_image(code, None, 10 ** 6)
    # a JAL in the window's last word would link to 0x20000: refused; one word lower, it runs
    last = [*asm.li(1, 0x1FFF8), asm.jalr(0, 1, 0)]  # then exit, at 0x1000c
    tail = {0x1FFF8: b"".join((w & 0xFFFFFFFF).to_bytes(4, "little")
                              for w in (asm.addi("a0", 0, 5), asm.jal("ra", 0x1000C - 0x1FFFC)))}
    with pytest.raises(run.Refused, match="pc 0x1fffc: an instruction in the window's last word"):
        run.prepare_image(asm.image([*last, *asm.exit_with("a0")], tail), None, 10 ** 6)
    lower = {0x1FFF4: b"".join((w & 0xFFFFFFFF).to_bytes(4, "little")
                               for w in (asm.addi("a0", 0, 5), asm.jal("ra", 0x1000C - 0x1FFF8)))}
    jump = [*asm.li(1, 0x1FFF4), asm.jalr(0, 1, 0)]
    assert run.prepare_image(asm.image([*jump, *asm.exit_with("a0")], lower), None,
                             10 ** 6).exited
    # the advice, followed: a stack word within 3,956 bytes of 0x20000, and words that are not
    # 16 KiB apart, run
    for fixed in ([*asm.li(1, 0x1F08C), asm.lw(2, 1, 0)],
                  [*asm.li(1, 0x14400), asm.sw(1, 1, 0), *asm.li(1, 0x18800), asm.sw(1, 1, 0)],
                  [*asm.li(1, 0x1FF00), asm.lw(2, 1, 0)]):
        assert run.prepare_image(asm.image([*fixed, *asm.exit_with(0)]), None, 10 ** 6).exited
    with pytest.raises(run.Refused, match="M extension"):
        run.prepare_image(asm.image([asm.mul(1, 1, 1), *asm.exit_with(1)]), None, 10 ** 6)


def test_the_llama_backend_names_the_venv_it_needs(monkeypatch, tmp_path):
    """--backend llama decodes in the llama venv (a subprocess); without it, a refusal that says
    which make target builds it (the decoding itself: `make rv32i-llama`)."""
    monkeypatch.setattr(run, "LLAMA_PY", tmp_path / "no-venv" / "bin" / "python")
    monkeypatch.setattr(run, "program", lambda max_seq_len=None, dump_at=None: None)
    with pytest.raises(run.Refused, match="make runtime-llama"):
        run.load("llama")


@pytest.mark.slow
def test_the_eager_program_is_the_same_machine(compiled):
    prompt, want = trace.run(asm.image(LOOP[:2] + asm.exit_with(1)))
    assert trace.parse(compiled.reference(prompt)) == want


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "examples.rv32i", *args], cwd=run.ROOT,
                          capture_output=True, timeout=1200)


def test_the_command_line_refuses_a_context_too_short_for_the_state():
    p = _cli("run", str(ELF_DIR / "sum.elf"), "--max-seq-len", "1088")
    assert p.returncode == 2 and p.stdout == b""
    assert b"leaves no room to run between dumps; give --max-seq-len" in p.stderr


@pytest.mark.slow
def test_the_command_line_verifies_hello():
    p = _cli("run", str(ELF_DIR / "hello.elf"), "--verify")
    assert (p.stdout, p.returncode) == (b"Hello, world!\n", 0)
    assert b"86 records (688 tokens) confirmed teacher-forced" in p.stderr


@pytest.mark.slow
@pytest.mark.skipif(not run.LLAMA_PY.exists(), reason="the llama venv: make runtime-llama")
def test_greedy_decoding_through_llama_cpp_across_contexts():
    """`run --backend llama` over several contexts of one llama.cpp process: every prompt is
    the image (whose KV cache is kept) and the last dump; the program's output and exit
    status are the reference's (sum.elf: 5050, exit 186, in 7 contexts of 2,048 tokens)."""
    p = _cli("run", str(ELF_DIR / "sum.elf"), "--backend", "llama", "--max-seq-len", "2048")
    assert (p.stdout, p.returncode) == (b"5050\n", 186), p.stderr[-400:]
    assert b"7 contexts of up to 2048 tokens" in p.stderr
