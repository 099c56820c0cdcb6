"""The GGUF backend: written, read back with gguf's own reader, and inverted to the Phi-3
weights bit for bit; then run with llama.cpp's arithmetic (adjacent-pair RoPE, freq_base,
rope_freqs) in torch. The real llama.cpp check is `make runtime-llama` (not in `make test`)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import torchwright_fx as tw
from torchwright_fx.backends import runtime
from torchwright_fx.backends.gguf import (
    LLAMA_CPP_FLAGS,
    layout,
    rotary_dim,
    rotary_permutation,
    save_gguf,
    tokenizer_arrays,
)

gguf = pytest.importorskip("gguf")

EXAMPLES = ["adder_1digit", "binary_increment"]


def _fields(reader) -> dict:
    return {name: field.contents() for name, field in reader.fields.items()}


def _tensors(reader) -> dict[str, np.ndarray]:
    return {t.name: np.array(t.data).reshape(tuple(reversed(t.shape.tolist())))
            for t in reader.tensors}


def _same_bits(a: np.ndarray, tensor: torch.Tensor) -> bool:
    b = tensor.detach().to(torch.float32).numpy()
    return a.dtype == np.float32 and a.shape == b.shape and \
        np.array_equal(a.view(np.uint32), b.view(np.uint32))


def _unpermute(w: np.ndarray, m) -> np.ndarray:
    """A Q or K projection (of any number of heads) back in Phi-3's rotate_half order."""
    inverse = np.argsort(rotary_permutation(m.d_head, rotary_dim(m)))
    return w.reshape(-1, m.d_head, w.shape[-1])[:, inverse].reshape(w.shape)


@pytest.fixture(scope="module", params=EXAMPLES)
def written(request, example, tmp_path_factory):
    ex = example(request.param)
    path = save_gguf(ex.program.weights, ex.program.vocab,
                     tmp_path_factory.mktemp("gguf") / f"{request.param}.gguf",
                     name=request.param)
    return ex, gguf.GGUFReader(path)


def test_metadata(written):
    ex, reader = written
    m, f = ex.program.weights, _fields(reader)
    arch = f["general.architecture"]
    assert (arch, f[f"{arch}.rope.dimension_count"]) == layout(m)[:2] == ("llama", m.d_head)
    assert np.float32(f[f"{arch}.rope.freq_base"]) == np.float32(layout(m)[2])
    assert f[f"{arch}.context_length"] == m.max_seq_len
    assert f[f"{arch}.embedding_length"] == m.d_model
    assert f[f"{arch}.block_count"] == m.n_layers
    assert f[f"{arch}.feed_forward_length"] == m.d_ff
    assert f[f"{arch}.attention.head_count"] == m.n_heads
    assert f[f"{arch}.attention.head_count_kv"] == m.kv_heads
    assert f[f"{arch}.attention.key_length"] == f[f"{arch}.attention.value_length"] == m.d_head
    assert f["general.file_type"] == 0  # all f32
    assert f["general.name"] == ex.program.fn.__name__
    assert LLAMA_CPP_FLAGS in f["general.description"]
    assert f"max_seq_len {m.max_seq_len}" in f["general.description"]
    assert f["tokenizer.ggml.model"] == "gpt2" and f["tokenizer.ggml.pre"] == "default"
    assert f["tokenizer.ggml.add_bos_token"] is True
    assert f["tokenizer.ggml.bos_token_id"] == m.bos_id
    assert f["tokenizer.ggml.eos_token_id"] == m.eos_id


def test_tokenizer_is_the_vocab(written):
    ex, reader = written
    f, vocab = _fields(reader), ex.program.vocab
    byte_of = {c: b for b, c in enumerate(_gpt2_alphabet())}
    decoded = [t if i < 3 else bytes(byte_of[c] for c in t).decode()
               for i, t in enumerate(f["tokenizer.ggml.tokens"])]
    assert decoded == list(vocab.tokens)
    assert f["tokenizer.ggml.token_type"] == [3, 3, 2] + [1] * (len(vocab) - 3)


def _gpt2_alphabet() -> list[str]:
    # GPT-2's byte -> character table, written out independently of the backend
    keep = [b for b in range(256) if 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255]
    shifted = iter(range(256, 512))
    return [chr(b) if b in keep else chr(next(shifted)) for b in range(256)]


