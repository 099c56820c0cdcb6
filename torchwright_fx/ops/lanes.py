"""A bank of MLP lanes being assembled into one FFN producer.

The two machines differ only here. A lane is ``act(gate) * up``:
- SwiGLU (Phi-3): act = SiLU. ``hinge(z) = SiLU(S*z) * (1/S)`` (see numerics.SILU_SCALE), and
  the gate-times-up form gives exact products and range-free selects.
- ReLU: act = ReLU, ``up`` is always the constant 1; ``hinge`` is exact.
"""

from __future__ import annotations

from collections.abc import Sequence

from torchwright_fx.base.machines import MachineKind, machine_kind
from torchwright_fx.base.numerics import READER_CONSTANT_LIMIT, SILU_SCALE
from torchwright_fx.ir.graph import FFN, Lane, Program
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import Interval


class Bank:
    def __init__(self, machine: MachineKind | str, n_outputs: int):
        self.machine = machine_kind(machine)
        self.lanes: list[Lane] = []
        self._index: dict[Lane, int] = {}
        self.outs: list[dict[int, float]] = [{} for _ in range(n_outputs)]
        self.consts: list[float] = [0.0] * n_outputs  # folded into the readers' affine forms

    def lane(self, out: int, gate: Lin, up: Lin, weight: float = 1.0) -> None:
        """Add ``weight * act(gate) * up`` to output ``out`` (identical lanes are shared)."""
        key = Lane(gate, up)
        idx = self._index.get(key)
        if idx is None:
            idx = self._index[key] = len(self.lanes)
            self.lanes.append(key)
        self.outs[out][idx] = self.outs[out].get(idx, 0.0) + weight

    def hinge(self, out: int, z: Lin, weight: float = 1.0, sharpness: float = 1.0) -> None:
        """Add ``weight * relu(z)``. SwiGLU: SiLU(k*z)/k with k = S * sharpness, within
        0.28/k of relu everywhere and exact once k*|z| is saturated; raise ``sharpness`` when
        the inputs that must be exact sit closer than SATURATION/S to the kink."""
        if self.machine.smooth_hinge:
            k = SILU_SCALE * sharpness
            self.lane(out, z * k, Lin.constant(1.0 / k), weight)
        else:
            self.lane(out, z, Lin.constant(1.0), weight)

    def hinge_times(self, out: int, z: Lin, factor: Lin, weight: float = 1.0,
                    sharpness: float = 1.0) -> None:
        """Add ``weight * relu(z) * factor`` (a gated machine's up carries ``factor``): exact
        where ``hinge`` is, a quadratic piece when both are affine in one stream."""
        assert self.machine.gated_up, "relu(z) * factor needs a gated up projection"
        k = SILU_SCALE * sharpness if self.machine.smooth_hinge else 1.0
        self.lane(out, z * k, factor * (1.0 / k), weight)

    def const(self, out: int, value: float) -> None:
        self.consts[out] += value

    def finish(self, prog: Program, ranges: Sequence[Interval], name: str,
               source: str) -> list[Lin]:
        pid = prog.next_producer_id()
        outputs: dict[int, dict[int, float]] = {}
        result: list[Lin] = []
        for o, weights in enumerate(self.outs):
            weights = {lane: w for lane, w in weights.items() if w != 0.0}
            if not weights:
                result.append(Lin.constant(self.consts[o]))
                continue
            if abs(self.consts[o]) > READER_CONSTANT_LIMIT:
                # a large constant goes into the column (a constant lane, shared per layer):
                # left to the readers, it would make the stored signal as large, and a run of
                # MLP steps each reading the last doubles it until fp32 loses the value
                self.hinge(o, Lin.constant(1.0), self.consts[o])
                weights = {lane: w for lane, w in self.outs[o].items() if w != 0.0}
                self.consts[o] = 0.0
            # The signal holds the lane sum; the constant part stays in the affine form.
            rng = ranges[o].shift(-self.consts[o])
            sid = prog.new_signal(pid, rng, f"{name}[{o}]", source)
            outputs[sid] = weights
            result.append(Lin.of(sid) + self.consts[o])
        if outputs:
            prog.add(FFN(pid, list(self.lanes), outputs, name, source))
        return result
