"""passes/ (dead-code elimination, embedding folding) alone, on hand-built Programs.

The programs are built with Program.embed / new_signal / add; ``evaluate`` is a reference
interpreter of their FFN-only part (every signal a function of the current token), so a pass
can be checked to keep the program's output on every token of the vocabulary.
"""

from __future__ import annotations

import copy
import math

from torchwright_fx.ir.graph import EMBED, FFN, Head, Lane, NodeRecord, Program
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import BOOL, Interval
from torchwright_fx.passes.dce import eliminate_dead, live_signals
from torchwright_fx.passes.fold_embedding import fold_embedding
from torchwright_fx.vocab import Vocab

VOCAB = Vocab("abc")  # ids: <bos> 0, <eos> 1, <unk> 2, a 3, b 4, c 5
D_HEAD = 8


def one_hot(prog: Program, token: str) -> Lin:
    table = tuple(float(t == VOCAB[token]) for t in range(len(VOCAB)))
    return prog.embed(table, BOOL, f"x[{token!r}]", "<token stream>")


def sid(lin: Lin) -> int:
    (s,) = lin.signals()
    return s


def add_ffn(prog: Program, lanes: list[Lane], n_out: int = 1, name: str = "f") -> list[int]:
    """An FFN whose output o is sum_lane (o + 1) * lane (a distinct mix per output)."""
    pid = prog.next_producer_id()
    outs = [prog.new_signal(pid, Interval(-100.0, 100.0), f"{name}[{o}]", f"{name}.py:{o}")
            for o in range(n_out)]
    prog.add(FFN(pid, lanes, {s: {i: float(o + 1) for i in range(len(lanes))}
                              for o, s in enumerate(outs)}, name, f"{name}.py"))
    return outs


def add_head(prog: Program, values: list[Lin], name: str = "h") -> list[int]:
    pid = prog.next_producer_id()
    outs = [prog.new_signal(pid, Interval(-100.0, 100.0), f"{name}[{i}]", "")
            for i in range(len(values))]
    q = [Lin.constant(0.0)] * D_HEAD
    prog.add(Head(pid, q, list(q), list(values), outs, name, ""))
    return outs


def evaluate(prog: Program, lin: Lin, token: int) -> float:
    """``lin`` at a position holding ``token``, by the program's own tables and lanes (ReLU
    lanes act(gate) * up; heads are not interpreted)."""
    memo: dict[int, float] = {}

    def signal(s: int) -> float:
        if s not in memo:
            producer = prog.signals[s].producer
            if producer == EMBED:
                memo[s] = prog.embed_tables[s][token]
            else:
                ffn = prog.producers[producer]
                assert isinstance(ffn, FFN), "evaluate interprets FFN programs only"
                acts = [max(0.0, form(lane.gate)) * form(lane.up) for lane in ffn.lanes]
                memo[s] = sum(w * acts[i] for i, w in ffn.outputs[s].items())
        return memo[s]

    def form(x: Lin) -> float:
        return x.const + sum(c * signal(s) for s, c in x.terms.items())

    return form(lin)


def outputs(prog: Program) -> list[float]:
    return [evaluate(prog, prog.output, t) for t in range(len(VOCAB))]


def snapshot(prog: Program) -> dict:
    """Every field a pass could change, deep-copied (the Program itself holds a Vocab and
    an index that need not be compared)."""
    return copy.deepcopy({
        "signals": prog.signals, "embed_tables": prog.embed_tables,
        "producers": {pid: (type(p).__name__, p.__dict__) for pid, p in prog.producers.items()},
        "output": prog.output, "nodes": prog.nodes, "live": prog.live,
    })


# -- programs -------------------------------------------------------------------------------------


