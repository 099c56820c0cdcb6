"""A picture of the plan: which value lives in which residual columns, sublayer by sublayer.

The x axis is the stages (``schedule/plan.py``): the embedding, then each layer's attention
and MLP sublayers, then the output (the ``lm_head``); the y axis is the residual columns. Each
value is a bar over its columns, from the stage that writes it to the stage whose cancel head
zeroes its columns (or the end), labelled with the fx node name of its producer: solid while
something still reads it, pale while it only holds the column. ``plan_text`` says the same
layer by layer (the ``inspect`` command prints it). matplotlib is imported only when a picture
is drawn, and without pyplot: a notebook's own matplotlib backend is left as it is.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchwright_fx.emit.placement import Placement
from torchwright_fx.ir.graph import EMBED, Head, Program
from torchwright_fx.schedule.cancels import is_cancel
from torchwright_fx.schedule.plan import EMBED_STAGE, MLP, Plan, end_stage, stage_parity

FORMATS = {".png": "png", ".svg": "svg"}
COLOURS = {"embedding": "#7f9fc6", "attention": "#f0a050", "mlp": "#74b87a",
           "reserved": "#c8c8c8"}


@dataclass(frozen=True)
class Bar:
    """One value's columns over the stages that hold them."""

    label: str  # the producer's fx node name (embedding: the node that reads it, and its token)
    kind: str  # embedding | attention | mlp | reserved
    first_column: int
    n_columns: int
    written: int  # stage that writes it (-1: the embedding)
    last_read: int  # stage of its last reader (2 * n_layers: the output reads it)
    cancelled: int | None  # the attention stage whose cancel head zeroes it, or None

    @property
    def columns(self) -> range:
        return range(self.first_column, self.first_column + self.n_columns)


def plan_format(path: str | os.PathLike) -> str:
    """``png`` or ``svg`` from the file's extension; any other is a ValueError."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(f"{str(path)!r}: the plan picture is PNG or SVG, chosen by the file's "
                         f"extension (.png or .svg), not {suffix or 'no extension'!r}")
    return FORMATS[suffix]


def signal_labels(prog: Program) -> dict[int, str]:
    """Live signal -> its label: its producer's fx node name; for a value of the embedding, the
    first fx node whose value is exactly it, beside the signal's own name (``x['1']``)."""
    out: dict[int, str] = {}
    for node, rec in prog.nodes.items():
        for lin in rec.columns:
            if lin.const == 0.0 and len(lin.terms) == 1:
                (sid, coef), = lin.terms.items()
                sig = prog.signals.get(sid)
                if (coef == 1.0 and sig is not None and sig.producer == EMBED
                        and sid not in out and not sig.name.startswith(node + "[")):
                    out[sid] = f"{node}: {sig.name}"
    for sid in prog.live_signals():
        sig = prog.signals[sid]
        if sig.producer != EMBED:
            out[sid] = prog.producers[sig.producer].name
        elif sid not in out:
            out[sid] = sig.name
    return out


def bars(prog: Program, plan: Plan) -> list[Bar]:
    """Every value's bar (consecutive columns of one producer with the same span merged),
    the reserved columns first."""
    end = end_stage(plan.n_layers)
    out = [Bar("1.0 (constant)", "reserved", plan.const_col, 1, EMBED_STAGE, end, None)]
    pin = "1.0 (second constant)" if prog.precision.half else "RMSNorm pin"  # columns.py
    out += [Bar(pin, "reserved", c, 1, EMBED_STAGE, end, None) for c in plan.pin_cols]
    spans = plan.lifetimes(prog)
    labels = signal_labels(prog)
    keyed = []
    for sid in prog.live_signals():
        sig = prog.signals[sid]
        if sig.producer == EMBED:
            kind, who = "embedding", -1 - sid  # each value of the embedding on its own
        else:
            kind = "attention" if isinstance(prog.producers[sig.producer], Head) else "mlp"
            who = sig.producer
        written, last = spans[sid]
        keyed.append((Bar(labels[sid], kind, plan.columns[sid], 1, written, last,
                          plan.cancels.get(sid)), who))
    keyed.sort(key=lambda bk: (bk[0].written, bk[1], bk[0].first_column))
    pending: Bar | None = None
    owner = None
    for bar, who in keyed:
        if (pending is not None and who == owner
                and bar.first_column == pending.first_column + pending.n_columns
                and (bar.last_read, bar.cancelled) == (pending.last_read, pending.cancelled)):
            pending = Bar(pending.label, pending.kind, pending.first_column,
                          pending.n_columns + 1, pending.written, pending.last_read,
                          pending.cancelled)
            continue
        if pending is not None:
            out.append(pending)
        pending, owner = bar, who
    if pending is not None:
        out.append(pending)
    return out


