"""Heads sharing keys and values (Phi-3's ``num_key_value_heads``): fewer K and V weights, and a
KV cache that runtimes read at every step made smaller by the same factor.

A layer's heads split into ``G`` groups of ``n_heads / G`` consecutive head slots; the heads of
a group read one K block and one V block of ``d_head`` rows each (transformers' ``repeat_kv``,
llama.cpp's broadcast: query head h reads group ``h // (n_heads / G)``). Sharing changes no
score and no output when the blocks are merged as follows:

- a head's score is the sum over its *used* dims: a rotary plane (p, p + rotary/2) where its Q
  and its K both have a weight, a NoPE dim where both do. Its unused Q dims are left at zero,
  so it reads nothing of the other heads' keys;
- a rotary plane stays where it is (RoPE turns it by the position): the heads of a group that
  use plane p must have the same K rows there;
- a NoPE dim may move: every head's used NoPE keys go to the group's NoPE slots, a key that
  another head of the group already has (the same affine form of the same signals) shared,
  and the head's Q row moves with it;
- every value a head moves goes to a V slot of its group (shared where two heads move the same
  affine form); its O columns read that slot.

``choose`` takes the head count and groups (a divisor of it) of fewest attention weights at which
every layer's heads fit their group's ``d_head`` K and V rows: the busiest layer's heads,
padded with empty slots where more slots divide better (9 heads on 9 blocks, or 10 on 5). With
as many groups as heads nothing is merged and the layout is Phi-3's plain one. Heads keep
their order (the circuit map's head indices do not move). Half-precision builds keep one
group per head (their certificate reads each head's own K and V blocks).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from torchwright_fx.ir.graph import Head
from torchwright_fx.ir.linear import Lin


def _nonzero(lin: Lin) -> bool:
    return bool(lin.terms) or lin.const != 0.0


def _form(lin: Lin) -> tuple:
    """A hashable identity of an affine form: two rows written from equal forms are equal."""
    return tuple(sorted(lin.terms.items())), lin.const


@dataclass(frozen=True)
class KvGroup:
    """One group's shared rows (None: a zero row) and, per head of the group, where its rows
    went: ``q[h][r]`` the Q form at row r of head h's block, ``o[h]`` (V slot, output signal)
    pairs in the order of the head's values."""

    k: tuple[Lin | None, ...]
    v: tuple[Lin | None, ...]
    q: tuple[tuple[Lin | None, ...], ...]
    o: tuple[tuple[tuple[int, int], ...], ...]


def merge(heads: Sequence[Head], d_head: int, rotary: int) -> KvGroup | None:
    """``heads`` over one K block and one V block, or None where their used rows do not fit."""
    half = rotary // 2
    k: list[Lin | None] = [None] * d_head
    v: list[Lin | None] = [None] * d_head
    v_slot: dict[tuple, int] = {}
    qs, os_ = [], []
    for head in heads:
        q: list[Lin | None] = [None] * d_head
        for p in range(half):  # rotary planes: in place, equal keys where shared
            rows = (p, p + half)
            if not (any(_nonzero(head.q[r]) for r in rows)
                    and any(_nonzero(head.k[r]) for r in rows)):
                continue
            if any(k[r] is not None for r in rows):
                if any(k[r] is None or _form(k[r]) != _form(head.k[r])  # type: ignore[arg-type]
                       for r in rows):
                    return None
            else:
                for r in rows:
                    k[r] = head.k[r]
            for r in rows:
                q[r] = head.q[r]
        taken: set[int] = set()  # this head's NoPE slots
        for r in range(rotary, d_head):
            if not (_nonzero(head.q[r]) and _nonzero(head.k[r])):
                continue
            form = _form(head.k[r])
            slot = next((s for s in range(rotary, d_head) if s not in taken
                         and k[s] is not None and _form(k[s]) == form), None)  # type: ignore[arg-type]
            if slot is None:
                slot = next((s for s in range(rotary, d_head) if k[s] is None), None)
                if slot is None:
                    return None
                k[slot] = head.k[r]
            taken.add(slot)
            q[slot] = head.q[r]
        outs = []
        for lin, sid in zip(head.v, head.outputs, strict=True):
            form = _form(lin)
            if form not in v_slot:
                if len(v_slot) == d_head:
                    return None
                v_slot[form] = len(v_slot)
                v[v_slot[form]] = lin
            outs.append((v_slot[form], sid))
        qs.append(tuple(q))
        os_.append(tuple(outs))
    return KvGroup(tuple(k), tuple(v), tuple(qs), tuple(os_))


def layout(heads: Sequence[Head], n_heads: int, n_groups: int, d_head: int, rotary: int
           ) -> tuple[KvGroup, ...] | None:
    """A layer's heads (in head order) in ``n_groups`` groups of consecutive slots, or None."""
    per = n_heads // n_groups
    groups = []
    for g in range(n_groups):
        merged = merge(heads[g * per:(g + 1) * per], d_head, rotary)
        if merged is None:
            return None
        groups.append(merged)
    return tuple(groups)


def choose(layers: Sequence[Sequence[Head]], n_heads: int, d_head: int, rotary: int
           ) -> tuple[int, int, list[tuple[KvGroup, ...]] | None]:
    """(query heads a layer, K/V blocks a layer, each layer's groups) of the fewest attention
    weights. A query head costs its Q and O rows, a block its K and V rows, so the cost is
    heads + blocks: the busiest layer's ``n_heads`` may be padded with empty heads, up to
    twice as many, where that lets heads share blocks (9 heads whose keys fit two a block: 10
    heads on 5 blocks, 15 against 18). None: a block a head, Phi-3's plain layout."""
    best: tuple[int, int, int, list[tuple[KvGroup, ...]] | None] = \
        (2 * n_heads, n_heads, n_heads, None)
    for total in range(n_heads, 2 * n_heads):
        for n_groups in range(1, total):
            if total + n_groups >= best[0]:
                break
            if total % n_groups:
                continue
            found = [layout(heads, total, n_groups, d_head, rotary) for heads in layers]
            if all(f is not None for f in found):
                best = (total + n_groups, total, n_groups, found)  # type: ignore[assignment]
                break
    return best[1], best[2], best[3]


def value_room(heads: Sequence[Head], d_head: int, rotary: int, self_key: Sequence[Lin]
               ) -> int | None:
    """For a layer whose ``heads`` are to share one K/V block: None where they do not fit
    one; else how many more values that block holds for cancel heads (each attends to its own
    position with the K rows ``self_key``: 0 where those clash with the heads' keys)."""
    if merge(heads, d_head, rotary) is None:
        return None
    if not self_key:
        return 0
    probe = Head(-1, list(self_key), list(self_key), [], [], "probe", "")
    merged = merge([*heads, probe], d_head, rotary)
    return 0 if merged is None else sum(v is None for v in merged.v)
