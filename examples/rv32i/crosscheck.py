"""An independent check of the reference interpreter: unicorn (a CPU emulator built on QEMU's
RISC-V, nobody's code here) and the reference step in lock step, one instruction at a time,
and the run stops at the first divergence, naming the step, the pc, the instruction and the
register (or memory word, output, exit status) that differ.

After every instruction: the next pc, the register the reference wrote and the bytes it
stored are compared; every ``full_every`` instructions (and at every system call and at the
end) all 31 registers, and every ``memory_every`` the whole memory window. A divergence found
by a whole-state comparison is pinned down by running both again from the start with every
register compared at every step, so the report names the first instruction that differs.

``qemu_run`` runs an ELF under ``qemu-riscv32`` (Debian's qemu-user) when it is installed.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

from unicorn import UC_ARCH_RISCV, UC_HOOK_INTR, UC_MODE_RISCV32, Uc, UcError
from unicorn import riscv_const as rv

from examples.rv32i.elf import Image
from examples.rv32i.reference import (
    MASK,
    REG_NAMES,
    SYS_EXIT,
    SYS_EXIT_GROUP,
    SYS_WRITE,
    Fault,
    Machine,
    disasm,
)

REGS = [getattr(rv, f"UC_RISCV_REG_X{i}") for i in range(32)]
PC = rv.UC_RISCV_REG_PC
ECALL_U = 8  # the exception cause unicorn reports for an ECALL from user mode


class Divergence(AssertionError):
    """The reference and unicorn disagree; ``step`` is the 0-based instruction count."""

    def __init__(self, step: int, pc: int, word: int, what: str):
        super().__init__(f"step {step}: pc {pc:#010x} ({disasm(word, pc)}): {what}")
        self.step, self.pc, self.word, self.what = step, pc, word, what


@dataclass
class Result:
    steps: int
    output: bytes
    exit_code: int | None


class Unicorn:
    """Unicorn's RV32 CPU holding the image, with ECALL write/exit served as the reference
    serves them."""

    def __init__(self, image: Image):
        self.uc = Uc(UC_ARCH_RISCV, UC_MODE_RISCV32)
        self.base, self.size = image.base, len(image.memory)
        self.uc.mem_map(image.base, len(image.memory))
        self.uc.mem_write(image.base, bytes(image.memory))
        self.pc = image.entry
        self.output = bytearray()
        self.exit_code: int | None = None
        self._trapped: int | None = None
        self.uc.hook_add(UC_HOOK_INTR, self._intr)

    def _intr(self, uc: Uc, intno: int, _data: object) -> None:
        self._trapped = intno
        uc.emu_stop()

    def step(self) -> None:
        """Runs the instruction at ``self.pc``; raises UcError on a fault."""
        self._trapped = None
        self.uc.emu_start(self.pc, 0xFFFFFFFF, count=1)
        self.pc = self.uc.reg_read(PC)
        if self._trapped is None:
            return
        if self._trapped != ECALL_U:
            raise RuntimeError(f"unicorn trap {self._trapped}")
        r = self.uc.reg_read
        num = r(REGS[17])
        if num == SYS_WRITE:
            fd, buf, n = r(REGS[10]), r(REGS[11]), r(REGS[12])
            data = bytes(self.uc.mem_read(buf, n)) if n else b""
            if fd == 1:
                self.output += data
            self.uc.reg_write(REGS[10], n)
        elif num in (SYS_EXIT, SYS_EXIT_GROUP):
            self.exit_code = r(REGS[10]) & 255

    def regs(self) -> list[int]:
        return [v & MASK for v in self.uc.reg_read_batch(REGS)]

    def memory(self) -> bytes:
        return bytes(self.uc.mem_read(self.base, self.size))


def crosscheck(image: Image, max_instructions: int | None = None, full_every: int = 64,
               memory_every: int = 4096, extensions: str = "i") -> Result:
    """Runs the reference and unicorn side by side; raises ``Divergence`` at the first
    difference, ``Fault`` where the reference refuses the program."""
    try:
        return _lockstep(image, max_instructions, full_every, memory_every, extensions)
    except Divergence as d:
        if full_every == 1:
            raise
        # pin it down: every register at every step, up to the step where it was seen
        _lockstep(image, d.step + 1, 1, 1, extensions)
        raise


def _lockstep(image: Image, max_instructions: int | None, full_every: int,
              memory_every: int, extensions: str) -> Result:
    ref = Machine(image, extensions)
    emu = Unicorn(image)
    n = 0
    while ref.exit_code is None and (max_instructions is None or n < max_instructions):
        s = ref.step()  # a Fault propagates: the program is outside what the machine offers
        try:
            emu.step()
        except (UcError, RuntimeError) as e:
            raise Divergence(n, s.pc, s.word, f"unicorn stopped: {e}") from e
        if emu.pc != s.next_pc:
            raise Divergence(n, s.pc, s.word, f"next pc: reference {s.next_pc:#x}, "
                                              f"unicorn {emu.pc:#x}")
        if s.rd:
            theirs = emu.uc.reg_read(REGS[s.rd]) & MASK
            if theirs != s.value:
                raise Divergence(n, s.pc, s.word, f"{REG_NAMES[s.rd]}: reference "
                                                  f"{s.value:#x}, unicorn {theirs:#x}")
        if s.store:
            addr, width, v = s.store
            theirs = int.from_bytes(emu.uc.mem_read(addr, width), "little")
            if theirs != v:
                raise Divergence(n, s.pc, s.word, f"memory at {addr:#x}: reference {v:#x}, "
                                                  f"unicorn {theirs:#x}")
        ecall = s.word == 0x73
        if ecall or n % full_every == full_every - 1:
            for i, (mine, theirs) in enumerate(zip(ref.regs, emu.regs(), strict=True)):
                if mine != theirs:
                    raise Divergence(n, s.pc, s.word, f"{REG_NAMES[i]}: reference {mine:#x}, "
                                                      f"unicorn {theirs:#x}")
        if ecall:
            if bytes(ref.output) != bytes(emu.output):
                raise Divergence(n, s.pc, s.word, f"output: reference {bytes(ref.output)!r}, "
                                                  f"unicorn {bytes(emu.output)!r}")
            if ref.exit_code != emu.exit_code:
                raise Divergence(n, s.pc, s.word, f"exit: reference {ref.exit_code}, "
                                                  f"unicorn {emu.exit_code}")
        n += 1
        if n % memory_every == 0 or ref.exit_code is not None:
            _compare_memory(n - 1, s.pc, s.word, ref, emu)
    return Result(n, bytes(ref.output), ref.exit_code)


def _compare_memory(n: int, pc: int, word: int, ref: Machine, emu: Unicorn) -> None:
    theirs = emu.memory()
    if theirs != bytes(ref.mem):
        i = next(k for k in range(len(theirs)) if theirs[k] != ref.mem[k])
        raise Divergence(n, pc, word, f"memory byte at {ref.base + i:#x}: reference "
                                      f"{ref.mem[i]:#x}, unicorn {theirs[i]:#x}")


def qemu_available() -> bool:
    return shutil.which("qemu-riscv32") is not None


def qemu_run(path: str, timeout: float = 60) -> tuple[bytes, int]:
    """What ``qemu-riscv32 path`` writes on stdout, and its exit status."""
    p = subprocess.run(["qemu-riscv32", path], capture_output=True, timeout=timeout)
    return p.stdout, p.returncode


__all__ = ["Divergence", "Fault", "Result", "Unicorn", "crosscheck", "qemu_available",
           "qemu_run"]
