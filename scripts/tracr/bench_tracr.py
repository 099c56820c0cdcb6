"""tracr's side of issue 16's side-by-side: every program of tracr's ``compiler/lib.py``
compiled by tracr itself at max_seq_len 5, 10 and 20, and checked against tracr's own RASP
evaluator on 200 seeded random inputs per length.

Run it with ``make bench-tracr`` (it needs tracr, jax and haiku, which live only in
``.runtimes/tracr/venv``; see scripts/tracr/README.md).  It writes
``build/tracr/tracr_results.json`` and prints a table.

This module imports nothing outside the standard library at import time, so that our side
(the .venv, without tracr) can read the results::

    from scripts.tracr.bench_tracr import load_results      # or importlib by path
    results = load_results()                                  # the JSON as a dict

What is compared, per input: ``model.apply([BOS] + xs).decoded[1:]`` (position 0 is tracr's
BOS and is skipped) against ``rasp.evaluate(program, xs)``.  An input is right only if every
position matches: exact equality for categorical outputs, ``abs(got - want) <= 1e-3`` for
numerical ones.  Positions where the evaluator itself gives ``None`` (``shift_by``'s and
``detect_pattern``'s padding) are skipped, as tracr's own integration tests skip them: a
compiled model has no way to output ``None``.
"""

import argparse
import json
import math
import platform
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS_PATH = ROOT / "build" / "tracr" / "tracr_results.json"
LENGTHS = (5, 10, 20)
SAMPLES = 200
NUM_TOL = 1e-3
BOS = "compiler_bos"
MAX_WRONG_EXAMPLES = 2


def load_results(path: str | Path = RESULTS_PATH) -> dict[str, Any]:
    """The JSON written by a previous run (no tracr needed)."""
    with open(path) as f:
        return json.load(f)


# -- how each lib.py program is instantiated ------------------------------------------------
# `build(lib, rasp, L)` returns the RASP program for max_seq_len L.  `vocab(L)` the vocab set.
# `sampler` draws one input of length n from the vocab (default: uniform, with repeats).


@dataclass
class Spec:
    name: str
    call: str  # how lib.py is called, for the README and the JSON
    build: Callable[[Any, Any, int], Any]
    vocab: Callable[[int], list[Any]]
    why: str  # why this vocab / these arguments
    sampler: str = "uniform"
    notes: list[str] = field(default_factory=list)


ABCD = ["a", "b", "c", "d"]
ABC = ["a", "b", "c"]
PARENS_TEXT = ["(", ")", "a", "b", "c"]


def _nary(lib: Any, rasp: Any, L: int) -> Any:
    return lib.make_nary_sequencemap(lambda x, y, z: x + y - z, rasp.tokens, rasp.tokens,
                                     rasp.indices)


