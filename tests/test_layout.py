"""The codebase's layout rules (docs/architecture.md), checked on the source itself:

- imports point down the pipeline: a module imports only from its own layer or earlier ones,
  and module-level imports form no circle; imports under ``if TYPE_CHECKING:`` count for both
  (an annotation that needs a later layer is a circle waiting for a runtime import: take a
  Protocol defined in the lower layer instead, as ``verify/protocol.py`` does);
- construction constants live in ``base/numerics.py``: a numeric module-level constant anywhere
  else fails here unless it is listed below with the reason it is not one;
- no file in the package is over 500 lines.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "torchwright_fx"

# Layers, earliest first; a module belongs to the layer holding the longest prefix of its name.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("vocab", "progress", "base")),
    ("ir", ("ir",)),
    ("constructions", ("ops",)),
    ("capture", ("capture",)),
    ("analysis", ("analysis",)),
    ("lower", ("lower",)),
    ("op families", ("families",)),
    ("passes", ("passes",)),
    ("schedule", ("schedule",)),
    ("emit", ("emit",)),
    ("backends", ("backends",)),
    ("pipeline", ("pipeline",)),
    ("verify", ("verify",)),
    # entry points: what users import
    ("entry points", ("api", "cli", "onnx", "ops.swiglu", "ops.relu", "")),
]

# Module-level numbers outside base/numerics.py that are not construction constants.
NOT_CONSTRUCTION = {
    "backends/card.py": {"VLLM_HEAD_SIZES"},  # a fact about vLLM, for the model card
    "backends/runtime.py": {"ROWS"},  # query rows per block of a long prefill (speed, memory)
    "base/machines.py": {"FP32", "FP16", "BF16"},  # the IEEE formats' own parameters
    "backends/onnx": {"FORMAT_VERSION", "INTRA_OP_THREADS"},  # file format, runtime threads
    "ir/graph.py": {"EMBED", "ALL_POSITIONS"},  # the embedding's producer id; a sentinel
    "ir/ranges.py": {"_memo", "BOOL"},  # a cache size; the 0/1 interval
    "ops/lobe_bound.py": {"SQRT2"},  # the length of a diagonal
    "progress.py": {"REDRAW_SECONDS", "SUMMARY_SECONDS"},  # display timing
    "schedule/": {"TIME_LIMITS", "WALL_FACTOR", "PROBING_LIMIT", "CACHE_VERSION",
                  "EMBED_STAGE"},  # solver budgets, cache format, the embedding's stage
}
MAX_LINES = 500


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _layer(module: str) -> int:
    matches = [(len(p), i) for i, (_, prefixes) in enumerate(LAYERS) for p in prefixes
               if module == p or module.startswith(p + ".")]
    assert matches, f"module {module!r} is in no layer: add it to LAYERS"
    return max(matches)[1]


def _target(name: str) -> str | None:
    """A dotted import name as a module of the package (None: outside it)."""
    if name == "torchwright_fx":
        return ""
    if not name.startswith("torchwright_fx."):
        return None
    name = name[len("torchwright_fx."):]
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def _imports(path: Path) -> list[tuple[str, bool, int]]:
    """(imported module, at module level, line) for every import of the package, those under
    ``if TYPE_CHECKING:`` included (at module level when the block is)."""
    tree = ast.parse(path.read_text())
    out: list[tuple[str, bool, int]] = []

    def visit(node: ast.AST, top: bool) -> None:
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                t = _target(f"{node.module}.{alias.name}")
                if t is not None:
                    out.append((t, top, node.lineno))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                t = _target(alias.name)
                if t is not None:
                    out.append((t, top, node.lineno))
        inner = top and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                               ast.Lambda))
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(tree, True)
    return out


def test_imports_point_down_the_pipeline():
    backwards = []
    for module, path in MODULES.items():
        for target, _, line in _imports(path):
            if _layer(target) > _layer(module):
                backwards.append(f"{path.relative_to(PACKAGE.parent)}:{line}: "
                                 f"{module or 'torchwright_fx'} ({LAYERS[_layer(module)][0]}) "
                                 f"imports {target} ({LAYERS[_layer(target)][0]})")
    assert not backwards, "imports against the pipeline:\n" + "\n".join(backwards)


def _circle(graph: dict[str, set[str]]) -> list[str] | None:
    """A circle in a module -> imported modules graph (the first found), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def walk(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for t in sorted(graph.get(m, ())):
            if state.get(t) == 1:
                return stack[stack.index(t):] + [t]
            if t not in state:
                found = walk(t)
                if found:
                    return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            circle = walk(m)
            if circle:
                return circle
    return None


def test_no_import_circle():
    graph = {m: {t for t, top, _ in _imports(p) if top and t != m}
             for m, p in MODULES.items()}
    # a package's __init__ re-exporting its own submodules is not a circle
    for m in graph:
        graph[m] = {t for t in graph[m] if not (m == "" or t.startswith(m + ".") and m)}
    circle = _circle(graph)
    assert circle is None, "import circle: " + " -> ".join(circle)


def _numbers(value: ast.AST) -> bool:
    return any(isinstance(n, ast.Constant) and isinstance(n.value, (int, float))
               and not isinstance(n.value, bool) for n in ast.walk(value))


def test_construction_constants_live_in_numerics():
    stray = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel == "base/numerics.py":
            continue
        allowed = set().union(*(names for prefix, names in NOT_CONSTRUCTION.items()
                                if rel.startswith(prefix)))
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                targets, value = [node.target], node.value
            else:
                continue
            for t in targets:
                if isinstance(t, ast.Name) and _numbers(value) and t.id not in allowed:
                    stray.append(f"torchwright_fx/{rel}:{node.lineno}: {t.id} = "
                                 f"{ast.unparse(value)[:60]}")
    assert not stray, ("numeric constants outside base/numerics.py (move them there, with the "
                       "bound they come from; or list them in NOT_CONSTRUCTION with why):\n"
                       + "\n".join(stray))


def test_no_file_over_500_lines():
    long = [f"{p.relative_to(PACKAGE.parent)}: {n} lines" for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES]
    assert not long, "split these files by responsibility:\n" + "\n".join(long)


def test_the_layer_rule_catches_a_backward_import(tmp_path):
    """The checker itself: a capture module importing lowering is reported; an import under
    ``if TYPE_CHECKING:`` counts (at module level), one inside a function is not top-level;
    two modules importing each other, one of them only for annotations, are a circle."""
    assert _layer("capture.tracer") < _layer("lower.context")
    assert _layer("ops.ffn.steps") < _layer("capture.registry") < _layer("families.intrinsics")
    assert _layer("ops.swiglu") == len(LAYERS) - 1
    probe = tmp_path / "m.py"
    probe.write_text("from torchwright_fx.lower.context import LowerCtx\n"
                     "def f():\n    from torchwright_fx.api import Compiled\n"
                     "from typing import TYPE_CHECKING\n"
                     "if TYPE_CHECKING:\n    from torchwright_fx.pipeline import Build\n")
    assert _imports(probe) == [("lower.context", True, 1), ("api", False, 3),
                               ("pipeline", True, 6)]
    assert _circle({"api": {"verify.probe"}, "verify.probe": {"api"}}) == \
        ["api", "verify.probe", "api"]
    assert _circle({"api": {"verify.probe"}, "verify.probe": {"backends.runtime"}}) is None
