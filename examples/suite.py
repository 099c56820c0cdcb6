"""A circuit-discovery benchmark anyone can regenerate (issue 34):
``torchwright-fx suite --n N --seed S OUT`` (from a checkout: it draws from this folder).

Writes N compiled programs under OUT, each a Phi-3 directory with its ground truth
(``circuit.json``, ``edges.json``, ``components.json``: docs/circuits.md) and ``pairs.json``:
clean/corrupted prompt pairs that differ in one input token, with the clean answer (the eager
reference's, which the model computes exactly), for patching methods. The programs are
tracr's library (``examples/rasp/``, at ``--max-len``) first, then programs of the fuzzer's
generator (``tests/fuzzgen.py``, seeded from S; the SwiGLU machine, a program the compiler
refuses is skipped and the next seed drawn). ``OUT/suite.json`` lists them. The same checks as
the library's apply to the output: ``make interp-loaders``' hook and module checks
(``scripts/runtimes/check_tl_hooks.py OUT``, ``scripts/runtimes/check_nnsight.py OUT``) and
the patching check through TransformerLens' hooks on ``patching.json``, the pairs as token ids
(``scripts/runtimes/tl_patching.py OUT``, then ``scripts/attribution_check.py --compare-tl
OUT``).
"""

from __future__ import annotations

import dataclasses
import importlib
import itertools
import json
import pkgutil
import random
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torchwright_fx as tw

ROOT = Path(__file__).resolve().parent.parent
MAX_FUZZ_SEEDS = 50  # draws per fuzz program before giving up (most compile: ~3 in 4)
# a unit is found by patching where it moves an answer logit by this share of what the whole
# corruption moves (scripts/attribution_check.py, scripts/runtimes/tl_patching.py)
PATCHING_TAU = 0.01
DOMAIN_CAP = 50_000  # a RASP domain listed up to this many prompts


def rasp_names() -> list[str]:
    import examples.rasp

    return sorted(m.name for m in pkgutil.iter_modules(examples.rasp.__path__)
                  if not m.name.startswith("_"))


def _fuzzgen() -> Any:
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        return importlib.import_module("fuzzgen")
    finally:
        sys.path.remove(str(ROOT / "tests"))


