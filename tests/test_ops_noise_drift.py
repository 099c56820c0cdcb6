"""The committed error measurements (docs/op_noise.json, docs/numerical_noise.md) match what
the code measures now: every op in the JSON is re-measured, through the compiled weights, with
the same seeded inputs. Any drift beyond the committed tolerance means the constructions
changed: rerun scripts/measure_noise.py and commit both files."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
RERUN = "rerun scripts/measure_noise.py (and commit docs/op_noise.json, docs/numerical_noise.md)"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("measure_noise",
                                                  ROOT / "scripts" / "measure_noise.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def script() -> ModuleType:
    return _script()


@pytest.fixture(scope="module")
def committed(script: ModuleType) -> dict[str, Any]:
    return json.loads(script.JSON_PATH.read_text())


@pytest.fixture(scope="module")
def fresh(script: ModuleType, committed: dict[str, Any]) -> dict[str, Any]:
    return script.measure(samples=committed["samples"])


def test_measurements_match_the_committed_numbers(script, committed, fresh):
    problems = script.drift(fresh, committed)
    assert not problems, f"op noise drifted from docs/op_noise.json; {RERUN}:\n" + \
        "\n".join(problems[:30])


def test_every_committed_op_was_remeasured_on_both_machines(committed, fresh):
    for name, entry in committed["ops"].items():
        assert set(fresh["ops"][name]["measured"]) == set(entry["measured"]) == \
            {"swiglu", "relu"}, f"{name}: {RERUN}"


def test_measurements_stay_within_their_bounds(script, fresh):
    problems = script.over_bound(fresh)
    assert not problems, "\n".join(problems)


def test_the_markdown_page_is_generated_from_the_json(script, committed):
    page = script.MD_PATH.read_text()
    assert page == script.render_markdown(committed) + "\n", \
        f"docs/numerical_noise.md is out of date; {RERUN}"
