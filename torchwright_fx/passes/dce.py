"""Drop producers and embedding columns that nothing reads."""

from __future__ import annotations

from torchwright_fx.ir.graph import Program


def live_signals(prog: Program) -> set[int]:
    """Signals read by the output or, transitively, by a producer that is live (one of its
    outputs is live): a walk back from the output, each producer read once."""
    writers: dict[int, list[int]] = {}  # signal -> the producers that list it as an output
    for pid, p in prog.producers.items():
        for s in p.outputs:
            writers.setdefault(s, []).append(pid)
    live: set[int] = prog.final_reads()
    todo = list(live)
    done: set[int] = set()
    while todo:
        for pid in writers.get(todo.pop(), ()):
            if pid not in done:
                done.add(pid)
                new = prog.producers[pid].reads() - live
                live |= new
                todo.extend(new)
    return live


def eliminate_dead(prog: Program) -> Program:
    """A new program without the dead producers and embedding columns, its ``live`` set."""
    live = live_signals(prog)
    out = prog.copy(live=frozenset(live))
    out.producers = {pid: p for pid, p in out.producers.items() if set(p.outputs) & live}
    out.embed_tables = {s: t for s, t in out.embed_tables.items() if s in live}
    out.check("eliminate_dead")
    return out
