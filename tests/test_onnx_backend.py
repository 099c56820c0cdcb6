"""ONNX export (dynamo exporter, static KV cache) and the onnxruntime runner vs Hugging Face."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import AutoModelForCausalLM, Phi3Config, Phi3ForCausalLM

import torchwright_fx.onnx as twx
from torchwright_fx.backends import onnx as onnx_backend
from torchwright_fx.backends.onnx import OnnxRunner, SequenceTooLongError

SPECIAL = ["<unk>", "<bos>", "<eos>"]
CHARS = list("01\nabcdef")
UNK, BOS, EOS = 0, 1, 2
MAX_POS = 32  # the config's max_position_embeddings
MAX_LEN = 24  # the exported cache: an explicit max_seq_len below MAX_POS
PROMPTS = ["1011\n", "0", "abc\nfed\n", "10\n01\nab", "f" * 16]
REL_TOL = 1e-4


def _write_tokenizer(path: Path) -> None:
    """Character-level WordLevel tokenizer with a ``<bos>`` template and a fusing decoder."""
    vocab = {tok: i for i, tok in enumerate(SPECIAL + CHARS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A", special_tokens=[("<bos>", BOS)]
    )
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens(SPECIAL)
    tok.save(str(path / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<bos>",
        "eos_token": "<eos>",
        "unk_token": "<unk>",
    }
    (path / "tokenizer_config.json").write_text(json.dumps(config))


def _tiny_phi3() -> Phi3ForCausalLM:
    """Random Phi-3 with partial RoPE; weights scaled up so argmax and attention vary."""
    settings: dict[str, Any] = dict(
        vocab_size=len(SPECIAL) + len(CHARS),
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=16,
        max_position_embeddings=MAX_POS,
        original_max_position_embeddings=MAX_POS,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 10000.0,
            "partial_rotary_factor": 0.5,
        },
        tie_word_embeddings=False,
        bos_token_id=BOS,
        eos_token_id=EOS,
        pad_token_id=UNK,
    )
    torch.manual_seed(1234)
    model = Phi3ForCausalLM(Phi3Config(**settings)).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("layernorm.weight") or name.endswith("norm.weight"):
                param.normal_(1.0, 0.2)
            else:
                param.normal_(0.0, 1.0 if "embed" in name else 0.35)
        model.lm_head.weight[EOS] = 0.0  # eos logit stays 0: long generations run to the cache end
    return model


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Write the tiny checkpoint + tokenizer and export it once for the whole module."""
    root = tmp_path_factory.mktemp("onnx_backend")
    hf_dir, onnx_dir = root / "hf", root / "onnx"
    hf_dir.mkdir()
    _tiny_phi3().save_pretrained(hf_dir)
    _write_tokenizer(hf_dir)
    assert twx.export(hf_dir, onnx_dir, max_seq_len=MAX_LEN) == onnx_dir.resolve()
    return hf_dir, onnx_dir


@pytest.fixture(scope="module")
def hf_model(dirs: tuple[Path, Path]) -> Any:
    """The reference: the saved checkpoint reloaded in fp32 with eager attention."""
    model = AutoModelForCausalLM.from_pretrained(
        dirs[0], dtype=torch.float32, attn_implementation="eager"
    )
    return model.eval()


@pytest.fixture(scope="module")
def runner(dirs: tuple[Path, Path]) -> OnnxRunner:
    """The onnxruntime runner over the exported directory."""
    return twx.load(dirs[1])


def _hf_logits(model: Any, ids: list[int]) -> np.ndarray:
    """Teacher-forced HF logits ``[T, V]``."""
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].numpy()


def _hf_greedy(model: Any, ids: list[int], new: int) -> list[int]:
    """HF greedy continuation (``generate(do_sample=False)``, its own dynamic cache)."""
    with torch.no_grad():
        out = model.generate(
            torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            do_sample=False,
            max_new_tokens=new,
            pad_token_id=UNK,
        )
    return out[0, len(ids) :].tolist()


