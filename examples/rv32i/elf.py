"""Loads an RV32I ELF executable into a flat memory image (pyelftools).

The examples are linked at 0x10000 and use at most 64 KiB above it (code, data, bss and the
stack); ``Image.memory`` is that whole window, zero where no segment puts bytes (bss, the
stack). A segment outside the window, or an ELF that is not 32-bit little-endian RISC-V, is
refused with ``ElfError``."""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path

from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

BASE = 0x10000
SIZE = 0x10000  # 64 KiB
EM_RISCV = "EM_RISCV"


class ElfError(ValueError):
    """The file is not an RV32 executable that fits the machine's memory."""


@dataclass
class Image:
    """A program ready to run: ``memory[i]`` is the byte at address ``base + i``."""

    memory: bytearray
    entry: int
    base: int = BASE
    symbols: dict[str, int] = field(default_factory=dict)
    segments: list[tuple[int, int, int]] = field(default_factory=list)  # (vaddr, filesz, memsz)
    name: str = ""

    @property
    def end(self) -> int:
        return self.base + len(self.memory)

    def highest_loaded(self) -> int:
        """The first address past every segment (bss and stack included)."""
        return max(v + m for v, _f, m in self.segments)


def load(path: str | Path, base: int = BASE, size: int = SIZE) -> Image:
    """The memory image and entry point of the ELF at ``path``."""
    data = Path(path).read_bytes()
    return load_bytes(data, base, size, name=Path(path).name)


def load_bytes(data: bytes, base: int = BASE, size: int = SIZE, name: str = "") -> Image:
    try:
        elf = ELFFile(io.BytesIO(data))
    except Exception as e:  # pyelftools raises its own ELFError on bad magic
        raise ElfError(f"{name or 'program'}: not an ELF file ({e})") from e
    if elf.elfclass != 32 or not elf.little_endian or elf["e_machine"] != EM_RISCV:
        raise ElfError(f"{name or 'program'}: not a 32-bit little-endian RISC-V ELF "
                       f"(class {elf.elfclass}, machine {elf['e_machine']})")
    if elf["e_type"] != "ET_EXEC":
        raise ElfError(f"{name or 'program'}: not an executable ({elf['e_type']})")
    memory = bytearray(size)
    segments = []
    for seg in elf.iter_segments():
        if seg["p_type"] != "PT_LOAD" or seg["p_memsz"] == 0:
            continue
        vaddr, filesz, memsz = seg["p_vaddr"], seg["p_filesz"], seg["p_memsz"]
        if vaddr < base or vaddr + memsz > base + size:
            raise ElfError(f"{name or 'program'}: segment {vaddr:#x}..{vaddr + memsz:#x} lies "
                           f"outside the machine's memory {base:#x}..{base + size:#x}")
        memory[vaddr - base:vaddr - base + filesz] = seg.data()[:filesz]
        segments.append((vaddr, filesz, memsz))
    if not segments:
        raise ElfError(f"{name or 'program'}: no loadable segment")
    entry = elf["e_entry"]
    if not base <= entry < base + size or entry % 4:
        raise ElfError(f"{name or 'program'}: entry point {entry:#x} is not an aligned address "
                       f"in {base:#x}..{base + size:#x}")
    symbols: dict[str, int] = {}
    for sec in elf.iter_sections():
        if isinstance(sec, SymbolTableSection):
            for sym in sec.iter_symbols():
                if sym.name and sym["st_info"]["type"] in ("STT_FUNC", "STT_OBJECT",
                                                           "STT_NOTYPE"):
                    symbols.setdefault(sym.name, sym["st_value"])
    return Image(memory, entry, base, symbols, segments, name)
