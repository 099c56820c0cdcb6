"""Random programs for differential fuzzing of the compiler.

A program is generated as *source text* (``def prog(x): ...``) from a typed expression pool:
0/1 streams (``bit``), integer-valued streams with a sound interval (``int``), token-code
streams (``code``) and general real streams (``real``: means, divisions). The interval of
every value is tracked, so claims are true claims and output tables cover what can occur.
A few picks ignore the types on purpose (ill-formed programs): the property allows refusals.

The property (``check``): every program is either refused at compile time with
``tw.CompileError``, or its compiled output (in-process runtime) equals the eager reference
on every prompt. Prompts on which the reference itself raises (a violated claim, an output
that is not a token code) are skipped as invalid input.

Every random choice goes through a ``Drawer``: ``RandomDrawer`` (a seeded ``random.Random``,
for ``scripts/fuzz.py``) or ``HypothesisDrawer`` (for ``programs()``, a hypothesis strategy
that shrinks towards the first alternative of every choice).

``precision="half"`` (``scripts/fuzz.py --precision half``): programs compiled with
``tw.compile(..., precision="half")``, generated with a bias toward what half supports (ops of
the current token, ``tw.shift`` by small offsets, ``tw.emit``, and ``tw.latch``, ``tw.position``,
``tw.steps_since``, ``tw.gather`` and ``tw.select_latest``, which half certifies to 128
positions, ``tw.argmax`` there for narrow scores, and ``tw.selector_width`` to 97; the ops
half refuses, means, only rarely, to keep the refusal path covered), and every compiled
program is
also run through
transformers as a user loads the saved directory (``AutoModelForCausalLM.from_pretrained(dir,
dtype=...)``) in float32, float16 and bfloat16, eager and sdpa attention (``HF_CONFIGS``): a
difference from the eager reference in any of them is a mismatch.
"""

from __future__ import annotations

import linecache
import math
import random
import re
import tempfile
import traceback
from dataclasses import dataclass, field
from typing import Any

import hfcheck
import torch

import torchwright_fx as tw

VOCABS = ("ab01\n", "abc01\n", "abc0123\n", "ab0123456789\n")
SEQ_LENS = (8, 12, 16, 24, 32)
LONG_SEQ_LENS = (128, 512, 2048, 4096, 8192, 32768, 131072)  # fuzz.py --long: where fp32 binds
# precision="half" (short: six transformers runs each; latch and position hold to 128)
HALF_SEQ_LENS = (16, 32, 64, 128, 128, 256)
HALF_LONG_SEQ_LENS = (512, 1024, 2048, 4096)  # precision="half" with --long
# precision="half": (dtype, attn_implementation) of every transformers run of a compiled program
HF_CONFIGS = hfcheck.CONFIGS
CMP_OPS = (">", ">=", "<", "<=", "==", "!=")