def _assert_close(got: np.ndarray, want: np.ndarray) -> float:
    """Relative max diff below `REL_TOL` and identical argmax at every row; return the diff."""
    rel = float(np.abs(got - want).max() / np.abs(want).max())
    assert rel < REL_TOL, rel
    np.testing.assert_array_equal(got.argmax(-1), want.argmax(-1))
    return rel


def _random_ids(rng: np.random.Generator, length: int) -> list[int]:
    """``<bos>`` followed by random non-special tokens."""
    return [BOS, *rng.integers(len(SPECIAL), len(SPECIAL) + len(CHARS), length - 1).tolist()]


def test_files_written(dirs: tuple[Path, Path]) -> None:
    """The directory holds both graphs with external data, the tokenizer and runner.json."""
    onnx_dir = dirs[1]
    for name in [
        "prefill.onnx",
        "prefill.onnx.data",
        "decode.onnx",
        "decode.onnx.data",
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
    ]:
        assert (onnx_dir / name).is_file(), name
    spec = json.loads((onnx_dir / "runner.json").read_text())
    assert (spec["max_seq_len"], spec["num_layers"], spec["num_kv_heads"]) == (MAX_LEN, 2, 4)
    assert (spec["head_dim"], spec["bos_token_id"], spec["eos_token_ids"]) == (16, BOS, [EOS])
    assert spec["outputs"][:3] == ["logits", "present.0.key", "present.0.value"]


def test_default_max_seq_len() -> None:
    """Without max_seq_len the cache covers max_position_embeddings."""
    assert onnx_backend._max_seq_len(_tiny_phi3().config, None) == MAX_POS
    with pytest.raises(ValueError):
        onnx_backend._max_seq_len(_tiny_phi3().config, 0)


def test_teacher_forced_logits(runner: OnnxRunner, hf_model: Any) -> None:
    """Prefill logits match HF on text prompts and random ids up to the full cache."""
    rng = np.random.default_rng(0)
    cases = [runner.encode(p) for p in PROMPTS] + [[BOS], _random_ids(rng, MAX_LEN)]
    cases += [_random_ids(rng, int(n)) for n in rng.integers(2, MAX_LEN, 4)]
    worst = max(_assert_close(runner.logits(ids), _hf_logits(hf_model, ids)) for ids in cases)
    print(f"prefill max rel logit diff {worst:.3g}")


def test_prefill_cache_layout(dirs: tuple[Path, Path], hf_model: Any) -> None:
    """present.N.* hold HF's rotated keys and values in slots 0..T-1 and zeros after."""
    ids = _random_ids(np.random.default_rng(1), 9)
    session = ort.InferenceSession(
        str(dirs[1] / "prefill.onnx"), providers=["CPUExecutionProvider"]
    )
    feeds = {"input_ids": np.array([ids]), "position_ids": np.arange(len(ids))[None]}
    names = [o.name for o in session.get_outputs()]
    outputs = dict(zip(names, session.run(None, feeds), strict=True))
    with torch.no_grad():
        cache = hf_model(torch.tensor([ids]), use_cache=True).cache
    for n, layer in enumerate(cache.layers):
        for kind, want in (("key", layer.keys), ("value", layer.values)):
            got = outputs[f"present.{n}.{kind}"]
            assert got.shape == (1, 4, MAX_LEN, 16)
            np.testing.assert_allclose(got[:, :, : len(ids)], want.numpy(), rtol=1e-5, atol=1e-5)
            assert not got[:, :, len(ids) :].any()


def test_decode_graph_logits(dirs: tuple[Path, Path], hf_model: Any) -> None:
    """Feeding tokens one at a time through decode.onnx reproduces HF's logits to the end."""
    seq = _random_ids(np.random.default_rng(2), MAX_LEN)
    want = _hf_logits(hf_model, seq)
    prefill = ort.InferenceSession(
        str(dirs[1] / "prefill.onnx"), providers=["CPUExecutionProvider"]
    )
    decode = ort.InferenceSession(str(dirs[1] / "decode.onnx"), providers=["CPUExecutionProvider"])
    start = 3
    out = prefill.run(
        None, {"input_ids": np.array([seq[:start]]), "position_ids": np.arange(start)[None]}
    )
    got = [out[0][0]]
    past_names = [i.name for i in decode.get_inputs()][2:]
    for slot in range(start, MAX_LEN):
        feeds = {"input_ids": np.array([[seq[slot]]]), "position_ids": np.array([[slot]])}
        out = decode.run(None, {**feeds, **dict(zip(past_names, out[1:], strict=True))})
        got.append(out[0][0])
    worst = _assert_close(np.concatenate(got), want)
    print(f"decode max rel logit diff {worst:.3g}")


