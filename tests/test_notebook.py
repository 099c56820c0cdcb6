"""docs/tutorial.ipynb runs top to bottom on a real IPython kernel (nbclient + ipykernel, the
kernel of this interpreter), and shows what it says it shows: the Traced and Compiled tables
naming the fx nodes, the plan picture, and transformers' answers equal to the reference."""

from __future__ import annotations

import base64
import json
import os
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOK = Path(__file__).resolve().parents[1] / "docs" / "tutorial.ipynb"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SVG_NS = "{http://www.w3.org/2000/svg}"
KERNEL = "torchwright-fx-tests"
TIME_LIMIT = 120  # seconds for the whole notebook; it runs in about 10 (budget: 30)

# appended to the executed copy only: what the test compares
CHECK_CELL = """
import json as _json
print("TW-CHECK " + _json.dumps({
    "answers": answers,
    "reference": {p: program.reference(p) for p in prompts},
    "generate": {p: program.generate(p) for p in prompts},
    "executable": __import__("sys").executable,
}))
"""


@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(CHECK_CELL))
    workdir = tmp_path_factory.mktemp("tutorial")
    # a kernel spec of this interpreter, found first (JUPYTER_PATH comes before the user's
    # and the system's kernels): the notebook runs in this venv whatever else is installed
    specs = tmp_path_factory.mktemp("jupyter")
    (specs / "kernels" / KERNEL).mkdir(parents=True)
    (specs / "kernels" / KERNEL / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "torchwright_fx tests", "language": "python"}))
    saved = {k: os.environ.get(k) for k in ("JUPYTER_PATH", "OMP_NUM_THREADS")}
    os.environ["JUPYTER_PATH"] = os.pathsep.join(
        [str(specs)] + ([saved["JUPYTER_PATH"]] if saved["JUPYTER_PATH"] else []))
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # the kernel inherits the environment
    try:
        client = nbclient.NotebookClient(nb, kernel_name=KERNEL, timeout=TIME_LIMIT,
                                         resources={"metadata": {"path": str(workdir)}})
        start = time.perf_counter()
        client.execute()
        seconds = time.perf_counter() - start
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    print(f"tutorial notebook executed in {seconds:.1f}s")
    return nb, workdir, seconds


def tagged(nb, tag: str):
    cells = [c for c in nb.cells if tag in c.get("metadata", {}).get("tags", [])]
    assert len(cells) == 1, tag
    return cells[0]


def data_of(cell, mime: str) -> str:
    found = [o["data"][mime] for o in cell.outputs
             if o.get("output_type") in ("execute_result", "display_data") and mime in o["data"]]
    assert found, (mime, cell.outputs)
    return found[0]


def test_every_cell_runs_without_error(executed):
    nb, workdir, seconds = executed
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not [o for o in cell.outputs if o["output_type"] == "error"], cell.source
            assert cell.execution_count is not None
    assert seconds < 60, f"the tutorial took {seconds:.1f}s (meant to take under 30)"
    assert (workdir / "build" / "tutorial" / "shout_hf" / "circuit.json").exists()


def test_traced_and_compiled_html_name_the_fx_nodes(executed):
    nb, _, _ = executed
    traced = data_of(tagged(nb, "traced"), "text/html")
    assert "<b>Traced</b>" in traced and "<table>" in traced
    for name in ("is_token", "lookup", "shift_2", "latch", "emit", "tw.latch"):
        assert f">{name}<" in traced, name
    assert "newline = tw.is_token(x," in traced  # the user's source line
    compiled = data_of(tagged(nb, "compiled"), "text/html")
    assert "shout: 2 layers" in compiled and "certified" in compiled
    for name in ("shift_1", "latch", "emit"):
        assert name in compiled, name
    svg = compiled[compiled.index("<svg"):compiled.index("</svg>") + len("</svg>")]
    root = ET.fromstring(svg)
    texts = {"".join(t.itertext()) for t in root.iter(f"{SVG_NS}text")}
    assert {"shift", "shift_1", "shift_2", "latch", "emit"} <= texts, texts


def test_the_plan_picture_is_a_png(executed):
    nb, workdir, _ = executed
    png = base64.b64decode(data_of(tagged(nb, "plan"), "image/png"))
    assert png.startswith(PNG_MAGIC) and len(png) > 5000
    assert (workdir / "build" / "tutorial" / "shout_plan.png").read_bytes() == png


def test_pipeline_answers_equal_the_reference(executed):
    nb, _, _ = executed
    shown = data_of(tagged(nb, "pipeline"), "text/plain")
    assert "'cab\\n': 'CAB'" in shown, shown
    out = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o["output_type"] == "stream")
    check = json.loads(out.split("TW-CHECK ", 1)[1])
    assert check["executable"] == sys.executable  # the kernel ran in this venv
    assert check["answers"] == check["reference"] == check["generate"]
    assert check["answers"] == {p: p.strip().upper() for p in check["answers"]}
