"""Write a Machine as a GGUF file that llama.cpp runs exactly (all tensors f32).

llama.cpp's own ``phi3`` graph cannot load our checkpoints: it ties the query width and
``o_proj`` to ``hidden_size``, and ours have ``n_heads * d_head != d_model``. So the Phi-3
weights are rewritten, exactly, as a llama-style model, whose graph is the same as Phi-3's op
for op (RMSNorm, causal attention with RoPE on Q and K, SwiGLU MLP, final norm, lm_head):

- ``qkv_proj`` is split into ``attn_q``/``attn_k``/``attn_v`` and ``gate_up_proj`` into
  ``ffn_gate``/``ffn_up``: the same rows, only stored as separate tensors.
- Phi-3 rotates the first ``R`` dims of each head in "rotate_half" order (dim i pairs with
  i + R/2); llama.cpp's llama-style archs rotate adjacent pairs (2i, 2i+1). Permuting the
  rotary rows of every Q and K head to ``[0, R/2, 1, R/2+1, ...]`` puts each Phi-3 pair next
  to each other. Q and K get the same permutation, so each q.k sum has the same terms, and
  V and ``o_proj`` are untouched.
- Arch ``llama`` rotates all ``d_head`` dims (it refuses ``n_rot != d_head``). With
  ``freq_base = theta ** (d_head / R)``, pair i turns at ``freq_base ** (-2i / d_head) =
  theta ** (-2i / R)``: Phi-3's frequencies for i < R/2. The ``rope_freqs`` tensor (the
  Llama-3 per-pair frequency divisor) is 1 there and inf beyond, so every pair past R turns
  by angle exactly 0 (cos 1, sin 0) and the position-free tail passes through unchanged.
- ``freq_base`` is stored as fp32; when ``theta ** (d_head / R)`` overflows it (large d_head
  or max_seq_len), arch ``nanbeige`` is written instead: the same llama graph, but it accepts
  ``n_rot = R < d_head`` and ``freq_base = theta`` directly, so only the permutation is needed.

The tokenizer is written as a GPT-2 byte-level BPE whose tokens are our single characters;
merges only rebuild a multi-byte character from its bytes, so every character is one token, as
in the Hugging Face tokenizer. llama.cpp must run with flash attention off and an f32 KV
cache (``-fa off -ctk f32 -ctv f32``): queries reach ~1e8, and an f16 cache or flash attention
(which casts K and V to f16) overflows to NaN.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import torch

from torchwright_fx.base.errors import CompileError
from torchwright_fx.base.machines import machine_of_act
from torchwright_fx.emit.machine import Machine
from torchwright_fx.vocab import BOS, EOS, UNK, Vocab

LLAMA_CPP_FLAGS = "-fa off -ctk f32 -ctv f32"
FP32_MAX = float(np.finfo(np.float32).max)


def rotary_dim(m: Machine) -> int:
    """Phi-3's rotated dims per head (``d_head * partial_rotary_factor``, as transformers)."""
    return int(m.d_head * m.partial_rotary_factor)


def rotary_permutation(d_head: int, rotary: int) -> list[int]:
    """New row j of a head takes old row perm[j]: Phi-3's pair (i, i + R/2) lands on (2i, 2i+1);
    the position-free tail keeps its place."""
    half = rotary // 2
    return [r for i in range(half) for r in (i, i + half)] + list(range(rotary, d_head))


def layout(m: Machine) -> tuple[str, int, float]:
    """(arch, n_rot, freq_base): ``llama`` when its fp32 freq_base is finite, else ``nanbeige``."""
    rotary = rotary_dim(m)
    base = m.rope_theta ** (m.d_head / rotary)
    if base < FP32_MAX:
        return "llama", m.d_head, base
    return "nanbeige", rotary, m.rope_theta


