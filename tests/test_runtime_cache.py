"""The in-process runtime (issue 36 item 6, issue 32): KV-cached generation gives the uncached
loop's tokens and logits bit for bit; ``dtype=`` computes as transformers' eager Phi-3 does in
half precision; ``verify(..., dtype=torch.bfloat16)`` reports what an fp32 build gets wrong
there; the reference checks a draft of the answer in one run of the eager function."""

from __future__ import annotations

import importlib

import pytest
import torch

import torchwright_fx as tw
from torchwright_fx.backends import runtime

CACHED = ("adder", "binary_increment", "calculator_simple", "fibonacci", "range_printer",
          "sort_digits_v1")
TWO_THREADS = ("adder", "range_printer", "sort_digits_v1")  # two threads are slow when shared


def _example(name: str):
    return importlib.import_module(f"examples.{name}")


def _prompts(module) -> list[str]:
    return list(dict.fromkeys([*module.DEMOS, *module.EDGE_CASES[:2]]))


def _uncached(m, ids: list[int]) -> tuple[list[int], list[torch.Tensor]]:
    """Greedy decoding as the runtime did before the cache: a full forward per new token."""
    seq, steps = list(ids), []
    while len(seq) < m.max_seq_len:
        steps.append(runtime.forward(m, seq)[0][-1])
        nxt = int(steps[-1].argmax())
        if nxt == m.eos_id:
            break
        seq.append(nxt)
    return seq[len(ids):], steps


@pytest.mark.parametrize(("name", "threads"), [*((name, 1) for name in CACHED),
                                               *((name, 2) for name in TWO_THREADS)])
def test_cached_generation_is_the_uncached_loop_bit_for_bit(name, threads):
    """MKL sums a row in another order below 4 rows on one thread and 12 on two: a new position
    is the last row of a padded block, and a shorter cache is recomputed."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        _cached_equals_uncached(name)
    finally:
        torch.set_num_threads(before)


def _cached_equals_uncached(name: str) -> None:
    module = _example(name)
    program = module.program
    for prompt in _prompts(module):
        ids = program.vocab.encode(prompt)
        steps: list[torch.Tensor] = []
        got = runtime.generate(program.weights, ids, steps=steps)
        want, want_steps = _uncached(program.weights, ids)
        assert got == want, prompt
        assert torch.equal(torch.stack(steps), torch.stack(want_steps)), prompt
        assert program.vocab.decode(got) == module.oracle(prompt)


VOCAB = tw.Vocab("0123456789ab\n?")


def tally(x: torch.Tensor) -> torch.Tensor:
    """After a long prompt ending in '?': 'a' if the a's are at least as many as the b's, else
    'b', then the digit before the '?' (0 for a letter), then <eos>."""
    end = tw.is_token(x, "?")
    digit = tw.lookup(x, {str(i): i for i in range(10)}, default=0)
    held = tw.latch(tw.shift(digit, 1), end)
    more_a = tw.mean(tw.is_token(x, "a")) >= tw.mean(tw.is_token(x, "b"))
    letter = torch.where(more_a, tw.token("a"), tw.token("b"))
    return torch.where(end.bool(), letter,
                       torch.where(tw.shift(end, 1).bool(), tw.token("0") + held,
                                   tw.token("<eos>")))


def _long_prompt(n: int) -> str:
    import random

    rng = random.Random(n)
    return "".join(rng.choice("0123456789ab\n") for _ in range(n - 2)) + "?"


@pytest.fixture(scope="module")
def long_program():
    return tw.compile(tally, vocab=VOCAB, max_seq_len=1024).compile()


def test_a_long_prompt_in_blocks_without_dead_heads_is_the_dense_forward(long_program,
                                                                         monkeypatch):
    """Past ROWS positions the attention runs in blocks of query rows over the keys up to
    each block's end, and heads without weights are skipped: the same logits as one dense
    block of every head, and cached generation still the uncached loop."""
    m = long_program.weights
    assert any(order is not None for order in runtime.Weights(m).order)  # some heads are dead
    ids = VOCAB.encode(_long_prompt(700))
    blocked = runtime.forward(m, ids)[0]
    steps: list[torch.Tensor] = []
    got = runtime.generate(m, ids, steps=steps)
    want, want_steps = _uncached(m, ids)
    assert got == want and torch.equal(torch.stack(steps), torch.stack(want_steps))
    text = _long_prompt(700)
    assert long_program.vocab.decode(got) == \
        ("a" if text.count("a") >= text.count("b") else "b") + \
        (text[-2] if text[-2].isdigit() else "0")
    init = runtime.Weights.__init__

    def every_head(self, *args):
        init(self, *args)
        self.order = [None] * len(self.layers)

    monkeypatch.setattr(runtime, "ROWS", 10**9)
    monkeypatch.setattr(runtime.Weights, "__init__", every_head)
    assert torch.equal(runtime.forward(m, ids)[0], blocked)


def _eager(directory, dtype):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(directory, dtype=dtype,
                                                attn_implementation="eager").eval()


def test_half_precision_is_transformers_eager_bit_for_bit(tmp_path, one_thread):
    """Measured on every example: the logits of AutoModelForCausalLM(dtype=..., eager) equal
    the runtime's in bfloat16 and float16 (NaN where it is NaN: fp32 builds overflow fp16),
    and the cached decoding steps equal transformers' generate."""
    module = _example("adder")
    program = module.program
    directory = program.save_pretrained(tmp_path / "adder")
    for dtype in (torch.bfloat16, torch.float16):
        model = _eager(directory, dtype)
        for prompt in module.DEMOS:
            ids = program.vocab.encode(prompt + module.oracle(prompt))
            ours = program.logits(ids, dtype=dtype)
            with torch.no_grad():
                theirs = model(torch.tensor([ids])).logits[0]
            assert ours.dtype == dtype
            torch.testing.assert_close(ours, theirs, rtol=0, atol=0, equal_nan=True)
        ids = program.vocab.encode(module.DEMOS[0])
        steps: list[torch.Tensor] = []
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=6,
                                 output_scores=True, return_dict_in_generate=True,
                                 pad_token_id=program.vocab.eos_id)
        try:
            runtime.generate(program.weights, ids, 6, dtype=dtype, steps=steps)
        except tw.InputError:  # it generated <bos>: transformers goes on, the runtime stops
            pass
        for ours, theirs in zip(steps, out.scores, strict=False):
            torch.testing.assert_close(ours.float(), theirs[0], rtol=0, atol=0, equal_nan=True)


