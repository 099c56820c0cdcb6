"""Plan -> Machine. The one place where signals become rows and columns of weight matrices."""

from __future__ import annotations

import math

import numpy as np
import torch

from torchwright_fx.base.machines import half_parts
from torchwright_fx.base.numerics import RMS_EPS
from torchwright_fx.emit import half
from torchwright_fx.emit.machine import LayerWeights, Machine
from torchwright_fx.emit.placement import LayerPlacement, Placement, place
from torchwright_fx.emit.rmsnorm import Pins, choose_pins
from torchwright_fx.ir.graph import Program
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ops import decode
from torchwright_fx.ops.attention import Geometry
from torchwright_fx.schedule.cancels import is_cancel
from torchwright_fx.schedule.plan import Plan


def data_energy(prog: Program) -> float:
    """An upper bound on the sum of squares of all data columns at any position."""
    total = 1.0  # the constant column
    for s in prog.live_signals():
        rng = prog.signals[s].range
        if not rng.finite:
            raise ValueError(f"signal {prog.signals[s].name} ({prog.signals[s].source}) has no "
                             "finite range; declare one with tw.claim")
        total += rng.magnitude * rng.magnitude  # inf beyond 1.3e154 (refused), not an error
    return total


class _Writer:
    def __init__(self, prog: Program, plan: Plan, const_scaled: bool = True):
        self.prog, self.plan = prog, plan
        # False: the constant column reads 1 after the norm without the readers' scale (half
        # precision stores it as the reader scale itself: emit/half.py)
        self.const_scaled = const_scaled

    def _constant(self, value: float) -> dict[int, float]:
        """A reader's constant weight on the constant column; in a half build, where bf16
        does not hold it, as two numbers that both formats hold, the second on the second
        constant column (``schedule.columns.constant_columns``)."""
        if self.const_scaled or len(self.plan.pin_cols) != 1:
            return {self.plan.const_col: value}
        parts = half_parts(float(np.float32(value)))
        if len(parts) != 2:  # held as it is, or by no split (refused: half_bounds)
            return {self.plan.const_col: value}
        return {self.plan.const_col: parts[0], self.plan.pin_cols[0]: parts[1]}

    def row(self, lin: Lin, scale: float = 1.0) -> torch.Tensor:
        """A weight row that reads ``lin`` from the (normalised) residual."""
        out = torch.zeros(self.plan.d_model, dtype=torch.float64)
        for col, v in self._constant(lin.const * (scale if self.const_scaled else 1.0)).items():
            out[col] = v
        for s, c in lin.terms.items():
            out[self.plan.columns[s]] += c * scale
        return out

    def entries(self, lin: Lin, scale: float = 1.0, factor: float = 1.0) -> dict[int, float]:
        """``row(lin, scale)`` as {column: value}: the same float64 operations in the same
        order, without a tensor per row (a tensor op per entry was the emitter's hot spot on
        large programs)."""
        # factor: a scale the constant takes even where the reader scale is not applied to it
        out = self._constant(lin.const * (scale if self.const_scaled else factor))
        for s, c in lin.terms.items():
            col = self.plan.columns[s]
            out[col] = out.get(col, 0.0) + c * scale
        return out

    def column(self, sid: int) -> int | None:
        return self.plan.columns.get(sid) if sid in self.prog.live_signals() else None


class _Sparse:
    """Writes into one zero matrix, collected and stored with one indexed assignment: each
    (row, column) at most once. Values are float64 (Python floats) until the store rounds
    them to the matrix's fp32, as ``.float()`` of a float64 matrix did."""

    def __init__(self) -> None:
        self.cells: dict[tuple[int, int], float] = {}

    def row(self, r: int, entries: dict[int, float]) -> None:
        self.cells.update(((r, c), v) for c, v in entries.items())

    def store(self, out: torch.Tensor) -> torch.Tensor:
        if self.cells:
            rows, cols = zip(*self.cells, strict=True)
            values = torch.tensor(list(self.cells.values()), dtype=torch.float64)
            out[list(rows), list(cols)] = values.to(out.dtype)
        return out


