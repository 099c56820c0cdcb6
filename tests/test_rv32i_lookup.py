"""Lookup speculation (examples/rv32i/lookup.py): the guesses it makes from a context, and,
through llama.cpp itself, that greedy decoding with guesses prints exactly what it prints
without them, in fewer forward passes."""

from __future__ import annotations

import json
import subprocess

import pytest

from examples.rv32i import lookup, run, trace
from examples.rv32i.lookup import NGRAM, Lookup


def test_a_repeated_pattern_is_guessed_and_a_changed_one_is_not():
    loop = list(range(100, 100 + NGRAM + 3))
    seq = [0] + loop * 3
    guess = Lookup(seq).guess(seq, 6)
    # after three iterations every n-gram of the loop has come twice in a row with the same
    # successor (odds 2.5 / 3.5 each); the chain goes on while their product stays >= SURE
    assert guess and guess == (loop * 2)[:len(guess)]
    # a context seen once: the first guess only (odds 1.5 / 2.5 = 0.6), never a second
    once = list(range(1, NGRAM + 3)) + list(range(1, NGRAM + 1))
    assert Lookup(once).guess(once, 6) == [NGRAM + 1]
    # an n-gram never seen: nothing
    fresh = list(range(2 * NGRAM))
    assert Lookup(fresh).guess(fresh, 6) == []
    # no room: nothing
    assert Lookup(seq).guess(seq, 0) == []


def test_a_changed_successor_starts_its_run_again():
    a = list(range(1, NGRAM + 1))
    seq = (a + [50]) * 4 + a + [60]
    table = Lookup(seq)
    assert table.next[tuple(a)] == [60, 1]
    seq += a
    table.learn(seq)
    assert table.guess(seq, 3)[:1] == [60]


def test_learning_is_incremental():
    seq = list(range(NGRAM + 2)) * 3
    whole = Lookup(seq)
    part = Lookup(seq[:NGRAM + 3])
    for end in range(NGRAM + 4, len(seq) + 1):
        part.learn(seq[:end])
    assert part.next == whole.next and part.seen == len(seq)


@pytest.mark.slow
@pytest.mark.skipif(not run.LLAMA_PY.exists(), reason="the llama venv: make runtime-llama")
def test_lookup_speculation_prints_what_greedy_decoding_prints_in_fewer_passes():
    """sum.elf (36 instructions, a loop) through llama.cpp with and without guesses: the same
    tokens, the reference's records, and fewer forward passes with them."""
    prepared = run.prepare(str(run.ROOT / "examples" / "rv32i" / "elf" / "sum.elf"), None)
    want = trace.text(prepared.records)
    model = run._model()
    request = {"gguf": str(run.load("llama", prepared.max_seq_len, prepared.dump_at).gguf),
               "ids": model.VOCAB.encode(prepared.prompt), "eos": model.VOCAB.eos_id,
               "n": len(want) + 1, "n_ctx": prepared.max_seq_len, "draft": lookup.DRAFT}
    script = ("import json, sys\n"
              f"sys.path.insert(0, {str(run.ROOT / 'examples' / 'rv32i')!r})\n"
              "import llama_decode as d\n"
              "r = json.load(sys.stdin)\n"
              "llm = d.load(r['gguf'], 2, n_ctx=r['n_ctx'])\n"
              "passes = [0]\n"
              "plain_eval = llm.eval\n"
              "def counted(tokens):\n"
              "    passes[0] += 1\n"
              "    plain_eval(tokens)\n"
              "llm.eval = counted\n"
              "out = []\n"
              "for draft in (0, r['draft']):\n"
              "    llm.reset()\n"
              "    passes[0] = 0\n"
              "    got = d.greedy(llm, r['ids'], r['eos'], r['n'], draft)\n"
              "    out.append([got, passes[0]])\n"
              "print(json.dumps(out))\n")
    done = subprocess.run([str(run.LLAMA_PY), "-c", script], input=json.dumps(request),
                          capture_output=True, text=True, check=True, timeout=600)
    (plain, plain_passes), (guessed, guessed_passes) = json.loads(done.stdout)
    assert guessed == plain
    assert model.VOCAB.decode(plain) == want
    assert guessed_passes < plain_passes * 0.8, (guessed_passes, plain_passes)