def test_greedy_matches_hf_generate(runner: OnnxRunner, hf_model: Any) -> None:
    """Greedy ids from the cached decode loop equal HF generate, up to the last slot."""
    for prompt in PROMPTS:
        ids = runner.encode(prompt)
        new = MAX_LEN - len(ids)
        want = _hf_greedy(hf_model, ids, new)
        assert EOS not in want  # the eos row is zero, so every step is exercised
        assert runner.generate_ids(ids, max_new_tokens=new) == want
        text = runner.generate(prompt, max_new_tokens=new)
        assert text == runner.tokenizer.decode(want, skip_special_tokens=True)
        assert " " not in text


def test_stops_at_eos(
    dirs: tuple[Path, Path], runner: OnnxRunner, hf_model: Any, tmp_path: Path
) -> None:
    """Generation ends right after an eos id (runner.json edited to a token the model emits)."""
    stop_dir = tmp_path / "stop"
    shutil.copytree(dirs[1], stop_dir)
    spec = json.loads((stop_dir / "runner.json").read_text())
    ids = runner.encode("1011\n")
    want = _hf_greedy(hf_model, ids, 10)
    spec["eos_token_ids"] = [want[3]]
    (stop_dir / "runner.json").write_text(json.dumps(spec))
    got = twx.load(stop_dir).generate_ids(ids)
    assert got == want[: want.index(want[3]) + 1]


def test_prompt_too_long(runner: OnnxRunner) -> None:
    """A prompt longer than max_seq_len is rejected with the lengths in the message."""
    ids = [BOS] + [3] * MAX_LEN
    with pytest.raises(SequenceTooLongError, match=f"{MAX_LEN + 1} tokens.*max_seq_len={MAX_LEN}"):
        runner.logits(ids)
    with pytest.raises(ValueError):
        runner.generate("0" * MAX_LEN)
    with pytest.raises(SequenceTooLongError, match="leaves no room"):
        runner.generate_ids(ids[:MAX_LEN])  # full cache: not even one token fits
    assert runner.logits(ids[:MAX_LEN]).shape == (MAX_LEN, len(SPECIAL) + len(CHARS))


def test_generation_too_long(runner: OnnxRunner) -> None:
    """Budgets past the cache fail up front; open-ended generation fails at the cache end."""
    ids = runner.encode("1011\n")
    room = MAX_LEN - len(ids)
    with pytest.raises(SequenceTooLongError, match=f"max_new_tokens={room + 1}.*{MAX_LEN}"):
        runner.generate_ids(ids, max_new_tokens=room + 1)
    assert len(runner.generate_ids(ids, max_new_tokens=room)) == room
    with pytest.raises(SequenceTooLongError, match=f"max_seq_len={MAX_LEN}"):
        runner.generate("1011\n")  # no eos ever comes (zero eos row)


def test_export_rejects_bad_directories(dirs: tuple[Path, Path], tmp_path: Path) -> None:
    """Non-Phi-3 configs, missing tokenizers and in-place exports fail before any work."""
    from transformers import LlamaConfig

    llama = tmp_path / "llama"
    LlamaConfig().save_pretrained(llama)
    with pytest.raises(ValueError, match="expected a phi3 checkpoint"):
        twx.export(llama, tmp_path / "out")
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copyfile(dirs[0] / "config.json", bare / "config.json")
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        twx.export(bare, tmp_path / "out")
    with pytest.raises(ValueError, match="must differ"):
        twx.export(dirs[0], dirs[0])
    assert not (tmp_path / "out").exists()
