"""The rv32i reference interpreter (examples/rv32i): every committed C program gives its
expected output and exit status and agrees with unicorn instruction by instruction; single
instructions against hand-computed results; what the machine refuses; the ELF loader; the
command line."""

from __future__ import annotations

import hashlib
import math
import subprocess
import sys
from pathlib import Path

import pytest

from examples.rv32i import asm, crosscheck, elf, reference, trace
from examples.rv32i.reference import Fault, Machine

ROOT = Path(__file__).resolve().parents[1]
ELF_DIR = ROOT / "examples" / "rv32i" / "elf"
BASE = elf.BASE


# -- what each program must print, computed here in Python ----------------------------------
def _fib() -> tuple[bytes, int]:
    a, b, lines = 0, 1, []
    for _ in range(30):
        lines.append(f"{a}\n")
        a, b = b, a + b
    return "".join(lines).encode(), (b - a) & 255


def _sort() -> tuple[bytes, int]:
    seed, vals = 12345, []
    for _ in range(24):
        seed = (seed * 1103515245 + 12345) & 0xFFFFFFFF
        vals.append((seed >> 16 & 0x7FF) - 1024)
    line = " ".join(map(str, vals)) + "\n"
    return (line + " ".join(map(str, sorted(vals))) + "\n").encode(), 0


def _sort100() -> tuple[bytes, int]:
    seed, vals = 2026, []
    for _ in range(100):
        seed = (seed * 1103515245 + 12345) & 0xFFFFFFFF
        vals.append((seed >> 16 & 0x3FF) - 512)
    vals.sort()
    return "".join(f"{v}{chr(10) if i % 10 == 9 else ' '}" for i, v in enumerate(vals)).encode(), 0


def _reverse() -> tuple[bytes, int]:
    texts = ["Hello, world!", "RISC-V in a transformer", "racecar", "a", "",
             "never odd or even", "0123456789"]
    return ("".join(f"{t} -> {t[::-1]}\n" for t in texts).encode(),
            sum(t == t[::-1] for t in texts))


def _primes() -> tuple[bytes, int]:
    ps = [p for p in range(2, 1000) if all(p % d for d in range(2, math.isqrt(p) + 1))]
    text = "".join(f"{p}{' ' if (i + 1) % 10 else chr(10)}" for i, p in enumerate(ps))
    return (text + "\n").encode(), len(ps) & 255


def _collatz() -> tuple[bytes, int]:
    total, best, best_n = 0, 0, 0
    for n in range(1, 601):
        v, steps = n, 0
        while v != 1:
            v, steps = (3 * v + 1 if v & 1 else v >> 1), steps + 1
        total += steps
        if steps > best:
            best, best_n = steps, n
    return f"steps {total}\nlongest {best_n} {best}\n".encode(), best_n & 255


def _gcd() -> tuple[bytes, int]:
    pairs = [(12, 18), (1071, 462), (17, 5), (360, 840), (4096, 1024)]
    return "".join(f"gcd({a},{b})={math.gcd(a, b)}\n" for a, b in pairs).encode(), 1024 & 255


def _words() -> tuple[bytes, int]:
    lines = ["the quick brown fox jumps over 13 lazy dogs", "  leading and trailing spaces  ",
             "RV32I: 47 instructions, 32 registers!", ""]
    out, total = [], 0
    for line in lines:
        words = sum(c != " " and (i == 0 or line[i - 1] == " ") for i, c in enumerate(line))
        vowels = sum(chr(ord(c) | 32) in "aeiou" for c in line)
        digits = sum(c.isdigit() for c in line)
        other = len(line) - vowels - digits - line.count(" ")
        out.append(f"{words} {vowels} {digits} {other}\n")
        total += words
    return ("".join(out) + "".join(f"{math.factorial(n)}\n" for n in (0, 4, 8, 12))).encode(), \
        total & 255


def _mix() -> tuple[bytes, int]:
    sb, sh = [-128, -1, 0, 1, 127, -77, 55, -3], [-32768, -2, 2, 32767, -1234, 4321]
    s = sum(v * (i + 1) for i, v in enumerate(sb)) + sum(v >> (i % 3) for i, v in enumerate(sh))
    x = 0x123456789
    for _ in range(5):
        x = (x * 3 + (x >> 7)) & (2 ** 64 - 1)
    table = [i * i - 40 for i in range(16)]
    found = [(k, table.index(k)) for k in range(-45, 200, 7) if k in table]
    text = f"{s}\n{x >> 32} {x & 0xFFFFFFFF}\n" + "".join(f"{k}@{i} " for k, i in found) + "\n"
    return text.encode(), (len(found) * 10 + (250 + 10) % 256) & 255


