"""Differential fuzzing: random programs (``tests/fuzzgen.py``), compiled vs eager reference.

The property: every generated program is refused at compile time with ``tw.CompileError``, or
the compiled model (in-process runtime) prints what the eager reference prints on every
prompt (prompts on which the reference itself raises are skipped as invalid input).

``test_fuzz_default`` runs 500 programs and reports every failing one (not only the first);
``test_fuzz_many`` (slow) runs 2500 and lets hypothesis shrink the first failure. Run more
with ``python scripts/fuzz.py --programs N --seed S``; shrunk bugs live in
``tests/test_fuzz_regressions.py``.
"""

from __future__ import annotations

import fuzzgen
import pytest
from hypothesis import HealthCheck, Phase, given, settings

DEFAULT_PROGRAMS = 500
SLOW_PROGRAMS = 2500
_COMMON = {"deadline": None, "derandomize": True, "database": None,
           "suppress_health_check": list(HealthCheck)}


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.one_thread


def test_fuzz_default():
    failures: dict[str, str] = {}  # source -> report (hypothesis revisits near-duplicates)
    counts: dict[str, int] = {}

    @settings(max_examples=DEFAULT_PROGRAMS, phases=[Phase.explicit, Phase.generate], **_COMMON)
    @given(fuzzgen.programs())
    def run(case):
        out = fuzzgen.check(*case)
        counts[out.status] = counts.get(out.status, 0) + 1
        if out.status in ("mismatch", "crash"):
            failures.setdefault(case[0].describe(), out.report())

    run()
    assert sum(counts.values()) >= 200, counts
    assert not failures, (f"{len(failures)} distinct programs failed ({counts}):\n\n"
                          + "\n\n".join(list(failures.values())[:10]))


@pytest.mark.slow
@settings(max_examples=SLOW_PROGRAMS, **_COMMON)
@given(fuzzgen.programs())
def test_fuzz_many(case):
    out = fuzzgen.check(*case)
    assert out.status not in ("mismatch", "crash"), out.report()