SPECS: list[Spec] = [
    Spec("length", "make_length()", lambda lib, rasp, L: lib.make_length(),
         lambda L: ABCD, "any vocab; tracr's test_cases.py uses {a,b,c,d}"),
    Spec("reverse", "make_reverse(rasp.tokens)",
         lambda lib, rasp, L: lib.make_reverse(rasp.tokens),
         lambda L: ABCD, "tracr's test_cases.py vocab"),
    Spec("hist", "make_hist()", lambda lib, rasp, L: lib.make_hist(),
         lambda L: ABCD, "tracr's test_cases.py vocab"),
    Spec("sort_unique", "make_sort_unique(vals=rasp.tokens, keys=rasp.tokens)",
         lambda lib, rasp, L: lib.make_sort_unique(rasp.tokens, rasp.tokens),
         lambda L: list(range(1, L + 1)),
         "keys must be unique (lib's docstring), so the vocab is the integers 1..L and "
         "inputs are drawn without replacement", sampler="unique"),
    Spec("sort", "make_sort(rasp.tokens, rasp.tokens, max_seq_len=L, min_key=1)",
         lambda lib, rasp, L: lib.make_sort(rasp.tokens, rasp.tokens, max_seq_len=L,
                                            min_key=1),
         lambda L: [1, 2, 3, 4], "tracr's test_cases.py (sort_1): integer tokens {1,2,3,4}, "
         "repeats allowed; max_seq_len argument = the compiled length L"),
    Spec("sort_freq", "make_sort_freq(max_seq_len=L)",
         lambda lib, rasp, L: lib.make_sort_freq(max_seq_len=L),
         lambda L: [1, 2, 3, 4], "tracr's test_cases.py vocab {1,2,3,4}; "
         "max_seq_len argument = L"),
    Spec("frac_prevs", 'make_frac_prevs(rasp.tokens == "(")',
         lambda lib, rasp, L: lib.make_frac_prevs(rasp.tokens == "("),
         lambda L: PARENS_TEXT, "tracr's test_cases.py (frac_prevs_2) vocab {a,b,c,(,)}; "
         "numerical output"),
    Spec("pair_balance", 'make_pair_balance(rasp.tokens, "(", ")")',
         lambda lib, rasp, L: lib.make_pair_balance(rasp.tokens, "(", ")"),
         lambda L: PARENS_TEXT, "tracr's test_cases.py vocab {a,b,c,(,)}; numerical output"),
    Spec("shuffle_dyck", 'make_shuffle_dyck(pairs=["()"])',
         lambda lib, rasp, L: lib.make_shuffle_dyck(pairs=["()"]),
         lambda L: ["(", ")"], "brackets only; half the inputs uniform, half balanced "
         "(odd n: a balanced n-1 prefix plus one random bracket)", sampler="dyck"),
    Spec("shuffle_dyck2", "make_shuffle_dyck2()",
         lambda lib, rasp, L: lib.make_shuffle_dyck2(),
         lambda L: ["(", ")", "{", "}"], "tracr's test_cases.py vocab; half uniform, half "
         "shuffle-balanced (each pair balanced, interleaved at random)", sampler="dyck"),
    Spec("shift_by", "shift_by(1, rasp.tokens)",
         lambda lib, rasp, L: lib.shift_by(1, rasp.tokens),
         lambda L: ABCD, "tracr's test_cases.py (shift_by_one); position 0 is None in "
         "the evaluator and skipped"),
    Spec("detect_pattern", 'detect_pattern(rasp.tokens, "abc")',
         lambda lib, rasp, L: lib.detect_pattern(rasp.tokens, "abc"),
         lambda L: ABC, "tracr's test_cases.py (detect_pattern_abc) vocab {a,b,c}; the "
         "first two positions are None in the evaluator and skipped"),
    Spec("count_less_freq", "make_count_less_freq(n=2)",
         lambda lib, rasp, L: lib.make_count_less_freq(n=2),
         lambda L: ABCD, "lib's docstring and test_cases.py: n=2, vocab {a,b,c,d}"),
    Spec("count", 'make_count(rasp.tokens, "a")',
         lambda lib, rasp, L: lib.make_count(rasp.tokens, "a"),
         lambda L: ABC, "tracr's test_cases.py: token 'a', vocab {a,b,c}"),
    Spec("nary_sequencemap",
         "make_nary_sequencemap(lambda x, y, z: x + y - z, rasp.tokens, rasp.tokens, "
         "rasp.indices)", _nary,
         lambda L: [1, 2, 3], "tracr's test_cases.py (make_nary_sequencemap_1): a 3-ary "
         "map, two SequenceMaps and a Map, vocab {1,2,3}"),
]


# -- inputs ----------------------------------------------------------------------------------


def _balanced(rng: random.Random, n_pairs: int, open_tok: str, close_tok: str) -> list[str]:
    """A uniformly-stepped random Dyck word with n_pairs pairs."""
    out: list[str] = []
    opens = closes = 0
    while len(out) < 2 * n_pairs:
        can_open = opens < n_pairs
        can_close = closes < opens
        if can_open and (not can_close or rng.random() < 0.5):
            out.append(open_tok)
            opens += 1
        else:
            out.append(close_tok)
            closes += 1
    return out


