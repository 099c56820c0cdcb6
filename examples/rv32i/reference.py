"""A plain-Python reference interpreter of the RV32I base integer ISA, one instruction at a time.

All of RV32I: LUI, AUIPC, JAL, JALR, the six branches, LB/LH/LW/LBU/LHU, SB/SH/SW, the ALU
immediates and registers, the shifts; FENCE and FENCE.I as no-ops; ECALL as Linux's system
calls ``write`` (a7 = 64; fd 1, or 2) and ``exit``/``exit_group`` (a7 = 93/94, status
``a0 & 255``). The M extension (MUL, MULH[S][U], DIV[U], REM[U]) when built with
``extensions="im"``. Memory is the flat window of the ELF image (64 KiB at 0x10000).

Refused (``Fault``, naming the pc and the instruction): an illegal or unsupported instruction
(EBREAK, CSRs, compressed instructions), a load or store outside the memory window, a
misaligned load or store (a half not at an even address, a word not at a multiple of 4: the
ISA lets an implementation trap, and this one does), a jump or branch to an address that is not
a multiple of 4 (the ISA's instruction-address-misaligned exception, as without the C
extension), and a system call other than write and exit.

Each ``step()`` returns a ``Step``: the instruction's pc and word, the next pc, and the one
write it performs, a register (``rd``, ``value``) or memory (``store``: address, width, value);
an ECALL records the bytes written or the exit status. That is the trace the compiled
interpreter prints (README.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from examples.rv32i.elf import Image

MASK = 0xFFFFFFFF
REG_NAMES = ("zero ra sp gp tp t0 t1 t2 s0 s1 a0 a1 a2 a3 a4 a5 a6 a7 "
             "s2 s3 s4 s5 s6 s7 s8 s9 s10 s11 t3 t4 t5 t6").split()
SYS_WRITE, SYS_EXIT, SYS_EXIT_GROUP = 64, 93, 94


class Fault(RuntimeError):
    """The program did something this machine refuses; the message names the pc."""

    def __init__(self, pc: int, word: int, reason: str):
        super().__init__(f"pc {pc:#010x} ({disasm(word, pc)}): {reason}")
        self.pc, self.word, self.reason = pc, word, reason


@dataclass(frozen=True)
class Step:
    """One executed instruction and its effect."""

    pc: int
    word: int
    next_pc: int
    rd: int = 0  # the register written (0: none; writes to x0 are dropped)
    value: int = 0  # its new value (unsigned 32-bit)
    store: tuple[int, int, int] | None = None  # (address, width in bytes, value)
    mem_word: int = 0  # after a store: the whole aligned word that holds it
    out: bytes = b""  # what an ECALL write printed
    exit: int | None = None  # the exit status of an ECALL exit
    reads: tuple[int, int] | None = None  # (address, bytes) a load or a write's buffer reads

    def describe(self) -> str:
        text = f"{self.pc:08x}: {self.word:08x}  {disasm(self.word, self.pc):<28}"
        if self.rd:
            text += f" {REG_NAMES[self.rd]}={self.value:#x}"
        if self.store:
            a, w, v = self.store
            text += f" mem[{a:#x}]{'bhw'[w // 2]}={v:#x}"
        if self.out:
            text += f" write {self.out!r}"
        if self.exit is not None:
            text += f" exit {self.exit}"
        return text


def sext(v: int, bits: int) -> int:
    """``v`` (the low ``bits`` bits) read as a two's-complement number."""
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


def imm_i(w: int) -> int:
    return sext(w >> 20, 12)


def imm_s(w: int) -> int:
    return sext((w >> 25) << 5 | (w >> 7) & 31, 12)


def imm_b(w: int) -> int:
    return sext((w >> 31 & 1) << 12 | (w >> 7 & 1) << 11 | (w >> 25 & 0x3F) << 5
                | (w >> 8 & 0xF) << 1, 13)


def imm_j(w: int) -> int:
    return sext((w >> 31 & 1) << 20 | (w >> 12 & 0xFF) << 12 | (w >> 20 & 1) << 11
                | (w >> 21 & 0x3FF) << 1, 21)