def _permute_heads(w: torch.Tensor, m: Machine) -> torch.Tensor:
    """Reorder the rows of each head of a ``[heads * d_head, d]`` Q or K projection."""
    perm = torch.tensor(rotary_permutation(m.d_head, rotary_dim(m)))
    return w.reshape(-1, m.d_head, w.shape[-1])[:, perm].reshape(w.shape)


def gguf_tensors(m: Machine) -> dict[str, np.ndarray]:
    """GGUF tensor name -> f32 array. numpy shape ``[out, in]`` is ggml's ``{in, out}``, the
    orientation llama.cpp expects, so weights keep the torch layout."""
    hd, kvd = m.n_heads * m.d_head, m.kv_heads * m.d_head
    out = {"token_embd.weight": m.embed, "output_norm.weight": m.final_norm,
           "output.weight": m.lm_head}
    arch, n_rot, _ = layout(m)
    if arch == "llama":
        # pair i turns at theta_i / rope_freqs[i]: 1 keeps Phi-3's frequency, inf gives angle 0
        factors = torch.full((n_rot // 2,), float("inf"))
        factors[: rotary_dim(m) // 2] = 1.0
        out["rope_freqs.weight"] = factors
    for i, la in enumerate(m.layers):
        p = f"blk.{i}."
        out[p + "attn_norm.weight"] = la.norm_attn
        out[p + "attn_q.weight"] = _permute_heads(la.qkv[:hd], m)
        out[p + "attn_k.weight"] = _permute_heads(la.qkv[hd:hd + kvd], m)
        out[p + "attn_v.weight"] = la.qkv[hd + kvd:]
        out[p + "attn_output.weight"] = la.o
        out[p + "ffn_norm.weight"] = la.norm_mlp
        # Phi-3 computes up * act(gate) with rows [gate; up]; llama.cpp: act(ffn_gate) * ffn_up
        out[p + "ffn_gate.weight"] = la.gate_up[: m.d_ff]
        out[p + "ffn_up.weight"] = la.gate_up[m.d_ff:]
        out[p + "ffn_down.weight"] = la.down
    # a half build (every weight an fp16 number) is written as llama.cpp's own converter writes
    # an F16 model: matrices in f16, norm gains and rope factors in f32
    half = is_half(m)
    return {k: v.detach().to(torch.float16 if half and v.dim() == 2 else torch.float32)
            .contiguous().numpy() for k, v in out.items()}


def is_half(m: Machine) -> bool:
    """Whether ``m`` is certified in half precision (``precision="half"``)."""
    return m.meta.get("precision") == "half"


def _byte_to_unicode() -> dict[int, str]:
    """GPT-2's byte-level alphabet: printable bytes stand for themselves, the other bytes
    (controls, space, ...) for the code points from 256 upwards, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    table, extra = {b: chr(b) for b in printable}, 0
    for b in range(256):
        if b not in table:
            table[b], extra = chr(256 + extra), extra + 1
    return table


def tokenizer_arrays(vocab: Vocab) -> tuple[list[str], list[int], list[str]]:
    """(token texts, token types, merges) for llama.cpp's ``gpt2`` BPE tokenizer."""
    import gguf

    enc = _byte_to_unicode()
    specials = {BOS: gguf.TokenType.CONTROL, EOS: gguf.TokenType.CONTROL,
                UNK: gguf.TokenType.UNKNOWN}
    texts, types, merges = [], [], []
    for tok in vocab.tokens:
        if tok in specials:
            texts.append(tok)  # matched only as special tokens, never in prompt text
            types.append(int(specials[tok]))
            continue
        pieces = [enc[b] for b in tok.encode("utf-8")]
        texts.append("".join(pieces))
        types.append(int(gguf.TokenType.NORMAL))
        # a multi-byte character starts as one symbol per byte: merge them back left to right
        # (a lead byte is only ever followed by its own continuation bytes, so merges never
        # join two characters)
        merges += [f"{''.join(pieces[:k])} {pieces[k]}" for k in range(1, len(pieces))]
    if not merges:
        # llama.cpp requires the merges key and the writer refuses an empty array: byte 0xFF
        # never occurs in UTF-8, so this merge never applies
        merges = [f"{enc[0xFF]} {enc[0xFF]}"]
    return texts, types, merges


RUN_NOTE = (f"Exact in llama.cpp only with flash attention off and an f32 KV cache: "
            f"{LLAMA_CPP_FLAGS} (llama-cpp-python: flash_attn=False, type_k=0, type_v=0).")
HALF_NOTE = ("An F16 file of a build certified in fp32, fp16 and bf16 (precision='half'): "
             "exact in llama.cpp at its default settings, no flags needed.")


def describe(m: Machine, name: str | None = None, description: str | None = None) -> str:
    """``general.description``: the caller's text (or a default naming the program and
    max_seq_len), always with the llama.cpp flags it needs."""
    text = description or (f"{name or 'program'}: compiled by torchwright_fx from a Python "
                           f"program (no training); greedy decoding; max_seq_len "
                           f"{m.max_seq_len}.")
    note = HALF_NOTE if is_half(m) else RUN_NOTE
    return text if note in text else f"{text.rstrip()}\n\n{note}"


def save_gguf(m: Machine, vocab: Vocab, path: str | os.PathLike,
              description: str | None = None, *, name: str | None = None) -> Path:
    """Write ``m`` as one f32 GGUF file for llama.cpp (see the module docstring)."""
    import gguf

    if not machine_of_act(m.act).llama_cpp:
        # the same kind of refusal as generate() on an output='value' build
        raise CompileError("this program was compiled for machine='relu' (a gated-ReLU MLP), "
                           "and llama.cpp has no architecture with a gated-ReLU MLP, so it "
                           "cannot be exported to GGUF; compile it with machine='swiglu'")
    if m.vocab_size != len(vocab):
        raise ValueError(f"the machine has {m.vocab_size} tokens, the vocabulary {len(vocab)}")
    arch, n_rot, freq_base = layout(m)
    target = Path(path).resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    # a staging file of its own (two processes writing one cache entry at once must not write
    # into one file: the first to finish would publish the other's half-written bytes)
    fd, staged = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".partial",
                                  dir=target.parent)
    os.close(fd)
    staging = Path(staged)

    w = gguf.GGUFWriter(str(staging), arch)
    w.add_name(name or "torchwright_fx program")
    w.add_description(describe(m, name, description))
    w.add_file_type(int(gguf.LlamaFileType.MOSTLY_F16 if is_half(m) else
                        gguf.LlamaFileType.ALL_F32))
    w.add_vocab_size(m.vocab_size)
    w.add_context_length(m.max_seq_len)
    w.add_embedding_length(m.d_model)
    w.add_block_count(m.n_layers)
    w.add_feed_forward_length(m.d_ff)
    w.add_head_count(m.n_heads)
    w.add_head_count_kv(m.kv_heads)
    w.add_key_length(m.d_head)
    w.add_value_length(m.d_head)
    w.add_layer_norm_rms_eps(m.rms_eps)
    w.add_rope_dimension_count(n_rot)
    w.add_rope_freq_base(freq_base)

    texts, types, merges = tokenizer_arrays(vocab)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(texts)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(m.bos_id)
    w.add_eos_token_id(m.eos_id)
    w.add_unk_token_id(vocab.unk_id)
    w.add_pad_token_id(m.eos_id)
    w.add_add_bos_token(True)  # every prompt starts at <bos>, as the HF post-processor does
    w.add_add_eos_token(False)

    for tensor_name, array in gguf_tensors(m).items():
        w.add_tensor(tensor_name, array)
    try:
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        staging.chmod(0o644)  # mkstemp creates 0600; a model file is ordinary shared data
        os.replace(staging, target)  # never leave a half-written file under the real name
    except BaseException:
        w.close()
        staging.unlink(missing_ok=True)
        raise
    return target
