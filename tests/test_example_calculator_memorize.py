"""calculator_memorize: one layer of tables (the generic tests run all 300 prompts)."""

from __future__ import annotations

import examples.calculator_memorize as ex


def test_one_fact_per_prompt_and_one_layer():
    assert len(ex.facts()) == 300
    assert ex.program.stats()["layers"] == 1  # the seed: 11 layers at d=4096