def _shuffle_balanced(rng: random.Random, n: int, pairs: list[str]) -> list[str]:
    """n even: each pair type balanced, the types interleaved at random."""
    total = n // 2
    counts = [0] * len(pairs)
    for _ in range(total):
        counts[rng.randrange(len(pairs))] += 1
    words = [_balanced(rng, c, p[0], p[1]) for c, p in zip(counts, pairs, strict=True)]
    slots = [i for i, w in enumerate(words) for _ in w]
    rng.shuffle(slots)
    pos = [0] * len(words)
    out = []
    for i in slots:
        out.append(words[i][pos[i]])
        pos[i] += 1
    return out


def draw_input(spec: Spec, vocab: list[Any], L: int, rng: random.Random, k: int) -> list[Any]:
    n = rng.randint(1, L)
    if spec.sampler == "unique":
        return rng.sample(vocab, n)
    if spec.sampler == "dyck" and k % 2 == 1:
        pairs = [vocab[i] + vocab[i + 1] for i in range(0, len(vocab), 2)]
        xs = _shuffle_balanced(rng, n - (n % 2), pairs)
        if n % 2:
            xs.append(rng.choice(vocab))
        return xs
    return [rng.choice(vocab) for _ in range(n)]


# -- comparison ------------------------------------------------------------------------------


def _jsonable(v: Any) -> Any:
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        return round(v, 6) if math.isfinite(v) else str(v)
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    try:  # numpy scalars
        return _jsonable(v.item())
    except AttributeError:
        return str(v)


def compare(got: list[Any], want: list[Any], numerical: bool) -> tuple[bool, int, int]:
    """(all match, checked positions, skipped positions)."""
    ok, checked, skipped = True, 0, 0
    for g, w in zip(got, want, strict=False):
        if w is None:
            skipped += 1
            continue
        checked += 1
        if numerical:
            try:
                good = abs(float(g) - float(w)) <= NUM_TOL
            except (TypeError, ValueError):
                good = False
        else:
            good = g == w
        ok = ok and good
    if len(got) != len(want):
        ok = False
    return ok, checked, skipped


# -- model figures ---------------------------------------------------------------------------


def model_figures(model: Any) -> dict[str, Any]:
    import numpy as np

    cfg = model.model_config
    params = model.params
    n_params = int(sum(np.size(a) for mod in params.values() for a in mod.values()))
    n_nonzero = int(sum(np.count_nonzero(np.asarray(a)) for mod in params.values()
                        for a in mod.values()))
    attn_blocks = mlp_blocks = heads = 0
    ks = cfg.key_size
    for layer in range(cfg.num_layers):
        pre = f"transformer/layer_{layer}"
        q = np.asarray(params[f"{pre}/attn/query"]["w"])
        k = np.asarray(params[f"{pre}/attn/key"]["w"])
        v = np.asarray(params[f"{pre}/attn/value"]["w"])
        o = np.asarray(params[f"{pre}/attn/linear"]["w"])
        layer_heads = 0
        for h in range(cfg.num_heads):
            sl = slice(h * ks, (h + 1) * ks)
            if (np.any(q[:, sl]) or np.any(k[:, sl])) and np.any(v[:, sl]) and np.any(o[sl]):
                layer_heads += 1
        heads += layer_heads
        attn_blocks += layer_heads > 0
        w1 = np.asarray(params[f"{pre}/mlp/linear_1"]["w"])
        w2 = np.asarray(params[f"{pre}/mlp/linear_2"]["w"])
        mlp_blocks += bool(np.any(w1) and np.any(w2))
    enc = model.output_encoder
    out_dims = len(enc.encoding_map) if enc is not None and hasattr(enc, "encoding_map") else 1
    d = len(model.residual_labels)
    return {
        "layers": int(cfg.num_layers),
        "attn_blocks": int(attn_blocks),
        "mlp_blocks": int(mlp_blocks),
        "heads": int(heads),
        "num_heads_per_layer": int(cfg.num_heads),
        "key_size": int(cfg.key_size),
        "mlp_hidden_size": int(cfg.mlp_hidden_size),
        "d_model": d,
        "params": n_params,
        "params_nonzero": n_nonzero,
        "unembed_size": d * out_dims,
        "output_categorical": enc is not None,
    }