BRANCHES = {0: "beq", 1: "bne", 4: "blt", 5: "bge", 6: "bltu", 7: "bgeu"}
LOADS = {0: ("lb", 1, True), 1: ("lh", 2, True), 2: ("lw", 4, False), 4: ("lbu", 1, False),
         5: ("lhu", 2, False)}
STORES = {0: ("sb", 1), 1: ("sh", 2), 2: ("sw", 4)}
ALU_IMM = {0: "addi", 2: "slti", 3: "sltiu", 4: "xori", 6: "ori", 7: "andi"}
ALU_REG = {(0, 0): "add", (0, 0x20): "sub", (1, 0): "sll", (2, 0): "slt", (3, 0): "sltu",
           (4, 0): "xor", (5, 0): "srl", (5, 0x20): "sra", (6, 0): "or", (7, 0): "and",
           (0, 1): "mul", (1, 1): "mulh", (2, 1): "mulhsu", (3, 1): "mulhu", (4, 1): "div",
           (5, 1): "divu", (6, 1): "rem", (7, 1): "remu"}


def disasm(w: int, pc: int = 0) -> str:
    """The instruction in assembler syntax (numeric offsets; ``?`` for what is not RV32IM)."""
    op, rd, f3 = w & 0x7F, w >> 7 & 31, w >> 12 & 7
    rs1, rs2, f7 = w >> 15 & 31, w >> 20 & 31, w >> 25
    r = REG_NAMES
    if op == 0x37:
        return f"lui {r[rd]},{w >> 12:#x}"
    if op == 0x17:
        return f"auipc {r[rd]},{w >> 12:#x}"
    if op == 0x6F:
        return f"jal {r[rd]},{(pc + imm_j(w)) & MASK:#x}"
    if op == 0x67 and f3 == 0:
        return f"jalr {r[rd]},{imm_i(w)}({r[rs1]})"
    if op == 0x63 and f3 in BRANCHES:
        return f"{BRANCHES[f3]} {r[rs1]},{r[rs2]},{(pc + imm_b(w)) & MASK:#x}"
    if op == 0x03 and f3 in LOADS:
        return f"{LOADS[f3][0]} {r[rd]},{imm_i(w)}({r[rs1]})"
    if op == 0x23 and f3 in STORES:
        return f"{STORES[f3][0]} {r[rs2]},{imm_s(w)}({r[rs1]})"
    if op == 0x13:
        if f3 in ALU_IMM:
            return f"{ALU_IMM[f3]} {r[rd]},{r[rs1]},{imm_i(w)}"
        name = {(1, 0): "slli", (5, 0): "srli", (5, 0x20): "srai"}.get((f3, f7))
        if name:
            return f"{name} {r[rd]},{r[rs1]},{rs2}"
    if op == 0x33 and (f3, f7) in ALU_REG:
        return f"{ALU_REG[(f3, f7)]} {r[rd]},{r[rs1]},{r[rs2]}"
    if op == 0x0F and f3 in (0, 1):
        return "fence" if f3 == 0 else "fence.i"
    if w == 0x73:
        return "ecall"
    if w == 0x100073:
        return "ebreak"
    return f"? {w:#010x}"


