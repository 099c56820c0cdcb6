"""ONNX export of a Phi-3 checkpoint with a static key-value cache, and an onnxruntime runner.

`export_onnx` turns a Hugging Face Phi-3 directory into two graphs written by the dynamo
exporter (`torch.onnx.export(..., dynamo=True)`):

* ``prefill.onnx`` runs a whole prompt and returns its logits and a filled static cache;
* ``decode.onnx`` runs one token against the static cache and returns the updated cache.

The graphs reuse the model's own modules (embedding, norms, projections, MLP, head) and
HF's own attention and rotary helpers, so the arithmetic matches the eager fp32 path of
``Phi3ForCausalLM``. `OnnxRunner` drives both graphs with onnxruntime on CPU.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from torchwright_fx.capture.errors import InputError

PREFILL_FILE = "prefill.onnx"
DECODE_FILE = "decode.onnx"
RUNNER_FILE = "runner.json"
TOKENIZER_FILE = "tokenizer.json"
COPIED_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "generation_config.json",
)
FORMAT_VERSION = 1
INTRA_OP_THREADS = 2
StrPath = str | os.PathLike[str]
_MASK_MIN = torch.finfo(torch.float32).min  # what HF's eager mask puts on blocked pairs
_DYNAMIC_ROPE_TYPES = ("dynamic", "longrope")
# Harmless exporter warnings: one Dim names both inputs; a torch-internal pytree notice.
_EXPORT_NOISE = (
    r"# The axis name: .* will not be used",
    r".*isinstance\(treespec, LeafSpec\)",
)


class SequenceTooLongError(InputError):
    """A prompt or a generation would need more positions than the static cache holds."""


# --------------------------------------------------------------------------- names


def token_inputs() -> list[str]:
    """Token and position inputs, first in both graphs."""
    return ["input_ids", "position_ids"]


def cache_names(prefix: str, num_layers: int) -> list[str]:
    """Return ``[prefix.0.key, prefix.0.value, prefix.1.key, ...]`` for every layer."""
    return [f"{prefix}.{n}.{kind}" for n in range(num_layers) for kind in ("key", "value")]


@dataclass(frozen=True)
class RunnerSpec:
    """Everything `OnnxRunner` needs, stored as ``runner.json`` next to the graphs."""

    max_seq_len: int
    num_layers: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    bos_token_id: int | None
    eos_token_ids: list[int]
    prefill_file: str = PREFILL_FILE
    decode_file: str = DECODE_FILE
    tokenizer_file: str = TOKENIZER_FILE
    prefill_inputs: list[str] = field(default_factory=token_inputs)
    decode_inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    cache_layout: str = "[1, num_kv_heads, max_seq_len, head_dim] float32, slot = position"
    format_version: int = FORMAT_VERSION

    @classmethod
    def build(cls, **values: Any) -> RunnerSpec:
        """Create a spec, filling the cache input/output names from ``num_layers``."""
        layers = values["num_layers"]
        past = cache_names("past_key_values", layers)
        values.setdefault("decode_inputs", [*token_inputs(), *past])
        values.setdefault("outputs", ["logits", *cache_names("present", layers)])
        return cls(**values)

    @property
    def cache_shape(self) -> tuple[int, int, int, int]:
        """Shape of one key or value cache tensor."""
        return (1, self.num_kv_heads, self.max_seq_len, self.head_dim)

    def save(self, path: Path) -> None:
        """Write the spec as JSON."""
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def load(cls, path: Path) -> RunnerSpec:
        """Read a spec written by `save`."""
        data = json.loads(path.read_text())
        if data.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"{path}: unsupported runner.json format {data.get('format_version')}")
        return cls(**data)


# ------------------------------------------------------------------ export modules


class _StaticCachePhi3(nn.Module):
    """Phi-3 forward over a static cache, built from a loaded ``Phi3ForCausalLM``.

    Cache slot ``s`` holds the rotated key and the value of position ``s``. The cos/sin
    tables are computed once by the model's own rotary embedding and gathered by
    ``position_ids``, so the graph has no data-dependent control flow.
    """

    cos_table: torch.Tensor
    sin_table: torch.Tensor

    def __init__(self, model: Any, max_seq_len: int) -> None:
        super().__init__()
        from transformers.models.phi3 import modeling_phi3

        self._phi3 = modeling_phi3
        self.model = model
        config = model.config
        self.max_seq_len = max_seq_len
        self.num_kv_heads = int(config.num_key_value_heads)
        self.head_dim = _head_dim(config)
        self.sliding_window: int | None = getattr(config, "sliding_window", None)
        cos, sin = _rope_tables(model, max_seq_len)
        self.register_buffer("cos_table", cos, persistent=False)
        self.register_buffer("sin_table", sin, persistent=False)

    def run(
        self, input_ids: torch.Tensor, position_ids: torch.Tensor, past: Sequence[torch.Tensor]
    ) -> tuple[torch.Tensor, ...]:
        """Return ``(logits, key0, value0, key1, ...)``; ``past`` is empty for prefill."""
        inner = self.model.model
        hidden = inner.embed_tokens(input_ids)
        cos = self.cos_table[position_ids]
        sin = self.sin_table[position_ids]
        presents: list[torch.Tensor] = []
        for n, layer in enumerate(inner.layers):
            layer_past = tuple(past[2 * n : 2 * n + 2])
            hidden, key, value = self._layer(layer, hidden, cos, sin, position_ids, layer_past)
            presents += [key, value]
        logits = self.model.lm_head(inner.norm(hidden))
        return (logits, *presents)

    def _layer(
        self,
        layer: Any,
        hidden: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        position_ids: torch.Tensor,
        past: tuple[torch.Tensor, ...],
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One decoder layer, in the order of ``Phi3DecoderLayer.forward`` (eval mode)."""
        normed = layer.input_layernorm(hidden)
        attn, key, value = self._attention(layer.self_attn, normed, cos, sin, position_ids, past)
        hidden = hidden + attn
        hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
        return hidden, key, value

    def _attention(
        self,
        attn: Any,
        hidden: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        position_ids: torch.Tensor,
        past: tuple[torch.Tensor, ...],
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``Phi3Attention.forward`` with the cache update done by scatter into slots."""
        query, key, value = self._project(attn, hidden)
        query, key = self._phi3.apply_rotary_pos_emb(query, key, cos, sin)
        query_pos = position_ids[0]
        if past:
            keys = self._write(past[0], key, query_pos)
            values = self._write(past[1], value, query_pos)
            key_pos = torch.arange(self.max_seq_len, device=query_pos.device)
            present = (keys, values)
        else:
            keys, values, key_pos = key, value, query_pos
            zeros = key.new_zeros(self.cache_shape())
            present = (self._write(zeros, key, query_pos), self._write(zeros, value, query_pos))
        mask = self._mask(query_pos, key_pos)
        out, _ = self._phi3.eager_attention_forward(
            attn, query, keys, values, mask, scaling=attn.scaling, dropout=0.0
        )
        out = out.reshape(*hidden.shape[:-1], -1).contiguous()
        return attn.o_proj(out), present[0], present[1]

    def _project(
        self, attn: Any, hidden: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Split ``qkv_proj`` rows ``[Q; K; V]`` into ``[1, heads, T, head_dim]`` tensors."""
        qkv = attn.qkv_proj(hidden)
        q_end = attn.config.num_attention_heads * self.head_dim
        k_end = q_end + self.num_kv_heads * self.head_dim
        shape = (*hidden.shape[:-1], -1, self.head_dim)
        parts = (qkv[..., :q_end], qkv[..., q_end:k_end], qkv[..., k_end:])
        query, key, value = (p.view(shape).transpose(1, 2) for p in parts)
        return query, key, value

    def cache_shape(self) -> tuple[int, int, int, int]:
        """Shape of one static key or value cache tensor."""
        return (1, self.num_kv_heads, self.max_seq_len, self.head_dim)

    def _write(self, cache: torch.Tensor, new: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """Return ``cache`` with ``new[:, :, i]`` written at slot ``slots[i]``."""
        index = slots.view(1, 1, -1, 1).expand(1, self.num_kv_heads, -1, self.head_dim)
        return cache.scatter(2, index, new)

    def _mask(self, query_pos: torch.Tensor, key_pos: torch.Tensor) -> torch.Tensor:
        """HF's eager causal mask: 0 where allowed, float32 min where blocked."""
        allowed = key_pos[None, :] <= query_pos[:, None]
        if self.sliding_window is not None:
            allowed = allowed & (key_pos[None, :] > query_pos[:, None] - self.sliding_window)
        zero = torch.zeros((), dtype=torch.float32, device=query_pos.device)
        return torch.where(allowed, zero, _MASK_MIN)[None, None]


class _Prefill(nn.Module):
    """Prompt graph: ``(input_ids, position_ids) -> (logits, present...)``."""

    def __init__(self, core: _StaticCachePhi3) -> None:
        super().__init__()
        self.core = core

    def forward(
        self, input_ids: torch.Tensor, position_ids: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        """Run the prompt; the returned cache has zeros past the prompt's slots."""
        return self.core.run(input_ids, position_ids, ())


class _Decode(nn.Module):
    """One-token graph: ``(input_ids, position_ids, past...) -> (logits, present...)``."""

    def __init__(self, core: _StaticCachePhi3) -> None:
        super().__init__()
        self.core = core

    def forward(
        self, input_ids: torch.Tensor, position_ids: torch.Tensor, *past: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        """Run one token at slot ``position_ids[0, 0]`` and return the updated cache."""
        return self.core.run(input_ids, position_ids, past)


def _head_dim(config: Any) -> int:
    """Head size as ``Phi3Attention`` computes it."""
    head_dim = getattr(config, "head_dim", None)
    return int(head_dim or config.hidden_size // config.num_attention_heads)


def _rope_tables(model: Any, max_seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin for positions ``0..max_seq_len-1``, from the model's rotary embedding."""
    config = model.config
    rope_type = config.rope_parameters.get("rope_type", "default")
    original = config.rope_parameters.get(
        "original_max_position_embeddings",
        getattr(config, "original_max_position_embeddings", config.max_position_embeddings),
    )
    if rope_type in _DYNAMIC_ROPE_TYPES and max_seq_len > original:
        raise NotImplementedError(
            f"rope_type={rope_type!r} changes its frequencies past {original} positions; "
            f"a static cache of {max_seq_len} slots cannot follow that "
            f"(use max_seq_len <= {original})"
        )
    positions = torch.arange(max_seq_len)[None]
    probe = torch.zeros((), dtype=torch.float32)
    with torch.no_grad():
        cos, sin = model.model.rotary_emb(probe, positions)
    return cos[0].contiguous(), sin[0].contiguous()


# ------------------------------------------------------------------------- export


def export_onnx(hf_dir: StrPath, out_dir: StrPath, *, max_seq_len: int | None = None) -> Path:
    """Export the Phi-3 checkpoint in ``hf_dir`` to ONNX graphs and runner files in ``out_dir``.

    ``max_seq_len`` (default ``config.max_position_embeddings``) is the number of static
    cache slots, i.e. the longest prompt plus generation the runner accepts. The directory
    is written beside ``out_dir`` and moved into place only once complete (replacing any
    previous export). Returns the resolved ``out_dir``.
    """
    hf_path, target = Path(hf_dir), Path(out_dir).resolve()
    if target == hf_path.resolve():
        raise ValueError(f"out_dir must differ from hf_dir ({target})")
    _check_checkpoint(hf_path)
    model = _load_model(hf_path)
    seq_len = _max_seq_len(model.config, max_seq_len)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        _write_bundle(model, hf_path, staging, seq_len)
        _publish(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def _max_seq_len(config: Any, requested: int | None) -> int:
    """The cache length: ``requested`` or the model's ``max_position_embeddings``."""
    seq_len = int(config.max_position_embeddings if requested is None else requested)
    if seq_len < 1:
        raise ValueError(f"max_seq_len must be >= 1, got {seq_len}")
    return seq_len


def _write_bundle(model: Any, hf_path: Path, out_path: Path, seq_len: int) -> None:
    """Write both graphs, the tokenizer files and ``runner.json`` into ``out_path``."""
    core = _StaticCachePhi3(model, seq_len).eval()
    spec = _runner_spec(hf_path, model.config, seq_len)
    _export_prefill(core, spec, out_path / spec.prefill_file)
    _export_decode(core, spec, out_path / spec.decode_file)
    _copy_tokenizer(hf_path, out_path)
    spec.save(out_path / RUNNER_FILE)


def _publish(staging: Path, target: Path) -> None:
    """Make ``staging`` readable and move it to ``target``, replacing an old export."""
    staging.chmod(0o755)  # mkdtemp creates 0700; an export is ordinary shared data
    for path in staging.iterdir():
        path.chmod(0o644)
    if not target.exists():
        os.replace(staging, target)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old.", dir=target.parent))
    os.replace(target, old / "previous")
    os.replace(staging, target)
    shutil.rmtree(old)


def _check_checkpoint(hf_path: Path) -> None:
    """Fail early, before loading weights, on a non-Phi-3 or tokenizer-less directory."""
    from transformers import AutoConfig

    model_type = AutoConfig.from_pretrained(hf_path).model_type
    if model_type != "phi3":
        raise ValueError(f"{hf_path}: expected a phi3 checkpoint, got {model_type!r}")
    if not (hf_path / TOKENIZER_FILE).exists():
        raise FileNotFoundError(f"{hf_path / TOKENIZER_FILE} is missing; the runner needs it")


def _load_model(hf_path: Path) -> Any:
    """Load the checkpoint in fp32 with eager attention (HF's reference arithmetic)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        hf_path, dtype=torch.float32, attn_implementation="eager"
    )
    return model.eval()


def _runner_spec(hf_path: Path, config: Any, max_seq_len: int) -> RunnerSpec:
    """Collect the shapes and special token ids the runner needs."""
    return RunnerSpec.build(
        max_seq_len=max_seq_len,
        num_layers=int(config.num_hidden_layers),
        num_kv_heads=int(config.num_key_value_heads),
        head_dim=_head_dim(config),
        vocab_size=int(config.vocab_size),
        bos_token_id=config.bos_token_id,
        eos_token_ids=_eos_ids(hf_path, config),
    )


def _eos_ids(hf_path: Path, config: Any) -> list[int]:
    """End-of-sequence ids: ``generation_config.json`` first, then the model config."""
    eos: Any = None
    gen_file = hf_path / "generation_config.json"
    if gen_file.exists():
        eos = json.loads(gen_file.read_text()).get("eos_token_id")
    if eos is None:
        eos = config.eos_token_id
    if eos is None:
        return []
    return [int(e) for e in (eos if isinstance(eos, list) else [eos])]


def _export_prefill(core: _StaticCachePhi3, spec: RunnerSpec, path: Path) -> None:
    """Export the prompt graph with a dynamic sequence length."""
    length = min(2, spec.max_seq_len)
    ids = torch.zeros((1, length), dtype=torch.long)
    pos = torch.arange(length)[None]
    seq = torch.export.Dim("seq_len", min=1, max=spec.max_seq_len)
    dynamic = {"input_ids": {1: seq}, "position_ids": {1: seq}} if length > 1 else None
    _export(_Prefill(core), (ids, pos), path, spec.prefill_inputs, spec.outputs, dynamic)


def _export_decode(core: _StaticCachePhi3, spec: RunnerSpec, path: Path) -> None:
    """Export the one-token graph; every shape is static."""
    ids = torch.zeros((1, 1), dtype=torch.long)
    pos = torch.zeros((1, 1), dtype=torch.long)
    past = [torch.zeros(spec.cache_shape) for _ in range(2 * spec.num_layers)]
    _export(_Decode(core), (ids, pos, *past), path, spec.decode_inputs, spec.outputs, None)


def _export(
    module: nn.Module,
    args: tuple[torch.Tensor, ...],
    path: Path,
    input_names: list[str],
    output_names: list[str],
    dynamic_shapes: dict[str, Any] | None,
) -> None:
    """Run the dynamo exporter and save the graph with its weights in ``<path>.data``."""
    module.eval()
    with torch.no_grad(), warnings.catch_warnings():
        for pattern in _EXPORT_NOISE:
            warnings.filterwarnings("ignore", message=pattern)
        program = torch.onnx.export(
            module,
            args,
            dynamo=True,
            input_names=input_names,
            output_names=output_names,
            dynamic_shapes=dynamic_shapes,
            optimize=True,
            verbose=False,
        )
    if program is None:
        raise RuntimeError("torch.onnx.export(dynamo=True) returned no program")
    program.save(path, external_data=True)


def _copy_tokenizer(hf_path: Path, out_path: Path) -> None:
    """Copy the tokenizer and generation files that exist in ``hf_path``."""
    for name in COPIED_FILES:
        if (hf_path / name).exists():
            shutil.copyfile(hf_path / name, out_path / name)


# ------------------------------------------------------------------------- runner


class OnnxRunner:
    """Greedy generation and teacher-forced logits from an `export_onnx` directory."""

    def __init__(self, path: StrPath) -> None:
        from tokenizers import Tokenizer

        self.path = Path(path)
        self.spec = RunnerSpec.load(self.path / RUNNER_FILE)
        self.tokenizer = Tokenizer.from_file(str(self.path / self.spec.tokenizer_file))
        self.tokenizer.encode_special_tokens = True  # "<eos>" in text is characters, as in HF
        self._prefill = _session(self.path / self.spec.prefill_file)
        self._decode = _session(self.path / self.spec.decode_file)

    # public API ---------------------------------------------------------------

    def logits(self, input_ids: Sequence[int]) -> np.ndarray:
        """Teacher-forced logits ``[T, V]`` for every position of ``input_ids`` (prefill)."""
        logits, _ = self._run_prefill(self._check_prompt(input_ids))
        return logits[0]

    def generate_ids(self, ids: Sequence[int], max_new_tokens: int | None = None) -> list[int]:
        """Greedy-decode after ``ids``; return only the new ids (eos included if produced).

        Prompt plus generated tokens may not exceed ``max_seq_len``. With
        ``max_new_tokens=None`` decoding runs until eos and raises `SequenceTooLongError`
        when one more token would pass the limit; an explicit ``max_new_tokens`` that
        cannot fit is rejected before anything runs.
        """
        prompt = self._check_prompt(ids)
        length = prompt.shape[1]
        budget = self._budget(length, max_new_tokens)
        if budget == 0:
            return []
        logits, cache = self._run_prefill(prompt)
        new: list[int] = []
        while True:
            token = int(np.argmax(logits[0, -1]))
            new.append(token)
            if token in self.spec.eos_token_ids or len(new) == budget:
                return new
            self._check_room(length, len(new))
            logits, cache = self._run_decode(token, length + len(new) - 1, cache)

    def generate(self, text: str, max_new_tokens: int | None = None) -> str:
        """Greedy-decode after ``text``; return only the new text, special tokens skipped."""
        return self.decode(self.generate_ids(self.encode(text), max_new_tokens))

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` as the directory's tokenizer produces them."""
        return list(self.tokenizer.encode(text).ids)

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` without special tokens and without added separators."""
        if self.tokenizer.decoder is not None:
            return str(self.tokenizer.decode(list(ids), skip_special_tokens=True))
        special = {i for i, tok in self.tokenizer.get_added_tokens_decoder().items() if tok.special}
        return "".join(self.tokenizer.id_to_token(i) or "" for i in ids if i not in special)

    # length checks ------------------------------------------------------------

    def _check_prompt(self, ids: Sequence[int]) -> np.ndarray:
        """Validate a prompt's length and ids; return it as ``[1, T]`` int64."""
        limit = self.spec.max_seq_len
        if len(ids) == 0:
            raise ValueError("the prompt must contain at least one token")
        if len(ids) > limit:
            raise SequenceTooLongError(
                f"prompt of {len(ids)} tokens does not fit max_seq_len={limit}"
            )
        array = np.asarray(ids, dtype=np.int64).reshape(1, -1)
        if array.min() < 0 or array.max() >= self.spec.vocab_size:
            raise ValueError(f"token ids must lie in [0, {self.spec.vocab_size})")
        return array

    def _budget(self, prompt_len: int, max_new_tokens: int | None) -> int | None:
        """Check the room left after the prompt, and an explicit budget, before running."""
        if max_new_tokens is None:
            self._check_room(prompt_len, 0)
            return None
        if max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
        if prompt_len + max_new_tokens > self.spec.max_seq_len:
            raise SequenceTooLongError(
                f"prompt of {prompt_len} tokens + max_new_tokens={max_new_tokens} = "
                f"{prompt_len + max_new_tokens} exceeds max_seq_len={self.spec.max_seq_len}"
            )
        return max_new_tokens

    def _check_room(self, prompt_len: int, generated: int) -> None:
        """Raise if one more token would make the sequence longer than ``max_seq_len``."""
        limit = self.spec.max_seq_len
        if prompt_len + generated + 1 > limit:
            raise SequenceTooLongError(
                f"generating past max_seq_len={limit}: prompt of {prompt_len} tokens + "
                f"{generated} generated leaves no room for another token and no eos came"
            )

    # graph calls --------------------------------------------------------------

    def _run_prefill(self, ids: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
        """Run the prompt graph; return logits ``[1, T, V]`` and the cache tensors."""
        pos = np.arange(ids.shape[1], dtype=np.int64)[None]
        outputs = self._prefill.run(self.spec.outputs, {"input_ids": ids, "position_ids": pos})
        return np.asarray(outputs[0]), list(outputs[1:])

    def _run_decode(
        self, token: int, slot: int, cache: list[np.ndarray]
    ) -> tuple[np.ndarray, list[np.ndarray]]:
        """Run one token at ``slot``; return logits ``[1, 1, V]`` and the new cache."""
        feeds = {
            "input_ids": np.array([[token]], dtype=np.int64),
            "position_ids": np.array([[slot]], dtype=np.int64),
        }
        feeds.update(zip(self.spec.decode_inputs[2:], cache, strict=True))
        outputs = self._decode.run(self.spec.outputs, feeds)
        return np.asarray(outputs[0]), list(outputs[1:])


def _session(path: Path) -> Any:
    """An onnxruntime CPU session with two intra-op threads."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = INTRA_OP_THREADS
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def load(path: StrPath) -> OnnxRunner:
    """Open a directory written by `export_onnx`."""
    return OnnxRunner(path)