# -- the run ---------------------------------------------------------------------------------


def run_one(spec: Spec, L: int, samples: int) -> dict[str, Any]:
    import jax
    from tracr.compiler import compiling, lib
    from tracr.rasp import rasp

    vocab = spec.vocab(L)
    program = spec.build(lib, rasp, L)
    numerical = bool(rasp.is_numerical(program))
    row: dict[str, Any] = {"program": spec.name, "max_seq_len": L, "vocab": vocab,
                           "call": spec.call.replace("=L", f"={L}"),
                           "output": "numerical" if numerical else "categorical"}
    t0 = time.perf_counter()
    try:
        model = compiling.compile_rasp_to_model(program, vocab=set(vocab), max_seq_len=L,
                                                compiler_bos=BOS)
    except Exception as e:  # noqa: BLE001 - a compile failure is a result
        row["compile_error"] = f"{type(e).__name__}: {e}"[:500]
        row["compile_s"] = round(time.perf_counter() - t0, 3)
        return row
    row["compile_s"] = round(time.perf_counter() - t0, 3)
    # compile_s includes XLA compiling haiku's parameter-init ops for shapes this process has
    # not seen yet (most of the second); a second compile of a freshly built program is tracr's
    # own work alone
    t0 = time.perf_counter()
    compiling.compile_rasp_to_model(spec.build(lib, rasp, L), vocab=set(vocab), max_seq_len=L,
                                    compiler_bos=BOS)
    row["compile_warm_s"] = round(time.perf_counter() - t0, 3)
    row.update(model_figures(model))
    # the same forward, jitted (one trace per input length): apply() is otherwise op by op
    model.forward = jax.jit(model.forward)

    rng = random.Random(f"tracr-bench:{spec.name}:{L}")
    right = checked_pos = skipped_pos = errors = true_outputs = 0
    wrong: list[dict[str, Any]] = []
    wrong_at_n: dict[int, int] = {}
    inputs_at_n: dict[int, int] = {}
    t1 = time.perf_counter()
    for k in range(samples):
        xs = draw_input(spec, vocab, L, rng, k)
        want = rasp.evaluate(program, xs)
        try:
            got = model.apply([BOS] + xs).decoded[1:]
        except Exception as e:  # noqa: BLE001
            got, ok, c, s = f"{type(e).__name__}: {e}"[:200], False, 0, 0
            errors += 1
        else:
            ok, c, s = compare(got, want, numerical)
        checked_pos += c
        skipped_pos += s
        right += ok
        inputs_at_n[len(xs)] = inputs_at_n.get(len(xs), 0) + 1
        if not ok:
            wrong_at_n[len(xs)] = wrong_at_n.get(len(xs), 0) + 1
        true_outputs += bool(want and want[-1] in (1, True))
        if not ok and len(wrong) < MAX_WRONG_EXAMPLES:
            wrong.append({"input": _jsonable(xs), "want": _jsonable(want),
                          "got": _jsonable(got)})
    row.update({"right": right, "total": samples, "checked_positions": checked_pos,
                "skipped_none_positions": skipped_pos, "apply_errors": errors,
                "eval_s": round(time.perf_counter() - t1, 3),
                "wrong_by_input_length": {str(n): f"{wrong_at_n[n]}/{inputs_at_n[n]}"
                                          for n in sorted(wrong_at_n)},
                "wrong_examples": wrong})
    if spec.sampler == "dyck":
        row["inputs_true_at_end"] = true_outputs
    return row


