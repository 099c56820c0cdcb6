"""range_printer: the documented format, every single item through the compiled model."""

from __future__ import annotations

from conftest import agrees

import examples.range_printer as ex


def test_format():
    assert ex.oracle("(2,5),(7,9),(0,3)\n") == "2 3 4 7 8 0 1 2"
    assert ex.oracle("(5,2),(1,3)\n") == "1 2"  # lo >= hi: an empty range
    assert ex.oracle("(9,9),(4,4)\n") == ""
    assert ex.oracle("(0,9),(0,9),(0,9)\n").count(" ") == 26


def test_every_single_item():
    for lo in range(10):
        for hi in range(10):
            prompt = f"({lo},{hi})\n"
            assert agrees(ex.program, prompt, ex.oracle(prompt)), prompt
