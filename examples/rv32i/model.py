"""The first compiled piece of the rv32i interpreter: a subset of RV32I as a torchwright_fx
program, printing the records of README.md ("The trace") from a prompt that holds the memory
image.

Subset: all of RV32I (LUI, AUIPC, JAL, JALR, the six branches, the ALU immediates and
registers with the shifts, the loads and stores of bytes, halves and words, FENCE as a no-op
record, ECALL ``write`` as a byte a record and ``exit``) but the faults. Memory: the 64 KiB
window at 0x10000, folded onto 4096 cells of 16 pages (below: a program's words must fall on
distinct cells, and not on the registers'), so the vocabulary holds the A_hi tokens 0x00
(registers, ports, the rest of their page) and 0x40 + p (the other 15 pages p), and a cell is
12 bits: 4096 values, one selection key.

Everything for record n is computed at the last token of record n-1 (the trigger) and printed
by ``tw.emit``; values move as bits (a byte token's bits are embedding columns), and every
field, immediate, byte and half is a linear map of bits. Past ``dump_at`` the model prints the
state the next context needs instead, and RESUME (contexts.py, README.md "Continuation").
"""

from __future__ import annotations

from typing import Any

import torch

import torchwright_fx as tw
from examples.rv32i import trace
from examples.rv32i.trace import ADDR, BYTE, DUMP, EXIT, IMAGE, OUT, RECORD, RESUME

