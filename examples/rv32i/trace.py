"""The token format of the compiled interpreter (README.md, "The trace"): the prompt that holds
a program's memory image, the record each executed instruction prints, and the way back from
tokens to the program's output and exit status.

Every record is 8 tokens, ``A_hi A_lo V0 V1 V2 V3 P_hi P_lo``:

- ``A = 256 A_hi + A_lo``, the target of the one write the instruction performs: 0 nothing
  (V = 0: x0 reads back as 0), 1..31 a register, ``OUT`` (32) one byte of a ``write`` to
  stdout, ``EXIT`` (33) the exit status, ``cell(k)`` the memory word at ``0x10000 + 4 k``
  (the 64 KiB window folds onto 4096 cells: ``MEM`` + the word's page mod 16 and low byte,
  or, on the register page, the low byte alone);
- ``V`` the 32-bit value written, little-endian bytes (OUT: V0 the byte, V1 V2 how many bytes
  of this ``write`` are out, V3 = 0; EXIT: V0 the status);
- ``P = 256 P_hi + P_lo``, the next pc as a word index: ``pc = 0x10000 + 4 P``.

``A_hi`` is drawn from an alphabet of its own (``ADDR``), which marks where a record starts;
every other slot is a byte token (``BYTE``). The prompt is ``<bos>`` and one record per nonzero
word of the memory image (``A = cell(k)``, ``P`` = the entry point), their ``A_hi`` from a third
alphabet (``IMAGE``: every prompt starts with the image, and a state dump leaves those cells
out unless the program wrote them); registers start at 0 and need no record. A ``write`` of n
bytes prints n OUT records, whose P stays at the ECALL, then the record of ``a0 = n`` with P
past it; ``exit`` prints its EXIT record, then ``<eos>``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from examples.rv32i.elf import BASE, Image
from examples.rv32i.reference import Machine, Step

RECORD = 8
OUT, EXIT, RESUME = 32, 33, 34
MEM = 0x4000  # A of the word at BASE: registers and ports sit below it
# The cells the reads match (model.py): 16 pages of 256. Page REGISTER_PAGE holds the registers
# and ports (x0..x31, OUT, EXIT, RESUME: its first PORTS cells) and memory in the rest; its
# A_hi is 0 (A < 256), every other page p's 0x40 + p.
CELLS, PAGE_WORDS, REGISTER_PAGE, PORTS = 4096, 256, 12, 35
BYTE = [chr(0x100 + b) for b in range(256)]  # 'Ā' ...: the value of a byte token is b
ADDR = [chr(0x300 + h) for h in range(128)]  # the A_hi tokens (15-bit targets)
DUMP = [chr(0x380 + h) for h in range(128)]  # the A_hi tokens of a state dump's records
IMAGE = [chr(0x400 + h) for h in range(128)]  # the A_hi tokens of the prompt's image records


def alphabet(addr_hi: Iterable[int] = range(128)) -> str:
    """The characters of a vocabulary: every byte, the A_hi tokens ``addr_hi`` and their dump
    and image forms."""
    hi = list(addr_hi)
    return "".join(BYTE) + "".join(t[h] for t in (ADDR, DUMP, IMAGE) for h in hi)


@dataclass(frozen=True)
class Record:
    target: int  # A
    value: int  # V (unsigned 32-bit)
    next_index: int  # P
    dump: bool = False  # a record of a state dump (its A_hi from DUMP): the cell's value
    image: bool = False  # a record of the prompt's memory image (its A_hi from IMAGE)

    @property
    def alphabet(self) -> list[str]:
        return DUMP if self.dump else IMAGE if self.image else ADDR

    def text(self) -> str:
        a, v, p = self.target, self.value, self.next_index
        return (self.alphabet[a >> 8] + BYTE[a & 255]
                + "".join(BYTE[v >> (8 * k) & 255] for k in range(4))
                + BYTE[p >> 8] + BYTE[p & 255])

    @property
    def pc(self) -> int:
        return BASE + 4 * self.next_index

    def describe(self) -> str:
        a = self.target
        what = ("-" if a == 0 else f"x{a}" if a < 32 else "out" if a == OUT else "exit"
                if a == EXIT else "resume" if a == RESUME else
                f"mem[{BASE + 4 * (a - MEM):#x} mod 16 KiB]" if a >= MEM else
                f"mem[{BASE + 4 * (PAGE_WORDS * REGISTER_PAGE + a):#x} mod 16 KiB]")
        kind = "dump " if self.dump else "image " if self.image else ""
        return f"{kind}{what}={self.value:#x} pc={self.pc:#x}"


def cell(k: int) -> int:
    """A of memory word ``k`` of the window (0x10000 + 4 k): its page mod 16 and low byte.
    Words 16 KiB apart share a cell, and the register page's first PORTS cells are the
    registers': run.py refuses a program whose words meet on a cell."""
    page, low = k // PAGE_WORDS % (CELLS // PAGE_WORDS), k % PAGE_WORDS
    return low if page == REGISTER_PAGE else MEM + PAGE_WORDS * page + low


