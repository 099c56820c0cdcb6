"""The docs are true to the code and stand alone: the op table of docs/architecture.md is the
registry's, nothing cites a design file a clone does not have, and every file a doc names in
backticks as a repository path exists."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_the_op_table_names_only_registered_ops():
    """Every op the generated table of docs/architecture.md names is registered (a new op
    appears there when ``make docs`` regenerates it)."""
    done = subprocess.run([sys.executable, "-c", "import scripts.op_table as t, sys; "
                           "sys.stdout.write(t.op_table())"], cwd=ROOT, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    doc = (ROOT / "docs" / "architecture.md").read_text()
    table = doc.split("<!-- op-table:begin", 1)[1].split("<!-- op-table:end -->", 1)[0]
    cells = lambda text: {c for line in text.splitlines()[3:]  # noqa: E731
                          for c in re.findall(r"`([^`]+)`", line)}
    stale = cells(table) - cells("\n" + done.stdout)
    assert not stale, f"docs/architecture.md names ops that are not registered: {stale}"


def test_nothing_cites_a_design_file_outside_the_repository():
    cited = []
    for path in [*DOCS, *ROOT.joinpath("torchwright_fx").rglob("*.py"),
                 *ROOT.joinpath("scripts").rglob("*.py")]:
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"\bDESIGN(\.md)? ?§|\bDESIGN\.md\b", line):
                cited.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not cited, "cite docs/design-notes.md instead:\n" + "\n".join(cited)


def test_paths_named_in_the_docs_exist():
    missing = []
    pattern = re.compile(r"`((?:torchwright_fx|tests|scripts|examples|docs)/[\w/.-]+\.(?:py|md))`")
    for doc in DOCS:
        for path in pattern.findall(doc.read_text()):
            if not (ROOT / path).exists():
                missing.append(f"{doc.relative_to(ROOT)}: {path}")
    assert not missing, "\n".join(missing)


def test_readme_has_no_placeholder():
    text = (ROOT / "README.md").read_text()
    found = re.findall(r"\b(?:TODO|TBD|XXX|[A-Z]+_[A-Z_]*TIME)\b", text)
    assert not found, found
