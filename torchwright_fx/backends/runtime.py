"""In-process runtime: a Machine run with Phi-3's arithmetic, op for op as transformers' eager
path computes it, with the residual stream capturable after every sublayer.

``dtype`` (float32, the default; float16; bfloat16) is the arithmetic of
``AutoModelForCausalLM.from_pretrained(dir, dtype=..., attn_implementation="eager")``: every
weight cast to it; RMSNorm's variance and normalisation in fp32, cast back, then times the
weight in the dtype; rotary cos/sin computed in fp32 and cast; the projections, the scores,
the attention output and the MLP in the dtype (each op rounded to it); the softmax in fp32,
cast back; residual adds and the lm_head in the dtype.

Generation is KV-cached as transformers' is: one forward over the prompt fills a per-layer
K/V cache (K after rotary), then each new token is one position (O(n) per token). Its logits
are those of the uncached loop (a full-sequence ``forward`` per new token), bit for bit on
every example (``tests/test_runtime_cache.py``): MKL sums a row's dot products in an order
that depends on how many rows the matrix has (below ``_block()`` rows), so a new position is
computed as the last row of a block that tall, and a cache shorter than that is recomputed.

A long sequence runs its attention in blocks of ``ROWS`` query rows, each over the keys up to
its last row (the causal half of the scores, in bounded memory), and a head with no Q, K or V
weights (the compiler leaves many) is not computed: it adds exactly 0 while the residual is
finite."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from torchwright_fx.base.errors import InputError
from torchwright_fx.emit.machine import ACTIVATIONS, Machine, rms_norm

DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def rotary_tables(m: Machine, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin ``[n, rotary dims]`` for positions 0..n-1, in fp32 (a position's row does
    not depend on n)."""
    dim = int(m.d_head * m.partial_rotary_factor)
    inv_freq = 1.0 / (m.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
    freqs = torch.arange(n, dtype=torch.float)[:, None] * inv_freq[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    dim = cos.shape[-1]
    rot, rest = x[..., :dim], x[..., dim:]
    half = torch.cat([-rot[..., dim // 2:], rot[..., : dim // 2]], dim=-1)
    return torch.cat([rot * cos + half * sin, rest], dim=-1)


def _check_dtype(dtype: torch.dtype) -> torch.dtype:
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype}: the runtime computes in torch.float32, torch.float16 "
                         "or torch.bfloat16")
    return dtype


class Weights:
    """A Machine's tensors in one dtype, as ``from_pretrained(dtype=...)`` casts them (fp32:
    the Machine's own tensors, no copy), with the rotary tables grown on demand."""

    def __init__(self, m: Machine, dtype: torch.dtype = torch.float32):
        self.machine, self.dtype = m, _check_dtype(dtype)

        def cast(t: torch.Tensor) -> torch.Tensor:
            return t.to(dtype)

        self.embed, self.final_norm, self.lm_head = (cast(t) for t in
                                                     (m.embed, m.final_norm, m.lm_head))
        self.layers: list[tuple[torch.Tensor, ...]] = []
        self._cos = self._sin = torch.empty(0)
        # per layer, the heads with any Q, K or V weight and any O weight first, then the
        # others (None: every head has both), and how many have both: the K/V cache keeps
        # heads in this order, so that the live ones are one slice
        self.order: list[torch.Tensor | None] = []
        self.live: list[int] = []
        for la in m.layers:
            # shared K/V blocks (Machine.n_kv_heads) repeated per query head: the same
            # arithmetic
            qkv = m.mha_qkv(la.qkv)
            self.layers.append(tuple(cast(t) for t in (qkv, la.o, la.gate_up, la.down,
                                                       la.norm_attn, la.norm_mlp)))
            # (a query head of a shared K/V block with no O weights adds 0 as well)
            per_head = qkv.reshape(3, m.n_heads, m.d_head, -1).ne(0).any(-1).any(-1).any(0) \
                & la.o.reshape(-1, m.n_heads, m.d_head).ne(0).any(-1).any(0)
            self.live.append(int(per_head.sum()))
            self.order.append(None if bool(per_head.all()) else
                              torch.argsort(~per_head, stable=True))

    def rotary(self, start: int, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin for positions start..end-1, computed in fp32 and cast to the dtype."""
        if self._cos.shape[0] < end:
            n = min(self.machine.max_seq_len, max(end, 2 * self._cos.shape[0]))
            cos, sin = rotary_tables(self.machine, max(n, end))
            self._cos, self._sin = cos.to(self.dtype), sin.to(self.dtype)
        return self._cos[start:end], self._sin[start:end]


def _block() -> int:
    """Rows from which MKL's matmul gives each row the same sums whatever the height (measured:
    from 4 rows on one thread, 12 on two or eight, 28 on sixteen)."""
    threads = torch.get_num_threads()
    return 4 if threads == 1 else 16 if threads <= 8 else 32


class KVCache:
    """Per layer, K (after rotary) and V of every position so far, ``[heads, capacity, d_head]``
    in the dtype, as transformers' DynamicCache holds them, and the ids they were made from."""

    def __init__(self, w: Weights, capacity: int):
        m = w.machine
        shape = (m.n_heads, capacity, m.d_head)
        self.k = [torch.empty(shape, dtype=w.dtype) for _ in m.layers]
        self.v = [torch.empty(shape, dtype=w.dtype) for _ in m.layers]
        self.ids: list[int] = []
        self.capacity = capacity
        # per layer: a non-finite input reached it (its dead heads' K/V are not all 0 then)
        self.nonfinite = [False] * len(m.layers)

    @property
    def length(self) -> int:
        return len(self.ids)


ROWS = 256  # query rows per block of a long prefill


def _blocks(n: int) -> list[tuple[int, int]]:
    """Query rows 0..n-1 in blocks of ROWS (the last one at least _block() rows tall)."""
    bounds = list(range(0, n, ROWS)) + [n]
    if len(bounds) > 2 and n - bounds[-2] < _block():
        del bounds[-2]
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, first: int, pad: int,
            scale: float) -> torch.Tensor:
    """Eager attention (scores in the dtype, an additive causal mask of the dtype's min, the
    softmax in fp32 cast back, then times V) of queries ``q [h, pad + n, dh]`` (``pad`` rows
    of padding, then positions first..first+n-1) over ``k, v [h, first + n, dh]``. A long run
    of queries goes in blocks of ROWS, each over the keys up to its last row: the causal half
    of the scores, in bounded memory."""
    h, n = q.shape[0], q.shape[1] - pad
    outs = []
    for s, e in _blocks(n):
        lo = 0 if s == 0 else pad + s  # the padding rides in the first block
        keys = first + e
        scores = torch.matmul(q[:, lo:pad + e], k[:, :keys].transpose(1, 2))
        scores.mul_(scale)
        real = scores[:, pad:] if s == 0 else scores
        rows = e - s
        if rows > 1:
            tri = torch.full((rows, rows), torch.finfo(q.dtype).min, dtype=q.dtype).triu_(1)
            real[..., keys - rows:] += tri
        weights = torch.softmax(real, dim=-1, dtype=torch.float32).to(q.dtype)
        if s == 0 and pad:
            weights = torch.cat([weights.new_zeros(h, pad, keys), weights], dim=1)
        outs.append(torch.matmul(weights, v[:, :keys]))
    return outs[0] if len(outs) == 1 else torch.cat(outs, dim=1)


def _attention(w: Weights, index: int, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
               cache: KVCache | None, start: int, n: int) -> torch.Tensor:
    """The attention sublayer for the last ``n`` rows of ``x`` (positions start..start+n-1;
    rows above them are padding) over the cache's keys and theirs."""
    m = w.machine
    qkv_w, o_w = w.layers[index][0], w.layers[index][1]
    rows, hd = x.shape[0], m.n_heads * m.d_head
    qkv = x @ qkv_w.T
    q, k, v = (t.reshape(rows, m.n_heads, m.d_head).transpose(0, 1)
               for t in (qkv[:, :hd], qkv[:, hd:2 * hd], qkv[:, 2 * hd:]))
    q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
    order, live = w.order[index], w.live[index]
    if order is not None:
        q, k, v = q[order], k[order], v[order]
    end = start + n
    if cache is not None:
        cache.k[index][:, start:end] = k[:, rows - n:]
        cache.v[index][:, start:end] = v[:, rows - n:]
        k, v = cache.k[index][:, :end], cache.v[index][:, :end]
    scale = m.d_head ** -0.5
    if order is None:
        out = _attend(q, k, v, start, rows - n, scale)
    else:  # a head with no Q, K or V weights adds exactly 0 while x is finite (its q, k, v are 0)
        out = q.new_zeros(q.shape)
        finite = bool(torch.isfinite(x).all())
        if cache is not None:
            cache.nonfinite[index] |= not finite
            finite = not cache.nonfinite[index]
        if not finite:
            out[order] = _attend(q, k, v, start, rows - n, scale)
        elif live:
            out[order[:live]] = _attend(q[:live], k[:live], v[:live], start, rows - n, scale)
    return out.transpose(0, 1).reshape(rows, hd) @ o_w.T


def _mlp(m: Machine, gate_up: torch.Tensor, down: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    gate, up = (x @ gate_up.T).chunk(2, dim=-1)
    act = ACTIVATIONS[m.act](gate)
    return (up * act) @ down.T


def _run(w: Weights, ids: Sequence[int], cache: KVCache | None = None, capture: bool = False
         ) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Logits of the positions of ``ids``, after the cache's (which grows by them; then only
    the last ``_block()`` positions' logits), and with ``capture`` the residual states (index
    s + 1 holds the residual after stage s)."""
    m, block = w.machine, _block()
    if cache is not None and 0 < cache.length < block:
        # a short cache was made from a matrix under _block() rows: recompute it with these
        ids, cache.ids = cache.ids + list(ids), []
    start = 0 if cache is None else cache.length
    n = len(ids)
    end = start + n
    if end > m.max_seq_len:
        raise InputError(f"{end} tokens exceed max_seq_len={m.max_seq_len}")
    if cache is not None and end > cache.capacity:
        raise InputError(f"{end} tokens exceed the cache's {cache.capacity} positions")
    h = w.embed[torch.tensor(list(ids), dtype=torch.long)]
    if start > 0 and n < block:
        h = torch.cat([h.new_zeros(block - n, h.shape[1]), h])
    cos, sin = w.rotary(start, end)
    if h.shape[0] > n:
        pad = h.shape[0] - n
        cos = torch.cat([cos.new_zeros(pad, cos.shape[1]), cos])
        sin = torch.cat([sin.new_zeros(pad, sin.shape[1]), sin])
    states = [h.clone()] if capture else []
    for index, layer in enumerate(w.layers):
        h = h + _attention(w, index, rms_norm(h, layer[4], m.rms_eps), cos, sin, cache, start,
                           n)
        if capture:
            states.append(h.clone())
        h = h + _mlp(m, layer[2], layer[3], rms_norm(h, layer[5], m.rms_eps))
        if capture:
            states.append(h.clone())
    if cache is not None:
        cache.ids.extend(ids)
        h = h[-block:]
    return rms_norm(h, w.final_norm, m.rms_eps) @ w.lm_head.T, states


@torch.no_grad()
def forward(m: Machine, ids: Sequence[int], capture: bool = False,
            dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Logits ``[T, vocab]`` for a token sequence (in ``dtype``); with ``capture``, the residual
    after the embedding and after every sublayer (index s + 1 holds the residual after stage
    s)."""
    return _run(Weights(m, dtype), ids, capture=capture)


@torch.no_grad()
def generate(m: Machine | Weights, ids: Sequence[int], max_new_tokens: int | None = None,
             dtype: torch.dtype = torch.float32, steps: list[torch.Tensor] | None = None
             ) -> list[int]:
    """Greedy decoding until ``<eos>`` or max_seq_len; returns the new ids (eos excluded). One
    forward over the prompt fills the K/V cache; each new token is then one position. With
    ``steps``, each step's next-token logits are appended to it."""
    w = m if isinstance(m, Weights) else Weights(m, dtype)
    mach = w.machine
    limit = mach.max_seq_len if max_new_tokens is None else min(mach.max_seq_len,
                                                                len(ids) + max_new_tokens)
    new: list[int] = []
    length = len(ids)
    if length >= limit:
        return new
    cache = KVCache(w, limit)
    logits, _ = _run(w, ids, cache)
    while True:
        if steps is not None:
            steps.append(logits[-1])
        nxt = int(torch.argmax(logits[-1]))
        if nxt == mach.eos_id:
            break
        if nxt == mach.bos_id:
            raise InputError(f"the model generated <bos> at position {length - 1}; <bos> only "
                             "starts a sequence, so this input is outside the program's domain")
        new.append(nxt)
        length += 1
        if length >= limit:
            break
        logits, _ = _run(w, [nxt], cache)
    return new


class Runtime:
    """The in-process runtime as a runner (``backends/protocol.py``), in ``dtype``."""

    def __init__(self, weights: Machine, dtype: torch.dtype = torch.float32):
        self.weights = weights
        self.dtype = _check_dtype(dtype)
        self._cast: Weights | None = None

    @property
    def cast(self) -> Weights:
        if self._cast is None:
            self._cast = Weights(self.weights, self.dtype)
        return self._cast

    def logits(self, ids: Sequence[int]) -> torch.Tensor:
        with torch.no_grad():
            return _run(self.cast, ids)[0]

    def generate_ids(self, ids: Sequence[int], max_new_tokens: int | None = None) -> list[int]:
        return generate(self.cast, ids, max_new_tokens)