class Machine:
    """The state of one run: 32 registers, the pc, the memory window, what was written."""

    def __init__(self, image: Image, extensions: str = "i"):
        if extensions not in ("i", "im"):
            raise ValueError(f"extensions: 'i' or 'im', not {extensions!r}")
        self.regs = [0] * 32
        self.pc = image.entry
        self.base = image.base
        self.mem = bytearray(image.memory)
        self.m_ext = extensions == "im"
        self.output = bytearray()
        self.exit_code: int | None = None
        self.steps = 0

    # -- memory ---------------------------------------------------------------------------
    def _addr(self, pc: int, w: int, addr: int, width: int, what: str) -> int:
        i = addr - self.base
        if i < 0 or i + width > len(self.mem):
            raise Fault(pc, w, f"{what} of {width} bytes at {addr:#x}, outside memory "
                               f"{self.base:#x}..{self.base + len(self.mem):#x}")
        if addr % width:
            raise Fault(pc, w, f"misaligned {what} of {width} bytes at {addr:#x}")
        return i

    def load(self, addr: int, width: int) -> int:
        """The unsigned little-endian value at ``addr`` (for tests and the host)."""
        i = addr - self.base
        return int.from_bytes(self.mem[i:i + width], "little")

    # -- one instruction ------------------------------------------------------------------
    def step(self) -> Step:
        if self.exit_code is not None:
            raise RuntimeError("the program has exited")
        pc, regs = self.pc, self.regs
        i = pc - self.base
        if i < 0 or i + 4 > len(self.mem):
            raise Fault(pc, 0, "instruction fetch outside memory")
        w = int.from_bytes(self.mem[i:i + 4], "little")
        op, rd, f3 = w & 0x7F, w >> 7 & 31, w >> 12 & 7
        rs1, rs2 = w >> 15 & 31, w >> 20 & 31
        a, b = regs[rs1], regs[rs2]
        nxt = (pc + 4) & MASK
        value: int | None = None
        store = None
        out, exit_code, mem_word = b"", None, 0
        reads = None
        if op == 0x13:  # OP-IMM
            imm = imm_i(w) & MASK
            f7 = w >> 25
            if f3 == 0:
                value = a + imm
            elif f3 == 2:
                value = int(sext(a, 32) < sext(imm, 32))
            elif f3 == 3:
                value = int(a < imm)
            elif f3 == 4:
                value = a ^ imm
            elif f3 == 6:
                value = a | imm
            elif f3 == 7:
                value = a & imm
            elif f3 == 1 and f7 == 0:
                value = a << rs2
            elif f3 == 5 and f7 == 0:
                value = a >> rs2
            elif f3 == 5 and f7 == 0x20:
                value = sext(a, 32) >> rs2
            else:
                raise Fault(pc, w, "illegal instruction")
        elif op == 0x33:  # OP
            f7 = w >> 25
            if f7 == 1 and self.m_ext:
                value = _m_op(f3, a, b)
            elif f7 == 0 or (f7 == 0x20 and f3 in (0, 5)):
                if f3 == 0:
                    value = a - b if f7 else a + b
                elif f3 == 1:
                    value = a << (b & 31)
                elif f3 == 2:
                    value = int(sext(a, 32) < sext(b, 32))
                elif f3 == 3:
                    value = int(a < b)
                elif f3 == 4:
                    value = a ^ b
                elif f3 == 5:
                    value = (sext(a, 32) if f7 else a) >> (b & 31)
                elif f3 == 6:
                    value = a | b
                else:
                    value = a & b
            else:
                raise Fault(pc, w, "illegal instruction" if f7 != 1 else
                            "M extension instruction (run with extensions='im')")
        elif op == 0x03:  # LOAD
            if f3 not in LOADS:
                raise Fault(pc, w, "illegal instruction")
            _name, width, signed = LOADS[f3]
            addr = (a + imm_i(w)) & MASK
            j = self._addr(pc, w, addr, width, "load")
            reads = (addr, width)
            value = int.from_bytes(self.mem[j:j + width], "little")
            if signed:
                value = sext(value, 8 * width)
        elif op == 0x23:  # STORE
            if f3 not in STORES:
                raise Fault(pc, w, "illegal instruction")
            width = STORES[f3][1]
            addr = (a + imm_s(w)) & MASK
            j = self._addr(pc, w, addr, width, "store")
            v = b & ((1 << (8 * width)) - 1)
            self.mem[j:j + width] = v.to_bytes(width, "little")
            store = (addr, width, v)
            mem_word = int.from_bytes(self.mem[j & ~3:(j & ~3) + 4], "little")
        elif op == 0x63:  # BRANCH
            if f3 == 0:
                taken = a == b
            elif f3 == 1:
                taken = a != b
            elif f3 == 4:
                taken = sext(a, 32) < sext(b, 32)
            elif f3 == 5:
                taken = sext(a, 32) >= sext(b, 32)
            elif f3 == 6:
                taken = a < b
            elif f3 == 7:
                taken = a >= b
            else:
                raise Fault(pc, w, "illegal instruction")
            if taken:
                nxt = (pc + imm_b(w)) & MASK
        elif op == 0x37:  # LUI
            value = w & 0xFFFFF000
        elif op == 0x17:  # AUIPC
            value = pc + (w & 0xFFFFF000)
        elif op == 0x6F:  # JAL
            value, nxt = pc + 4, (pc + imm_j(w)) & MASK
        elif op == 0x67 and f3 == 0:  # JALR: the target's lowest bit is cleared
            value, nxt = pc + 4, (a + imm_i(w)) & MASK & ~1
        elif op == 0x0F and f3 in (0, 1):  # FENCE, FENCE.I: nothing to order here
            pass
        elif w == 0x73:  # ECALL
            value, out, exit_code = self._ecall(pc, w)
            rd = 10 if value is not None else 0
            if regs[17] == SYS_WRITE:
                reads = (regs[11], regs[12])
        else:
            raise Fault(pc, w, "illegal instruction" if w != 0x100073 else "ebreak")
        if nxt % 4:
            raise Fault(pc, w, f"jump to a misaligned address {nxt:#x}")
        if value is not None and rd:
            value &= MASK
            regs[rd] = value
        else:
            rd, value = 0, 0
        self.pc = nxt
        self.steps += 1
        if exit_code is not None:
            self.exit_code = exit_code
        return Step(pc, w, nxt, rd, value, store, mem_word, out, exit_code, reads)

    def _ecall(self, pc: int, w: int) -> tuple[int | None, bytes, int | None]:
        r = self.regs
        num = r[17]
        if num == SYS_WRITE:
            fd, buf, n = r[10], r[11], r[12]
            if fd not in (1, 2):
                raise Fault(pc, w, f"write to fd {fd} (only 1 and 2 are open)")
            j = buf - self.base
            if n and (j < 0 or j + n > len(self.mem)):
                raise Fault(pc, w, f"write of {n} bytes from {buf:#x}, outside memory")
            data = bytes(self.mem[j:j + n]) if n else b""
            if fd == 1:
                self.output += data
            return n, data if fd == 1 else b"", None
        if num in (SYS_EXIT, SYS_EXIT_GROUP):
            return None, b"", r[10] & 255
        raise Fault(pc, w, f"system call {num} (only write = 64 and exit = 93 are offered)")

    def run(self, max_instructions: int | None = None, trace: list[Step] | None = None) -> bool:
        """Steps until the program exits (True) or ``max_instructions`` have run (False).
        ``trace``, when given, collects every ``Step``."""
        step = self.step
        n = 0
        while self.exit_code is None:
            if max_instructions is not None and n >= max_instructions:
                return False
            s = step()
            if trace is not None:
                trace.append(s)
            n += 1
        return True


def _m_op(f3: int, a: int, b: int) -> int:
    sa, sb = sext(a, 32), sext(b, 32)
    if f3 == 0:
        return a * b
    if f3 == 1:
        return (sa * sb) >> 32
    if f3 == 2:
        return (sa * b) >> 32
    if f3 == 3:
        return (a * b) >> 32
    if f3 == 4:  # division rounds toward zero; by zero gives -1, overflow gives the dividend
        if b == 0:
            return MASK
        if sa == -(1 << 31) and sb == -1:
            return a
        q = abs(sa) // abs(sb)
        return q if (sa < 0) == (sb < 0) else -q
    if f3 == 5:
        return MASK if b == 0 else a // b
    if f3 == 6:
        if b == 0:
            return a
        if sa == -(1 << 31) and sb == -1:
            return 0
        rem = abs(sa) % abs(sb)
        return -rem if sa < 0 else rem
    return a if b == 0 else a % b


def run(image: Image, max_instructions: int | None = None, extensions: str = "i"
        ) -> Machine:
    """Runs ``image`` to its exit (or the limit) and returns the machine."""
    m = Machine(image, extensions)
    m.run(max_instructions)
    return m
