"""Large generated programs (scripts/bigprog.py) compile and are right.

No timing assertions: the compile-time and memory figures live in the scaling section of
docs/benchmarks.md (``make bench``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

import bigprog  # noqa: E402


def check(n: int, prompts: int = 4) -> None:
    prog = bigprog.generate(n, seed=0)
    compiled = prog.compile().compile()
    nodes = len(compiled.traced.graph.nodes)
    assert 0.9 * n <= nodes <= n, nodes
    for prompt in prog.prompts(prompts, seed=1):
        want = compiled.reference(prompt)
        assert len(want) == bigprog.ANSWER and want.isdigit(), (prompt, want)
        assert compiled.generate(prompt) == want, prompt


def test_generator_is_seeded() -> None:
    assert bigprog.generate(1000, seed=3).source == bigprog.generate(1000, seed=3).source
    assert bigprog.generate(1000, seed=3).source != bigprog.generate(1000, seed=4).source


def test_1k_node_program_compiles_and_is_right() -> None:
    check(1000)


@pytest.mark.slow
def test_10k_node_program_compiles_and_is_right() -> None:
    check(10000, prompts=3)  # about 490 M parameters: seconds a prompt


@pytest.mark.slow
def test_1k_node_program_with_cpsat_has_a_status_and_a_bound() -> None:
    prog = bigprog.generate(1000, seed=0)
    plan = prog.compile(optimize=1).build.plan
    assert plan.status.split()[0] in ("optimal", "feasible"), plan.status
    assert plan.proven_bound is not None and plan.proven_bound <= plan.n_layers
