"""The first compiled piece of the rv32i interpreter (examples/rv32i/model.py): compiled, its
greedy output (the in-process runtime of the compiled weights) equals the records the reference
interpreter's steps print (examples/rv32i/trace.py), on hand-assembled programs of its subset.

Slow (the build takes about 90 s on 2 cores): `make test-all` runs it."""

from __future__ import annotations

import pytest

from examples.rv32i import asm, trace

pytestmark = pytest.mark.slow

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
PROGRAMS = {"alu": ALU, "loop": LOOP, "branches": BRANCHES, "call": CALL}


@pytest.fixture(scope="module")
def compiled():
    from examples.rv32i import model
    return model.program.compile()


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_generated_records_equal_the_reference(compiled, name):
    prompt, want = trace.run(asm.image(PROGRAMS[name]))
    got = compiled.generate(prompt)
    assert trace.parse(got) == want
    out, status = trace.output(want)
    assert status is not None and trace.output(trace.parse(got)) == (out, status)


def test_exit_statuses():
    assert [trace.output(trace.run(asm.image(PROGRAMS[n]))[1])[1]
            for n in ("loop", "branches", "call")] == [21, 6, 42]


def test_the_eager_program_is_the_same_machine(compiled):
    prompt, want = trace.run(asm.image(LOOP[:2] + asm.exit_with(1)))
    assert trace.parse(compiled.reference(prompt)) == want
