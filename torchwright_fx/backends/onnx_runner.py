"""`OnnxRunner`: greedy generation and teacher-forced logits from an `export_onnx` directory,
driving the prefill and decode graphs with onnxruntime on CPU."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from torchwright_fx.backends.onnx_spec import RUNNER_FILE, RunnerSpec, StrPath
from torchwright_fx.base.errors import SequenceTooLongError

INTRA_OP_THREADS = 2


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