def index(pc: int) -> int:
    """P of a pc in the memory window."""
    return (pc - BASE) // 4


def prompt(image: Image) -> str:
    """The prompt (without ``<bos>``): a record for every nonzero word of the image."""
    entry = index(image.entry)
    mem = image.memory
    words = (int.from_bytes(mem[i:i + 4], "little") for i in range(0, len(mem), 4))
    return "".join(Record(cell(k), w, entry, image=True).text()
                   for k, w in enumerate(words) if w)


def records(steps: Iterable[Step]) -> list[Record]:
    """The records the interpreter prints for the reference's steps."""
    out: list[Record] = []
    for s in steps:
        here, nxt = index(s.pc), index(s.next_pc)
        if s.word == 0x73 and s.exit is None:  # write: a byte a record, then a0 = n
            for i, b in enumerate(s.out):
                out.append(Record(OUT, b | (i + 1) << 8, here))
        if s.exit is not None:
            out.append(Record(EXIT, s.exit, nxt))
        elif s.store is not None:
            out.append(Record(cell(index(s.store[0] & ~3)), s.mem_word, nxt))
        else:
            out.append(Record(s.rd, s.value, nxt))
    return out


def run(image: Image, max_instructions: int | None = None) -> tuple[str, list[Record]]:
    """The prompt and the records the interpreter must print for ``image`` (by the
    reference)."""
    m = Machine(image)
    steps: list[Step] = []
    m.run(max_instructions, steps)
    return prompt(image), records(steps)


def text(recs: Sequence[Record]) -> str:
    """The text of these records (``generate`` stops at the ``<eos>`` after EXIT and does not
    return it)."""
    return "".join(r.text() for r in recs)


def parse(generated: str) -> list[Record]:
    """Records from generated text; raises ValueError on a malformed record."""
    if len(generated) % RECORD:
        raise ValueError(f"{len(generated)} tokens is not a whole number of records")
    recs = []
    for k in range(0, len(generated), RECORD):
        t = generated[k:k + RECORD]
        alphabet = next((a for a in (ADDR, DUMP, IMAGE) if t[0] in a), None)
        if alphabet is None or any(c not in BYTE for c in t[1:]):
            raise ValueError(f"record {k // RECORD} is malformed: {t!r}")
        b = [ord(c) - 0x100 for c in t[1:]]
        recs.append(Record((ord(t[0]) - ord(alphabet[0])) << 8 | b[0],
                           b[1] | b[2] << 8 | b[3] << 16 | b[4] << 24, b[5] << 8 | b[6],
                           alphabet is DUMP, alphabet is IMAGE))
    return recs


def output(recs: Iterable[Record]) -> tuple[bytes, int | None]:
    """What the program wrote on stdout and its exit status (None: it did not exit)."""
    out, status = bytearray(), None
    for r in recs:
        if r.dump or r.image:  # a state dump repeats the last OUT record: nothing new written
            continue
        if r.target == OUT:
            out.append(r.value & 255)
        elif r.target == EXIT:
            status = r.value & 255
    return bytes(out), status
