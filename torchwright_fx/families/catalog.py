"""The op table of docs/architecture.md, generated from the registry (``scripts/op_table.py``
writes it; ``tests/test_docs.py`` fails when the doc is stale)."""

from __future__ import annotations

from collections import defaultdict

from torchwright_fx.capture.registry import OPS, OpSpec


def _family(spec: OpSpec) -> str:
    rule = spec.lower or spec.facts
    module = getattr(rule, "__module__", "") or ""
    return module.rsplit(".", 1)[-1] if module.startswith("torchwright_fx.families.") else "?"


def _kind(spec: OpSpec) -> str:
    if spec.intrinsic:
        return "tw" if spec.machine is None else "library"
    if spec.name.startswith("Tensor."):
        return "method"
    if spec.name.startswith("operator."):
        return "operator"
    return "torch"


def op_table() -> str:
    """One markdown row per family file: its torch functions, Tensor methods, Python operators
    and ``tw.*`` intrinsics (library ops of ``ops.swiglu`` / ``ops.relu`` once per name, once
    those modules are imported: ``scripts/op_table.py`` imports them)."""
    rows: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for spec in OPS.values():
        if spec.lower is None:
            continue
        name = spec.name
        kind = _kind(spec)
        if kind == "method":
            name = name.removeprefix("Tensor.")
        elif kind == "operator":
            name = name.removeprefix("operator.")
        elif kind == "library":
            name = name.removeprefix("tw.")
        rows[_family(spec)][kind].add(name)
    out = ["| family file | torch functions | Tensor methods | operators | `tw.*` | library "
           "(`ops.swiglu`, `ops.relu`) |", "|---|---|---|---|---|---|"]
    for family in sorted(rows):
        cells = [", ".join(f"`{n}`" for n in sorted(rows[family][k]))
                 for k in ("torch", "method", "operator", "tw", "library")]
        out.append(f"| `families/{family}.py` | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"
