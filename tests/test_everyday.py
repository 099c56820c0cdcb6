"""Everyday calls print nothing: a saved directory through transformers' generate() and
pipeline(), and tw.trace(f).compile() in a notebook."""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator

import pytest
import torch

import torchwright_fx as tw
from torchwright_fx.backends.hf import TransformersRunner

MAX_SEQ_LEN = 32
VOCAB = tw.Vocab("x0123456789")
PROMPT = "xxxx"  # 5 tokens with <bos>


def pos_digits(x):
    """Never prints <eos>: only max_seq_len ends its answer."""
    return tw.token("0") + tw.position(x) % 10


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    program = tw.compile(pos_digits, vocab=VOCAB, max_seq_len=MAX_SEQ_LEN, progress=False)
    return program, program.save_pretrained(tmp_path_factory.mktemp("everyday") / "hf")


@contextlib.contextmanager
def printed() -> Iterator[list[str]]:
    """Python warnings and transformers' log records (warning and above) while inside."""
    out: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            out.append(record.getMessage())

    handler = Collect(logging.WARNING)
    logger = logging.getLogger("transformers")  # every transformers module logs below it
    logger.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield out
        out.extend(str(w.message) for w in caught)
    finally:
        logger.removeHandler(handler)


def load(directory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(directory)


def new_text(tokenizer, enc, out) -> str:
    return tokenizer.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)


def test_generate_without_a_length_prints_nothing_and_stops_at_max_seq_len(saved):
    program, directory = saved
    model, tokenizer = load(directory)
    enc = tokenizer(PROMPT, return_tensors="pt")
    with printed() as shown, torch.no_grad():
        out = model.generate(**enc)
    assert shown == []
    assert out.shape[1] == MAX_SEQ_LEN
    assert new_text(tokenizer, enc, out) == program.reference(PROMPT)


def test_generate_with_a_total_length_prints_nothing(saved):
    program, directory = saved
    model, tokenizer = load(directory)
    enc = tokenizer(PROMPT, return_tensors="pt")
    with printed() as shown, torch.no_grad():
        out = model.generate(**enc, max_length=enc["input_ids"].shape[1] + 3)
    assert shown == []
    assert new_text(tokenizer, enc, out) == program.reference(PROMPT)[:3]


def test_pipeline_prints_nothing(saved):
    from transformers import pipeline

    program, directory = saved
    generate = pipeline("text-generation", model=str(directory))
    with printed() as shown:
        default = generate(PROMPT, return_full_text=False)[0]["generated_text"]
        total = generate(PROMPT, max_length=8, return_full_text=False)[0]["generated_text"]
    assert shown == []
    assert default == program.reference(PROMPT)  # stopped at max_seq_len
    assert total == program.reference(PROMPT)[:3]


def test_transformers_runner_prints_nothing(saved):
    program, directory = saved
    runner = TransformersRunner(directory)
    ids = VOCAB.encode(PROMPT)
    with printed() as shown:
        whole = runner.generate_ids(ids)
        three = runner.generate_ids(ids, max_new_tokens=3)
        full = runner.generate_ids(VOCAB.encode("x" * (MAX_SEQ_LEN - 1)))
    assert shown == []
    assert whole == program.reference_ids(ids) and len(ids) + len(whole) == MAX_SEQ_LEN
    assert three == whole[:3] and full == []


@pytest.mark.xfail(strict=True, reason="transformers' only cap is the generation config's "
                   "max_length, which a max_new_tokens argument replaces with a warning; quiet "
                   "and capped needs the compiled model to print <eos> before max_seq_len "
                   "(docs/runtimes.md)")
def test_bug_max_new_tokens_prints_nothing_and_stops_at_max_seq_len(saved):
    from transformers import pipeline

    program, directory = saved
    model, tokenizer = load(directory)
    enc = tokenizer(PROMPT, return_tensors="pt")
    generate = pipeline("text-generation", model=str(directory))
    with printed() as shown, torch.no_grad():
        out = model.generate(**enc, max_new_tokens=100)
        piped = generate(PROMPT, max_new_tokens=100, return_full_text=False)[0]["generated_text"]
    assert shown == []
    assert new_text(tokenizer, enc, out) == piped == program.reference(PROMPT)


def echo_last(x):
    newline = tw.is_token(x, "\n")
    return tw.emit(newline, [tw.latch(tw.shift(tw.code(x), 1), newline)])


def test_traced_compile_displays_the_compiled_program():
    program = tw.trace(echo_last, vocab=tw.Vocab("ab\n")).compile(max_seq_len=16, progress=False)
    text, page = repr(program), program._repr_html_()
    for shown in (text, page):
        assert "not compiled yet" not in shown
        assert "echo_last: " in shown and " layers (critical-path bound" in shown
        assert "parameters" in shown and "certified" in shown
    assert text == program.summary()


def test_tw_compile_stays_lazy():
    program = tw.compile(echo_last, vocab=tw.Vocab("ab\n"), max_seq_len=16, progress=False)
    assert program._build is None and "not compiled yet" in repr(program)
    assert program.compile() is program and repr(program) == program.summary()
