"""Differential fuzzing of precision="half" (``scripts/fuzz.py --precision half``).

The property: every generated program is refused with ``tw.CompileError``, or its half build
prints what the eager reference prints on every valid prompt, in the in-process runtime and
through transformers from the saved directory in float32, float16 and bfloat16, eager and sdpa
(``fuzzgen.HF_CONFIGS``). ``test_fuzz_half_seeded`` runs a handful of seeded programs (the
generator biased toward what half supports); ``test_half_check_sees_a_wrong_dtype`` makes sure
the check itself fails when one dtype's model is wrong. Run more with
``python scripts/fuzz.py --precision half --programs N --seed S``.
"""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import fuzzgen
import pytest
import torch
from transformers import AutoModelForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

import fuzz  # noqa: E402

SEED = 7
PROGRAMS = 30

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.one_thread


def test_fuzz_half_seeded():
    counts: collections.Counter[str] = collections.Counter()
    failures = []
    for i in range(PROGRAMS):
        prog, prompts = fuzzgen.random_case(fuzz.case_seed(SEED, i), seq_lens=(16, 32, 64),
                                            precision="half")
        assert prog.precision == "half"
        out = fuzzgen.check(prog, prompts)
        counts[out.status] += 1
        if out.status in ("mismatch", "crash"):
            failures.append(f"program {i} (scripts/fuzz.py --precision half --seed {SEED} "
                            f"--first {i} --programs 1):\n{out.report()}\nprompts: {prompts!r}")
    assert not failures, f"{counts}:\n\n" + "\n\n".join(failures)
    assert counts["matched"] >= 1, counts  # some program compiled and was run in every dtype


SHIFTED = """def prog(x):
    v0 = tw.is_token(x, 'a')
    v1 = tw.shift(v0, 1)
    return torch.where(v1.bool(), tw.token('b'), tw.token('a'))
"""


def test_half_check_sees_a_wrong_dtype(monkeypatch):
    """A model that is wrong in float16 only (two rows of lm_head swapped after loading) is a
    mismatch that names float16; the same program with the model left alone matches."""
    prog = fuzzgen.Program(SHIFTED, "ab01\n", "swiglu", 16, 0, 1, "half")
    prompts = ["ab", "aab\n", "ba"]
    assert fuzzgen.check(prog, prompts).status == "matched"

    load = AutoModelForCausalLM.from_pretrained
    vocab = prog.vocab
    a, b = vocab.encode("ab", bos=False)

    def wrong_in_fp16(*args, **kwargs):
        model = load(*args, **kwargs)
        if kwargs.get("dtype") == torch.float16:
            w = model.lm_head.weight.data
            w[[a, b]] = w[[b, a]]
        return model

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", wrong_in_fp16)
    out = fuzzgen.check(prog, prompts)
    assert out.status == "mismatch", out.report()
    where = {got.rsplit("[", 1)[-1] for _, _, got in out.mismatches}
    assert where and all("float16" in w for w in where), out.report()
    assert any("eager" in w for w in where) and any("sdpa" in w for w in where), out.report()
