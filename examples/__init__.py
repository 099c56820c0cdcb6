"""Example programs. Each module defines ``VOCAB``, ``make(**params) -> tw.Compiled``,
``program`` (the default build), ``oracle(prompt) -> str`` (plain Python, independent of the
program), ``inputs()`` (the prompts its tests enumerate) and ``DEMOS`` (a few prompts)."""

NAMES = ["binary_increment", "adder_1digit"]