EXPECTED = {
    "hello": (b"Hello, world!\n", 0),
    "sum": (b"5050\n", 5050 & 255),
    "fib": _fib(),
    "sort": _sort(),
    "sort100": _sort100(),
    "reverse": _reverse(),
    "primes": _primes(),
    "collatz": _collatz(),
    "gcd": _gcd(),
    "words": _words(),
    "mix": _mix(),
    "stderr": (b"before\nafter 0\n", 3),  # the diagnostic went to fd 2: nowhere
}
# bytes and alu print bit patterns (hex): their output as qemu-riscv32 printed it, by hash
HASHED = {
    "bytes": ("5af6c5c0cac7300e8040b3d3d83a32fb10cf09453584353a952b66577ad68bdd", 1),
    "alu": ("8c0da15aae5dc46763caaf597c46247152230e00615ed382b55bf4be4c0089fd", 112),
}
PROGRAMS = sorted(p.stem for p in ELF_DIR.glob("*.elf"))


def test_every_program_is_covered():
    assert set(PROGRAMS) == set(EXPECTED) | set(HASHED)


@pytest.fixture(scope="module")
def runs() -> dict[str, Machine]:
    return {name: reference.run(elf.load(ELF_DIR / f"{name}.elf")) for name in PROGRAMS}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_program_output(runs, name):
    m = runs[name]
    out, code = EXPECTED[name]
    assert bytes(m.output) == out
    assert m.exit_code == code


def test_byte_programs(runs):
    text = bytes(runs["bytes"].output).decode()
    assert text.startswith("remrofsnart a ni V-CSIR\n-128 -1 0 1 127 -2 64 -65 \n"
                           "-32768/65535 -1/1 12345/40000 32767/0 \n12345678\n")
    assert "80000001 80000001 f8a432eb\n" in text  # shifts by 0
    alu = bytes(runs["alu"].output).decode().splitlines()
    assert alu[-5:-1] == ["-3 -300", "100 30000", "-128 -32768", "7 5"]  # LB, LH
    for name, (digest, code) in HASHED.items():
        assert hashlib.sha256(bytes(runs[name].output)).hexdigest() == digest, name
        assert runs[name].exit_code == code


def test_a_long_run(runs):
    assert runs["collatz"].steps > 100_000


@pytest.mark.parametrize("name", PROGRAMS)
def test_unicorn_agrees(runs, name):
    r = crosscheck.crosscheck(elf.load(ELF_DIR / f"{name}.elf"))
    assert r.steps == runs[name].steps
    assert r.output == bytes(runs[name].output)
    assert r.exit_code == runs[name].exit_code


@pytest.mark.skipif(not crosscheck.qemu_available(), reason="qemu-riscv32 is not installed")
@pytest.mark.parametrize("name", ["hello", "bytes", "alu"])
def test_qemu_agrees(runs, name):
    out, code = crosscheck.qemu_run(str(ELF_DIR / f"{name}.elf"))
    assert (out, code) == (bytes(runs[name].output), runs[name].exit_code)


# -- single instructions, against hand-computed values (and unicorn) --------------------------
DATA = 0x11000


def run_asm(words: list[int], data: dict[int, bytes] | None = None, extensions: str = "i",
            check: bool = True) -> Machine:
    """Runs the words (which end in an exit) and, with ``check``, unicorn beside them."""
    img = asm.image(words, data)
    m = reference.run(img, 1000, extensions)
    assert m.exit_code is not None
    if check:
        r = crosscheck.crosscheck(img, 1000, full_every=1, extensions=extensions)
        assert (r.steps, r.output, r.exit_code) == (m.steps, bytes(m.output), m.exit_code)
    return m


def regs_after(words: list[int], data: dict[int, bytes] | None = None,
               extensions: str = "i") -> list[int]:
    """The registers after the words (straight-line code), each step checked by unicorn."""
    img = asm.image(words, data)
    m = Machine(img, extensions)
    m.run(len(words))
    r = crosscheck.crosscheck(img, len(words), full_every=1, extensions=extensions)
    assert r.steps == m.steps == len(words)
    return m.regs


