"""A tiny RV32I assembler for tests: one function per instruction, returning its 32-bit word,
and ``image()`` to lay words (and data) out as a program at 0x10000.

    from examples.rv32i import asm
    prog = asm.image([asm.addi(1, 0, -1), asm.srai(2, 1, 4), *asm.exit_with(2)])

Registers are numbers (x0..x31) or ABI names ("a0"); branch and jump offsets are in bytes,
relative to the instruction."""

from __future__ import annotations

from examples.rv32i.elf import BASE, SIZE, Image
from examples.rv32i.reference import REG_NAMES

Reg = int | str


def _r(x: Reg) -> int:
    n = REG_NAMES.index(x) if isinstance(x, str) else x
    if not 0 <= n < 32:
        raise ValueError(f"no register x{n}")
    return n


def _fits(v: int, bits: int, what: str) -> None:
    if not -(1 << (bits - 1)) <= v < (1 << (bits - 1)):
        raise ValueError(f"{what} {v} does not fit {bits} signed bits")


def r_type(f7: int, rs2: Reg, rs1: Reg, f3: int, rd: Reg, op: int = 0x33) -> int:
    return f7 << 25 | _r(rs2) << 20 | _r(rs1) << 15 | f3 << 12 | _r(rd) << 7 | op


def i_type(imm: int, rs1: Reg, f3: int, rd: Reg, op: int) -> int:
    _fits(imm, 12, "immediate")
    return (imm & 0xFFF) << 20 | _r(rs1) << 15 | f3 << 12 | _r(rd) << 7 | op


def s_type(imm: int, rs2: Reg, rs1: Reg, f3: int) -> int:
    _fits(imm, 12, "offset")
    imm &= 0xFFF
    return (imm >> 5) << 25 | _r(rs2) << 20 | _r(rs1) << 15 | f3 << 12 | (imm & 31) << 7 | 0x23


def b_type(off: int, rs2: Reg, rs1: Reg, f3: int) -> int:
    _fits(off, 13, "branch offset")
    o = off & 0x1FFF
    return ((o >> 12 & 1) << 31 | (o >> 5 & 0x3F) << 25 | _r(rs2) << 20 | _r(rs1) << 15
            | f3 << 12 | (o >> 1 & 0xF) << 8 | (o >> 11 & 1) << 7 | 0x63)


def lui(rd: Reg, imm20: int) -> int:
    return (imm20 & 0xFFFFF) << 12 | _r(rd) << 7 | 0x37


def auipc(rd: Reg, imm20: int) -> int:
    return (imm20 & 0xFFFFF) << 12 | _r(rd) << 7 | 0x17


def jal(rd: Reg, off: int) -> int:
    _fits(off, 21, "jump offset")
    o = off & 0x1FFFFF
    return ((o >> 20 & 1) << 31 | (o >> 1 & 0x3FF) << 21 | (o >> 11 & 1) << 20
            | (o >> 12 & 0xFF) << 12 | _r(rd) << 7 | 0x6F)


def jalr(rd: Reg, rs1: Reg, imm: int = 0) -> int:
    return i_type(imm, rs1, 0, rd, 0x67)


def _branch(f3: int):
    return lambda rs1, rs2, off: b_type(off, rs2, rs1, f3)


beq, bne, blt, bge, bltu, bgeu = (_branch(f) for f in (0, 1, 4, 5, 6, 7))


def _load(f3: int):
    return lambda rd, rs1, imm=0: i_type(imm, rs1, f3, rd, 0x03)


lb, lh, lw, lbu, lhu = (_load(f) for f in (0, 1, 2, 4, 5))


def _store(f3: int):
    return lambda rs2, rs1, imm=0: s_type(imm, rs2, rs1, f3)


sb, sh, sw = (_store(f) for f in (0, 1, 2))


def _alu_imm(f3: int):
    return lambda rd, rs1, imm: i_type(imm, rs1, f3, rd, 0x13)


addi, slti, sltiu, xori, ori, andi = (_alu_imm(f) for f in (0, 2, 3, 4, 6, 7))


def slli(rd: Reg, rs1: Reg, sh: int) -> int:
    return r_type(0, sh, rs1, 1, rd, 0x13)


def srli(rd: Reg, rs1: Reg, sh: int) -> int:
    return r_type(0, sh, rs1, 5, rd, 0x13)


def srai(rd: Reg, rs1: Reg, sh: int) -> int:
    return r_type(0x20, sh, rs1, 5, rd, 0x13)


def _alu(f3: int, f7: int = 0):
    return lambda rd, rs1, rs2: r_type(f7, rs2, rs1, f3, rd)


add, sub, sll, slt, sltu = _alu(0), _alu(0, 0x20), _alu(1), _alu(2), _alu(3)
xor, srl, sra, or_, and_ = _alu(4), _alu(5), _alu(5, 0x20), _alu(6), _alu(7)
mul, mulh, mulhsu, mulhu = _alu(0, 1), _alu(1, 1), _alu(2, 1), _alu(3, 1)
div, divu, rem, remu = _alu(4, 1), _alu(5, 1), _alu(6, 1), _alu(7, 1)

FENCE = 0x0FF0000F
ECALL = 0x00000073
EBREAK = 0x00100073


def li(rd: Reg, value: int) -> list[int]:
    """Loads a 32-bit constant: LUI + ADDI (or one ADDI when it fits 12 bits)."""
    value &= 0xFFFFFFFF
    signed = value - (1 << 32) if value >> 31 else value
    if -2048 <= signed < 2048:
        return [addi(rd, 0, signed)]
    low = signed & 0xFFF
    low = low - 4096 if low >= 2048 else low
    return [lui(rd, ((value - low) >> 12) & 0xFFFFF), addi(rd, rd, low)]


def exit_with(rs: Reg) -> list[int]:
    """exit(rs): a0 = rs, a7 = 93, ECALL."""
    return [addi("a0", rs, 0), addi("a7", 0, 93), ECALL]


def image(words: list[int], data: dict[int, bytes] | None = None, base: int = BASE,
          size: int = SIZE) -> Image:
    """The words at ``base`` (the entry point), and ``data`` (address: bytes) in memory."""
    memory = bytearray(size)
    for k, w in enumerate(words):
        memory[4 * k:4 * k + 4] = (w & 0xFFFFFFFF).to_bytes(4, "little")
    for addr, blob in (data or {}).items():
        memory[addr - base:addr - base + len(blob)] = blob
    return Image(memory, base, base, segments=[(base, size, size)], name="asm")
