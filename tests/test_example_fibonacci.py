"""fibonacci beyond the generic suite: the answer is read back autoregressively (a typed
prefix of the answer is continued, not restarted), and the number of terms is a parameter."""

from __future__ import annotations

from examples import fibonacci

ANSWER = "0101020305081321"


def test_continues_any_prefix_of_its_own_answer():
    for cut in range(len(ANSWER) + 1):
        prompt = "fibonacci\n" + ANSWER[:cut]
        assert fibonacci.program.generate(prompt) == ANSWER[cut:], prompt


def test_eleven_terms():
    program = fibonacci.make(n_terms=11)
    assert program.generate("fibonacci\n") == "0101020305081321345589"
    assert program.generate("fibonacci\n0307") == fibonacci.oracle("fibonacci\n0307", 11)
