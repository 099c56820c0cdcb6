"""Activation patching against the ground truth: the table of docs/circuits.md (issue 34).

For each program (the RASP library at a small length, and three examples): compile, save the
Phi-3 directory, load it with transformers, and take clean/corrupted prompt pairs from the
program's own domain: two prompts that differ in one input token (``substitute``: same
length; ``insert``: the corrupted prompt has one token more, truncated to the clean sequence's
length). Each run is teacher-forced with the clean answer, so both sequences have the same
length and only the input differs.

Units: every attention head (the slice of ``o_proj``'s input that is head h: TransformerLens'
``hook_z[:, :, h]``), every whole MLP (``down_proj``'s input), every fx node's MLP lane group
(``components.json``) and every single lane (``hook_post[:, :, i]``). Per pair, each unit's
activation in the clean run is replaced by its activation in the corrupted run (one batch
element per unit; torch forward pre-hooks on ``o_proj`` / ``down_proj``), and the effect is
the largest change of any answer logit (every position from the trigger's on), over the
change that the whole corruption makes. A unit is *found* when that ratio reaches ``--tau``
on some pair. Found heads and MLPs are scored against ``edges.json`` with
``tw.score_circuit`` (head granularity: heads and whole MLPs; neuron granularity: heads and
lanes). A missed component gets its reason: its activation never differed between the two
runs of a pair (it reads only what every pair shares, e.g. positions), or it differed without
moving the answer logits. Zero-ablation (the unit's activation set to 0 on clean prompts) is
reported beside it: it finds the components that patching cannot see.

    .venv/bin/python scripts/attribution_check.py                 # the table (about 2 min)
    .venv/bin/python scripts/attribution_check.py -n hist sort -v # some programs, details
    .venv/bin/python scripts/attribution_check.py --save build/interp  # directories only
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import json
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torchwright_fx as tw  # noqa: E402
from examples import suite  # noqa: E402

RASP = ["count", "count_less_freq", "detect_pattern", "frac_prevs", "hist", "length",
        "nary_sequencemap", "pair_balance", "reverse", "shift_by", "shuffle_dyck",
        "shuffle_dyck2", "sort", "sort_freq", "sort_unique"]
EXAMPLES = {"adder_1digit": {}, "binary_increment": {"max_bits": 4},
            "caesar_cipher": {"max_letters": 3}}
MAX_LEN = 4  # RASP inputs up to 4 tokens
TAU = suite.PATCHING_TAU
DOMAIN_CAP = 5000


@dataclass
class Pair:
    kind: str  # substitute | insert
    clean: str
    corrupt: str
    answer: str  # the clean answer (teacher-forced in both runs)


def build(name: str, max_len: int = MAX_LEN) -> tw.Compiled:
    if name in EXAMPLES:
        return importlib.import_module(f"examples.{name}").make(**EXAMPLES[name])
    return importlib.import_module(f"examples.rasp.{name}").make(max_len=max_len)


def pairs(program: tw.Compiled, n_substitute: int = 24, n_insert: int = 8, seed: int = 0
          ) -> list[Pair]:
    """Prompt pairs from the program's domain that differ in one input token; pairs whose
    answers differ first."""
    assert program.domain is not None and program.oracle is not None, program
    domain = list(itertools.islice(program.domain(), DOMAIN_CAP))
    known = set(domain)
    chars = sorted({c for p in domain for c in p})
    rng = random.Random(seed)
    order = domain[:]
    rng.shuffle(order)
    oracle = program.oracle
    subs: list[Pair] = []
    same: list[Pair] = []
    ins: list[Pair] = []
    for p in order:  # at most one pair of each kind per clean prompt
        if len(subs) >= n_substitute and len(ins) >= n_insert:
            break
        answer = oracle(p)
        edits = [(i, c) for i in range(len(p) + 1) for c in chars]
        rng.shuffle(edits)
        sub = insert = None
        for i, c in edits:
            q = p[:i] + c + p[i + 1:]
            if q != p and q in known and (sub is None or sub.answer == oracle(sub.corrupt)):
                sub = Pair("substitute", p, q, answer)
            q = p[:i] + c + p[i:]
            if insert is None and q in known:
                insert = Pair("insert", p, q, answer)
        if sub is not None:
            if oracle(sub.corrupt) != answer:
                if len(subs) < n_substitute:
                    subs.append(sub)
            elif len(same) < n_substitute:
                same.append(sub)
        if insert is not None and len(ins) < n_insert:
            ins.append(insert)
    return subs + same[: max(0, n_substitute - len(subs))] + ins


# -- patching --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Unit:
    name: str  # a0.h1, m2, m2:lookup (a lane group), m2.n7
    layer: int
    kind: str  # head | mlp
    index: tuple[int, ...]  # columns of o_proj's input (head) or lanes (mlp)


def units(model: Any, components: dict[str, Any]) -> list[Unit]:
    cfg = model.config
    n_heads, d_head = cfg.num_attention_heads, cfg.head_dim
    d_ff = cfg.intermediate_size
    out = []
    for layer in range(cfg.num_hidden_layers):
        out += [Unit(f"a{layer}.h{h}", layer, "head", tuple(range(h * d_head, (h + 1) * d_head)))
                for h in range(n_heads)]
        out.append(Unit(f"m{layer}", layer, "mlp", tuple(range(d_ff))))
        out += [Unit(f"m{layer}.n{i}", layer, "mlp", (i,)) for i in range(d_ff)]
    out += [Unit(c["id"], c["layer"], "mlp", tuple(c["lanes"]))
            for c in components["components"] if c["kind"] == "lanes"]
    return out


class Patcher:
    """Forward pre-hooks on every layer's o_proj and down_proj: capture their inputs, or
    replace slices of them per batch element (by a corrupted run's activation, or by 0)."""

    def __init__(self, model: Any):
        self.model = model
        self.captured: dict[tuple[int, str], torch.Tensor] = {}
        self.masks: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]] = {}
        self.capture = False
        layers = model.model.layers
        self.handles = [m.register_forward_pre_hook(self._hook(i, kind))
                        for i, layer in enumerate(layers)
                        for kind, m in (("head", layer.self_attn.o_proj),
                                        ("mlp", layer.mlp.down_proj))]

    def _hook(self, layer: int, kind: str) -> Any:
        def hook(_module: Any, args: tuple[torch.Tensor, ...]) -> Any:
            x = args[0]
            if self.capture:
                self.captured[layer, kind] = x[0].detach().clone()
                return None
            if (layer, kind) not in self.masks:
                return None
            patch, zero = self.masks[layer, kind]
            source = self.source[layer, kind]
            return (x * (1 - patch - zero) + patch * source,)
        return hook

    def run(self, ids: list[int]) -> tuple[torch.Tensor, dict[tuple[int, str], torch.Tensor]]:
        self.capture, self.masks = True, {}
        with torch.no_grad():
            logits = self.model(torch.tensor([ids]), use_cache=False).logits[0]
        self.capture = False
        return logits, dict(self.captured)

    def patched(self, ids: list[int], corrupt: dict[tuple[int, str], torch.Tensor],
                todo: list[tuple[Unit, str]]) -> torch.Tensor:
        """Logits [1 + len(todo), T, V]: element 0 unpatched, then one per (unit, mode) with
        mode "patch" (the corrupted activation) or "zero"."""
        b = 1 + len(todo)
        self.masks, self.source = {}, corrupt
        for key, act in corrupt.items():
            width = act.shape[-1]
            self.masks[key] = (torch.zeros(b, 1, width), torch.zeros(b, 1, width))
        for j, (u, mode) in enumerate(todo, start=1):
            patch, zero = self.masks[u.layer, u.kind]
            (patch if mode == "patch" else zero)[j, 0, list(u.index)] = 1.0
        with torch.no_grad():
            out = self.model(torch.tensor([ids] * b), use_cache=False).logits
        self.masks = {}
        return out


