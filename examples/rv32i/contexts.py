"""Unbounded runs: the state dump that ends a context, and the host's schedule of contexts.

A build has a dump position ``T`` (``model.make(dump_at=T)``, a multiple of 8). At the first
record end at or past ``T`` whose record is not a ``write``'s byte (a write in progress keeps
its count in that record), the model stops executing and prints the state the next context
needs: one dump record (``DUMP`` alphabet) per cell that has a record in the context other than
the prompt's image, in the reverse order of the cells' first such records, each with the
cell's latest value and ``P`` = the pc to resume at, then a ``RESUME`` record (``A`` = 34, V =
0, the same ``P``) and ``<eos>``. The host copies the first prompt's image records and then the
dump and the ``RESUME`` record, unchanged, into the next prompt after ``<bos>``; there the
``RESUME`` record ends below ``T``, so the model executes from its ``P``. A cell the program
never wrote is not dumped: its image record, in every prompt, still holds its value (a cell it
wrote has a later record, the dump's, which the reads prefer).

How the model finds the cells (model.py): a record is *first* when it is not an image record
and no earlier such record has its cell; each record end holds the cell of the latest first
record before it (a link), so the first records form a list from the newest back to the
oldest, which the dump walks: the cell printed last, its first record, that record's link, the
next cell, its latest value.

Everything here is the host's side: ``dump`` is the oracle of what the model prints, and
``schedule`` splits the reference's records into the contexts a run goes through, so that a
run is refused before it starts when a context would not fit ``max_seq_len``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from examples.rv32i.trace import OUT, RECORD, RESUME, Record


def dump(context: Sequence[Record], resume_at: int) -> list[Record]:
    """The records a context's dump prints: its cells but those only the image holds, newest
    first record first, each with its latest value, then ``RESUME``."""
    order: dict[int, int] = {}
    latest: dict[int, int] = {}
    for r in context:
        if not r.image:
            order.setdefault(r.target, len(order))
        latest[r.target] = r.value
    cells = sorted(order, key=order.__getitem__, reverse=True)
    return ([Record(c, latest[c], resume_at, dump=True) for c in cells]
            + [Record(RESUME, 0, resume_at)])


@dataclass
class Context:
    prompt: list[Record]  # after <bos>: the image, then (after the first) the last dump
    printed: list[Record]  # what the model prints (a dump ends with RESUME)
    stops: bool  # the model prints <eos> after ``printed`` (EXIT or RESUME)

    @property
    def tokens(self) -> int:
        """Positions used: <bos>, the prompt, the printed records and <eos>."""
        return 1 + RECORD * (len(self.prompt) + len(self.printed)) + int(self.stops)


class TooLong(ValueError):
    """A context of the run does not fit the build."""


def schedule(prompt: Sequence[Record], records: Sequence[Record], exited: bool,
             dump_at: int, max_seq_len: int) -> list[Context]:
    """The contexts of a run whose executed records (by the reference) are ``records``, from
    the first ``prompt`` (the image)."""
    contexts: list[Context] = []
    image = [r for r in prompt if r.image]
    ctx, printed, i = list(prompt), [], 0
    while True:
        last = ctx[-1] if ctx else None
        t = RECORD * len(ctx)  # the position of the last record's last token
        if t >= dump_at and len(ctx) == len(prompt):
            raise TooLong(f"a context's prompt (the state, {t} tokens) reaches the dump "
                          f"position {dump_at}")
        if t >= dump_at and i < len(records) and not (last and last.target == OUT
                                                      and not last.dump):
            resume_at = last.next_index if last else 0
            out = dump(ctx, resume_at)
            contexts.append(Context(list(prompt), printed + out, True))
            prompt, ctx, printed = image + out, image + out, []
            continue
        if i == len(records):
            contexts.append(Context(list(prompt), printed, exited))
            break
        ctx.append(records[i])
        printed.append(records[i])
        i += 1
    for c in contexts:
        if c.tokens > max_seq_len:
            raise TooLong(f"a context takes {c.tokens} tokens, over max_seq_len {max_seq_len}")
    return contexts
