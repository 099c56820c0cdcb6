"""Near-integers made exact (ops/ffn/snap.py), alone and as RASP's Select(indices, ...):
selections keyed by decoded positions, step counts and selector widths.

Alone: a hand-built program whose embedding holds values a little off integers (declared as
integers with noise) is snapped, scheduled, emitted and run; the column must hold the integer
bit for bit on both machines, for every constant the affine form may carry.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
import torch
from conftest import lin_value, load_hf

import torchwright_fx as tw
from torchwright_fx.backends import runtime
from torchwright_fx.base.numerics import SNAP_LIMIT, SNAP_NOISE
from torchwright_fx.emit.emitter import emit
from torchwright_fx.emit.placement import place
from torchwright_fx.ir.graph import Program
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import Interval
from torchwright_fx.ops import ffn
from torchwright_fx.ops.attention import Geometry
from torchwright_fx.ops.lanes import Bank
from torchwright_fx.passes.dce import eliminate_dead
from torchwright_fx.schedule import columns, heuristic

pytestmark = pytest.mark.usefixtures("one_thread")

VOCAB = tw.Vocab("abcdefgh")
# per token: an integer plus an error of up to 0.02 either way (the specials hold 0)
NEAR = (0.0, 0.0, 0.0, 3.013, -5.997, 1000.02, -2.0, 7.0041, 0.0189, -0.0117, 4095.98)
OTHER = (0.0, 0.0, 0.0, 1.0, 2.004, -3.0, 9.9879, -7.0, 0.0, 12.011, 5.0)
NOISE = 0.021


def _program(machine: str, x_of: Callable[[Lin, Lin], Lin]) -> tuple[Program, Lin, Lin]:
    prog = Program(VOCAB, machine)
    a = prog.embed(NEAR, Interval(-6.0, 4096.0, True, noise=NOISE), "a", "table a")
    b = prog.embed(OTHER, Interval(-7.0, 12.0, True, noise=NOISE), "b", "table b")
    x = x_of(a, b)
    bank = Bank(machine, 1)
    ffn.snap(bank, 0, x)
    (out,) = bank.finish(prog, [Interval(-1e5, 1e5, True)], "snapped", "test")
    prog.output = out
    return prog, x, out


def _run(prog: Program, out: Lin) -> torch.Tensor:
    prog = eliminate_dead(prog)
    plan = columns.allocate(prog, heuristic.schedule(prog), None)
    geom = Geometry(16, 16)
    machine = emit(prog, plan, geom, place(prog, plan, geom))
    ids = list(range(len(VOCAB)))
    _, states = runtime.forward(machine, ids, capture=True)
    return lin_value(out, plan, states[-1])


FORMS = {
    "a": lambda a, b: a,
    "a - 1": lambda a, b: a - 1.0,
    "a + 2.4": lambda a, b: a + 2.0,
    "-a + 0.001": lambda a, b: a * -1.0 + 0.001,
    "a - b": lambda a, b: a - b,
    "3a + 2b - 7": lambda a, b: a * 3.0 + b * 2.0 - 7.0,
}


@pytest.mark.parametrize("machine", ["swiglu", "relu"])
@pytest.mark.parametrize("form", sorted(FORMS))
def test_snap_holds_the_integer_bit_for_bit(machine: str, form: str) -> None:
    prog, x, out = _program(machine, FORMS[form])
    error = ffn.snap_error(x, Interval(-1e4, 1e4, True), lambda s: prog.signals[s].range)
    assert error is not None and error <= SNAP_NOISE
    got = _run(prog, out)
    tables = {next(iter(prog.embed_tables)): NEAR}
    tables[sorted(prog.embed_tables)[1]] = OTHER
    for t in range(len(VOCAB)):
        exact = x.const + sum(c * round(tables[s][t]) for s, c in x.terms.items())
        assert float(got[t]) == round(exact), (form, t, float(got[t]), exact)


HALF = tuple(v + 0.5 if i >= 3 else 0.5 for i, v in enumerate(NEAR))  # stored around n + 1/2


@pytest.mark.parametrize("machine", ["swiglu", "relu"])
def test_terms_off_the_integers_are_copied_then_snapped(machine: str) -> None:
    """x = h - 0.5 with h stored around n + 1/2: one dot product's partial sums could round at
    a half, so snap_error refuses it; copy (one sublayer) then snap gives n bit for bit."""
    prog = Program(VOCAB, machine)
    h = prog.embed(HALF, Interval(-5.5, 4096.5, step=1, offset=0.5, noise=NOISE), "h", "t")
    x = h - 0.5
    rng = Interval(-6.0, 4096.0, True, noise=NOISE)

    def of(s: int) -> Interval:
        return prog.signals[s].range

    assert ffn.snap_error(x, rng, of) > SNAP_NOISE
    error = ffn.copy_error(x, rng, of)
    assert error is not None and error <= SNAP_NOISE
    first = Bank(machine, 1)
    ffn.copy(first, 0, x, rng)
    (y,) = first.finish(prog, [rng.with_noise(error)], "copy", "test")
    assert ffn.snap_error(y, rng.with_noise(error), of) <= SNAP_NOISE
    second = Bank(machine, 1)
    ffn.snap(second, 0, y)
    (out,) = second.finish(prog, [Interval(-6.0, 4096.0, True)], "snapped", "test")
    prog.output = out
    got = _run(prog, out)
    assert [float(v) for v in got] == [float(round(v - 0.5)) for v in HALF]


def test_snap_error_refuses_what_rounding_cannot_fix() -> None:
    prog, _, _ = _program("swiglu", FORMS["a"])
    a, b = sorted(prog.embed_tables)
    rng = Interval(-1e4, 1e4, True)

    def of(s: int) -> Interval:
        return prog.signals[s].range

    assert ffn.snap_error(Lin.of(a) + 0.4, rng, of) > SNAP_NOISE  # 0.4 from the integers
    assert ffn.snap_error(Lin.of(a, 0.5), rng, of) is None  # moves by half-integers
    assert ffn.snap_error(Lin.of(a), Interval(-1e4, 1e4), of) is None  # not whole numbers
    assert ffn.snap_error(Lin.of(a, 2.0 ** 11), rng, of) is None  # beyond the fp32 grid of 1
    noisy = Program(VOCAB, "swiglu")
    n = noisy.embed(NEAR, Interval(-6.0, 4096.0, True, noise=0.3), "n", "t")
    assert ffn.snap_error(n, rng, lambda s: noisy.signals[s].range) > SNAP_NOISE
    assert SNAP_LIMIT < 2 ** 22


# -- Select(indices, ...) through the compiled model ----------------------------------------------
V = tw.Vocab("abcd|")


def reverse(x):
    """After '|', the input backwards: position q selects the key position bar - steps - 1."""
    p = tw.position(x)
    bar = tw.latch(p, tw.is_token(x, "|"))
    target = bar - tw.steps_since(tw.is_token(x, "|")) - 1
    value = tw.select_latest(tw.select(p, target, "=="), tw.code(x), default="<eos>")
    started = tw.latch(torch.ones_like(p), tw.is_token(x, "|")) > 0.5
    return torch.where(started & (target >= 0.5), value, tw.token("<eos>"))


def older_same(x):
    """At each position: how many earlier positions, at least two back, hold the same letter
    (Select(indices, indices, <) & Select(tokens, tokens, ==)); printed as a letter a-d
    (count mod 4) after '|'."""
    p = tw.position(x)
    sel = tw.select(p, p - 1, "<") & tw.select(x, x, "==")
    n = tw.selector_width(sel)
    letter = tw.lookup(n - 4 * torch.floor(n / 4), {0: "a", 1: "b", 2: "c", 3: "d"})
    return tw.emit(tw.is_token(x, "|"), [tw.shift(letter, 1)])


def _older_same_oracle(s: str) -> str:
    body = s[:-1]
    last = len(body)  # the letter before '|' is at position len(body) (position 0: <bos>)
    n = sum(1 for j in range(1, last - 1) if body[j - 1] == body[last - 1])
    return "abcd"[n % 4]


@pytest.mark.parametrize("n", [48, 128])
def test_select_on_decoded_positions_reverses(n: int) -> None:
    program = tw.compile(reverse, vocab=V, max_seq_len=n)
    rng = random.Random(n)
    longest = n // 2 - 1
    for length in [1, 2, longest, *(rng.randint(1, longest) for _ in range(6))]:
        s = "".join(rng.choice("abcd") for _ in range(length)) + "|"
        assert program.reference(s) == program.generate(s) == s[:-1][::-1], s


def test_select_on_positions_and_tokens_counts() -> None:
    """``<`` over positions takes one content dim per position (d_head 64 for 32 positions)."""
    program = tw.compile(older_same, vocab=V, max_seq_len=32, d_head=64)
    rng = random.Random(5)
    for length in [1, 2, 3, 29, *(rng.randint(1, 29) for _ in range(8))]:
        s = "".join(rng.choice("abcd") for _ in range(length)) + "|"
        assert program.reference(s) == program.generate(s) == _older_same_oracle(s), s


def repeats(x):
    """After '|': whether the last letter equals the one two before it, read by selecting the
    key position p - 2 (Select(indices, indices - 2, ==)), and how many positions ago the
    (count - 1)-th 'a' came, found with the running count of 'a' (a selector width) as key."""
    p = tw.position(x)
    two_back = tw.select_latest(tw.select(p, p - 2, "=="), tw.code(x), default=0.0)
    same = (two_back == tw.code(x)).float()
    count_a = tw.selector_width(tw.select(x, x, lambda k, q: k == V["a"]))
    latest_count = tw.select_latest(tw.select(count_a, count_a - 1, "=="), p, default=0.0)
    since = torch.clamp(p - latest_count, 0, 3)  # positions since the (count_a - 1)-th 'a'
    letter = tw.lookup(same * 4 + since, {k: "abcd|"[k % 5] for k in range(8)})
    return tw.emit(tw.is_token(x, "|"), [tw.shift(letter, 1)])


def _repeats_oracle(s: str) -> str:
    body = s[:-1]
    q = len(body)  # position of the last letter
    same = int(q - 2 >= 1 and body[q - 3] == body[q - 1])
    count_a = body.count("a")
    where = [j for j in range(1, q + 1) if body[:j].count("a") == count_a - 1]
    latest = where[-1] if where else 0
    return "abcd|"[(same * 4 + min(max(q - latest, 0), 3)) % 5]


@pytest.mark.parametrize("n", [24, 200])
def test_select_keyed_by_positions_and_widths(n: int) -> None:
    program = tw.compile(repeats, vocab=V, max_seq_len=n)
    rng = random.Random(n + 1)
    for length in [1, 2, 3, n - 3, *(rng.randint(1, n - 3) for _ in range(8))]:
        s = "".join(rng.choice("abcd") for _ in range(length)) + "|"
        assert program.reference(s) == program.generate(s) == _repeats_oracle(s), s


# -- rounding a long context's counts -------------------------------------------------------------
W = tw.Vocab("ab|")


def since_mod_7(x):
    """After '|': the steps since the previous '|' (or <bos>), mod 7, as 'a' (even) or 'b'."""
    d = tw.steps_since(tw.is_token(x, "|")) % 7
    return tw.emit(tw.is_token(x, "|"), [tw.lookup(tw.shift(d, 1), {k: "ab"[k % 2]
                                                                    for k in range(7)})])


def _since_mod_7_oracle(s: str) -> str:
    body = s[:-1]
    last = body.rfind("|")
    return "ab"[((len(body) - 1 - last) % 7) % 2]


def test_remainder_of_a_long_count_is_rounded_onto_its_lattice_first(tmp_path) -> None:
    """At 4096 positions the decoded count is too noisy for a 585-step staircase: the
    count is snapped to an exact integer first (it was refused before). Checked in process
    and through transformers (its SiLU and matmuls on the snapping gate)."""
    program = tw.compile(since_mod_7, vocab=W, max_seq_len=4096)
    assert any(p.name.endswith(".exact") for p in program.build.program.producers.values())
    model, _ = load_hf(program.save_pretrained(tmp_path / "hf"))
    rng = random.Random(7)
    for length in (4093, 3000, 12):
        s = "".join(rng.choice("aab") for _ in range(length)) + "|"
        assert program.reference(s) == program.generate(s) == _since_mod_7_oracle(s)
        ids = W.encode(s)
        with torch.no_grad():
            top = model(torch.tensor([ids])).logits[0, -1].argmax()
        assert W.decode([int(top)]) == _since_mod_7_oracle(s)


# -- gather by the digits of positions ------------------------------------------------------------
B = 16


def echo(x):
    """After '|', the input again from its start: the position to copy is matched digit by
    digit in base 16 (three & parts of one selection head), which reaches 4096 positions
    where tw.gather's quadratic logits stop at 661."""
    p = tw.position(x)
    at = tw.steps_since(tw.is_token(x, "|")) + 1
    bar = tw.latch(p, tw.is_token(x, "|"))
    sel = (tw.select(torch.floor(p / (B * B)), torch.floor(at / (B * B)), "==")
           & tw.select(torch.floor(p / B) % B, torch.floor(at / B) % B, "==")
           & tw.select(p % B, at % B, "=="))
    v = tw.select_latest(sel, tw.code(x), default="<eos>")
    return torch.where(at < bar - 0.5, v, tw.token("<eos>"))


