"""Lookup speculation for greedy decoding (``llama_decode.greedy``): guesses of the next tokens
taken from the context itself, which the model then confirms or rejects in one batch. Every
token kept is the model's own argmax after exactly the tokens before it, so the output is
greedy decoding's token for token, whatever is guessed; guesses only save forward passes.

Three sources of guesses, none of which executes an instruction:

- **n-grams.** An interpreter's trace repeats itself: a loop prints the same targets and next
  pcs every iteration, and often the same values. Each n-gram of the context keeps the token
  that followed it last and how many times in a row that token came; a run of r predicts the
  next with odds (r + 1/2) / (r + 3/2) (Laplace's rule over the run), and a chain of guesses
  stops where the product of its odds falls below SURE.
- **The record printed at the same pc.** Where the n-grams know nothing (the last record's
  value changed), the record the trace printed the last time it stood at the same pc (the
  previous record's P) is guessed with the same odds, token by token: an instruction writes
  the same register every time it runs, and often goes on to the same next pc.
- **The state dump** (``Records``: where records start and what their tokens mean). Past the
  build's dump position a context ends by listing its cells (contexts.py): a copy of what
  the context holds, in an order the context fixes. At the first record end where the model
  will dump, the whole dump is guessed at once: each cell with a record outside the image,
  newest first record first, with the value tokens of its latest record and the P tokens of
  the last record, then RESUME. It is confirmed DRAFT tokens a pass instead of one.

The constants were chosen by timing llama.cpp on 2 cores (the default build, the first
context of each program, 2,900 to 4,000 tokens; the output the same token for token): fib
7.9 s plain, 6.3 s with n-grams (1.26x); primes 14.3 s and 12.4 s (1.16x); sort100, whose
values move every iteration, 11.7 s and 11.0 s (1.07x). Shorter n-grams (4) guess more and are
wrong more: fib 7.6 s. A batch of 2 tokens costs 1.2 to 1.5 passes of one, a batch of 9
about 4 (each pass reads every weight and the whole KV cache), so a guess pays only where
it is likelier right than wrong.
"""

from __future__ import annotations

from dataclasses import dataclass

DRAFT = 8  # the most guesses a pass evaluates
NGRAM = 8  # the tokens a guess follows (a record's length)
SURE = 0.5  # the odds a chain of guesses must keep


def _odds(run: int) -> float:
    return (run + 0.5) / (run + 1.5)


@dataclass(frozen=True)
class Records:
    """What the guesser knows of the trace's tokens (trace.py): records of ``length`` tokens
    from position 1 (after ``<bos>``), the first of each a cell's page in one of three
    alphabets, the second its low byte, then the value's and P's tokens."""

    length: int
    dump_at: int  # the build's dump position (model.make)
    page: dict[int, tuple[str, int]]  # A_hi token -> ("addr" | "dump" | "image", page)
    dump_page: dict[int, int]  # page -> its A_hi token in the dump alphabet
    no_dump_after: frozenset[tuple[int, int]]  # cells (page, A_lo token) a dump never follows
    resume: tuple[int, ...]  # RESUME's record but its P tokens

    def to_json(self) -> dict:
        return {"length": self.length, "dump_at": self.dump_at,
                "page": [[t, k, p] for t, (k, p) in self.page.items()],
                "dump_page": [[p, t] for p, t in self.dump_page.items()],
                "no_dump_after": [list(c) for c in self.no_dump_after],
                "resume": list(self.resume)}

    @staticmethod
    def from_json(d: dict) -> Records:
        return Records(d["length"], d["dump_at"], {t: (k, p) for t, k, p in d["page"]},
                       {p: t for p, t in d["dump_page"]},
                       frozenset(tuple(c) for c in d["no_dump_after"]), tuple(d["resume"]))

    def cell(self, record: list[int]) -> tuple[str, tuple[int, int]]:
        kind, page = self.page[record[0]]
        return kind, (page, record[1])

    def dump(self, seq: list[int]) -> list[int]:
        """The dump a context ending with ``seq`` prints: every cell with a record outside
        the image, newest first record first, with its latest record's value tokens and the
        last record's P tokens, then RESUME (contexts.dump, on tokens)."""
        n = self.length
        first: dict[tuple[int, int], int] = {}
        latest: dict[tuple[int, int], list[int]] = {}
        for b in range(1, len(seq) - n + 1, n):
            record = seq[b:b + n]
            kind, cell = self.cell(record)
            if kind != "image":
                first.setdefault(cell, len(first))
            latest[cell] = record[2:n - 2]
        p = seq[-2:]
        out: list[int] = []
        for cell in sorted(first, key=first.__getitem__, reverse=True):
            out += [self.dump_page[cell[0]], cell[1], *latest[cell], *p]
        return out + [*self.resume, *p]


