"""Drop producers and embedding columns that nothing reads."""

from __future__ import annotations

from torchwright_fx.ir.graph import Program


def live_signals(prog: Program) -> set[int]:
    """Signals read by the output or, transitively, by a producer that is live."""
    live: set[int] = set(prog.output.signals())
    changed = True
    while changed:
        changed = False
        for p in prog.producers.values():
            if set(p.outputs) & live:
                new = p.reads() - live
                if new:
                    live |= new
                    changed = True
    return live


def eliminate_dead(prog: Program) -> Program:
    live = live_signals(prog)
    for pid, p in list(prog.producers.items()):
        outs = set(p.outputs)
        if not outs & live:
            del prog.producers[pid]
    prog.embed_tables = {s: t for s, t in prog.embed_tables.items() if s in live}
    prog.live = live
    return prog
