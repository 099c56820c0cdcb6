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


# transformers' one-time notice when a sequence holds more than max_position_embeddings ids:
# an answer that fills the context ends with the <eos> the model prints at position
# max_seq_len - 1, which sits at index max_seq_len (never fed to the model)
NOTICE = "exceeded the model's predefined maximum length"


def quiet(shown: list[str]) -> bool:
    return all(NOTICE in message for message in shown)


def ends_at_context(tokenizer, enc, out, program) -> bool:
    """The answer is the reference's, fills the context and ends with <eos>."""
    ids = out[0].tolist()
    return len(ids) == MAX_SEQ_LEN + 1 and ids[-1] == tokenizer.eos_token_id and \
        new_text(tokenizer, enc, out) == program.reference(PROMPT)


def test_the_model_prints_eos_at_its_last_position(saved):
    program, directory = saved
    model, tokenizer = load(directory)
    for n in (1, 5, MAX_SEQ_LEN - 1, MAX_SEQ_LEN):
        ids = VOCAB.encode("x" * (n - 1))
        top = model(torch.tensor([ids])).logits[0].argmax(-1).tolist()
        codes = program.traced.run(ids).long().tolist()
        want = codes[:MAX_SEQ_LEN - 1] + [VOCAB.eos_id] * (n == MAX_SEQ_LEN)
        assert top == want[:n]
    assert program.build.machine.ends_with_eos


def test_generate_without_a_length_stops_at_max_seq_len(saved):
    program, directory = saved
    model, tokenizer = load(directory)
    enc = tokenizer(PROMPT, return_tensors="pt")
    with printed() as shown, torch.no_grad():
        out = model.generate(**enc)
    assert quiet(shown), shown
    assert ends_at_context(tokenizer, enc, out, program)


def test_max_new_tokens_prints_nothing_and_stops_at_max_seq_len(saved):
    program, directory = saved
    model, tokenizer = load(directory)
    enc = tokenizer(PROMPT, return_tensors="pt")
    with printed() as shown, torch.no_grad():
        out = model.generate(**enc, max_new_tokens=100)
        three = model.generate(**enc, max_new_tokens=3)
    assert quiet(shown), shown
    assert ends_at_context(tokenizer, enc, out, program)
    assert new_text(tokenizer, enc, three) == program.reference(PROMPT)[:3]


def test_a_total_length_is_told_that_max_new_tokens_wins(saved):
    """The config's max_new_tokens meets a caller's max_length: transformers says which wins,
    and the answer still ends at the context's end."""
    program, directory = saved
    model, tokenizer = load(directory)
    enc = tokenizer(PROMPT, return_tensors="pt")
    with printed() as shown, torch.no_grad():
        out = model.generate(**enc, max_length=8)
    assert any("max_new_tokens" in message for message in shown)
    assert ends_at_context(tokenizer, enc, out, program)


def test_pipeline_prints_nothing(saved):
    from transformers import pipeline

    program, directory = saved
    generate = pipeline("text-generation", model=str(directory))
    with printed() as shown:
        default = generate(PROMPT, return_full_text=False)[0]["generated_text"]
        three = generate(PROMPT, max_new_tokens=3, return_full_text=False)[0]["generated_text"]
    assert quiet(shown), shown
    assert default == program.reference(PROMPT)  # stopped at max_seq_len
    assert three == program.reference(PROMPT)[:3]


def counter(x):
    """Prints its own <eos> at position 10: a call never reaches max_seq_len."""
    return torch.where(tw.position(x) >= 10, tw.token("<eos>"), tw.token("0") +
                       tw.position(x) % 10)


def test_an_answer_ended_by_the_program_prints_nothing(tmp_path):
    from transformers import pipeline

    program = tw.compile(counter, vocab=VOCAB, max_seq_len=MAX_SEQ_LEN, progress=False)
    directory = program.save_pretrained(tmp_path / "hf")
    model, tokenizer = load(directory)
    enc = tokenizer(PROMPT, return_tensors="pt")
    generate = pipeline("text-generation", model=str(directory))
    with printed() as shown, torch.no_grad():
        default = model.generate(**enc)
        new = model.generate(**enc, max_new_tokens=100)
        piped = generate(PROMPT, max_new_tokens=100, return_full_text=False)[0]["generated_text"]
    assert shown == []
    assert new_text(tokenizer, enc, default) == new_text(tokenizer, enc, new) == piped == \
        program.reference(PROMPT) == "456789"


def test_transformers_runner_prints_nothing(saved):
    program, directory = saved
    runner = TransformersRunner(directory)
    ids = VOCAB.encode(PROMPT)
    with printed() as shown:
        whole = runner.generate_ids(ids)
        three = runner.generate_ids(ids, max_new_tokens=3)
        full = runner.generate_ids(VOCAB.encode("x" * (MAX_SEQ_LEN - 1)))
    assert quiet(shown), shown
    assert whole == program.reference_ids(ids) and len(ids) + len(whole) == MAX_SEQ_LEN
    assert three == whole[:3] and full == []


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