def test_immediates_sign_extend():
    r = regs_after([asm.addi(1, 0, -1), asm.addi(2, 0, 2047), asm.addi(3, 0, -2048),
                    asm.addi(4, 1, 1), asm.andi(5, 1, -2048), asm.xori(6, 2, -1),
                    asm.ori(7, 0, -16), asm.addi(0, 0, 5)])
    assert r[1:8] == [0xFFFFFFFF, 2047, 0xFFFFF800, 0, 0xFFFFF800, 0xFFFFF800, 0xFFFFFFF0]
    assert r[0] == 0  # writes to x0 are dropped


def test_lui_auipc_and_wrapping_arithmetic():
    r = regs_after([asm.lui(1, 0xFFFFF), asm.auipc(2, 1), *asm.li(3, 0x7FFFFFFF),
                    asm.addi(4, 3, 1), asm.sub(5, 0, 4), asm.sub(6, 0, 3), asm.add(7, 1, 1)])
    assert r[1] == 0xFFFFF000
    assert r[2] == BASE + 4 + 0x1000  # auipc adds to its own pc
    assert r[3:8] == [0x7FFFFFFF, 0x80000000, 0x80000000, 0x80000001, 0xFFFFE000]


def test_set_less_than_signed_and_unsigned():
    r = regs_after([asm.addi(1, 0, -1), asm.addi(2, 0, 1),
                    asm.slt(3, 1, 2), asm.sltu(4, 1, 2), asm.slti(5, 1, 0),
                    asm.sltiu(6, 2, -1), asm.sltiu(7, 1, -1), asm.sltiu(8, 0, 1),
                    asm.slt(9, 2, 1), asm.sltu(10, 2, 1), asm.slti(11, 2, 1)])
    assert r[3:12] == [1, 0, 1, 1, 0, 1, 0, 1, 0]


def test_shifts_use_the_low_five_bits_of_a_register():
    r = regs_after([*asm.li(1, 0x80000001), asm.addi(2, 0, 33), asm.addi(3, 0, -1),
                    asm.sll(4, 1, 2), asm.srl(5, 1, 2), asm.sra(6, 1, 2),
                    asm.sll(7, 1, 3), asm.srl(8, 1, 3), asm.sra(9, 1, 3), asm.sll(10, 1, 0),
                    asm.slli(11, 1, 31), asm.srli(12, 1, 31), asm.srai(13, 1, 31),
                    asm.srai(14, 1, 0)])
    assert r[4:15] == [0x00000002, 0x40000000, 0xC0000000,  # by 33 = by 1
                       0x80000000, 0x00000001, 0xFFFFFFFF,  # by -1 = by 31
                       0x80000001, 0x80000000, 0x00000001, 0xFFFFFFFF, 0x80000001]


def test_logic_ops():
    r = regs_after([*asm.li(1, 0xF0F0FF00), *asm.li(2, 0x0FF0F0F0),
                    asm.xor(3, 1, 2), asm.or_(4, 1, 2), asm.and_(5, 1, 2)])
    assert r[3:6] == [0xFF000FF0, 0xFFF0FFF0, 0x00F0F000]


def test_loads_sign_and_zero_extend():
    data = {DATA: bytes([0x80, 0xFF, 0x34, 0x12, 0x7F, 0x00, 0x00, 0x80])}
    r = regs_after([*asm.li(1, DATA), asm.lb(2, 1, 0), asm.lbu(3, 1, 0), asm.lh(4, 1, 0),
                    asm.lhu(5, 1, 0), asm.lw(6, 1, 0), asm.lb(7, 1, 2), asm.lh(8, 1, 2),
                    asm.lb(9, 1, 4), asm.lh(10, 1, 6), asm.lw(11, 1, 4), asm.lhu(12, 1, 6),
                    asm.lbu(13, 1, 7), asm.lw(14, 1, 8)], data)
    assert r[2:15] == [0xFFFFFF80, 0x80, 0xFFFFFF80, 0xFF80, 0x1234FF80, 0x34, 0x1234,
                       0x7F, 0xFFFF8000, 0x8000007F, 0x8000, 0x80, 0]