@dataclass
class Result:
    name: str
    layers: int
    pairs: int
    used: int  # pairs whose corruption moved the answer logits
    head: dict[str, Any]
    neuron: dict[str, Any]
    groups_found: int
    groups: int
    lanes_invariant: int  # true lanes patching missed whose activation never differed
    zero: dict[str, Any]
    reasons: dict[str, str] = field(default_factory=dict)
    also_found: list[str] = field(default_factory=list)  # cancel heads patching flags
    ratios: dict[str, float] = field(default_factory=dict)  # head-level units' best ratios
    seconds: float = 0.0


def check(program: tw.Compiled, directory: Path, n_pairs: tuple[int, int] = (24, 8),
          tau: float = TAU, seed: int = 0) -> Result:
    from transformers import AutoModelForCausalLM

    start = time.perf_counter()
    edges = json.loads((directory / "edges.json").read_text())
    comps = json.loads((directory / "components.json").read_text())
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
    patcher = Patcher(model)
    every = units(model, comps)
    best: dict[str, float] = {u.name: 0.0 for u in every}
    zero_best: dict[str, float] = {u.name: 0.0 for u in every}
    moved: set[str] = set()  # units whose activation differed in some pair
    moved_late: set[str] = set()  # ... at a position that predicts an answer token
    vocab = program.vocab
    chosen = pairs(program, *n_pairs, seed=seed)
    used = 0
    zeroed: set[str] = set()
    for pair in chosen:
        ids = vocab.encode(pair.clean + pair.answer)
        start_pos = len(vocab.encode(pair.clean)) - 1
        bad = vocab.encode(pair.corrupt + pair.answer)[: len(ids)]
        clean_logits, clean_acts = patcher.run(ids)
        want = ids[start_pos + 1:] + [vocab.eos_id]
        got = clean_logits[start_pos:].argmax(-1).tolist()
        assert got == want, f"{program.fn.__name__} {pair.clean!r}: the model answers {got}"
        corrupt_logits, corrupt_acts = patcher.run(bad)
        for u in every:
            cols = list(u.index)
            diff = clean_acts[u.layer, u.kind][:, cols] != corrupt_acts[u.layer, u.kind][:, cols]
            if diff.any():
                moved.add(u.name)
                if diff[start_pos:].any():
                    moved_late.add(u.name)
        total = (corrupt_logits[start_pos:] - clean_logits[start_pos:]).abs().max().item()
        todo = [(u, "patch") for u in every] if total > 0 else []
        if pair.clean not in zeroed:  # zero-ablation: once per clean prompt
            zeroed.add(pair.clean)
            todo += [(u, "zero") for u in every]
        if not todo:
            continue
        used += total > 0
        out = patcher.patched(ids, corrupt_acts, todo)[:, start_pos:]
        base = out[0]
        scale = (clean_logits[start_pos:].max(-1).values
                 - clean_logits[start_pos:].min(-1).values).max().item()
        for j, (u, mode) in enumerate(todo, start=1):
            effect = (out[j] - base).abs().max().item()
            if mode == "patch":
                best[u.name] = max(best[u.name], effect / total)
            else:
                zero_best[u.name] = max(zero_best[u.name], effect / scale)
    for h in patcher.handles:
        h.remove()

    def found(scores: dict[str, float], pick: Any) -> set[str]:
        return {n for n, s in scores.items() if s >= tau and pick(n)}

    def head_level(n: str) -> bool:
        return ".n" not in n and ":" not in n

    def neuron_level(n: str) -> bool:
        return n.startswith("a") or ".n" in n

    head = tw.score_circuit(found(best, head_level), edges, granularity="head")
    neuron = tw.score_circuit(found(best, neuron_level), edges, granularity="neuron")
    zero = tw.score_circuit(found(zero_best, head_level), edges, granularity="head")
    groups = [c["id"] for c in comps["components"] if c["kind"] == "lanes"]
    role = {c["id"]: f"{c['role']}, {c['fx_node']}" for c in comps["components"]}
    reasons = {}
    for n in head["nodes"]["missed"]:
        why = ("its activation is identical in both runs of every pair" if n not in moved else
               "its activation differs only at input positions, and patching it moves no "
               "answer logit" if n not in moved_late else
               "it changes at answer positions, but patching it moves no answer logit on "
               "these pairs" if best[n] == 0 else
               f"it changes, but moves the answer logits by at most {best[n]:.2g} of the "
               "corruption's effect")
        needed = n in zero["nodes"]["missed"]
        reasons[n] = (f"{n} ({role.get(n, 'MLP')}): {why}; zero-ablating it "
                      f"{'changes nothing either' if needed else 'moves the answer'}")
    cancel = {c["id"] for c in comps["components"] if c["role"] == "cancel"}
    return Result(program.fn.__name__, model.config.num_hidden_layers, len(chosen), used,
                  head["nodes"], neuron["nodes"],
                  sum(best[g] >= tau for g in groups), len(groups),
                  sum(n not in moved for n in neuron["nodes"]["missed"] if ".n" in n),
                  zero["nodes"], reasons,
                  sorted(found(best, head_level) & cancel),
                  {n: v for n, v in best.items() if head_level(n)}, time.perf_counter() - start)