def pairs(program: tw.Compiled, prompts: list[str], letters: str, rng: random.Random,
          n: int, valid: Callable[[str], bool]) -> list[dict[str, str]]:
    """Up to ``n`` pairs: a clean prompt and the same with one input token changed to another
    of ``letters`` (``substitute``), or one more token inserted (``insert``: a quarter of the
    pairs; the patching checks truncate it to the clean sequence's length), each a prompt
    ``valid`` accepts, with the clean answer. Pairs whose corruption changes the reference's
    output at an answer position (teacher-forced with the clean answer, as the patching checks
    run them) come first: only those can show a component."""
    want = {"insert": n // 4, "substitute": n - n // 4}
    moving: dict[str, list[dict[str, str]]] = {"substitute": [], "insert": []}
    still: list[dict[str, str]] = []
    for clean in prompts:
        if all(len(moving[k]) >= want[k] for k in want):
            break
        answer = program.reference(clean)
        for kind in ("substitute", "insert"):
            if len(moving[kind]) >= want[kind]:
                continue
            edits = [(i, c) for i in range(len(clean) + (kind == "insert")) for c in letters
                     if kind == "insert" or c != clean[i]]
            rng.shuffle(edits)
            fallback = None
            for i, c in edits:
                corrupt = clean[:i] + c + clean[i + (kind == "substitute"):]
                if not valid(corrupt):
                    continue
                pair = {"kind": kind, "clean": clean, "corrupt": corrupt, "answer": answer,
                        "position": str(i)}
                if _moves(program, pair):
                    moving[kind].append(pair)
                    break
                fallback = fallback or pair
            else:
                if fallback is not None:
                    still.append(fallback)
    chosen = moving["substitute"][:want["substitute"]] + moving["insert"][:want["insert"]]
    return (chosen + still)[:n]


def _moves(program: tw.Compiled, pair: dict[str, str]) -> bool:
    """Whether the corruption changes the reference's output at an answer position."""
    ids = pair_ids(program, pair["clean"], pair["corrupt"], pair["answer"])
    start = ids["start"]
    return not bool((program.printed_ids(ids["clean"])[start:]
                     == program.printed_ids(ids["corrupt"])[start:]).all())


def _rasp(name: str, max_len: int, rng: random.Random, n_pairs: int
          ) -> tuple[tw.Compiled, list[dict[str, str]]]:
    module = importlib.import_module(f"examples.rasp.{name}")
    program = module.make(max_len=max_len)
    prompts = list(dict.fromkeys(module.random_input(rng, k) for k in range(1, max_len + 1)
                                 for _ in range(4)))
    letters = "".join(sorted({c for p in prompts for c in p if c != "\n"}))
    domain = set(itertools.islice(module.inputs(max_len), DOMAIN_CAP + 1))

    def valid(p: str) -> bool:  # in the program's domain (beyond the cap: its claims hold)
        if len(domain) <= DOMAIN_CAP:
            return p in domain
        try:
            program.reference(p)
        except (AssertionError, ValueError):
            return False
        return True

    return program, pairs(program, prompts, letters, rng, n_pairs, valid)


def _fuzz(seed: int, n_pairs: int) -> tuple[str, tw.Compiled, list[dict[str, str]], int]:
    """The first fuzz program from ``seed`` on that compiles: name, program, pairs, seed."""
    fuzzgen = _fuzzgen()
    for s in range(seed, seed + MAX_FUZZ_SEEDS):
        prog, prompts = fuzzgen.random_case(s)
        prog = dataclasses.replace(prog, machine="swiglu")
        try:
            program = prog.compile().compile()
        except tw.CompileError:
            continue
        letters = prog.chars[:-1]
        usable = [p for p in prompts if p]
        try:
            chosen = pairs(program, usable, letters, random.Random(s), n_pairs, lambda p: True)
        except Exception:  # noqa: BLE001  (a prompt the reference itself rejects)
            continue
        if chosen:
            return f"fuzz_{s}", program, chosen, s
    raise RuntimeError(f"no fuzz program compiled from seeds {seed}..{seed + MAX_FUZZ_SEEDS}")


def programs(n: int, seed: int, max_len: int, n_pairs: int
             ) -> Iterator[tuple[str, tw.Compiled, list[dict[str, str]], dict[str, Any]]]:
    rng = random.Random(seed)
    for name in rasp_names()[:n]:
        program, chosen = _rasp(name, max_len, rng, n_pairs)
        yield name, program, chosen, {"source": f"examples/rasp/{name}.py", "max_len": max_len}
    next_seed = seed * 1_000_003
    for _ in range(max(0, n - len(rasp_names()))):
        name, program, chosen, used = _fuzz(next_seed, n_pairs)
        next_seed = used + 1
        yield name, program, chosen, {"source": "tests/fuzzgen.py", "fuzz_seed": used}


def pair_ids(program: tw.Compiled, clean: str, corrupt: str, answer: str) -> dict[str, Any]:
    """A pair as the patching checks run it: both prompts teacher-forced with the clean
    answer, as token ids of one length, and the first position that predicts an answer token
    (``patching.json``, read by scripts/runtimes/tl_patching.py)."""
    vocab = program.vocab
    ids = vocab.encode(clean + answer)
    return {"clean": ids, "corrupt": vocab.encode(corrupt + answer)[: len(ids)],
            "start": len(vocab.encode(clean)) - 1}


def write(out: Path, n: int, seed: int = 0, max_len: int = 5, n_pairs: int = 32,
          log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Compile and save the suite under ``out``; returns its index (also ``suite.json``)."""
    out.mkdir(parents=True, exist_ok=True)
    index = []
    for name, program, chosen, origin in programs(n, seed, max_len, n_pairs):
        directory = Path(program.save_pretrained(out / name))
        (directory / "pairs.json").write_text(json.dumps(
            {"format": "torchwright_fx.pairs/1", "program": name, "pairs": chosen}, indent=1))
        (directory / "patching.json").write_text(json.dumps(
            {"tau": PATCHING_TAU, "pairs": [pair_ids(program, p["clean"], p["corrupt"],
                                                     p["answer"]) for p in chosen]}))
        stats = program.stats()
        index.append({"name": name, "directory": name, **origin, "layers": stats["layers"],
                      "pairs": len(chosen)})
        log(f"{name}: {stats['layers']} layers, {len(chosen)} pairs -> {directory}")
    (out / "suite.json").write_text(json.dumps(
        {"format": "torchwright_fx.suite/1", "seed": seed, "n": n, "max_len": max_len,
         "programs": index}, indent=1))
    return index
