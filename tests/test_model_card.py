"""What every compiled directory tells its user: the model card's commands per runtime, a
generation config that transformers takes without a warning, and --gguf on the command line."""

from __future__ import annotations

import logging
import warnings

import pytest
import torch

import torchwright_fx as tw
from torchwright_fx import cli

VOCAB = tw.Vocab("01\n")


def flip(x):
    nl = tw.is_token(x, "\n")
    bit = tw.lookup(x, {"0": 0, "1": 1})
    return tw.emit(nl, [tw.token("0") + 1 - tw.shift(bit, 1)])


@pytest.fixture
def transformers_logs(caplog):
    """transformers' own log records (it does not propagate them to the root logger)."""
    from transformers.utils import logging as hf_logging

    hf_logging.enable_propagation()
    try:
        with caplog.at_level(logging.WARNING):
            yield caplog
    finally:
        hf_logging.disable_propagation()


def test_pipeline_default_call_warns_nothing(example, transformers_logs):
    from transformers import pipeline

    generate = pipeline("text-generation", model=str(example("binary_increment").directory))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = generate("1011\n", return_full_text=False)
    assert out[0]["generated_text"] == "1100"
    assert [str(w.message) for w in caught] == []
    assert [r.getMessage() for r in transformers_logs.records
            if r.name.startswith("transformers")] == []


def test_pipeline_with_max_new_tokens_still_works(example):
    from transformers import pipeline

    generate = pipeline("text-generation", model=str(example("binary_increment").directory))
    assert generate("1011\n", max_new_tokens=8, return_full_text=False)[0][
        "generated_text"] == "1100"


def count_to_forty(x):
    """Prints '1' at every position before 40, then <eos>: answers longer than
    transformers' default of 20 new tokens."""
    early = torch.round(tw.position(x)) < 40
    return torch.where(early, tw.token("1"), tw.token("<eos>")).float()


def test_generation_config_alone_runs_to_eos(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    program = tw.compile(count_to_forty, vocab=VOCAB, max_seq_len=64)
    assert program.reference("0") == "1" * 39
    directory = program.save_pretrained(tmp_path / "hf")
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(directory)
    enc = tok("0", return_tensors="pt")
    out = model.generate(**enc)  # the directory's generation config alone
    assert tok.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True) == "1" * 39


def test_card_names_each_runtime_and_its_settings(example):
    card = (example("adder_1digit").directory / "README.md").read_text()
    for needle in ["pipeline(\"text-generation\"", "twx.load(", "flash_attn=False, type_k=0",
                   "-fa off -ctk f32 -ctv f32", "vLLM: not loadable", "recompile with d_head=32",
                   "TransformerBridge.boot_transformers(DIR", "circuit.json",
                   "max_seq_len = 512"]:
        assert needle in card, needle
    # the default head size (8 here) is below vLLM's; at d_head=32 the card says how to serve it
    portable = tw.compile(flip, vocab=VOCAB, d_head=32).model_card()
    assert "vllm.entrypoints.openai.api_server --model DIR --dtype float32" in portable


def test_card_says_what_cannot_load_a_build():
    relu = tw.compile(flip, vocab=VOCAB, machine="relu")
    card = relu.model_card()
    assert "llama.cpp and vLLM: not loadable" in card and "machine='swiglu'" in card
    small = tw.compile(flip, vocab=VOCAB, d_head=16)
    assert "vLLM: not loadable" in small.model_card() and "d_head=32" in small.model_card()


def test_cli_writes_gguf_and_refuses_it_for_relu(tmp_path, monkeypatch, capsys):
    gguf = pytest.importorskip("gguf")
    (tmp_path / "flipper.py").write_text(
        "import torchwright_fx as tw\n"
        "VOCAB = tw.Vocab('01\\n')\n"
        "def flip(x):\n"
        "    nl = tw.is_token(x, '\\n')\n"
        "    bit = tw.lookup(x, {'0': 0, '1': 1})\n"
        "    return tw.emit(nl, [tw.token('0') + 1 - tw.shift(bit, 1)])\n"
        "program = tw.compile(flip)\n"
        "relu = tw.compile(flip, machine='relu')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert cli.main(["compile", "flipper", "-o", "hf", "--gguf", "flip.gguf"]) == 0
    reader = gguf.GGUFReader(str(tmp_path / "flip.gguf"))
    assert reader.fields["general.architecture"].contents() == "llama"
    assert (tmp_path / "hf" / "circuit.json").exists()
    capsys.readouterr()
    assert cli.main(["compile", "flipper:relu", "-o", "hf2", "--gguf", "r.gguf"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "gated-ReLU" in err and "swiglu" in err
    assert not (tmp_path / "r.gguf").exists()


def test_cli_no_share_kv_writes_a_block_a_head(tmp_path):
    import json

    assert cli.main(["compile", "examples.fibonacci", "-o", str(tmp_path / "a")]) == 0
    assert cli.main(["compile", "examples.fibonacci", "-o", str(tmp_path / "b"),
                     "--no-share-kv"]) == 0
    shared, plain = (json.loads((tmp_path / d / "config.json").read_text()) for d in "ab")
    assert shared["num_key_value_heads"] < shared["num_attention_heads"]
    assert plain["num_key_value_heads"] == plain["num_attention_heads"]


def pos_digits(x):
    return tw.token("0") + tw.position(x) % 10


def test_over_long_prompt_through_transformers_is_never_silent(tmp_path, transformers_logs):
    """What plain transformers does with a prompt past max_seq_len (we cannot raise our
    InputError inside a stock model): it runs, with its tokenizer's and generate's warnings
    (nothing past max_seq_len is certified; docs/runtimes.md)."""
    from transformers import pipeline

    program = tw.compile(pos_digits, vocab=tw.Vocab("x0123456789"), max_seq_len=64)
    generate = pipeline("text-generation", model=str(program.save_pretrained(tmp_path / "hf")))
    generate("x" * 80, return_full_text=False, max_new_tokens=3)
    warned = " ".join(r.getMessage() for r in transformers_logs.records)
    assert "(81 > 64)" in warned and "exceeded the model's predefined maximum length" in warned
    with pytest.raises(tw.InputError, match="max_seq_len"):
        program.generate("x" * 80)
