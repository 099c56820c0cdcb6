"""ONNX export of a Phi-3 checkpoint with a static key-value cache, and an onnxruntime runner.

`export_onnx` turns a Hugging Face Phi-3 directory into two graphs written by the dynamo
exporter (`torch.onnx.export(..., dynamo=True)`):

* ``prefill.onnx`` runs a whole prompt and returns its logits and a filled static cache;
* ``decode.onnx`` runs one token against the static cache and returns the updated cache.

The graphs reuse the model's own modules (embedding, norms, projections, MLP, head) and
HF's own attention and rotary helpers, so the arithmetic matches the eager fp32 path of
``Phi3ForCausalLM``. `OnnxRunner` drives both graphs with onnxruntime on CPU.

The directory's format (file names, ``runner.json``) is in ``backends/onnx_spec.py``, the
modules the graphs are exported from in ``backends/onnx_graphs.py``, and the runner in
``backends/onnx_runner.py``; this module does the export and re-exports the public names.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from torchwright_fx.backends.onnx_graphs import (
    DecodeModule,
    PrefillModule,
    StaticCachePhi3,
    config_head_dim,
)
from torchwright_fx.backends.onnx_runner import INTRA_OP_THREADS, OnnxRunner, load
from torchwright_fx.backends.onnx_spec import (
    COPIED_FILES,
    DECODE_FILE,
    FORMAT_VERSION,
    PREFILL_FILE,
    RUNNER_FILE,
    TOKENIZER_FILE,
    RunnerSpec,
    StrPath,
    cache_names,
    token_inputs,
)
from torchwright_fx.base.errors import SequenceTooLongError

__all__ = [
    "COPIED_FILES",
    "DECODE_FILE",
    "FORMAT_VERSION",
    "INTRA_OP_THREADS",
    "PREFILL_FILE",
    "RUNNER_FILE",
    "TOKENIZER_FILE",
    "OnnxRunner",
    "RunnerSpec",
    "SequenceTooLongError",
    "StrPath",
    "cache_names",
    "export_onnx",
    "load",
    "token_inputs",
]

# Harmless exporter warnings: one Dim names both inputs; a torch-internal pytree notice.
_EXPORT_NOISE = (
    r"# The axis name: .* will not be used",
    r".*isinstance\(treespec, LeafSpec\)",
)


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
    core = StaticCachePhi3(model, seq_len).eval()
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
        head_dim=config_head_dim(config),
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


def _export_prefill(core: StaticCachePhi3, spec: RunnerSpec, path: Path) -> None:
    """Export the prompt graph with a dynamic sequence length."""
    length = min(2, spec.max_seq_len)
    ids = torch.zeros((1, length), dtype=torch.long)
    pos = torch.arange(length)[None]
    seq = torch.export.Dim("seq_len", min=1, max=spec.max_seq_len)
    dynamic = {"input_ids": {1: seq}, "position_ids": {1: seq}} if length > 1 else None
    _export(PrefillModule(core), (ids, pos), path, spec.prefill_inputs, spec.outputs, dynamic)


def _export_decode(core: StaticCachePhi3, spec: RunnerSpec, path: Path) -> None:
    """Export the one-token graph; every shape is static."""
    ids = torch.zeros((1, 1), dtype=torch.long)
    pos = torch.zeros((1, 1), dtype=torch.long)
    past = [torch.zeros(spec.cache_shape) for _ in range(2 * spec.num_layers)]
    _export(DecodeModule(core), (ids, pos, *past), path, spec.decode_inputs, spec.outputs, None)


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