def pair_ids(program: tw.Compiled, pair: Pair) -> dict[str, Any]:
    """A pair as check() runs it (``examples.suite.pair_ids``)."""
    return suite.pair_ids(program, pair.clean, pair.corrupt, pair.answer)


def compare_tl(root: Path, names: list[str] | None, max_len: int, tau: float) -> int:
    """TransformerLens' patching (tl_found.json) against this check's torch hooks, both scored
    against edges.json at head granularity: the same units must be found. A directory this
    script cannot rebuild as it was saved (a suite's programs: ``suite.json`` beside them)
    gets TransformerLens' scores alone."""
    print("| program | TransformerLens head P | R | torch hooks head P | R | same units |")
    print("|---|---|---|---|---|---|")
    differ = 0
    dirs = [root / n for n in names] if names else \
        sorted(p.parent for p in root.glob("*/tl_found.json"))
    for directory in dirs:
        name = directory.name
        tl = json.loads((directory / "tl_found.json").read_text())
        edges = json.loads((directory / "edges.json").read_text())
        theirs = tw.score_circuit(set(tl["found"]), edges, granularity="head")["nodes"]
        cells = f"| {name} | {theirs['precision']:.2f} | {theirs['recall']:.2f} | "
        if (root / "suite.json").exists() or (name not in RASP and name not in EXAMPLES):
            print(cells + "- | - | - |", flush=True)
            continue
        ours = check(build(name, max_len), directory, tau=tau)
        mine = {n for n, v in ours.ratios.items() if v >= tau}
        same = mine == set(tl["found"])
        differ += not same
        print(cells + f"{ours.head['precision']:.2f} | {ours.head['recall']:.2f} | "
              f"{'yes' if same else sorted(mine ^ set(tl['found']))} |", flush=True)
    return 1 if differ else 0