def test_select_on_position_digits_copies_beyond_gathers_reach() -> None:
    _copies(tw.compile(echo, vocab=V, max_seq_len=1024, d_head=64), (5, 510))


def echo_eq(x):
    """The same copy written plainly: tw.select(p, at, "==") on more values than one side
    encodes (256) is matched digit by digit by the compiler."""
    p = tw.position(x)
    at = torch.clamp(tw.steps_since(tw.is_token(x, "|")) + 1, 0, 511)
    bar = tw.latch(p, tw.is_token(x, "|"))
    v = tw.select_latest(tw.select(p, at, "=="), tw.code(x), default="<eos>")
    return torch.where(at < bar - 0.5, v, tw.token("<eos>"))


def _copies(program, lengths) -> None:
    rng = random.Random(4)
    for length in lengths:
        s = "".join(rng.choice("abcd") for _ in range(length)) + "|"
        ids = V.encode(s)
        want = program.reference_ids(ids, 48)
        assert V.decode(want) == s[:len(want)]
        logits = runtime.forward(program.weights, ids + want)[0]
        assert logits[len(ids) - 1:len(ids) - 1 + len(want)].argmax(-1).tolist() == want


@pytest.mark.parametrize("machine", ["swiglu", "relu"])
def test_equality_on_many_positions_is_matched_by_digits(machine: str) -> None:
    """512 positions: three base-8 digits, 27 content dims, inside d_head 32."""
    program = tw.compile(echo_eq, vocab=V, max_seq_len=512, machine=machine)
    assert program.stats()["d_head"] == 32
    _copies(program, (3, 254))