def with_dead_parts() -> tuple[Program, dict[str, set[int]]]:
    """The output reads a head over an FFN over the column ``deep``, and x['b'] directly.
    Dead: an FFN over x['c'] (and x['c'], which only it reads), an embedding column nobody
    reads, and a head reading the live FFN whose output nobody reads. A second FFN has two
    outputs, one live: it stays, and so does what it reads."""
    prog = Program(VOCAB, "relu")
    xa, xb, xc = one_hot(prog, "a"), one_hot(prog, "b"), one_hot(prog, "c")
    unread = prog.embed((0.0, 0.0, 1.0, 1.0, 2.0, 3.0), Interval(0.0, 3.0, integral=True),
                        "unread", "")
    deep = prog.embed((1.0, 0.0, 0.0, 2.0, 0.0, 0.0), Interval(0.0, 2.0, integral=True),
                      "deep", "")  # read only by live_ffn: live through two producers
    (f1,) = add_ffn(prog, [Lane(deep * 2.0 - 1.0, Lin.constant(1.0))], name="live_ffn")
    (h1,) = add_head(prog, [Lin.of(f1)], name="live_head")
    (dead_f,) = add_ffn(prog, [Lane(xc + 1.0, Lin.constant(1.0))], name="dead_ffn")
    (dead_h,) = add_head(prog, [Lin.of(f1) + Lin.of(dead_f)], name="dead_head")
    two = add_ffn(prog, [Lane(xb * 3.0, xa + 1.0)], n_out=2, name="half_live")
    prog.output = Lin.of(h1) + xb * 2.0 + Lin.of(two[0]) + 1.0
    live = {sid(xa), sid(xb), sid(deep), f1, h1, two[0]}
    dead = {sid(xc), sid(unread), dead_f, dead_h, two[1]}
    return prog, {"live": live, "dead": dead}


def ffn_only() -> Program:
    """A ReLU program the interpreter can run: two layers of lanes over embedding columns,
    with one dead FFN and one dead embedding column."""
    prog = Program(VOCAB, "relu")
    xa, xb, xc = one_hot(prog, "a"), one_hot(prog, "b"), one_hot(prog, "c")
    prog.embed((5.0,) * len(VOCAB), Interval.point(5.0), "never_read", "")
    (f1,) = add_ffn(prog, [Lane(xa * 2.0 + xb * 3.0 - 1.0, Lin.constant(1.0)),
                           Lane(xc - xa, xb + xc + 2.0)], name="f1")
    add_ffn(prog, [Lane(xc + xb, Lin.constant(1.0))], name="dead")
    (f2,) = add_ffn(prog, [Lane(Lin.of(f1) - 1.0, xa * 4.0 + xc)], name="f2")
    prog.output = Lin.of(f2) + Lin.of(f1) * 0.5 + xa - xc * 2.0
    return prog


# -- dead-code elimination ------------------------------------------------------------------------


def test_live_signals_are_what_the_output_reads_transitively() -> None:
    prog, expect = with_dead_parts()
    assert live_signals(prog) == expect["live"]


def test_eliminate_dead_keeps_exactly_the_live_producers_and_columns() -> None:
    prog, expect = with_dead_parts()
    names = {p.name for p in prog.producers.values()}
    assert names == {"live_ffn", "live_head", "dead_ffn", "dead_head", "half_live"}
    out = eliminate_dead(prog)
    assert out.live == expect["live"]
    assert {p.name for p in out.producers.values()} == {"live_ffn", "live_head", "half_live"}
    assert set(out.embed_tables) == expect["live"] & set(out.embed_tables)
    assert set(out.embed_tables) == {s for s in expect["live"]
                                     if out.signals[s].producer == EMBED}
    # every read of what is left is live: nothing kept reads a removed producer
    for p in out.producers.values():
        assert p.reads() <= out.live
        assert all(out.signals[s].producer in {EMBED, *out.producers} for s in p.reads())


def test_eliminate_dead_keeps_the_outputs() -> None:
    prog = ffn_only()
    before = outputs(prog)
    out = eliminate_dead(prog)
    assert len(out.producers) == 2 and len(out.embed_tables) == 3
    assert outputs(out) == before
    assert before != [before[0]] * len(VOCAB)  # the output depends on the token


def test_eliminate_dead_is_idempotent() -> None:
    prog, _ = with_dead_parts()
    once = eliminate_dead(prog)
    kept = (set(once.producers), set(once.embed_tables), set(once.live))
    twice = eliminate_dead(once)
    assert (set(twice.producers), set(twice.embed_tables), set(twice.live)) == kept


def test_a_program_reading_only_constants_keeps_nothing() -> None:
    prog, _ = with_dead_parts()
    prog.output = Lin.constant(3.0)
    out = eliminate_dead(prog)
    assert out.producers == {} and out.embed_tables == {} and out.live == set()


def test_eliminate_dead_leaves_its_input_unchanged() -> None:
    prog, _ = with_dead_parts()
    before = snapshot(prog)
    eliminate_dead(prog)
    assert snapshot(prog) == before


# -- embedding folding ----------------------------------------------------------------------------