def row(r: Result) -> str:
    h, n, z = r.head, r.neuron, r.zero
    return (f"| {r.name} | {r.layers} | {r.used}/{r.pairs} | {h['tp'] + h['fn']} | "
            f"{h['precision']:.2f} | {h['recall']:.2f} | {r.groups_found}/{r.groups} | "
            f"{n['precision']:.2f} | {n['recall']:.2f} | {r.lanes_invariant}/{n['fn']} | "
            f"{z['recall']:.2f} | "
            f"{', '.join(r.also_found) or '-'} |")


HEADER = ("| program | layers | pairs used | true heads+MLPs | head P | head R | lane groups "
          "found | lane P | lane R | missed lanes never moved | zero-abl. R | cancel heads "
          "found |\n|---|---|---|---|---|---|---|---|---|---|---|---|")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--names", nargs="*", default=None)
    parser.add_argument("--max-len", type=int, default=MAX_LEN)
    parser.add_argument("--tau", type=float, default=TAU)
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("--save", type=Path, metavar="DIR",
                        help="only save each program's directory as DIR/<name> (the input of "
                             "make interp-loaders), with patching.json: the pairs as token ids "
                             "(scripts/runtimes/tl_patching.py reads them)")
    parser.add_argument("--compare-tl", type=Path, metavar="DIR",
                        help="score DIR/<name>/tl_found.json (TransformerLens' patching, "
                             "scripts/runtimes/tl_patching.py) beside this check's own")
    args = parser.parse_args(argv)
    args.names_given = args.names is not None
    if args.names is None:
        args.names = RASP + list(EXAMPLES)
    torch.set_num_threads(2)
    if args.save:
        for name in args.names:
            program = build(name, args.max_len)
            directory = program.save_pretrained(args.save / name)
            (directory / "patching.json").write_text(json.dumps(
                {"tau": args.tau, "pairs": [pair_ids(program, p) for p in pairs(program)]}))
            print(directory)
        return 0
    if args.compare_tl:
        return compare_tl(args.compare_tl, args.names if args.names_given else None,
                          args.max_len, args.tau)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.names:
            program = build(name, args.max_len)
            directory = program.save_pretrained(Path(tmp) / name)
            r = check(program, directory, tau=args.tau)
            results.append(r)
            print(f"{name}: head P {r.head['precision']:.2f} R {r.head['recall']:.2f}, "
                  f"{r.seconds:.1f}s", file=sys.stderr, flush=True)
            if args.verbose:
                for why in r.reasons.values():
                    print("   missed", why, file=sys.stderr)
                for fp in r.head["false_positives"]:
                    print("   false positive", fp, file=sys.stderr)
    print(HEADER)
    for r in results:
        print(row(r))
    missed = [why for r in results for why in r.reasons.values()]
    if missed:
        print("\nMissed at head level:\n")
        for r in results:
            for why in r.reasons.values():
                print(f"- {r.name}: {why}")
    if args.json:
        args.json.write_text(json.dumps([r.__dict__ for r in results], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