# A cell's address as the selections match it, 12 bits: its page (4 bits) and its low byte (8
# bits); the keys are the positions that end a record. Memory word k of the 64 KiB window
# (0x10000 + 4 k) is the cell of page (k >> 8) & 15 and low byte k & 255: the window folds onto
# the 16 pages of 1 KiB, 16 KiB apart (trace.cell). The registers and ports (x0..x31, OUT,
# EXIT, RESUME) are the first 35 cells of page REGISTER_PAGE: the memory words that fold onto
# them (0x13000..0x1308B and its copies 16, 32 and 48 KiB up), and two words that fold onto
# one cell, are refused by run.py. Page 12 leaves 12 KiB of code and data from 0x10000 and a
# stack of 3,956 bytes below the window's end, or any other split of the 16 pages.
WINDOW_WORDS = 16384  # 64 KiB at 0x10000
CELLS = trace.CELLS  # 16 pages of 256
REGISTER_PAGE = trace.REGISTER_PAGE
# the A_hi tokens: 0x00 the register page, 0x40 + p page p (0x40 + REGISTER_PAGE is never
# printed: its index keeps A_hi a linear map of the page's bits)
HI = (0x00, *(0x40 + p for p in range(CELLS // 256)))
VOCAB = tw.Vocab(trace.alphabet(HI))
MAX_P = WINDOW_WORDS - 1  # the last word index


def _num(bits: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
    """The unsigned number of bits lo..hi-1 (column j has weight 2**(j - lo))."""
    w = torch.tensor([2.0 ** (j - lo) for j in range(lo, hi)])
    return (bits[:, lo:hi] * w).sum(-1, keepdim=True)


def _bytes(bits: torch.Tensor) -> list[torch.Tensor]:
    return [_num(bits, 8 * k, 8 * k + 8) for k in range(4)]


def _pick(bits: torch.Tensor, spec: list[int | None]) -> torch.Tensor:
    """A 32-bit value whose bit j is ``bits[:, spec[j]]`` (None: 0)."""
    zero = torch.zeros_like(bits[:, 0:1])
    return torch.cat([zero if s is None else bits[:, s:s + 1] for s in spec], -1)


def _imm_i(ins: torch.Tensor) -> torch.Tensor:
    return _pick(ins, [20 + j for j in range(11)] + [31] * 21)


def _imm_u(ins: torch.Tensor) -> torch.Tensor:
    return _pick(ins, [None] * 12 + list(range(12, 32)))


def _signed(bits: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
    """Bits lo..hi-1 as a two's-complement number (bit hi-1 the sign)."""
    return _num(bits, lo, hi - 1) - (2.0 ** (hi - 1 - lo)) * bits[:, hi - 1:hi]


def _when(flag: torch.Tensor, a: Any, b: Any) -> torch.Tensor:
    return torch.where(flag.bool(), a, b)


def _add(a: list[torch.Tensor], b: list[torch.Tensor], cin: torch.Tensor
         ) -> list[torch.Tensor]:
    """The bytes of (a + b + cin) mod 2**32 for byte lists a, b, by carry look-ahead: each
    byte sum t_k generates a carry (t_k >= 256) or propagates one (t_k == 255); the carries
    are 0/1 logic of those (every compared value stays below 512)."""
    t = [a[k] + b[k] for k in range(4)]
    g = [(t[k] >= 256).bool() for k in range(4)]
    p = [(t[k] == 255).bool() for k in range(4)]
    c1 = (t[0] + cin >= 256).bool()
    c2 = g[1] | (p[1] & c1)
    c3 = g[2] | (p[2] & g[1]) | (p[2] & p[1] & c1)
    c4 = g[3] | (p[3] & g[2]) | (p[3] & p[2] & g[1]) | (p[3] & p[2] & p[1] & c1)
    c = [cin] + [v.float() for v in (c1, c2, c3, c4)]
    return [t[k] + c[k] - 256 * c[k + 1] for k in range(4)]


def _less(a: torch.Tensor, b: torch.Tensor, signed: torch.Tensor
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """[a < b] and [a == b] for 32-bit values given as bits, [a < b] signed where ``signed``
    is 1 (the sign bit flipped): per 16-bit half, the difference d is below 2**16 in size;
    a < b iff the high half is less, or equal and the low half is less."""
    flip_a = torch.where(signed.bool(), 128 - 256 * a[:, 31:32], 0.0)
    flip_b = torch.where(signed.bool(), 128 - 256 * b[:, 31:32], 0.0)
    d_lo = _num(a, 0, 16) - _num(b, 0, 16)
    d_hi = _num(a, 16, 32) - _num(b, 16, 32) + 256 * (flip_a - flip_b)
    lo_less, hi_less = (d_lo < 0).bool(), (d_hi < 0).bool()
    lo_eq, hi_eq = (d_lo == 0).bool(), (_num(a, 16, 32) == _num(b, 16, 32)).bool()
    return (hi_less | (hi_eq & lo_less)).float(), (hi_eq & lo_eq).float()


def _shift(a: torch.Tensor, amount: torch.Tensor, left: torch.Tensor, arith: torch.Tensor
           ) -> torch.Tensor:
    """SLL / SRL / SRA of the bits ``a`` by the 5 bits ``amount``: a left shift is a right
    shift of the reversed bits; a barrel of 5 stages (by 1, 2, 4, 8, 16), each a
    torch.where per bit, the vacated bits filled with the sign for SRA."""
    rev = torch.cat([a[:, 31 - i:32 - i] for i in range(32)], -1)
    x = _when(left, rev, a)
    fill = arith * a[:, 31:32]
    for j in range(5):
        step = 1 << j
        moved = torch.cat([x[:, step:], *[fill] * step], -1)
        x = _when(amount[:, j:j + 1], moved, x)
    back = torch.cat([x[:, 31 - i:32 - i] for i in range(32)], -1)
    return _when(left, back, x)


def _const_bits(like: torch.Tensor, value: int, n: int) -> list[torch.Tensor]:
    return [torch.full_like(like, float(value >> i & 1)) for i in range(n)]


def _address(page: list[torch.Tensor], low: list[torch.Tensor]) -> torch.Tensor:
    """A query's 12 address bits (page, low byte)."""
    return torch.cat([*page, *low], -1)


def _register(like: torch.Tensor, number: Any) -> torch.Tensor:
    """The address bits of register ``number``: an int, or its 5 bits as columns."""
    page = _const_bits(like, REGISTER_PAGE, 4)
    if isinstance(number, int):
        return _address(page, _const_bits(like, number, 8))
    low = [number[:, i:i + 1] for i in range(5)] + _const_bits(like, 0, 3)
    return _address(page, low)


def _sum_bits(a: torch.Tensor, b: torch.Tensor, n: int) -> list[torch.Tensor]:
    """Bits 0..n-1 of a + b for a, b given as bits: the carry into bit i is one comparison
    of the low i bits' sum, (a mod 2**i) + (b mod 2**i) >= 2**i (every value below 2**17)."""
    carry = [torch.zeros_like(a[:, 0:1])]
    for i in range(1, n + 1):
        carry.append((_num(a, 0, i) + _num(b, 0, i) >= 2 ** i).float())
    return [tw.claim(a[:, i:i + 1] + b[:, i:i + 1] + carry[i] - 2 * carry[i + 1], 0, 1,
                     integral=True) for i in range(n)]


def _imm_s(ins: torch.Tensor) -> torch.Tensor:
    return _pick(ins, list(range(7, 12)) + list(range(25, 31)) + [31] * 21)


def _any(*terms: torch.Tensor) -> torch.Tensor:
    """The one of several exclusive cases that holds (each a where(flag, v, 0)), as a sum."""
    total = terms[0]
    for t in terms[1:]:
        total = total + t
    return total


def _load(word: torch.Tensor, off: list[torch.Tensor], f3: list[torch.Tensor]
          ) -> list[torch.Tensor]:
    """The bytes LB/LH/LW/LBU/LHU give from the aligned ``word`` (bits) at offset ``off``
    (one-hot of address & 3), sign- or zero-extended by funct3."""
    wb = _bytes(word)
    zero = torch.zeros_like(wb[0])
    byte = tw.claim(_any(*[_when(off[k], wb[k], zero) for k in range(4)]), 0, 255,
                    integral=True)
    half = [_when(off[0], wb[0], _when(off[2], wb[2], zero)),
            _when(off[0], wb[1], _when(off[2], wb[3], zero))]
    sign_b = _any(*[_when(off[k], word[:, 8 * k + 7:8 * k + 8], zero) for k in range(4)])
    sign_h = _when(off[0], word[:, 15:16], _when(off[2], word[:, 31:32], zero))
    ext_b, ext_h = 255 * _when(f3[0], sign_b, zero), 255 * _when(f3[1], sign_h, zero)
    small = f3[0] + f3[4]  # LB LBU
    halfw = f3[1] + f3[5]  # LH LHU
    return [_when(small, byte, _when(halfw, half[0], wb[0])),
            _when(small, ext_b, _when(halfw, half[1], wb[1])),
            _when(small, ext_b, _when(halfw, ext_h, wb[2])),
            _when(small, ext_b, _when(halfw, ext_h, wb[3]))]


def _store(word: torch.Tensor, off: list[torch.Tensor], f3: list[torch.Tensor],
           src: list[torch.Tensor]) -> list[torch.Tensor]:
    """The aligned word after SB/SH/SW of ``src`` (bytes) at offset ``off``, as bytes."""
    wb = _bytes(word)
    new = []
    for k in range(4):
        in_half = off[0] if k < 2 else off[2]
        new.append(_when(f3[0].bool() & off[k].bool(), src[0], _when(
            f3[1].bool() & in_half.bool(), src[k % 2], _when(f3[2], src[k], wb[k]))))
    return new


# The default context: 135 * 1024 tokens, about 17,000 instructions with the prompt (every
# program in elf/ below 70,000 instructions). The build's size does not depend on it (every cell
# is matched by its bits, whatever the length), and a run allocates only the context it uses.
# The recency lobe of the reads is certified up to 138,969 positions at d_head 32.
MAX_SEQ_LEN = 138240
# The most a dump can print: every cell (memory, the 32 registers, the OUT, EXIT and RESUME
# cells), and the RESUME record (contexts.py)
MAX_DUMP = RECORD * (CELLS + 1)


def dump_position(max_seq_len: int, dump_at: int | None = None) -> int:
    """``dump_at``, or by default room for the largest dump (``MAX_DUMP``) before
    ``max_seq_len``, or half the context where it cannot hold that."""
    if dump_at is None:
        dump_at = max(max_seq_len - MAX_DUMP - 2 * RECORD, max_seq_len // 2)
        dump_at = dump_at // RECORD * RECORD
    return dump_at


def make(max_seq_len: int = MAX_SEQ_LEN, dump_at: int | None = None, **options: Any
         ) -> tw.Compiled:
    """The interpreter for contexts of ``max_seq_len`` tokens that dump their state at the
    first record end at or past position ``dump_at`` (a multiple of 8; default:
    ``dump_position``'s; ``run.py`` chooses it from the program's footprint)."""
    dump_at = dump_position(max_seq_len, dump_at)
    if dump_at <= 0 or dump_at % RECORD:
        raise ValueError(f"dump_at must be a positive multiple of {RECORD}, not {dump_at}: "
                         f"max_seq_len {max_seq_len} leaves no room for a dump")
    byte0 = VOCAB[BYTE[0]]
    addr0 = VOCAB[ADDR[0]]
    dump0 = VOCAB[DUMP[0]]

    def rv32i_subset(x: torch.Tensor) -> torch.Tensor:
        # -- the tokens (free: embedding columns) ------------------------------------------
        a_hi = [(j, h, t) for j, h in enumerate(HI) for t in (ADDR[h], DUMP[h], IMAGE[h])]
        start = tw.is_token(x, [t for _, _, t in a_hi])  # slot 0 of a record
        # A_hi: 0 (the register page) or 0x40 + j (page j): the cell's page
        hi = tw.lookup(x, {t: j for j, _, t in a_hi})
        page = [tw.lookup(x, {t: (h - 0x40 if h else REGISTER_PAGE) >> i & 1 for _, h, t in a_hi})
                for i in range(4)]
        dumped = tw.is_token(x, [DUMP[h] for h in HI])  # a record of a state dump
        imaged = tw.is_token(x, [IMAGE[h] for h in HI])  # a record of the prompt's image
        byte = tw.lookup(x, {BYTE[b]: b for b in range(256)})
        bits = torch.cat([tw.lookup(x, {BYTE[b]: b >> i & 1 for b in range(256)})
                          for i in range(8)], -1)

        # -- the record that ends here (slot 7): its cell, value and P, in two hops --------
        # layer 0: each position gathers the token one back and the token two back (with its
        # A_hi flags); layer 1: one head brings tokens 3, 4, 5 back from those, another tokens
        # 6 and 7 back, so a record's end holds all seven tokens before it with two heads a
        # layer (seven shifts would need seven heads in one layer, and Phi-3 gives every layer
        # the same head count)
        meta = torch.cat([start, hi, *page, dumped, imaged], -1)  # a record's A_hi
        s1 = tw.shift(bits, 1)
        s2 = tw.shift(torch.cat([bits, meta], -1), 2)
        near = tw.shift(torch.cat([bits, s1, s2[:, :8]], -1), 3)  # tokens 3, 4, 5 back
        far = tw.shift(torch.cat([s1, s2[:, 8:]], -1), 5)  # tokens 6 and 7 back
        at7 = far[:, 8:]  # start, hi, page of A_hi
        trigger = at7[:, 0:1]
        low = far[:, 0:8]  # A_lo's bits (a byte is a linear map of its bits: no head)
        cell = 256 * at7[:, 1:2] + _num(low, 0, 8)
        value = torch.cat([near[:, 16:24], near[:, 8:16], near[:, 0:8], s2[:, :8]], -1)  # V0..V3
        p_bits = s1  # P_hi (the page of word P), then P_lo: this token
        # P at a record's end (P_hi < 64 in the window: its two top bits are left out), in a
        # column of its own: read as a sum of this token's lookup, it would keep the
        # embedding's one-hot token columns live for every late reader
        p = _when(trigger, 256 * _num(p_bits, 0, 6) + byte, torch.zeros_like(byte))
        key = torch.cat([at7[:, 2:6], low], -1)  # the address bits
        was_dump = at7[:, 6:7]  # the record that ends here is a dump's
        was_image = at7[:, 7:8]  # ... the image's (a prompt's: its cell is dumped only if written)
        ran = trigger * (1 - was_dump)  # ... an executed one (or the prompt's image)
        exited = ran * (cell == EXIT).float()
        after_out = ran * (cell == OUT).float()  # the record that ends here printed a byte
        resumed = ran * (cell == RESUME).float()

        def read(address: torch.Tensor, width: int = 32, lo: int = 0) -> torch.Tensor:
            """The latest value of the cell at ``address`` (bits), its bits lo..width-1."""
            ends = tw.select(trigger, torch.ones_like(trigger), "==")
            return tw.select_latest(tw.select(key, address, "==") & ends, value[:, lo:width],
                                    default=0.0)

        # -- the state dump (contexts.py): past dump_at, walk the first records back --------
        ones = torch.ones_like(trigger)
        # a record is first when it is not the image's and no earlier such record has its cell:
        # each position after a record end holds that record's cell and whether it counts, so
        # a record's own end never matches itself
        counted = trigger * (1 - was_image)
        after = tw.shift(torch.cat([key, counted], -1), 1)
        seen = tw.select_latest(tw.select(after[:, :12], key, "==")
                                & tw.select(after[:, 12:13], ones, "=="), ones, default=0.0)
        first = (counted.bool() & (seen < 0.5).bool()).float()
        first_ends = tw.select(first, ones, "==")
        newest = tw.select_latest(first_ends, torch.cat([key, ones], -1), default=0.0)
        link = tw.shift(newest, 1)  # the newest first record before this position
        late = (tw.position(x) >= dump_at).bool()
        begin = late & ran.bool() & ~after_out.bool() & ~resumed.bool()  # (a write finishes)
        dumping = begin | was_dump.bool()
        # the cell to print: the newest first record's (begin), else the one whose first
        # record the last dump record's cell links to
        back_link = tw.select_latest(tw.select(key, key, "==") & first_ends, link,
                                     default=0.0)
        next_cell = _when(begin, newest, back_link)
        more = dumping & (next_cell[:, 12:13] > 0.5).bool()  # else every cell is out: RESUME
        dump_cell = (next_cell[:, :12] > 0.5).float()  # (moved twice: snapped onto 0/1)
        dump_value = read(dump_cell)
        execute = ~dumping

        # the instruction's bits 2..31: bits 0 and 1 of every RV32I instruction are 1 (the
        # reference faults on any other word it executes, and run.py refuses the program), so
        # the read moves 30 values, not 32
        fetched = read(_address([p_bits[:, i:i + 1] for i in range(4)],
                                [bits[:, i:i + 1] for i in range(8)]), lo=2)
        ins = torch.cat([torch.ones_like(fetched[:, :2]), fetched], -1)
        op, f3 = _num(ins, 0, 7), _num(ins, 12, 15)
        rd = _num(ins, 7, 12)
        is_opimm, is_op = (op == 0x13).float(), (op == 0x33).float()
        is_lui, is_auipc = (op == 0x37).float(), (op == 0x17).float()
        is_jal, is_jalr = (op == 0x6F).float(), (op == 0x67).float()
        is_branch, is_ecall = (op == 0x63).float(), (op == 0x73).float()
        is_load, is_store = (op == 0x03).float(), (op == 0x23).float()
        f3_is = [(f3 == k).float() for k in range(8)]

        # -- registers: rs1 and rs2; an ECALL (whose fields are 0) reads a1 and a2 in their
        # place, and the low bytes of a7 (which call) and a0 (exit's status) -------------
        def field(lo: int, ecall_reads: int) -> torch.Tensor:
            return torch.cat([tw.claim(ins[:, lo + i:lo + i + 1] + (ecall_reads >> i & 1)
                                       * is_ecall, 0, 1, integral=True) for i in range(5)], -1)

        r1, r2 = read(_register(p, field(15, 11))), read(_register(p, field(20, 12)))
        a2 = r2  # (a1 is r1: the write reads its buffer at r1 + count)
        a0, a7 = (read(_register(p, r), 8) for r in (10, 17))
        call = _num(a7, 0, 8)
        # exit (93) and exit_group (94)
        is_exit = is_ecall * ((call >= 93).float() - (call >= 95).float())
        is_write = is_ecall * (call == 64).float()
        # write(2, ...): stderr's bytes go nowhere. A write's fd is 1 or 2 (the reference
        # refuses any other, and run.py refuses the program), so bit 1 of a0 tells them apart
        to_stderr = a0[:, 1:2]
        # a write prints one byte a record; the count so far is in the last record's V1 V2
        count = _when(after_out, value[:, 8:24], torch.zeros_like(value[:, 8:24]))

        # -- the ALU, and the address of a load, a store or the next byte of a write --------
        use_r2 = is_op + is_branch
        upper = is_lui + is_auipc
        imm = _when(upper, _imm_u(ins), _when(is_store, _imm_s(ins), _imm_i(ins)))
        b = _when(use_r2, r2, imm)
        is_sub = is_op * f3_is[0] * ins[:, 30:31]
        b_add = _when(is_sub, 1 - b, b)
        # pc and pc + 4 as bytes: pc = 0x10000 + 4 P; pc + 4 carries into byte 1 when P's low
        # 6 bits are all 1 (never into byte 2: run.py refuses an instruction at the window's
        # last word). From p and P_hi's bits (the token before): a late read of this token's
        # own lookups (byte, bits) would keep the embedding's one-hot token columns live
        # until then, one per byte token
        p_next = p + 1
        p_hi6 = _when(trigger, _num(p_bits, 0, 6), torch.zeros_like(p))  # P_hi (0 elsewhere)
        p_lo = tw.claim(p - 256 * p_hi6, 0, 255, integral=True)  # P_lo
        quarter = sum((p_lo >= 64 * k).float() for k in (1, 2, 3))  # P_lo >> 6
        p_lo6 = p_lo - 64 * quarter
        pc_hi = quarter + 4 * p_hi6
        pc_bytes = [4 * p_lo6, pc_hi, torch.ones_like(p), torch.zeros_like(p)]
        c6 = (p_lo6 == 63).float()
        link = [4 * (p_lo6 + 1 - 64 * c6), pc_hi + c6, torch.ones_like(p), torch.zeros_like(p)]
        a_bytes = [_when(is_auipc, pc_k, _when(is_lui, 0.0, r_k))
                   for pc_k, r_k in zip(pc_bytes, _bytes(r1), strict=True)]
        total = [tw.claim(t, 0, 255, integral=True)
                 for t in _add(a_bytes, _bytes(b_add), is_sub)]
        # the address of a load, a store, a JALR or a write's byte (r1 + imm, a1 + count) as
        # bits: bits 2..15 are the word index (the window's addresses have bit 16 set)
        addr = _sum_bits(r1[:, 0:16], _when(is_write, count, imm[:, 0:16]), 16)
        word_index = sum(addr[i] * 2.0 ** (i - 2) for i in range(2, 16))
        offset = addr[0] + 2 * addr[1]
        off = [(offset == k).float() for k in range(4)]
        mem = read(_address(addr[10:14], addr[2:10]))
        loaded = _load(mem, off, f3_is)
        stored = _store(mem, off, f3_is, _bytes(r2))

        shifted = _bytes(_shift(r1, b[:, 0:5], f3_is[1], f3_is[5] * ins[:, 30:31]))
        both = r1 * b  # AND of each bit pair
        and_bytes = _bytes(both)
        or_bytes = _bytes(r1 + b - both)
        xor_bytes = _bytes(r1 + b - 2 * both)
        unsigned = (f3 == 3).bool() | (f3 >= 6).bool()
        slt, eq = _less(r1, b, (~unsigned).float())  # SLT BLT BGE signed; SLTU BLTU BGEU not
        alu = is_opimm + is_op
        zero = torch.zeros_like(p)
        result = []
        for k in range(4):
            lt_byte = slt if k == 0 else zero
            result.append(_any(_when(alu * f3_is[0], total[k], zero),
                               _when(alu * (f3_is[2] + f3_is[3]), lt_byte, zero),
                               _when(alu * f3_is[4], xor_bytes[k], zero),
                               _when(alu * f3_is[6], or_bytes[k], zero),
                               _when(alu * f3_is[7], and_bytes[k], zero),
                               _when(upper, total[k], zero),
                               _when(is_jal + is_jalr, link[k], zero),
                               _when(is_load, loaded[k], zero),
                               _when(alu * (f3_is[1] + f3_is[5]), shifted[k], zero)))

        # -- a write: a byte a record until the count reaches a2, then a0 = a2 (at once for
        # stderr) -------------------------------------------------------------------------
        n_lo = _num(a2, 0, 16)
        done = ((_num(count, 0, 16) == n_lo) | to_stderr.bool()).float()
        write_byte = is_write * (1 - done)
        write_done = is_write * done
        c0 = _num(count, 0, 8)
        wrap = (c0 == 255).float()
        out_bytes = [loaded[0], c0 + 1 - 256 * wrap, _num(count, 8, 16) + wrap, zero]

        # -- where execution goes: branches, jumps ------------------------------------------
        # BEQ BNE: f3 0 1; BLT BGE: 4 5 (signed); BLTU BGEU: 6 7. slt above compares signed
        # unless f3 is 3, 6 or 7, which is what the branches need as well.
        f3b = [v.bool() for v in f3_is]
        cond = ((f3b[0] & eq.bool()) | (f3b[1] & ~eq.bool()) | ((f3b[4] | f3b[6]) & slt.bool())
                | ((f3b[5] | f3b[7]) & ~slt.bool()))
        taken = (is_branch.bool() & cond).float()
        imm_b = torch.cat([ins[:, 8:12], ins[:, 25:31], ins[:, 7:8], ins[:, 31:32]], -1)
        imm_j = torch.cat([ins[:, 21:31], ins[:, 20:21], ins[:, 12:20], ins[:, 31:32]], -1)
        jump_b = _signed(imm_b, 1, 12)  # offset / 4 (bit 1 is 0 in aligned code)
        jump_j = _signed(imm_j, 1, 20)
        nxt = (p_next + _when(taken, jump_b - 1, zero) + _when(is_jal, jump_j - 1, zero)
               + _when(is_jalr, word_index - p_next, zero) - write_byte)
        nxt = torch.clamp(nxt, 0, MAX_P)  # (any value off the trigger positions)

        # -- the record: every slot a sum of exclusive cases (each a where(flag, v, 0), so
        # that a late value passes one sublayer, not a chain of them) ----------------------
        writes = (alu + upper + is_jal + is_jalr + is_load) * (rd > 0).float()
        case = {name: (execute & flag.bool()).float() for name, flag in (
            ("exit", is_exit), ("byte", write_byte), ("done", write_done), ("store", is_store),
            ("writes", writes))}
        resume = (dumping & ~more).float()
        dumped = more.float()
        target_lo = _any(_when(case["exit"], float(EXIT), zero),
                         _when(case["byte"], float(OUT), zero),
                         _when(case["done"], 10.0, zero),
                         _when(case["store"], _num(torch.cat(addr[2:10], -1), 0, 8), zero),
                         _when(case["writes"], rd, zero),
                         _when(dumped, _num(dump_cell, 4, 12), zero),
                         _when(resume, float(RESUME), zero))
        # A_hi: its index in HI (0 the register page, whose memory words print as its
        # registers do, else 1 + page), + len(HI) for a dump's
        def hi_index(page_bits: torch.Tensor) -> torch.Tensor:
            on_registers = tw.equals(page_bits, [float(REGISTER_PAGE >> i & 1) for i in range(4)])
            return _num(page_bits, 0, 4) + 1 - (1 + REGISTER_PAGE) * on_registers

        target_hi = _any(_when(case["store"], hi_index(torch.cat(addr[10:14], -1)), zero),
                         _when(dumped, hi_index(dump_cell[:, 0:4]) + float(dump0 - addr0), zero))
        vbytes = []
        for k in range(4):
            v = _any(_when(case["exit"], _num(a0, 0, 8) if k == 0 else zero, zero),
                     _when(case["byte"], out_bytes[k], zero),
                     _when(case["done"], _bytes(a2)[k], zero),
                     _when(case["store"], stored[k], zero),
                     _when(case["writes"], result[k], zero),
                     _when(dumped, _bytes(dump_value)[k], zero))
            vbytes.append(tw.claim(v, 0, 255, integral=True))
        # a dump's records keep the pc to resume at
        nxt = _when(dumping, p, nxt)
        nxt_hi = torch.floor(nxt / 256)
        nxt_lo = tw.claim(nxt - 256 * nxt_hi, 0, 255, integral=True)
        codes = [addr0 + target_hi, byte0 + target_lo,
                 *[byte0 + v for v in vbytes], byte0 + nxt_hi, byte0 + nxt_lo]
        stop = exited.bool() | (resumed.bool() & late)
        fire = (trigger.bool() & ~stop).float()
        held = tw.latch(torch.cat(codes, -1), fire)
        return tw.emit(fire, [held[:, k:k + 1] for k in range(RECORD)])

    return tw.compile(rv32i_subset, vocab=VOCAB, max_seq_len=max_seq_len, **options)


program = make()