def test_verify_in_bfloat16_reports_an_fp32_build_wrong(one_thread):
    """Builds are certified for fp32 (issue 32); in bfloat16 the adder answers wrong, and
    verify says so through the runtime and through transformers (which, unlike the runtime,
    goes on after a <bos>: max_seq_len 32 keeps that short)."""
    module = _example("adder")
    program = module.make(max_seq_len=32)
    prompts = module.DEMOS
    assert tw.verify(program, prompts, backend="runtime").ok
    report = tw.verify(program, prompts, backend="runtime", dtype=torch.bfloat16)
    assert not report.ok and len(report.mismatches) >= 3
    assert "bfloat16" in str(report)
    hf = program.verify(prompts, backend="hf", dtype=torch.bfloat16)
    assert not hf.ok and len(hf.mismatches) >= 3
    with pytest.raises(ValueError, match="onnx float32"):
        tw.verify(program, prompts, backend="onnx", dtype=torch.float16)


def _counting(program, monkeypatch) -> list[int]:
    runs: list[int] = []
    run = program.traced.run

    def counted(ids):
        runs.append(len(ids))
        return run(ids)

    monkeypatch.setattr(program.traced, "run", counted)
    return runs


def test_the_reference_checks_a_draft_in_one_run(monkeypatch, one_thread):
    module = _example("fibonacci")
    program = module.program.compile()
    runs = _counting(program, monkeypatch)
    ids = program.vocab.encode(module.DEMOS[0])
    want = program.reference_ids(ids)
    alone = len(runs)
    runs.clear()
    assert program.reference_ids(ids, draft=want) == want and len(runs) == 1
    wrong = list(want)
    wrong[len(wrong) // 2] = want[0] if want[len(want) // 2] != want[0] else want[-1]
    runs.clear()
    assert program.reference_ids(ids, draft=wrong) == want
    assert len(runs) <= alone


REPEAT = tw.Vocab("abc\n")


def repeat_last(x: torch.Tensor) -> torch.Tensor:
    newline = tw.is_token(x, "\n")
    letter = tw.lookup(x, {c: c for c in "abc"}, default="a")
    held = tw.latch(tw.shift(letter, 1), newline)
    return torch.where(tw.latch(newline, newline).bool(), held, tw.token("<eos>"))


def test_a_long_answer_costs_the_reference_a_few_runs(monkeypatch, one_thread):
    """An answer that fills the context: one eager run per token while they are cheap (or the
    program is not compiled); once runs cost more than DRAFT_SECONDS, the runtime drafts the
    answer after DRAFT_AFTER tokens."""
    program = tw.compile(repeat_last, vocab=REPEAT, max_seq_len=96)
    runs = _counting(program, monkeypatch)
    ids = REPEAT.encode("abcab\n")
    monkeypatch.setattr(program, "DRAFT_SECONDS", 0.0)
    alone = program.reference_ids(ids)
    assert len(alone) == 96 - len(ids) and len(runs) == len(alone)
    program.compile()
    runs.clear()
    assert program.reference_ids(ids) == alone == program.generate_ids(ids)
    assert len(runs) == program.DRAFT_AFTER + 1
    monkeypatch.setattr(program, "DRAFT_SECONDS", 60.0)
    runs.clear()
    assert program.reference_ids(ids) == alone and len(runs) == len(alone)