def test_fold_replaces_multi_column_reads_of_the_embedding() -> None:
    prog = Program(VOCAB, "relu")
    xa, xb, xc = one_hot(prog, "a"), one_hot(prog, "b"), one_hot(prog, "c")
    mixed_gate = xa * 2.0 + xb * 3.0 - 1.0
    (f,) = add_ffn(prog, [Lane(mixed_gate, Lin.constant(1.0))], name="f")
    single = xc * 4.0 + 2.0
    beside_ffn = Lin.of(f) + xa  # also reads a non-embedding signal: must stay as it is
    prog.output = single + beside_ffn
    prog.nodes["mixed"] = NodeRecord("mixed", "", (mixed_gate, single),
                                     (Interval(-1.0, 2.0), Interval(2.0, 6.0)))
    n_before = len(prog.signals)

    prog = fold_embedding(prog)
    (lane,) = prog.producers[0].lanes  # type: ignore[union-attr]
    # the gate now reads one new embedding column (its constant kept outside the table)
    (new,) = lane.gate.signals()
    assert new >= n_before and prog.signals[new].producer == EMBED
    assert lane.gate.const == -1.0 and lane.gate.terms[new] == 1.0
    assert prog.embed_tables[new] == (0.0, 0.0, 0.0, 2.0, 3.0, 0.0)
    r = prog.signals[new].range
    assert (r.lo, r.hi, r.integral) == (0.0, 3.0, True)
    # a single column and a read of a produced signal are left alone
    assert prog.output == single + beside_ffn
    # node records are rewritten like every other read
    assert prog.nodes["mixed"].columns == (lane.gate, single)


def test_fold_shares_one_column_per_distinct_combination() -> None:
    prog = Program(VOCAB, "relu")
    xa, xb = one_hot(prog, "a"), one_hot(prog, "b")
    add_ffn(prog, [Lane(xa + xb, xa * 2.0 - xb), Lane(xa + xb + 5.0, Lin.constant(1.0))])
    heads = add_head(prog, [xa + xb, xa - xb * 0.5])
    prog.output = Lin.of(heads[0])
    prog = fold_embedding(prog)
    lanes = prog.producers[0].lanes  # type: ignore[union-attr]
    head = prog.producers[1]
    assert isinstance(head, Head)
    assert lanes[0].gate.signals() == lanes[1].gate.signals() == head.v[0].signals()
    assert lanes[1].gate.const == 5.0
    # the table of xa + xb is that of is_token(x, ["a", "b"])
    assert prog.embed_tables[sid(head.v[0])] == (0.0, 0.0, 0.0, 1.0, 1.0, 0.0)
    r = prog.signals[sid(head.v[1])].range
    assert (r.lo, r.hi, r.integral) == (-0.5, 1.0, False)
    assert len({sid(lanes[0].up), sid(head.v[0]), sid(head.v[1])}) == 3


def test_fold_keeps_every_read_on_every_token() -> None:
    prog = ffn_only()
    reads = [(lane.gate, lane.up) for p in prog.producers.values() for lane in p.lanes]
    before = outputs(prog)
    values = [[evaluate(prog, lin, t) for t in range(len(VOCAB))] for pair in reads for lin in pair]
    prog = fold_embedding(prog)
    after_reads = [(lane.gate, lane.up) for p in prog.producers.values() for lane in p.lanes]
    after = [[evaluate(prog, lin, t) for t in range(len(VOCAB))]
             for pair in after_reads for lin in pair]
    assert outputs(prog) == before
    assert all(math.isclose(x, y, abs_tol=1e-12) for row, new in zip(values, after, strict=True)
               for x, y in zip(row, new, strict=True))
    # every read of the embedding is now one column
    for pair in after_reads:
        for lin in pair:
            embed_terms = [s for s in lin.terms if prog.signals[s].producer == EMBED]
            assert len(embed_terms) <= 1 or len(embed_terms) < len(lin.terms)


def test_fold_then_dce_frees_the_one_hot_columns() -> None:
    """The reason for the pass: once every multi-column read is folded, the one-hot columns
    only it read are dead."""
    prog = ffn_only()
    before = outputs(prog)
    xa, xb, xc, never_read = sorted(prog.embed_tables)
    out = eliminate_dead(fold_embedding(prog))
    assert outputs(out) == before
    # x['b'] was only read inside sums of embedding columns, and never_read by nothing: gone.
    # x['a'] and x['c'] stay (the output reads them beside produced signals); one new column
    # for each of the four distinct sums the live lanes read.
    old = set(out.embed_tables) & {xa, xb, xc, never_read}
    new = set(out.embed_tables) - {xa, xb, xc, never_read}
    assert old == {xa, xc}
    assert len(new) == 4
    assert set(out.embed_tables) <= out.live


def test_fold_leaves_its_input_unchanged() -> None:
    prog = ffn_only()
    before = snapshot(prog)
    fold_embedding(prog)
    assert snapshot(prog) == before