def _attention(w: _Writer, layer: LayerPlacement, n_heads: int, d_head: int, scale: float = 1.0,
               n_kv: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """qkv ``[(n_heads + 2 n_kv) d_head, d]`` (rows [Q; K; V]) and o; ``n_kv`` K/V blocks
    (None: one a head)."""
    d = w.plan.d_model
    width = n_heads * d_head
    kv_width = (n_kv or n_heads) * d_head
    qkv, o = _Sparse(), _Sparse()  # qkv rows: [Q; K; V]
    # Phi-3 scales logits by 1/sqrt(d_head); fold sqrt(d_head) into W_Q.
    q_scale = math.sqrt(d_head) * scale  # scale: the half norm's reader scale (emit/half.py)
    # q's scales (terms, constant) and k's: in half precision the reader scale R moves from
    # the query to the key (q / R, k * R: powers of two, no product changes), since the
    # query's weights are the large ones (a position cut's 7400 x 8) and must stay < 65504
    root = math.sqrt(d_head)
    qs, qc, ks, kc = (root, root / scale, scale * scale, scale) if not w.const_scaled else \
        (q_scale, root, scale, scale)
    first_cancel = len(layer.heads) - layer.n_cancel
    if layer.kv is not None:  # heads over shared K/V blocks (schedule/kv_groups.py)
        per = n_heads // len(layer.kv)
        for g, group in enumerate(layer.kv):
            for r, (key, value) in enumerate(zip(group.k, group.v, strict=True)):
                if key is not None:
                    qkv.row(width + g * d_head + r, w.entries(key, ks, kc))
                if value is not None:
                    qkv.row(width + kv_width + g * d_head + r, w.entries(value, scale))
            for i, (q_rows, outs) in enumerate(zip(group.q, group.o, strict=True)):
                h = g * per + i
                sign = -1.0 if h >= first_cancel else 1.0  # cancel heads write the negation
                for r, lin in enumerate(q_rows):
                    if lin is not None:
                        qkv.row(h * d_head + r, w.entries(lin, qs, qc))
                for slot, sid in outs:
                    col = w.column(sid)
                    if col is not None:
                        o.cells[col, h * d_head + slot] = sign
        return (qkv.store(torch.zeros(width + 2 * kv_width, d, dtype=torch.float32)),
                o.store(torch.zeros(d, width, dtype=torch.float32)))
    for h, head in enumerate(layer.heads):
        base = h * d_head
        sign = -1.0 if h >= first_cancel else 1.0  # cancel heads write the negation
        for r in range(d_head):
            qkv.row(base + r, w.entries(head.q[r], qs, qc))
            qkv.row(width + base + r, w.entries(head.k[r], ks, kc))
        for r, (lin, sid) in enumerate(zip(head.v, head.outputs, strict=True)):
            qkv.row(2 * width + base + r, w.entries(lin, scale))
            col = w.column(sid)
            if col is not None:
                o.cells[col, base + r] = sign
    return (qkv.store(torch.zeros(3 * width, d, dtype=torch.float32)),
            o.store(torch.zeros(d, width, dtype=torch.float32)))


def _mlp(w: _Writer, layer: LayerPlacement, d_ff: int, scale: float = 1.0
         ) -> tuple[torch.Tensor, torch.Tensor]:
    d = w.plan.d_model
    gate_up, down = _Sparse(), _Sparse()  # gate_up rows: [gate; up]
    for f in layer.ffns:
        local = layer.lanes_of(f)
        for sid, weights in f.outputs.items():
            col = w.column(sid)
            if col is None:
                continue
            for lane_idx, weight in weights.items():
                cell = (col, local[lane_idx])
                down.cells[cell] = down.cells.get(cell, 0.0) + weight
    for lane, i in layer.lane_index.items():
        gate_up.row(i, w.entries(lane.gate, scale))
        gate_up.row(d_ff + i, w.entries(lane.up, scale))
    return (gate_up.store(torch.zeros(2 * d_ff, d, dtype=torch.float32)),
            down.store(torch.zeros(d, d_ff, dtype=torch.float32)))


def _embedding(prog: Program, plan: Plan, const: float) -> torch.Tensor:
    """[vocab, d] float64: the constant column (holding ``const``) and the per-token tables."""
    embed = torch.zeros(len(prog.vocab), plan.d_model, dtype=torch.float64)
    embed[:, plan.const_col] = const
    for sid, table in prog.embed_tables.items():
        embed[:, plan.columns[sid]] = torch.tensor(table, dtype=torch.float64)
    return embed


def _cancel_lanes(placed: Placement) -> int:
    """The MLP lanes that zero recycled columns (``schedule/cancels.py``)."""
    return len({la.lane_index[lane] + (i << 32) for i, la in enumerate(placed.layers)
                for f in la.ffns if is_cancel(f) for lane in f.lanes})


def _layers(w: _Writer, placed: Placement, d_head: int, gain: torch.Tensor,
            scale: float = 1.0) -> list[LayerWeights]:
    """Every layer's weights, its norms' gains ``gain`` (``scale``: the readers' scale)."""
    layers = []
    for layer in placed.layers:
        qkv, o = _attention(w, layer, placed.n_heads, d_head, scale, placed.kv_heads)
        gate_up, down = _mlp(w, layer, placed.d_ff, scale)
        layers.append(LayerWeights(qkv, o, gate_up, down, gain.clone(), gain.clone()))
    return layers


def emit(prog: Program, plan: Plan, geom: Geometry, placed: Placement | None = None,
         energy: float | None = None) -> Machine:
    """``energy``: half precision's bound on the residual's sum of squares (from the
    certificate's value sets; default: the facts' ranges)."""
    if prog.precision.half:
        return _emit_half(prog, plan, geom, placed or place(prog, plan, geom), energy)
    w = _Writer(prog, plan)
    d, vocab = plan.d_model, len(prog.vocab)
    pins: Pins = choose_pins(d, data_energy(prog))
    placed = placed or place(prog, plan, geom)

    embed = _embedding(prog, plan, 1.0)
    embed[:, plan.pin_cols] = torch.tensor(pins.values, dtype=torch.float64)
    gain = torch.full((d,), pins.gain)
    layers = _layers(w, placed, geom.d_head, gain)
    final = gain.clone()
    final[plan.pin_cols] = 0.0

    # logit_t = G * (t * c - t^2 / 2) up to a shift: largest at the token nearest the code c.
    end_row = None if prog.end_flag is None else w.row(prog.end_flag)
    lm_head = decode.lm_head(prog, w.row(prog.output), plan.const_col, end_row)
    margin = decode.margin(prog, prog.output, prog.output_range)  # > 0: certified at lowering

    return Machine(
        act=prog.machine.act,
        d_model=d, d_head=geom.d_head, n_heads=placed.n_heads, d_ff=placed.d_ff, vocab_size=vocab,
        max_seq_len=geom.max_seq_len, rope_theta=geom.rope_theta,
        partial_rotary_factor=geom.partial_rotary_factor,
        embed=embed.float(), layers=layers, final_norm=final, lm_head=lm_head.float(),
        rms_eps=RMS_EPS, bos_id=prog.vocab.bos_id, eos_id=prog.vocab.eos_id,
        ends_with_eos=prog.end_flag is not None, n_kv_heads=placed.kv_heads,
        meta={"pin_exponent": pins.gain_exponent, "pin_roots": list(pins.roots),
              "data_energy": data_energy(prog),
              "layer_heads": [len(la.heads) for la in placed.layers],
              "layer_lanes": [len(la.lane_index) for la in placed.layers],
              "cancel_heads": sum(la.n_cancel for la in placed.layers),
              "cancel_lanes": _cancel_lanes(placed),
              "output_margin": margin},
    )


def _emit_half(prog: Program, plan: Plan, geom: Geometry, placed: Placement,
               energy: float | None) -> Machine:
    """The half-precision machine: the pin-free RMSNorm identity and the one-hot lm_head
    (``emit/half.py``); certified afterwards by ``emit/certify_half.py``."""
    w = _Writer(prog, plan, const_scaled=False)
    d, vocab = plan.d_model, len(prog.vocab)
    energy = data_energy(prog) if energy is None else energy
    norm = half.choose_norm(d, energy, constants=1 + len(plan.pin_cols))
    embed = _embedding(prog, plan, norm.reader_scale)
    embed[:, plan.pin_cols] = norm.reader_scale  # the second constant column, if any
    gain = torch.full((d,), norm.gain)
    layers = _layers(w, placed, geom.d_head, gain, norm.reader_scale)
    lm_head = half.lm_head(prog, w.row, norm.reader_scale)
    return Machine(
        act=prog.machine.act,
        d_model=d, d_head=geom.d_head, n_heads=placed.n_heads, d_ff=placed.d_ff, vocab_size=vocab,
        max_seq_len=geom.max_seq_len, rope_theta=geom.rope_theta,
        partial_rotary_factor=geom.partial_rotary_factor,
        embed=embed.float(), layers=layers, final_norm=gain.clone(), lm_head=lm_head.float(),
        rms_eps=norm.eps, bos_id=prog.vocab.bos_id, eos_id=prog.vocab.eos_id,
        meta={"norm_exponent": norm.exponent, "reader_scale": norm.reader_scale,
              "data_energy": energy,
              "layer_heads": [len(la.heads) for la in placed.layers],
              "layer_lanes": [len(la.lane_index) for la in placed.layers],
              "cancel_heads": sum(la.n_cancel for la in placed.layers),
              "cancel_lanes": _cancel_lanes(placed),
              "output_margin": half.DECODE_GAIN,
              "precision": prog.precision.name,
              "formats": [f.name for f in prog.precision.formats]},
    )
