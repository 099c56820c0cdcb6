"""Vocab: characters <-> token ids, and the tokenizer contract.

Every prompt is split into single characters. Id 0 is ``<bos>`` (prepended to every prompt),
id 1 is ``<eos>`` (ends generation, doubles as padding), id 2 is ``<unk>`` (any character
outside the vocabulary). The program sees the token stream as a one-hot ``[seq, len(vocab)]``
tensor, so a token's id is also its *code*: the number an output stream carries to say
"print this token".
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

BOS, EOS, UNK = "<bos>", "<eos>", "<unk>"
SPECIALS = (BOS, EOS, UNK)


class Vocab:
    """An ordered set of single-character tokens plus the three special tokens."""

    def __init__(self, chars: Iterable[str] | str):
        chars = list(chars)
        for c in chars:
            if len(c) != 1:
                raise ValueError(f"Vocab tokens are single characters, got {c!r}")
        if len(set(chars)) != len(chars):
            raise ValueError(f"Vocab has repeated characters: {chars}")
        self.tokens: tuple[str, ...] = SPECIALS + tuple(chars)
        self._ids = {t: i for i, t in enumerate(self.tokens)}

    def __len__(self) -> int:
        return len(self.tokens)

    def __repr__(self) -> str:
        return f"Vocab({''.join(self.tokens[len(SPECIALS):])!r})"

    def __getitem__(self, token: str) -> int:
        """The id (= code) of a token; raises with the known tokens if absent."""
        try:
            return self._ids[token]
        except KeyError:
            raise KeyError(f"{token!r} is not in {self!r}") from None

    def __contains__(self, token: object) -> bool:
        return token in self._ids

    @property
    def bos_id(self) -> int:
        return self._ids[BOS]

    @property
    def eos_id(self) -> int:
        return self._ids[EOS]

    @property
    def unk_id(self) -> int:
        return self._ids[UNK]

    def encode(self, text: str, *, bos: bool = True) -> list[int]:
        """Characters to ids, ``<bos>`` first; unknown characters become ``<unk>``."""
        ids = [self._ids.get(c, self.unk_id) for c in text]
        return [self.bos_id, *ids] if bos else ids

    def decode(self, ids: Sequence[int]) -> str:
        """Ids to text, dropping special tokens (as ``skip_special_tokens`` does)."""
        return "".join(self.tokens[i] for i in ids if self.tokens[i] not in SPECIALS)

    def one_hot(self, ids: Sequence[int]) -> torch.Tensor:
        """The program's view of a token sequence: a ``[seq, len(vocab)]`` float tensor."""
        out = torch.zeros(len(ids), len(self))
        out[torch.arange(len(ids)), torch.tensor(list(ids), dtype=torch.long)] = 1.0
        return out