def test_equality_on_more_positions_names_the_head_size_that_fits() -> None:
    def wide(x):  # 1024 positions: base 16, 51 dims
        p = tw.position(x)
        at = tw.steps_since(tw.is_token(x, "|")) + 1
        return tw.select_latest(tw.select(p, at, "=="), tw.code(x), default="<eos>")

    with pytest.raises(tw.CompileError, match="compile with d_head=64"):
        tw.compile(wide, vocab=V, max_seq_len=1024, d_head=32).compile()
    _copies(tw.compile(echo_eq, vocab=V, max_seq_len=1024, d_head=64), (500,))


def echo_gather(x):
    at = tw.steps_since(tw.is_token(x, "|")) + 1
    bar = tw.latch(tw.position(x), tw.is_token(x, "|"))
    return torch.where(at < bar - 0.5, tw.gather(tw.code(x), at), tw.token("<eos>"))


def test_gather_beyond_its_square_matches_digits() -> None:
    """tw.gather past the square's certified length (661) falls back to a digit-by-digit
    selection of the position, clamped to [0, i] like the square; at d_head 32 it names the
    head size that fits."""
    with pytest.raises(tw.CompileError, match="compile with d_head=64"):
        tw.compile(echo_gather, vocab=V, max_seq_len=1024, d_head=32).compile()
    program = tw.compile(echo_gather, vocab=V, max_seq_len=1024)  # d_head=None: it picks 64
    assert program.stats()["d_head"] == 64
    _copies(program, (4, 510))

    def clamped(x):  # positions ahead of i read i, at or below 0 read <bos>
        at = tw.lookup(x, {"a": -3, "b": 0, "c": 700, "d": 2})
        return tw.gather(tw.lookup(x, {"a": "b", "b": "c", "c": "d", "d": "a"}), at)

    program = tw.compile(clamped, vocab=V, max_seq_len=1024, d_head=64, output="value")
    ids = V.encode("dacbdcab")
    assert any(p.name.endswith(".exact") for p in program.build.program.producers.values())
    want = program.traced.run(ids)  # the eager semantics, read against the residual stream
    assert torch.equal(_output_values(program, ids), want.reshape(-1).double())


def _output_values(program, ids) -> torch.Tensor:
    _, states = runtime.forward(program.weights, ids, capture=True)
    return lin_value(program.build.program.output, program.build.plan, states[-1])
