"""Write a Machine as a stock Phi-3 Hugging Face directory (no custom code)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors.torch import save_file
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors

from torchwright_fx.emit.machine import Machine
from torchwright_fx.vocab import BOS, EOS, UNK, Vocab


def phi3_config(m: Machine) -> dict:
    rope = {"rope_type": "default", "rope_theta": m.rope_theta,
            "partial_rotary_factor": m.partial_rotary_factor}
    return {
        "architectures": ["Phi3ForCausalLM"],
        "model_type": "phi3",
        "vocab_size": m.vocab_size,
        "hidden_size": m.d_model,
        "intermediate_size": m.d_ff,
        "num_hidden_layers": m.n_layers,
        "num_attention_heads": m.n_heads,
        "num_key_value_heads": m.kv_heads,
        "head_dim": m.d_head,
        "hidden_act": m.act,
        "max_position_embeddings": m.max_seq_len,
        "original_max_position_embeddings": m.max_seq_len,
        "rms_norm_eps": m.rms_eps,
        "rope_parameters": rope,
        # older transformers read only these two
        "rope_theta": m.rope_theta,
        "partial_rotary_factor": m.partial_rotary_factor,
        "rope_scaling": None,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "attention_dropout": 0.0,
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "bos_token_id": m.bos_id,
        "eos_token_id": m.eos_id,
        "pad_token_id": m.eos_id,
        "use_cache": True,
        # the arithmetics the build is certified for (precision="half": fp16 and bf16 too)
        "torchwright_fx_certified": m.meta.get("formats", ["fp32"]),
        "torch_dtype": "float32",
        "dtype": "float32",
    }


def state_dict(m: Machine) -> dict[str, torch.Tensor]:
    sd = {"model.embed_tokens.weight": m.embed, "model.norm.weight": m.final_norm,
          "lm_head.weight": m.lm_head}
    for i, layer in enumerate(m.layers):
        p = f"model.layers.{i}."
        sd[p + "self_attn.qkv_proj.weight"] = layer.qkv
        sd[p + "self_attn.o_proj.weight"] = layer.o
        sd[p + "mlp.gate_up_proj.weight"] = layer.gate_up
        sd[p + "mlp.down_proj.weight"] = layer.down
        sd[p + "input_layernorm.weight"] = layer.norm_attn
        sd[p + "post_attention_layernorm.weight"] = layer.norm_mlp
    return {k: v.detach().to(torch.float32).contiguous() for k, v in sd.items()}


def build_tokenizer(vocab: Vocab) -> Tokenizer:
    tok = Tokenizer(models.WordLevel({t: i for i, t in enumerate(vocab.tokens)}, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, vocab.bos_id)])
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens([BOS, EOS, UNK])
    return tok


def _tokenizer_files(vocab: Vocab, m: Machine, out: Path) -> None:
    build_tokenizer(vocab).save(str(out / "tokenizer.json"))
    specials = {"bos_token": BOS, "eos_token": EOS, "unk_token": UNK, "pad_token": EOS}
    (out / "special_tokens_map.json").write_text(json.dumps(specials, indent=2))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": m.max_seq_len,
              "add_bos_token": False, "add_eos_token": False, "clean_up_tokenization_spaces": False,
              "padding_side": "left",
              # the text "<eos>" is five characters, not the special token (the program sees
              # characters; only the post-processor adds <bos>)
              "split_special_tokens": True, **specials}
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    # How a call stops where the certificate ends, quietly, in transformers 5.x. The model
    # prints <eos> at position max_seq_len - 1 itself (ops/end.py, ``ends_with_eos``), so the
    # config only needs a length that silences transformers' own default: max_new_tokens =
    # max_seq_len. A default generate() or pipeline() call and one passing its own
    # max_new_tokens then print nothing and stop at <eos>, never past max_seq_len (transformers'
    # max_position_embeddings only warns, after the fact). A caller's max_length meets the
    # config's max_new_tokens: transformers warns that both are set and keeps max_new_tokens.
    # Where the flag is not certified (very long contexts) the config caps the total with
    # max_length = max_seq_len instead: quiet for default and max_length calls, and a caller's
    # max_new_tokens replaces the cap with a warning.
    generation = {"bos_token_id": m.bos_id, "eos_token_id": m.eos_id, "pad_token_id": m.eos_id,
                  "do_sample": False}
    if m.ends_with_eos:
        generation["max_new_tokens"] = m.max_seq_len
    else:
        generation["max_length"] = m.max_seq_len
    (out / "generation_config.json").write_text(json.dumps(generation, indent=2))


def _make_readable(directory: Path) -> None:
    # mkdtemp creates 0700; a model directory is ordinary shared data
    directory.chmod(0o755)
    for path in directory.iterdir():
        path.chmod(0o644)


def save_pretrained(m: Machine, vocab: Vocab, directory: str | os.PathLike,
                    card: str | None = None) -> Path:
    """Write the directory atomically: into a staging folder beside it, moved into place only
    once complete, so a failure never leaves a half-written or clobbered bundle."""
    target = Path(directory).resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        (staging / "config.json").write_text(json.dumps(phi3_config(m), indent=2))
        save_file(state_dict(m), str(staging / "model.safetensors"), metadata={"format": "pt"})
        _tokenizer_files(vocab, m, staging)
        if card:
            (staging / "README.md").write_text(card)
        _make_readable(staging)
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old.", dir=target.parent))
            os.replace(target, old / "previous")
            os.replace(staging, target)
            shutil.rmtree(old)
        else:
            os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


class TransformersRunner:
    """A Phi-3 directory loaded by ``AutoModelForCausalLM`` in ``dtype`` (float32 unless
    given), as a runner (``backends/protocol.py``): what a user of the directory gets."""

    def __init__(self, directory: str | os.PathLike, dtype: torch.dtype = torch.float32):
        from transformers import AutoModelForCausalLM

        self.model = AutoModelForCausalLM.from_pretrained(directory, dtype=dtype).eval()
        config = self.model.config
        self.max_seq_len = int(config.max_position_embeddings)
        self.eos_id = int(config.eos_token_id)

    def logits(self, ids: Sequence[int]) -> torch.Tensor:
        with torch.no_grad():
            return self.model(torch.tensor([list(ids)])).logits[0]

    def generate_ids(self, ids: Sequence[int], max_new_tokens: int | None = None) -> list[int]:
        # the length in the form the directory's generation config has it (max_new_tokens or
        # a total, max_length): the other form would make transformers warn that both are set
        limit = self.max_seq_len if max_new_tokens is None else \
            min(self.max_seq_len, len(ids) + max_new_tokens)
        if len(ids) >= limit:
            return []
        length = {"max_new_tokens": limit - len(ids)} \
            if self.model.generation_config.max_new_tokens is not None else {"max_length": limit}
        with torch.no_grad():
            out = self.model.generate(torch.tensor([list(ids)]), do_sample=False, **length)
        new = out[0, len(ids):].tolist()
        return new[: new.index(self.eos_id)] if self.eos_id in new else new