# -- drawers ------------------------------------------------------------------------------------
class RandomDrawer:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def int(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def pick(self, seq: Any) -> Any:
        return seq[self.rng.randrange(len(seq))]

    def chance(self, p: float) -> bool:
        return self.rng.random() < p


class HypothesisDrawer:
    def __init__(self, draw: Any):
        from hypothesis import strategies as st

        self.draw, self.st = draw, st

    def int(self, lo: int, hi: int) -> int:
        return self.draw(self.st.integers(lo, hi))

    def pick(self, seq: Any) -> Any:
        return seq[self.int(0, len(seq) - 1)]

    def chance(self, p: float) -> bool:  # shrinks towards False (the simpler program)
        return self.int(0, 999) >= 1000 - round(1000 * p)


# -- programs -----------------------------------------------------------------------------------
@dataclass
class Var:
    name: str
    kind: str  # "bit" | "int" | "code" | "real"
    lo: float
    hi: float
    tag: str = ""  # reals: "mean:<where>", "lattice" or "other"


@dataclass
class Program:
    source: str
    chars: str
    machine: str
    max_seq_len: int
    optimize: int
    answer_len: int
    precision: str = "fp32"

    @property
    def vocab(self) -> tw.Vocab:
        return tw.Vocab(self.chars)

    def function(self) -> Any:
        filename = f"<fuzz-{abs(hash(self.source)):x}>"
        linecache.cache[filename] = (len(self.source), None, self.source.splitlines(True),
                                     filename)
        scope: dict[str, Any] = {"tw": tw, "torch": torch}
        exec(compile(self.source, filename, "exec"), scope)
        return scope["prog"]

    def compile(self) -> tw.Compiled:
        if self.precision != "fp32":
            return tw.compile(self.function(), vocab=self.vocab, machine=self.machine,
                              max_seq_len=self.max_seq_len, optimize=self.optimize,
                              precision=self.precision)
        return tw.compile(self.function(), vocab=self.vocab, machine=self.machine,
                          max_seq_len=self.max_seq_len, optimize=self.optimize)

    def describe(self) -> str:
        half = f" precision={self.precision!r}" if self.precision != "fp32" else ""
        return (f"# vocab={self.chars!r} machine={self.machine!r} "
                f"max_seq_len={self.max_seq_len} optimize={self.optimize}{half}\n{self.source}")


class _Gen:
    # precision="half": the share of picks that still draw an op half refuses (tw.mean,
    # tw.gather, tw.argmax, selectors, counts), so that the refusal path stays covered
    HALF_REFUSED = 0.03
    # precision="half": the share of moves that latch rather than shift, and of tw.position
    # leaves kept, up to HALF_POSITIONS (what half certifies tw.latch, tw.position and
    # tw.steps_since to; beyond, they are drawn as rarely as the ops half refuses)
    HALF_LATCH = 0.3
    HALF_POSITION = 0.5
    HALF_POSITIONS = 128

    def __init__(self, d: Any, chars: str, max_seq_len: int, half: bool = False):
        self.d, self.chars, self.L, self.half = d, chars, max_seq_len, half
        self.V = len(tw.Vocab(chars))
        self.digits = "".join(c for c in chars if c.isdigit())
        self.lines: list[str] = []
        self.pool: list[Var] = []

    # -- the pool --
    def new(self, expr: str, kind: str, lo: float, hi: float, tag: str = "") -> Var:
        v = Var(f"v{len(self.pool)}", kind, lo, hi, tag)
        self.lines.append(f"    {v.name} = {expr}")
        self.pool.append(v)
        return v

    def some(self, kind: str) -> Var:
        """An existing variable of ``kind`` (``int`` accepts bits and codes), or a new leaf;
        rarely (ill-formed on purpose) a real where an integer is expected."""
        d = self.d
        if kind == "int" and d.chance(0.02):
            reals = [v for v in self.pool if v.kind == "real"]
            if reals:
                return d.pick(reals)
        kinds = {"int": ("int", "bit", "code"), "bit": ("bit",), "real": ("real",),
                 "code": ("code",)}[kind]
        found = [v for v in self.pool if v.kind in kinds]
        if found and d.chance(0.8):
            if d.chance(0.6):  # mostly one of the latest: long chains
                return d.pick(found[::-1][:2])
            return d.pick(found[::-1])
        return {"bit": self.bit_leaf, "int": self.int_leaf, "real": self.real_op,
                "code": self.code_leaf}[kind]()

    def tok(self) -> str:
        return self.d.pick(("\n", *self.chars[:-1]))

    # -- leaves --
    def bit_leaf(self) -> Var:
        d, t = self.d, self.tok()
        form = d.int(0, 3)
        if form == 0:
            return self.new(f"tw.is_token(x, {t!r})", "bit", 0, 1)
        if form == 1:
            return self.new(f"tw.is_token(x, [{t!r}, \"<bos>\"])", "bit", 0, 1)
        if form == 2:
            return self.new(f"1 - tw.is_token(x, {t!r})", "bit", 0, 1)
        other = self.tok()
        if other == t and d.chance(0.9):  # a repeated token counts twice in the reference
            other = "<bos>"
        return self.new(f"tw.is_token(x, [{t!r}, {other!r}])", "bit", 0, 1)

    def code_leaf(self) -> Var:
        return self.new("tw.code(x)", "code", 0, self.V - 1)

    def int_leaf(self) -> Var:
        d = self.d
        form = d.int(0, 2)
        if self.half and form == 2 and not d.chance(self.half_rate(self.HALF_POSITION)):
            form = d.int(0, 1)
        if form == 0:
            top = d.pick((9, 9, 120, 1000))  # large values: steps far from 0 (// 100)
            table = {c: d.int(-3, top) for c in self.chars if d.chance(0.6)}
            default = d.int(-2, 5)
            vals = [*table.values(), default]
            return self.new(f"tw.lookup(x, {table!r}, default={default})", "int", min(vals),
                            max(vals))
        if form == 1:
            return self.code_leaf()
        return self.new("tw.position(x)", "int", 0, self.L - 1)

    # -- bits --
    def bit_op(self) -> Var:
        d = self.d
        form = d.pick(("leaf", "cmp", "cmp", "cmp2", "rcmp", "logic", "not", "equals", "move"))
        if form == "cmp":
            a = self.some("int")
            k = d.int(math.floor(a.lo) - 1, math.ceil(a.hi) + 1)
            return self.new(f"({a.name} {d.pick(CMP_OPS)} {k}).float()", "bit", 0, 1)
        if form == "cmp2":
            a, b = self.some("int"), self.some("int")
            return self.new(f"({a.name} {d.pick(CMP_OPS)} {b.name}).float()", "bit", 0, 1)
        if form == "rcmp":
            r = self.some("real")
            same = [v for v in self.pool if v.kind == "real" and v.tag == r.tag
                    and v is not r and r.tag.startswith("mean")]
            if same and d.chance(0.4):
                rhs = d.pick(same).name
            else:
                q = d.int(1, self.L)
                p = d.int(math.floor(r.lo * q) - 1, math.ceil(r.hi * q) + 1)
                rhs = f"{p} / {q}"
            return self.new(f"({r.name} {d.pick(CMP_OPS)} {rhs}).float()", "bit", 0, 1)
        if form == "logic":
            a, b = self.some("bit"), self.some("bit")
            op = d.pick(("&", "|", "^", "*"))
            if op == "*":
                return self.new(f"{a.name} * {b.name}", "bit", 0, 1)
            return self.new(f"({a.name}.bool() {op} {b.name}.bool()).float()", "bit", 0, 1)
        if form == "not":
            a = self.some("bit")
            if d.chance(0.5):
                return self.new(f"1 - {a.name}", "bit", 0, 1)
            return self.new(f"torch.logical_not({a.name}.bool()).float()", "bit", 0, 1)
        if form == "equals":
            a = self.some("int")
            return self.new(f"tw.equals({a.name}, {d.int(math.floor(a.lo), math.ceil(a.hi))})",
                            "bit", 0, 1)
        if form == "move":
            a = self.some("bit")
            if self.half:
                if not d.chance(self.half_rate(self.HALF_LATCH)):
                    return self.new(f"tw.shift({a.name}, {self.half_offset()})", "bit", 0, 1)
            elif d.chance(0.5):
                return self.new(f"tw.shift({a.name}, {d.int(1, 3)})", "bit", 0, 1)
            return self.new(f"tw.latch({a.name}, {self.some('bit').name})", "bit", 0, 1)
        return self.bit_leaf()

    # -- reals --
    def real_op(self) -> Var:
        d = self.d
        if self.half:
            form = d.pick(("div", "affine", "sdiv", "decimal", "dtable", "dwhere", "rmove"))
            if d.chance(self.HALF_REFUSED):
                form = d.pick(("mean", "mean_where", "aggregate"))
        else:
            form = d.pick(("mean", "mean_where", "div", "affine", "sdiv", "decimal", "dtable",
                           "dwhere", "rmove", "aggregate"))
        if form == "decimal":  # constants fp32 does not hold: the reference rounds them
            a, c = self.some("int"), d.pick((0.1, 0.3, 0.7, 1.3, 2.5, 0.05))
            lo, hi = sorted((a.lo * c, a.hi * c))
            return self.new(f"{a.name} * {c}", "real", lo, hi, "lattice")
        if form == "dtable":
            table = {ch: d.pick((0.1, 0.2, 0.25, 0.3, 0.7, 1.5)) for ch in self.chars
                     if d.chance(0.6)}
            vals = [*table.values(), 0.0]
            return self.new(f"tw.lookup(x, {table!r}, default=0.0)", "real", min(vals),
                            max(vals), "lattice")
        if form == "dwhere":
            c1, c2 = d.pick((0.1, 0.01, 0.3, 0.5)), d.pick((0.0, 0.04, 0.2))
            return self.new(f"torch.where({self.some('bit').name}.bool(), {c1}, {c2})", "real",
                            min(c1, c2), max(c1, c2), "lattice")
        if form == "rmove":
            r = self.some("real")
            if self.half:
                move = f"tw.shift({r.name}, {self.half_offset()})" \
                    if not d.chance(self.half_rate(self.HALF_LATCH)) else \
                    f"tw.latch({r.name}, {self.some('bit').name})"
            else:
                move = f"tw.shift({r.name}, {d.int(1, 3)})" if d.chance(0.5) else \
                    f"tw.latch({r.name}, {self.some('bit').name})"
            return self.new(move, "real", r.lo, r.hi, "moved")
        if form in ("mean", "mean_where"):
            a = self.some("int") if d.chance(0.7) else self.some("bit")
            if form == "mean":
                return self.new(f"tw.mean({a.name})", "real", a.lo, a.hi, "mean:")
            w = self.some("bit")
            return self.new(f"tw.mean({a.name}, where={w.name})", "real", a.lo, a.hi,
                            f"mean:{w.name}")
        if form == "aggregate":
            a = self.some("int") if d.chance(0.7) else self.some("bit")
            default = d.int(math.floor(a.lo), math.ceil(a.hi))
            return self.new(f"tw.aggregate({self.selector()}, {a.name}, default={default})",
                            "real", a.lo, a.hi, "aggregate")
        if form == "div":
            a, c = self.some("int"), d.pick((2, 3, 4, 5, 10, 7))
            return self.new(f"{a.name} / {c}", "real", a.lo / c, a.hi / c, "lattice")
        if form == "affine":
            r = [v for v in self.pool if v.kind == "real"]
            if r:
                r0, c, b = d.pick(r), d.pick((2, -1, 3, 10)), d.int(-3, 3)
                lo, hi = sorted((c * r0.lo + b, c * r0.hi + b))
                return self.new(f"{c} * {r0.name} + {b}", "real", lo, hi, r0.tag)
            return self.real_op()
        a, b = self.some("int"), self.some("int")  # a stream division (rare: "sdiv")
        if b.lo < 1:
            c = d.int(2, 6)
            return self.new(f"{a.name} / {c}", "real", a.lo / c, a.hi / c, "lattice")
        bounds = [a.lo / b.lo, a.lo / b.hi, a.hi / b.lo, a.hi / b.hi]
        return self.new(f"{a.name} / {b.name}", "real", min(bounds), max(bounds), "other")

    # -- selectors (tw.select) --
    PREDICATES = ("==", "!=", "<", "<=", ">", ">=", "true", "false",
                  "lambda k, q: (k + q) % 3 == 0", "lambda k, q: abs(k - q) <= 1")

    def select_side(self) -> str:
        """A key or query stream with few values (a selection head has ~27 classes)."""
        d = self.d
        small = [v for v in self.pool if v.kind in ("int", "bit", "code")
                 and v.hi - v.lo <= 12]
        if small and d.chance(0.7):
            return d.pick(small[::-1][:4]).name
        return d.pick(("x", self.bit_leaf().name, self.code_leaf().name))

    def selector(self, depth: int = 0) -> str:
        d = self.d
        if depth < 2 and d.chance(0.25):
            op = d.pick(("&", "|", "~"))
            if op == "~":
                return f"~{self.selector(depth + 1)}"
            return f"({self.selector(depth + 1)} {op} {self.selector(depth + 1)})"
        if d.chance(0.15):  # == on two bit vectors (families/bit_select.py)
            n = d.int(2, 5)
            return f"tw.select({self.bit_vector(n)}, {self.bit_vector(n)}, '==')"
        pred = d.pick(self.PREDICATES)
        pred = pred if pred.startswith("lambda") else repr(pred)
        return f"tw.select({self.select_side()}, {self.select_side()}, {pred})"

    def bit_vector(self, n: int) -> str:
        """n 0/1 columns side by side, from the pool's bits (moved ones too) or new leaves."""
        d = self.d
        bits = [v for v in self.pool if v.kind == "bit"]
        cols = []
        for _ in range(n):
            name = d.pick(bits).name if bits and d.chance(0.6) else self.bit_leaf().name
            cols.append(f"tw.shift({name}, {d.int(1, 3)})" if d.chance(0.25) else name)
        return "torch.cat([" + ", ".join(f"{c}.float()" for c in cols) + "], -1)"

    # -- integers --
    def int_op(self) -> Var:
        d = self.d
        form = d.pick(("add", "affine", "relu", "clamp", "abs", "minmax", "where", "floordiv",
                       "mod", "round", "digits", "shift", "latch", "arg", "gather", "steps",
                       "count", "lookup", "lookup2", "claim", "rfloor", "mul", "d2n", "sign",
                       "width", "latest", "leaf")) if not self.half else self.half_int_form()
        a = self.some("int")
        lo, hi = math.floor(a.lo), math.ceil(a.hi)
        keep = a.kind if a.kind in ("code", "bit") else "int"
        if form == "add":
            b = self.some("int")
            if d.chance(0.5):
                return self.new(f"{a.name} + {b.name}", "int", lo + b.lo, hi + b.hi)
            return self.new(f"{a.name} - {b.name}", "int", lo - b.hi, hi - b.lo)
        if form == "affine":
            c, k = d.pick((2, -1, 3, -2, 10)), d.int(-5, 5)
            lo2, hi2 = sorted((c * lo + k, c * hi + k))
            return self.new(f"{c} * {a.name} + {k}", "int", lo2, hi2)
        if form == "relu":
            k = d.int(lo - 1, hi + 1)
            return self.new(f"torch.relu({a.name} - {k})", "int", max(0, lo - k), max(0, hi - k))
        if form == "clamp":
            l0 = d.int(lo - 1, hi + 1)
            h0 = d.int(l0, hi + 2)
            spelling = d.int(0, 3)
            if spelling == 0:
                return self.new(f"torch.clamp({a.name}, {l0}, {h0})", "int", min(max(lo, l0), h0),
                                max(min(hi, h0), l0))
            if spelling == 1:
                return self.new(f"torch.clamp({a.name}, min={l0})", "int", max(lo, l0),
                                max(hi, l0))
            if spelling == 2:
                return self.new(f"torch.clip({a.name}, max={h0})", "int", min(lo, h0),
                                min(hi, h0))
            b = self.some("int")
            return self.new(f"torch.clamp({a.name}, min={b.name})", "int", max(lo, b.lo),
                            max(hi, b.hi))
        if form == "sign":
            return self.new(f"torch.sign({a.name} - {d.int(lo, hi)})", "int", -1, 1)
        if form == "abs":
            k = d.int(lo, hi)
            return self.new(f"torch.abs({a.name} - {k})", "int", 0, max(abs(lo - k), abs(hi - k)))
        if form == "minmax":
            b = self.some("int")
            if d.chance(0.5):
                return self.new(f"torch.minimum({a.name}, {b.name})", "int", min(lo, b.lo),
                                min(hi, b.hi))
            return self.new(f"torch.maximum({a.name}, {b.name})", "int", max(lo, b.lo),
                            max(hi, b.hi))
        if form == "where":
            b, c = self.some("int"), self.bit_op() if d.chance(0.3) else self.some("bit")
            kind = "code" if a.kind == b.kind == "code" else "int"
            return self.new(f"torch.where({c.name}.bool(), {a.name}, {b.name})", kind,
                            min(lo, b.lo), max(hi, b.hi))
        if form == "floordiv":
            c = d.pick((2, 3, 10, 4, 100, 7, 1000, 16))
            spelling = d.pick((f"{a.name} // {c}", f"torch.floor({a.name} / {c})",
                               f"torch.div({a.name}, {c}, rounding_mode=\"floor\")",
                               f"torch.ceil({a.name} / {c})"))
            up = spelling.startswith("torch.ceil")
            f = math.ceil if up else math.floor
            return self.new(spelling, "int", f(lo / c), f(hi / c))
        if form == "mod":
            c = d.pick((2, 3, 10, 4, 7))
            if d.chance(0.8) or lo >= 0:
                return self.new(f"{a.name} % {c}", "int", 0, c - 1)
            return self.new(f"torch.fmod({a.name}, {c})", "int", -(c - 1), c - 1)
        if form == "round":
            c = d.pick((2, 3, 4, 10))
            return self.new(f"torch.round({a.name} / {c})", "int", math.floor(lo / c),
                            math.ceil(hi / c))
        if form == "digits":
            n = d.int(1, 3)
            k = d.int(0, n - 1)
            return self.new(f"tw.number_to_digits({a.name}, {n})[:, {k}:{k + 1}]", "int", 0, 9)
        if form == "shift":
            k = self.half_offset(zero=True) if self.half else d.int(0, 4)
            return self.new(f"tw.shift({a.name}, {k})", keep, lo, hi)
        if form == "latch":
            return self.new(f"tw.latch({a.name}, {self.some('bit').name})", keep, lo, hi)
        if form == "arg":
            s = self.some("int")
            fn = d.pick(("tw.argmax", "tw.argmin"))
            where = f", where={self.some('bit').name}" if d.chance(0.5) else ""
            return self.new(f"{fn}({s.name}, {a.name}{where})", keep, lo, hi)
        if form == "gather":
            at = self.some("int")
            return self.new(f"tw.gather({a.name}, {at.name})", keep, lo, hi)
        if form == "steps":
            return self.new(f"tw.steps_since({self.some('bit').name})", "int", 0, self.L - 1)
        if form == "width":
            return self.new(f"tw.selector_width({self.selector()})", "int", 0, self.L - 1)
        if form == "latest":
            default = d.int(lo, hi)
            return self.new(f"tw.select_latest({self.selector()}, {a.name}, default={default})",
                            keep, lo, hi)
        if form == "count":
            b = self.some("bit")
            if d.chance(0.3):
                return self.new(f"torch.round(tw.mean({b.name}) * (tw.position(x) + 1))", "int",
                                0, self.L)
            return self.new(f"tw.claim(tw.mean({b.name}) * (tw.position(x) + 1), 0, {self.L}, "
                            "integral=True)", "int", 0, self.L)
        if form == "lookup":
            span = range(lo, min(hi, lo + 40) + 1)
            table = {k: d.int(-4, 12) for k in span if d.chance(0.5)}
            default = d.int(-1, 3)
            vals = [*table.values(), default]
            return self.new(f"tw.lookup({a.name}, {table!r}, default={default})", "int",
                            min(vals), max(vals))
        if form == "lookup2":
            b = self.some("int")
            b_lo = math.floor(b.lo)
            pairs = [(i, j) for i in range(lo, min(hi, lo + 6) + 1)
                     for j in range(b_lo, min(math.ceil(b.hi), b_lo + 6) + 1)]
            table = {p: d.int(0, 9) for p in pairs if d.chance(0.4)}
            default = d.int(0, 2)
            vals = [*table.values(), default]
            return self.new(f"tw.lookup2({a.name}, {b.name}, {table!r}, default={default})", "int",
                            min(vals), max(vals))
        if form == "claim":
            c_lo, c_hi = lo - d.pick((0, 0, 1, 5)), hi + d.pick((0, 0, 1, 5))
            kind = keep if (c_lo, c_hi) == (lo, hi) else "int"
            return self.new(f"tw.claim({a.name}, {c_lo}, {c_hi}, integral=True)", kind, c_lo,
                            c_hi)
        if form == "rfloor":
            r = self.some("real")
            fn = d.pick(("torch.floor", "torch.round", "torch.ceil"))
            f = math.ceil if fn == "torch.ceil" else math.floor
            lo2, hi2 = f(r.lo) - 1, f(r.hi) + 1
            return self.new(f"{fn}({r.name})", "int", lo2, hi2)
        if form == "mul":
            b = self.some("int")
            if max(abs(lo), abs(hi), abs(b.lo), abs(b.hi)) > 60:
                return self.new(f"{a.name} % 10", "int", 0, 9)
            prods = [lo * b.lo, lo * b.hi, hi * b.lo, hi * b.hi]
            spelling = f"{a.name} * {b.name}" if d.chance(0.8) else f"torch.square({a.name})"
            if "square" in spelling:
                prods = [0, lo * lo, hi * hi] if lo <= 0 <= hi else [lo * lo, hi * hi]
            return self.new(spelling, "int", min(prods), max(prods))
        if form == "d2n":
            b = self.some("int")
            return self.new(f"tw.digits_to_number([{a.name}, {b.name}])", "int",
                            10 * lo + b.lo, 10 * hi + b.hi)
        if form == "number":  # a number written in tens from three digits (half: 'wide')
            b, c = self.some("int"), self.some("int")
            return self.new(f"100 * ({a.name} % 10) + 10 * ({b.name} % 10) + {c.name} % 10",
                            "int", 0, 999)
        return self.int_leaf()

    # -- precision="half" --
    HALF_INT_FORMS = ("add", "affine", "relu", "clamp", "abs", "minmax", "where", "floordiv",
                      "mod", "round", "digits", "shift", "shift", "shift", "latch", "steps",
                      "lookup", "lookup2", "claim", "rfloor", "mul", "d2n", "sign", "leaf",
                      "gather", "latest", "width", "arg", "number", "number")
    HALF_REFUSED_INT_FORMS = ("count",)
    HALF_COUNTS = 97  # tw.selector_width holds to this many positions in half

    def half_int_form(self) -> str:
        """int_op's form in half: ops of the current token, tw.shift, tw.latch,
        tw.steps_since, tw.gather, tw.select_latest, tw.argmax and tw.selector_width; rarely a
        mean, which half refuses."""
        d = self.d
        if d.chance(self.HALF_REFUSED):
            return d.pick(self.HALF_REFUSED_INT_FORMS)
        form = d.pick(self.HALF_INT_FORMS)
        if form in ("latch", "steps", "gather", "latest", "arg") and \
                self.L > self.HALF_POSITIONS and \
                not d.chance(self.HALF_REFUSED):
            return "shift"
        if form == "width" and self.L > self.HALF_COUNTS and not d.chance(self.HALF_REFUSED):
            return "shift"
        return form

    def half_rate(self, rate: float) -> float:
        """``rate`` for tw.latch or tw.position up to HALF_POSITIONS, HALF_REFUSED beyond."""
        return rate if self.L <= self.HALF_POSITIONS else self.HALF_REFUSED

    def half_offset(self, zero: bool = False) -> int:
        """A shift offset: mostly 1..4 (0 too where ``zero``), sometimes up to 16."""
        d = self.d
        if d.chance(0.1):
            return d.pick((5, 6, 8, 12, 16))
        return d.int(0 if zero else 1, 4)

    # -- outputs --
    def code_item(self, names: bool = True) -> str:
        """An expression whose value is a whole token code at every position (``names``: a
        token name, for emit's items)."""
        d = self.d
        form = d.pick(("lookup", "digit", "where", "code", "name")[:5 if names else 4])
        if form == "code":  # mostly keep a <bos> (code 0, the shift/gather default) unprinted
            v = self.some("code").name
            return f"torch.clamp({v}, min=1)" if d.chance(0.8) else v
        if form == "name":
            return repr(self.tok())
        if form == "where":
            c = self.some("bit")
            return f"torch.where({c.name}.bool(), tw.token({self.tok()!r}), " \
                   f"tw.token({self.tok()!r}))"
        v = self.some("int")
        lo, hi = math.floor(v.lo), math.ceil(v.hi)
        if form == "lookup" and hi - lo <= 200:
            keys = [k for k in range(lo, min(hi, lo + 30) + 1) if d.chance(0.7)]
            table = {k: d.pick((*self.chars[:-1], "\n", "<eos>")) for k in keys}
            return f"tw.lookup({v.name}, {table!r}, default=\"<eos>\")"
        nd = len(self.digits)
        if d.chance(0.5):
            return f"tw.token(\"0\") + torch.clamp({v.name}, 0, {nd - 1})"
        return f"tw.token(\"0\") + {v.name} % {nd}"

    def program(self) -> tuple[str, int]:
        d = self.d
        for _ in range(d.int(1, 10)):
            d.pick((self.int_op, self.int_op, self.int_op, self.bit_op, self.real_op))()
        if d.chance(0.6):
            trigger = self.some("bit") if d.chance(0.4) else self.new(
                "tw.is_token(x, \"\\n\")", "bit", 0, 1)
            n = d.int(1, 3)
            items = []
            for _ in range(n):
                if d.chance(0.4):
                    ints = [v for v in self.pool if v.kind in ("int", "code")]
                    if ints:
                        src = d.pick(ints)
                        if self.half and not d.chance(self.half_rate(self.HALF_LATCH)):
                            self.new(f"tw.shift({src.name}, {self.half_offset()})", src.kind,
                                     src.lo, src.hi)
                        else:
                            self.new(f"tw.latch({src.name}, {trigger.name})", src.kind, src.lo,
                                     src.hi)
                items.append(self.code_item())
            ret = f"tw.emit({trigger.name}, [{', '.join(items)}])"
        else:
            n, ret = 1, self.code_item(names=False)
        body = "\n".join(self.lines)
        return f"def prog(x):\n{body}\n    return {ret}\n", n


def generate_program(d: Any, opt_rate: float = 0.08,
                     seq_lens: tuple[int, ...] = SEQ_LENS, precision: str = "fp32") -> Program:
    chars = d.pick(VOCABS)
    max_seq_len = d.pick(seq_lens)
    machine = d.pick(("swiglu", "relu"))
    optimize = 1 if d.chance(opt_rate) else 0
    source, answer_len = _Gen(d, chars, max_seq_len, precision == "half").program()
    return Program(source, chars, machine, max_seq_len, optimize, answer_len, precision)


# Prompts stop here even where max_seq_len is longer (32768, 131072): the eager reference
# re-runs the program per answer token, minutes a prompt at 131072 (those lengths are checked
# whole by tests/test_long_131072.py and scripts/long/).
PROMPT_CAP = 8192


def generate_prompts(d: Any, prog: Program, n_random: int = 4) -> list[str]:
    """``n_random`` prompts of random length plus the longest one that leaves room for the
    answer (at most PROMPT_CAP); most end with the newline."""
    longest = min(PROMPT_CAP, max(0, prog.max_seq_len - 1 - prog.answer_len))
    letters = prog.chars[:-1]
    out = []
    for k in range(n_random + 1):
        n = longest if k == n_random else d.int(0, longest)
        body = [d.pick(letters) if d.chance(0.85) else "\n" for _ in range(n)]
        if body and d.chance(0.7):
            body[-1] = "\n"
        out.append("".join(body))
    return list(dict.fromkeys(out))


# -- the differential check ---------------------------------------------------------------------
@dataclass
class Outcome:
    status: str  # "refused" | "matched" | "mismatch" | "crash" | "invalid"
    program: Program
    message: str = ""
    mismatches: list[tuple[str, str, str]] = field(default_factory=list)  # prompt, ref, got
    invalid: list[tuple[str, str]] = field(default_factory=list)  # prompt, why

    def known_class(self) -> str:
        """A guess at the class of a mismatch, for grouping (see test_fuzz_regressions.py)."""
        if any("<bos>" in ref or "<bos>" in got for _, ref, got in self.mismatches):
            return "printed <bos>"
        if re.search(r"is_token\(x, \[('[^']*'), \1\]\)", self.program.source):
            return "is_token with a repeated token"
        if "steps_since" in self.program.source:
            return "steps_since"
        return "other"

    def report(self) -> str:
        lines = [f"== {self.status.upper()} ==", self.program.describe()]
        if self.message:
            lines.append(self.message)
        for p, ref, got in self.mismatches:
            lines.append(f"prompt {p!r}: reference {ref!r}, compiled {got!r}")
        return "\n".join(lines)


def check(prog: Program, prompts: list[str]) -> Outcome:
    """Refused with tw.CompileError, or compiled == reference on every valid prompt (in
    precision="half" also through transformers in every ``HF_CONFIGS``)."""
    try:
        compiled = prog.compile().compile()
    except tw.CompileError as e:
        return Outcome("refused", prog, str(e))
    except Exception:
        return Outcome("crash", prog, "compile crashed:\n" + traceback.format_exc(limit=-4))
    vocab = prog.vocab
    out = Outcome("matched", prog)
    valid = 0
    answers: list[tuple[str, list[int], list[int]]] = []  # prompt, ids, reference answer
    for p in prompts:
        ids = vocab.encode(p)
        try:
            want = _reference(compiled, ids)
        except Exception as e:
            out.invalid.append((p, f"{type(e).__name__}: {str(e)[:200]}"))
            continue
        valid += 1
        answers.append((p, ids, want))
        try:
            got = compiled.generate_ids(ids) if len(want) <= TEACHER_FORCED_FROM else \
                _teacher_forced(compiled, ids, want)[:MAX_ANSWER]
        except Exception:
            return Outcome("crash", prog, f"generate crashed on {p!r}:\n"
                           + traceback.format_exc(limit=-4))
        if got != want:
            out.mismatches.append((p, _show(vocab, want), _show(vocab, got)))
    if prog.precision == "half" and answers:
        try:
            out.mismatches += _hf_mismatches(compiled, answers)
        except Exception:
            return Outcome("crash", prog, "transformers run crashed:\n"
                           + traceback.format_exc(limit=-4))
    if out.mismatches:
        out.status = "mismatch"
    elif not valid:
        out.status = "invalid"
        out.message = out.invalid[0][1] if out.invalid else "no prompts"
    return out


# Longer answers are checked in one forward pass over prompt + reference answer (greedy
# generation re-runs the whole sequence per token: hours at max_seq_len 4096), and only their
# first MAX_ANSWER tokens (the eager reference re-runs too; the prompts themselves reach the
# long positions).
TEACHER_FORCED_FROM = 64
MAX_ANSWER = 256


def _reference(compiled: tw.Compiled, ids: list[int]) -> list[int]:
    """The eager greedy answer, cut after MAX_ANSWER tokens."""
    return compiled.reference_ids(ids, max_new_tokens=MAX_ANSWER)


def _teacher_forced(compiled: tw.Compiled, ids: list[int], want: list[int]) -> list[int]:
    """What greedy generation prints, read from one forward pass over ids + want: it follows
    ``want`` while the top logit agrees, and the first token that differs (an extra token
    where <eos> was due included) ends it."""
    top = compiled.logits(ids + want).argmax(-1).tolist()[len(ids) - 1:]
    return _greedy(compiled, ids, want, top)


def _greedy(compiled: tw.Compiled, ids: list[int], want: list[int], top: list[int]
            ) -> list[int]:
    """_teacher_forced's answer from ``top``, the top token at each position from the
    prompt's last on."""
    got: list[int] = []
    for k, t in enumerate(top):
        if len(ids) + len(got) >= compiled.options.max_seq_len or t == compiled.vocab.eos_id:
            break
        got.append(t)
        if k >= len(want) or t != want[k]:
            break
    return got


# precision="half": every prompt is read in one forward pass over prompt + reference answer in
# every HF_CONFIGS (greedy output teacher-forced, and the top token at every position against the
# reference's, where that is a token code); the first HF_GENERATED valid prompts also go through
# generate() (the KV cache) for at most HF_GENERATE_TOKENS new tokens
HF_GENERATED = 2
HF_GENERATE_TOKENS = 24


def _reference_tokens(compiled: tw.Compiled, seq: list[int]) -> list[int | None]:
    """The reference's token at every position of ``seq`` (None where its output is not a
    whole token code)."""
    out: list[int | None] = []
    for code in compiled.traced.run(seq).tolist():
        t = round(code)
        ok = 0 <= t < len(compiled.vocab) and abs(code - t) <= 1e-3  # api's CODE_TOLERANCE
        out.append(t if ok else None)
    return out


def _hf_mismatches(compiled: tw.Compiled, answers: list[tuple[str, list[int], list[int]]]
                   ) -> list[tuple[str, str, str]]:
    """The saved directory through transformers, loaded as a user loads it in each dtype and
    attention implementation (HF_CONFIGS), against the reference: (prompt, reference, what
    transformers printed [dtype attn path]) for each difference. transformers' logging is
    quieted for the call and restored after it (a test after this one may read its
    warnings)."""
    import transformers

    before = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()  # "Loading weights" six times a program
    try:
        return _hf_mismatches_quiet(compiled, answers)
    finally:
        transformers.logging.set_verbosity(before)
        transformers.logging.enable_progress_bar()


def _hf_mismatches_quiet(compiled: tw.Compiled, answers: list[tuple[str, list[int], list[int]]]
                         ) -> list[tuple[str, str, str]]:
    from transformers import AutoModelForCausalLM

    vocab, eos = compiled.vocab, compiled.vocab.eos_id
    n_max = compiled.options.max_seq_len
    refs = [_reference_tokens(compiled, ids + want) for _, ids, want in answers]
    found: list[tuple[str, str, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        directory = compiled.save_pretrained(tmp + "/hf")
        for dtype, impl in HF_CONFIGS:
            model = AutoModelForCausalLM.from_pretrained(directory, dtype=dtype,
                                                         attn_implementation=impl).eval()
            where = f"{str(dtype).removeprefix('torch.')} {impl}"
            for k, ((p, ids, want), ref) in enumerate(zip(answers, refs, strict=True)):
                with torch.no_grad():
                    top = model(torch.tensor([ids + want])).logits[0].float().argmax(-1)
                got = _greedy(compiled, ids, want, top.tolist()[len(ids) - 1:])[:MAX_ANSWER]
                if got != want:
                    found.append((p, _show(vocab, want),
                                  f"{_show(vocab, got)} [transformers {where}, one pass]"))
                    continue
                wrong = [t for t, (r, g) in enumerate(zip(ref, top.tolist(), strict=True))
                         if r is not None and r != g]
                if wrong:
                    t = wrong[0]
                    found.append((p, f"position {t}: {vocab.tokens[ref[t]]!r}",  # type: ignore
                                  f"{vocab.tokens[top[t]]!r} [transformers {where}, at "
                                  f"{len(wrong)} positions]"))
                    continue
                if k >= HF_GENERATED or len(ids) >= n_max:
                    continue
                limit = min(n_max, len(ids) + HF_GENERATE_TOKENS)
                with torch.no_grad():
                    new = model.generate(torch.tensor([ids]), do_sample=False,
                                         max_length=limit)[0, len(ids):].tolist()
                new = new[: new.index(eos)] if eos in new else new
                if new != want[: limit - len(ids)]:
                    found.append((p, _show(vocab, want[: limit - len(ids)]),
                                  f"{_show(vocab, new)} [transformers {where}, generate]"))
    return found


def _show(vocab: tw.Vocab, ids: list[int]) -> str:
    return "".join(vocab.tokens[i] for i in ids)


def programs(opt_rate: float = 0.08) -> Any:
    """A hypothesis strategy: (Program, prompts)."""
    from hypothesis import strategies as st

    @st.composite
    def strategy(draw: Any) -> tuple[Program, list[str]]:
        d = HypothesisDrawer(draw)
        prog = generate_program(d, opt_rate)
        return prog, generate_prompts(d, prog)

    return strategy()


def random_case(seed: int, opt_rate: float = 0.08, seq_lens: tuple[int, ...] = SEQ_LENS,
                precision: str = "fp32") -> tuple[Program, list[str]]:
    d = RandomDrawer(seed)
    prog = generate_program(d, opt_rate, seq_lens, precision)
    return prog, generate_prompts(d, prog)