def table(rows: list[dict[str, Any]]) -> str:
    head = (f"{'program':<17} {'L':>3} {'layers':>6} {'attn':>4} {'mlp':>4} {'heads':>5} "
            f"{'d':>5} {'params':>9} {'compile_s':>9} {'warm_s':>6} {'right':>9}")
    lines = [head, "-" * len(head)]
    for r in rows:
        if "compile_error" in r:
            lines.append(f"{r['program']:<17} {r['max_seq_len']:>3} compile error: "
                         f"{r['compile_error'][:60]}")
            continue
        lines.append(
            f"{r['program']:<17} {r['max_seq_len']:>3} {r['layers']:>6} {r['attn_blocks']:>4} "
            f"{r['mlp_blocks']:>4} {r['heads']:>5} {r['d_model']:>5} {r['params']:>9} "
            f"{r['compile_s']:>9.2f} {r['compile_warm_s']:>6.3f} "
            f"{str(r['right']) + '/' + str(r['total']):>9}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=RESULTS_PATH)
    ap.add_argument("--samples", type=int, default=SAMPLES)
    ap.add_argument("--lengths", type=int, nargs="*", default=list(LENGTHS))
    ap.add_argument("--only", nargs="*", help="program names (default: all 15)")
    args = ap.parse_args(argv)

    import jax

    # as tracr's own integration tests do (a no-op on CPU, where float32 is the default)
    jax.config.update("jax_default_matmul_precision", "float32")
    jax.numpy.ones(2).sum().block_until_ready()  # backend start-up, not any program's compile
    from importlib.metadata import version

    specs = [s for s in SPECS if not args.only or s.name in args.only]
    t0 = time.perf_counter()
    rows = []
    for spec in specs:
        for L in args.lengths:
            r = run_one(spec, L, args.samples)
            rows.append(r)
            msg = r.get("compile_error") or f"{r['right']}/{r['total']}"
            print(f"{spec.name:<17} L={L:<3} compile {r['compile_s']:.2f}s  {msg}",
                  file=sys.stderr, flush=True)
    total_s = round(time.perf_counter() - t0, 1)
    out = {
        "what": "tracr lib.py programs compiled by tracr, checked against rasp.evaluate",
        "tracr": version("tracr-pypi"), "jax": version("jax"), "jaxlib": version("jaxlib"),
        "dm_haiku": version("dm-haiku"), "numpy": version("numpy"),
        "python": platform.python_version(), "machine": platform.machine(),
        "lengths": args.lengths, "samples_per_length": args.samples,
        "input_lengths": "uniform in 1..max_seq_len",
        "numerical_tolerance_abs": NUM_TOL,
        "causal": False, "bos_skipped": True, "none_positions_skipped": True,
        "layers_means": "model.model_config.num_layers: tracr layers, each one attention "
                        "sublayer then one MLP sublayer (empty ones are zero weights); "
                        "attn_blocks/mlp_blocks count the sublayers with nonzero weights",
        "params_means": "sum of the sizes of model.params (token and position embeddings, "
                        "q/k/v/o and both MLP matrices with biases, zero padding included); "
                        "the unembedding is a fixed projection outside params (unembed_size)",
        "compile_s_means": "seconds of compile_rasp_to_model in this run (the first for these "
                           "shapes: includes XLA compiling haiku's init ops); compile_warm_s: "
                           "a second compile of a freshly built program, tracr's own work",
        "total_s": total_s,
        "programs": {s.name: {"call": s.call, "vocab_note": s.why, "sampler": s.sampler}
                     for s in specs},
        "results": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(table(rows))
    print(f"\n{len(rows)} compiles, {total_s} s in all; written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