def test_stores_write_the_low_bytes_little_endian():
    words = [*asm.li(1, DATA), *asm.li(2, 0xAABBCCDD), asm.sw(0, 1, 0), asm.sb(2, 1, 1),
             asm.sh(2, 1, 2), asm.lw(3, 1, 0), asm.sw(2, 1, -4), asm.sb(2, 1, 7),
             asm.lw(4, 1, 4)]
    m = run_asm([*words, *asm.exit_with(0)])
    assert m.regs[3] == 0xCCDDDD00
    assert m.load(DATA - 4, 4) == 0xAABBCCDD
    assert m.regs[4] == 0xDD000000


@pytest.mark.parametrize("branch, taken", [
    ("beq", (False, False, True)), ("bne", (True, True, False)),
    ("blt", (True, False, False)), ("bge", (False, True, True)),
    ("bltu", (False, True, False)), ("bgeu", (True, False, True)),
])
def test_branches(branch, taken):
    for (a, b), want in zip([(-1, 1), (1, -1), (5, 5)], taken, strict=True):
        m = run_asm([asm.addi(1, 0, a), asm.addi(2, 0, b), asm.addi(3, 0, 1),
                     getattr(asm, branch)(1, 2, 8), asm.addi(3, 0, 0), *asm.exit_with(3)])
        assert m.exit_code == int(want), (branch, a, b)


def test_a_backward_branch_loops():
    m = run_asm([asm.addi(1, 0, 10), asm.addi(2, 0, 0), asm.add(2, 2, 1), asm.addi(1, 1, -1),
                 asm.bne(1, 0, -8), *asm.exit_with(2)])
    assert m.exit_code == 55
    assert m.steps == 2 + 3 * 10 + 3


def test_jal_and_jalr_link_and_clear_the_low_bit():
    # 0: jal ra,+16; 4: exit(a0) (3 words); 16: a0 = ra; jalr with rd == rs1 to ra + 1 (odd)
    words = [asm.jal("ra", 16), *asm.exit_with("a0"),
             asm.addi("a0", "ra", 0), asm.addi("t0", "ra", 1), asm.jalr("t0", "t0", 0)]
    m = run_asm(words)
    assert m.exit_code == (BASE + 4) & 255
    assert m.regs[5] == BASE + 28  # t0 = the link, after reading t0 as the base
    assert m.regs[1] == BASE + 4


def test_fence_is_a_no_op_and_write_returns_its_length():
    text = b"hi there\n"
    m = run_asm([asm.FENCE, *asm.li("a1", DATA), asm.addi("a0", 0, 1),
                 asm.addi("a2", 0, len(text)), asm.addi("a7", 0, 64), asm.ECALL,
                 *asm.exit_with("a0")], {DATA: text})
    assert bytes(m.output) == text
    assert m.exit_code == len(text)


def test_m_extension():
    words = [*asm.li(1, 0xFFFFFFF9), asm.addi(2, 0, 2), *asm.li(3, 0x80000000),
             asm.addi(4, 0, -1), asm.mul(5, 1, 2), asm.mulh(6, 1, 2), asm.mulhu(7, 1, 2),
             asm.mulhsu(8, 1, 2), asm.div(9, 1, 2), asm.rem(10, 1, 2), asm.divu(11, 1, 2),
             asm.remu(12, 1, 2), asm.div(13, 1, 0), asm.rem(14, 1, 0), asm.divu(15, 1, 0),
             asm.div(16, 3, 4), asm.rem(17, 3, 4)]
    r = regs_after(words, extensions="im")
    assert r[5:18] == [0xFFFFFFF2, 0xFFFFFFFF, 1, 0xFFFFFFFF, 0xFFFFFFFD, 0xFFFFFFFF,
                       0x7FFFFFFC, 1, 0xFFFFFFFF, 0xFFFFFFF9, 0xFFFFFFFF, 0x80000000, 0]