def _columns(cols: Iterable[int]) -> str:
    """'3-5, 9': sorted columns as ranges."""
    ordered = sorted(set(cols))
    runs: list[list[int]] = []
    for c in ordered:
        if runs and c == runs[-1][1] + 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs) or "none"


def _plural(n: int, word: str) -> str:
    return f"{word}{'s' if n != 1 else ''}"


def plan_text(prog: Program, plan: Plan, placement: Placement, title: str = "") -> str:
    """The plan layer by layer: each head and the fx node it computes, each MLP node and its
    lanes, the columns each writes, and the columns each cancel head zeroes."""
    labels = signal_labels(prog)

    def cols(sids: Iterable[int]) -> str:
        found = [plan.columns[s] for s in sids if s in plan.columns]
        return f"{_plural(len(set(found)), 'column')} {_columns(found)}"

    pins = len(plan.pin_cols)
    lines = [f"plan{' of ' + title if title else ''}: {plan.n_layers} "
             f"{_plural(plan.n_layers, 'layer')}, "
             f"d_model={plan.d_model} (column {plan.const_col}: the constant 1.0, "
             + (f"{_plural(pins, 'column')} {_columns(plan.pin_cols)}: "
                + ("a second constant" if prog.precision.half else
                   f"RMSNorm {_plural(pins, 'pin')}") if pins else "no other reserved column")
             + f"), {placement.n_heads} heads/layer, {placement.d_ff} lanes/layer"]
    embedded = sorted((plan.columns[s], s) for s in prog.live_signals()
                      if prog.signals[s].producer == EMBED)
    lines.append(f"embedding: {len(embedded)} {_plural(len(embedded), 'value')}")
    lines += [f"  {labels[s]} -> column {c}" for c, s in embedded]
    for i, layer in enumerate(placement.layers):
        n_prog = len(layer.heads) - layer.n_cancel
        lines.append(f"layer {i} attention: {n_prog} {_plural(n_prog, 'head')}"
                     + (f" + {layer.n_cancel} cancel" if layer.n_cancel else ""))
        for h, head in enumerate(layer.heads[:n_prog]):
            lines.append(f"  head {h}: {head.name} -> {cols(head.outputs)}")
        for h, head in enumerate(layer.heads[n_prog:], start=n_prog):
            zeroed = ", ".join(f"{plan.columns[s]} ({labels[s]})" for s in
                               sorted(head.outputs, key=lambda s: plan.columns[s]))
            lines.append(f"  head {h}: cancel, zeroes {_plural(len(head.outputs), 'column')} "
                         f"{zeroed}")
        lines.append(f"layer {i} MLP: {len(layer.lane_index)} lanes")
        for f in layer.ffns:
            lanes = sorted(set(layer.lanes_of(f)))
            verb = ", zeroes" if is_cancel(f) else " ->"  # cancel lanes: schedule/cancels
            lines.append(f"  {f.name}: {_plural(len(lanes), 'lane')} {_columns(lanes)}{verb} "
                         f"{cols(f.outputs)}")
    lines.append("output (lm_head) reads: " + ", ".join(
        f"{labels[s]} ({plan.columns[s]})"
        for s in sorted(prog.output.signals(), key=lambda s: plan.columns[s])))
    return "\n".join(lines)


