"""firebrand's RV32IM interpreter on one program, in firebrand's own venv (make bench-firebrand):
compile time, shape, and greedy decoding through its Python runtime and its C decoder.

Reads ``{"words": [...], "ram_bytes": N, "max_context": N}`` (the program's instruction words,
loaded at address 0) as JSON on stdin; prints one JSON object on stdout. Called by
``scripts/bench_rv32i.py``, which runs our interpreter on the same program in the same run.
"""

from __future__ import annotations

import json
import sys
import time

from firebrand import compile_machine
from firebrand.machines.rv32 import RV32Spec


def main() -> None:
    req = json.load(sys.stdin)
    image = b"".join(w.to_bytes(4, "little") for w in req["words"])
    spec = RV32Spec(ram_bytes=req["ram_bytes"], max_context=req["max_context"])
    start = time.perf_counter()
    model = compile_machine(spec.machine())
    compiled = time.perf_counter() - start
    prompt = spec.encode(image, 0)
    out: dict = {"compile_seconds": round(compiled, 2), "record_tokens": spec.record.width,
                 "prompt_tokens": len(prompt)}
    out |= {k: model.config[k] for k in ("layers", "width", "heads", "dtype", "attention")}
    model.generate(prompt, 1, backend="c")  # the first call compiles the C decoder
    for backend in ("python", "c"):
        start = time.perf_counter()
        trace = model.generate(prompt, req["max_steps"], backend=backend)
        seconds = time.perf_counter() - start
        new = len(trace) - len(prompt)
        out[backend] = {"tokens": new, "seconds": round(seconds, 3),
                        "tok_per_s": round(new / seconds, 1),
                        "registers": spec.registers(trace)[:18], "halted": spec.halted(trace)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