@pytest.mark.parametrize("words, message", [
    ([*asm.li(1, DATA + 1), asm.lw(2, 1, 0)], "misaligned load of 4 bytes at 0x11001"),
    ([*asm.li(1, DATA + 1), asm.lh(2, 1, 0)], "misaligned load of 2 bytes"),
    ([*asm.li(1, DATA + 2), asm.sw(2, 1, 0)], "misaligned store of 4 bytes"),
    ([asm.lw(2, 0, 0)], "outside memory"),
    ([*asm.li(1, 0x20000), asm.sb(2, 1, 0)], "store of 1 bytes at 0x20000, outside memory"),
    ([*asm.li(1, BASE + 2), asm.jalr(0, 1, 0)], "jump to a misaligned address 0x10002"),
    ([asm.jal(0, 6)], "misaligned address"),
    ([asm.EBREAK], "ebreak"),
    ([0], "illegal instruction"),
    ([0x4501], "illegal instruction"),  # a compressed instruction
    ([asm.mul(1, 2, 3)], "M extension"),
    ([asm.addi("a7", 0, 57), asm.ECALL], "system call 57"),
    ([asm.addi("a0", 0, 3), asm.addi("a7", 0, 64), asm.ECALL], "write to fd 3"),
])
def test_refusals(words, message):
    m = Machine(asm.image(words))
    with pytest.raises(Fault, match=message.replace("(", r"\(")):
        m.run(10)


def test_nothing_runs_after_exit():
    m = run_asm(asm.exit_with(0))
    with pytest.raises(RuntimeError, match="exited"):
        m.step()


def test_the_cross_check_names_the_first_divergence(monkeypatch):
    """A reference that silently corrupts t6 at step 100: the whole-state comparison notices
    later, and the pinning run names step 100 and the register."""
    img = elf.load(ELF_DIR / "sum.elf")
    step = Machine.step

    def corrupt(self):
        s = step(self)
        if self.steps == 101:
            self.regs[31] ^= 4
        return s

    monkeypatch.setattr(Machine, "step", corrupt)
    with pytest.raises(crosscheck.Divergence, match=r"^step 100: pc .*: t6: reference 0x4, "
                                                    r"unicorn 0x0") as e:
        crosscheck.crosscheck(img)
    assert e.value.step == 100


# -- the ELF loader and the command line -----------------------------------------------------
def test_elf_loader():
    img = elf.load(ELF_DIR / "hello.elf")
    assert img.entry == BASE == img.symbols["_start"]
    assert "main" in img.symbols
    assert len(img.memory) == 0x10000
    assert BASE < img.highest_loaded() <= BASE + 0x10000
    with pytest.raises(elf.ElfError, match="not an ELF"):
        elf.load_bytes(b"#!/bin/sh\n")


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "examples.rv32i", *args], cwd=ROOT,
                          capture_output=True, timeout=120)


def test_command_line():
    p = _cli("ref", str(ELF_DIR / "hello.elf"))
    assert (p.stdout, p.returncode) == (b"Hello, world!\n", 0)
    assert b"72 instructions" in p.stderr
    p = _cli("ref", str(ELF_DIR / "sum.elf"), "--check")
    assert (p.stdout, p.returncode) == (b"5050\n", 186)
    assert b"checked against unicorn" in p.stderr
    p = _cli("ref", str(ELF_DIR / "sum.elf"), "--max-instructions", "10")
    assert (p.stdout, p.returncode) == (b"", 124)
    p = _cli("ref", str(ROOT / "README.md"))
    assert p.returncode == 2 and b"not an ELF" in p.stderr


# -- the token format of the compiled interpreter ---------------------------------------------
@pytest.mark.parametrize("name", ["hello", "bytes", "gcd"])
def test_trace_records_carry_the_output(runs, name):
    prompt, recs = trace.run(elf.load(ELF_DIR / f"{name}.elf"))
    assert len(prompt) % trace.RECORD == 0
    assert trace.parse(prompt)[0].target == trace.MEM  # the first word of the image
    assert trace.output(recs) == (bytes(runs[name].output), runs[name].exit_code)
    assert trace.parse(trace.text(recs)) == recs
    n_out = len(runs[name].output)
    assert len(recs) == runs[name].steps + n_out  # one record an instruction, one a byte


def test_a_store_prints_its_whole_word():
    words = [*asm.li(1, DATA), *asm.li(2, 0x11223344), asm.sw(2, 1, 0), asm.addi(3, 0, 0x55),
             asm.sb(3, 1, 2), *asm.exit_with(0)]
    m = Machine(asm.image(words))
    steps: list = []
    m.run(100, steps)
    recs = trace.records(steps)
    assert recs[-4] == trace.Record(trace.MEM + (DATA - BASE) // 4, 0x11553344, 7)  # sb
    assert recs[-1] == trace.Record(trace.EXIT, 0, 10)