class Lookup:
    """Guesses of the next tokens of a context: n-grams, then the record last printed at the
    same pc, and (with ``records``) the state dump."""

    def __init__(self, seq: list[int], records: Records | None = None) -> None:
        self.records = records
        self.seen = 0
        self.next: dict[tuple[int, ...], list[int]] = {}  # n-gram -> [successor, run]
        self.at_pc: dict[tuple[int, ...], list[int]] = {}  # (pc, record so far) -> [next, run]
        self.records_seen = 0
        self.dumping: tuple[int, list[int]] | None = None  # (where it starts, its tokens)
        self.learn(seq)

    def learn(self, seq: list[int]) -> None:
        for p in range(max(self.seen, NGRAM), len(seq)):
            key = tuple(seq[p - NGRAM:p])
            e = self.next.get(key)
            if e is not None and e[0] == seq[p]:
                e[1] += 1
            else:
                self.next[key] = [seq[p], 1]
        self.seen = len(seq)
        if self.records is None:
            return
        n = self.records.length
        whole = (len(seq) - 1) // n
        for r in range(max(self.records_seen, 1), whole):
            b = 1 + r * n
            pc, record = seq[b - 2:b], seq[b:b + n]
            for s in range(n):
                key = (*pc, *record[:s])
                e = self.at_pc.get(key)
                if e is not None and e[0] == record[s]:
                    e[1] += 1
                else:
                    self.at_pc[key] = [record[s], 1]
        self.records_seen = max(self.records_seen, whole)

    def guess(self, seq: list[int], most: int) -> list[int]:
        if most <= 0:
            return []
        dump = self._dump(seq)
        if dump is not None:
            return dump[:most]
        return (self._chain(seq, most, self.next, lambda tail, _: tuple(tail[-NGRAM:]))
                or self._chain(seq, most, self.at_pc, self._pc_key))

    def _chain(self, seq: list[int], most: int, table: dict, key) -> list[int]:
        """Guesses from ``table`` while the product of their odds stays >= SURE; ``key`` of
        the context's tail (and where in the context it starts), each guess appended, gives
        the next entry (None: no key)."""
        extra = self.records.length + 2 if self.records else 0
        tail = seq[-(NGRAM + extra):]
        base = len(seq) - len(tail)
        out: list[int] = []
        odds = 1.0
        while len(out) < most:
            k = key(tail, base)
            e = table.get(k) if k is not None else None
            if e is None:
                break
            odds *= _odds(e[1])
            if odds < SURE:
                break
            out.append(e[0])
            tail.append(e[0])
        return out

    def _pc_key(self, tail: list[int], base: int) -> tuple[int, ...] | None:
        """(the previous record's P tokens, the current record's tokens so far): the record
        printed the last times at this pc."""
        if self.records is None:
            return None
        end = base + len(tail)
        start = end - (end - 1) % self.records.length  # where the current record starts
        i = start - base
        if start - 2 < 1 or i < 2:
            return None
        return (*tail[i - 2:i], *tail[i:])

    def _dump(self, seq: list[int]) -> list[int] | None:
        """The rest of the state dump, once the context has reached it; None before (and for
        good once the model prints anything else)."""
        r = self.records
        if r is None:
            return None
        if self.dumping is None:
            end = len(seq) - 1  # the position of the last token
            if end % r.length or end < r.dump_at or end < r.length:
                return None
            kind, cell = r.cell(seq[-r.length:])
            if kind == "addr" and cell in r.no_dump_after:
                return None
            self.dumping = (len(seq), r.dump(seq))
        start, tokens = self.dumping
        if not tokens:
            return None
        done = len(seq) - start
        if seq[start:] != tokens[:done]:  # the model printed something else: no more
            self.dumping = (start, [])
            return None
        return tokens[done:]
