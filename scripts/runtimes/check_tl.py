"""Check the compiled checkpoints under TransformerLens 4.3.0 (``make runtime-tl``).

Run in .runtimes/tl (transformers pinned to 5.23.0: with 5.24 TL's generate() drops its KV
cache, as transformers renamed the attention kwarg it reads). For every directory written by
compile_checkpoints.py: ``TransformerBridge.boot_transformers(dir, dtype=float32)``, the
forward logits over prompt + answer against transformers' (every position), greedy
``generate()`` with TL's KV cache from the prompt text against the reference answer and the
oracle, and tokens/s of TL's generate and of transformers' in this venv (batch 1, best of
three passes). Exits 1 on any
wrong answer.
"""

from __future__ import annotations

import sys

import refcheck
import torch
from transformer_lens.model_bridge import TransformerBridge


def check(ex: refcheck.Example) -> refcheck.Row:
    row = refcheck.Row(ex.name, len(ex.cases))
    bridge = TransformerBridge.boot_transformers(str(ex.directory), dtype=torch.float32,
                                                 device="cpu")
    eos = refcheck.eos_id(ex.directory)

    def generate(case: refcheck.Case) -> list[int]:
        out = bridge.generate(case.prompt, max_new_tokens=ex.max_seq_len - len(case.prompt_ids),
                              do_sample=False, verbose=False, return_type="tokens")
        return out[0, len(case.prompt_ids):].tolist()

    with torch.no_grad():
        for case in ex.cases:
            ids = bridge.to_tokens(case.prompt)[0].tolist()
            if ids != case.prompt_ids:
                raise AssertionError(f"{ex.name} {case.prompt!r}: TL tokenizes to {ids}, "
                                     f"transformers to {case.prompt_ids}")
            full = torch.tensor([case.prompt_ids + case.new_ids])
            row.diff(bridge(full)[0].numpy(), case.logits)
            new = generate(case)
            row.compare(case, new, bridge.tokenizer.decode(new, skip_special_tokens=True), eos)
        row.tok_s = refcheck.best_rate(lambda: sum(len(generate(c)) for c in ex.cases))
    row.hf_tok_s = refcheck.transformers_speed(ex)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = refcheck.arguments(__doc__)
    args = parser.parse_args(argv)
    torch.set_num_threads(2)
    rows = []
    for ex in refcheck.load(args.root, args.names):
        try:
            row = check(ex)
        except Exception as e:  # report it in the table and go on with the next example
            row = refcheck.Row(ex.name, len(ex.cases), wrong=[f"{ex.name}: {e!r}"])
        print(f"{row.name}: {row.right}/{row.total} right, max |logit diff| {row.max_diff:.3g}",
              flush=True)
        rows.append(row)
    return refcheck.finish("TransformerLens", rows)


if __name__ == "__main__":
    sys.exit(main())