def _figure(prog: Program, plan: Plan, placement: Placement, title: str) -> Any:
    from matplotlib.artist import Artist
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch, Rectangle
    from matplotlib.ticker import MaxNLocator

    n = plan.n_layers
    end = 2 * n
    d = plan.d_model
    cells = end + 2  # the embedding, 2 per layer, the output
    row_in = min(0.16, 40.0 / max(d, 1))  # inches per column; tall programs get thinner rows
    fontsize = max(2.0, min(7.0, row_in * 72 * 0.62))
    fig = Figure(figsize=(2.0 + 1.35 * cells, 1.6 + row_in * d))
    ax = fig.add_subplot()
    for i in range(0, n, 2):  # a pale background on every other layer
        ax.axvspan(2 * i, 2 * i + 2, color="#f3f3f3", zorder=0)
    for b in bars(prog, plan):
        colour = COLOURS[b.kind]
        y0, h = b.first_column, b.n_columns
        stop = b.cancelled + 1 if b.cancelled is not None else end
        if b.last_read >= end:
            stop = end + 1  # the output reads it
        live_to = min(b.last_read + 1, stop)
        outline = Rectangle((b.written, y0), stop - b.written, h, facecolor="none",
                            edgecolor="#555555", linewidth=0.4, zorder=3)
        ax.add_patch(Rectangle((b.written, y0), live_to - b.written, h, facecolor=colour,
                               edgecolor="none", zorder=2))
        if stop > live_to:
            ax.add_patch(Rectangle((live_to, y0), stop - live_to, h, facecolor=colour,
                                   alpha=0.3, edgecolor="none", zorder=2))
        ax.add_patch(outline)
        if b.cancelled is not None:
            ax.plot([b.cancelled + 0.5], [y0 + h / 2], marker="x", color="#c03030",
                    markersize=max(2.0, fontsize * 0.8), zorder=4)
        text = ax.text(b.written + 0.06, y0 + h / 2, b.label, fontsize=fontsize,
                       va="center", ha="left", zorder=5, parse_math=False)
        text.set_clip_path(outline)
    ticks, names = [EMBED_STAGE + 0.5], ["embedding"]
    for i, layer in enumerate(placement.layers):
        heads = len(layer.heads) - layer.n_cancel
        cancel = f" +{layer.n_cancel} cancel" if layer.n_cancel else ""
        ticks += [2 * i + 0.5, 2 * i + 1.5]
        lanes = len(layer.lane_index)
        names += [f"L{i} attention\n{heads} {_plural(heads, 'head')}{cancel}",
                  f"L{i} MLP\n{lanes} {_plural(lanes, 'lane')}"]
    ticks.append(end + 0.5)
    names.append("output")
    ax.set_xticks(ticks, names, fontsize=7)
    ax.set_xlim(EMBED_STAGE, end + 1)
    ax.set_ylim(0, d)
    ax.set_ylabel("residual column")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    for x in range(EMBED_STAGE + 1, end + 1):
        ax.axvline(x, color="#dddddd" if stage_parity(x) == MLP else "#999999", linewidth=0.5,
                   zorder=1)
    ax.set_title(title or "plan", fontsize=9)
    legend: list[Artist] = [Patch(facecolor=COLOURS[k], label=k)
                            for k in ("embedding", "attention", "mlp")]
    legend += [Patch(facecolor=COLOURS["mlp"], alpha=0.3, label="held, no longer read"),
               Patch(facecolor=COLOURS["reserved"], label="constant / RMSNorm pins"),
               Line2D([], [], marker="x", color="#c03030", linestyle="none",
                      label="cancelled (zeroed)")]
    ax.legend(handles=legend, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)
    fig.tight_layout()
    return fig


def _save(fig: Any, target: Any, fmt: str) -> None:
    import matplotlib

    # text stays text in the SVG (searchable, and the node names can be checked); a fixed
    # salt and no date make the same plan give the same file
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "torchwright_fx"}):
        metadata = {"Date": None} if fmt == "svg" else {}
        fig.savefig(target, format=fmt, dpi=100, metadata=metadata)


def plot_plan(prog: Program, plan: Plan, placement: Placement, path: str | os.PathLike,
              title: str = "") -> Path:
    """Write the picture to ``path``: PNG or SVG by its extension (else ValueError)."""
    fmt = plan_format(path)
    fig = _figure(prog, plan, placement, title)
    out = Path(path)
    _save(fig, out, fmt)
    return out


def plan_svg(prog: Program, plan: Plan, placement: Placement, title: str = "") -> str:
    """The picture as SVG text (from ``<svg``, for inline HTML)."""
    buf = io.StringIO()
    _save(_figure(prog, plan, placement, title), buf, "svg")
    text = buf.getvalue()
    return text[text.find("<svg"):]