def test_weights_invert_to_the_machine_bit_for_bit(written):
    ex, reader = written
    m, t = ex.program.weights, _tensors(reader)
    assert _same_bits(t["token_embd.weight"], m.embed)
    assert _same_bits(t["output.weight"], m.lm_head)
    assert _same_bits(t["output_norm.weight"], m.final_norm)
    rope = np.ones(m.d_head // 2, np.float32)
    rope[rotary_dim(m) // 2:] = np.inf
    assert np.array_equal(t["rope_freqs.weight"], rope)
    for i, la in enumerate(m.layers):
        p = f"blk.{i}."
        qkv = np.concatenate([_unpermute(t[p + "attn_q.weight"], m),
                              _unpermute(t[p + "attn_k.weight"], m), t[p + "attn_v.weight"]])
        assert _same_bits(qkv, la.qkv)
        assert _same_bits(np.concatenate([t[p + "ffn_gate.weight"], t[p + "ffn_up.weight"]]),
                          la.gate_up)
        assert _same_bits(t[p + "ffn_down.weight"], la.down)
        assert _same_bits(t[p + "attn_output.weight"], la.o)
        assert _same_bits(t[p + "attn_norm.weight"], la.norm_attn)
        assert _same_bits(t[p + "ffn_norm.weight"], la.norm_mlp)
    assert len(t) == 3 + 1 + 9 * m.n_layers


def _llama_logits(reader, ids: list[int]) -> torch.Tensor:
    """llama.cpp's graph for these archs, in torch: RoPE on adjacent pairs (2i, 2i+1) of the
    first n_rot dims, pair i at position p turning by p * base^(-2i/n_rot) / rope_freqs[i]."""
    f, t = _fields(reader), {k: torch.from_numpy(v) for k, v in _tensors(reader).items()}
    a = f["general.architecture"]
    heads, dh, n_rot = (f[f"{a}.attention.head_count"], f[f"{a}.attention.key_length"],
                        f[f"{a}.rope.dimension_count"])
    # query head h reads K/V block h // (heads / kv_heads) (ggml's broadcast in mul_mat)
    rep = heads // f[f"{a}.attention.head_count_kv"]
    eps = f[f"{a}.attention.layer_norm_rms_epsilon"]
    scale = torch.tensor(f[f"{a}.rope.freq_base"], dtype=torch.float32) ** (-2.0 / n_rot)
    freq = scale ** torch.arange(n_rot // 2, dtype=torch.float32)
    freq = freq / t.get("rope_freqs.weight", torch.ones(n_rot // 2))
    angle = torch.arange(len(ids), dtype=torch.float32)[:, None, None] * freq
    cos, sin = angle.cos(), angle.sin()

    def rope(x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(len(ids), -1, dh).clone()
        even, odd = x[..., 0:n_rot:2].clone(), x[..., 1:n_rot:2].clone()
        x[..., 0:n_rot:2], x[..., 1:n_rot:2] = even * cos - odd * sin, even * sin + odd * cos
        return x.transpose(0, 1)

    def norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    h = t["token_embd.weight"][torch.tensor(ids)]
    mask = torch.ones(len(ids), len(ids), dtype=torch.bool).tril()
    for i in range(f[f"{a}.block_count"]):
        p = f"blk.{i}."
        x = norm(h, t[p + "attn_norm.weight"])
        q, k = rope(x @ t[p + "attn_q.weight"].T), rope(x @ t[p + "attn_k.weight"].T)
        v = (x @ t[p + "attn_v.weight"].T).reshape(len(ids), -1, dh).transpose(0, 1)
        k, v = k.repeat_interleave(rep, 0), v.repeat_interleave(rep, 0)
        scores = (q @ k.transpose(1, 2) * dh ** -0.5).masked_fill(~mask, -torch.inf)
        out = (scores.softmax(-1) @ v).transpose(0, 1).reshape(len(ids), heads * dh)
        h = h + out @ t[p + "attn_output.weight"].T
        x = norm(h, t[p + "ffn_norm.weight"])
        gate, up = x @ t[p + "ffn_gate.weight"].T, x @ t[p + "ffn_up.weight"].T
        h = h + (torch.nn.functional.silu(gate) * up) @ t[p + "ffn_down.weight"].T
    return norm(h, t["output_norm.weight"]) @ t["output.weight"].T


def test_llama_arithmetic_generates_the_same(written):
    ex, reader = written
    program = ex.program
    for prompt in ex.module.DEMOS:
        ids = program.vocab.encode(prompt)
        seq = ids + program.generate_ids(ids) + [program.vocab.eos_id]
        want = runtime.forward(program.weights, seq)[0]
        got = _llama_logits(reader, seq)
        assert torch.equal(got.argmax(-1)[len(ids) - 1:-1], torch.tensor(seq[len(ids):]))
        assert torch.allclose(got, want, rtol=1e-4, atol=1e-2), (got - want).abs().max()


def test_layout_falls_back_to_nanbeige_when_freq_base_overflows(example):
    m = example("adder_1digit").program.weights
    wide = dataclasses.replace(m, d_head=64, partial_rotary_factor=4 / 64)
    assert m.rope_theta ** 16 > 3.5e38  # theta ** (64 / 4) is not an fp32
    assert layout(wide) == ("nanbeige", 4, m.rope_theta)


def test_nanbeige_file(tmp_path):
    # a long max_seq_len raises rope_theta = (L / pi)^2 until theta^(d_head/4) overflows fp32
    def echo_b(x: torch.Tensor) -> torch.Tensor:
        return tw.emit(tw.is_token(x, "a"), ["b"])

    program = tw.compile(echo_b, vocab=tw.Vocab("ab"), d_head=32, max_seq_len=2048)
    m = program.weights
    reader = gguf.GGUFReader(save_gguf(m, program.vocab, tmp_path / "p.gguf"))
    f, t = _fields(reader), _tensors(reader)
    assert f["general.architecture"] == "nanbeige" and f["nanbeige.rope.dimension_count"] == 4
    assert "rope_freqs.weight" not in t
    assert _same_bits(np.concatenate([_unpermute(t["blk.0.attn_q.weight"], m),
                                      _unpermute(t["blk.0.attn_k.weight"], m),
                                      t["blk.0.attn_v.weight"]]), m.layers[0].qkv)
    ids = program.vocab.encode("aba")
    seq = ids + program.generate_ids(ids) + [program.vocab.eos_id]
    got = _llama_logits(reader, seq)
    assert torch.equal(got.argmax(-1)[len(ids) - 1:-1], torch.tensor(seq[len(ids):]))
    assert torch.allclose(got, runtime.forward(m, seq)[0], rtol=1e-4, atol=1e-2)


def test_multibyte_characters_are_merged_back():
    texts, types, merges = tokenizer_arrays(tw.Vocab("aé€"))
    assert texts[3:] == ["a", "Ã©", "âĤ¬"]
    assert merges == ["Ã ©", "â Ĥ", "âĤ ¬"]
    assert tokenizer_arrays(tw.Vocab("ab\n"))[2] == ["ÿ ÿ"]  # 0xFF never occurs in UTF-8


def test_relu_machine_is_refused(example, tmp_path):
    program = example("adder_1digit").module.make(machine="relu")
    assert program.weights.act == "relu"
    with pytest.raises(tw.CompileError, match="llama.cpp has no architecture with a gated-ReLU"):
        save_gguf(program.weights, program.vocab, tmp_path / "r.gguf")
    assert not list(tmp_path.iterdir())


def test_writers_racing_for_one_file_publish_a_whole_one(example, tmp_path):
    """Two writers of one cache entry at once (two runs of a command with a cold cache): each
    stages a file of its own, so what is published is always one writer's whole file."""
    import threading

    ex = example("binary_increment")
    m, vocab = ex.program.weights, ex.program.vocab
    alone = save_gguf(m, vocab, tmp_path / "alone.gguf", name="x").read_bytes()
    target = tmp_path / "raced.gguf"
    errors: list[BaseException] = []

    def write() -> None:
        try:
            save_gguf(m, vocab, target, name="x")
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=write) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert target.read_bytes() == alone
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".partial")] == []
