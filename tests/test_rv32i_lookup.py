"""Lookup speculation (examples/rv32i/lookup.py): the guesses it makes from a context (n-grams,
the record last printed at the same pc, the state dump), and, through llama.cpp itself, that
greedy decoding with guesses prints exactly what it prints without them, in fewer forward
passes."""

from __future__ import annotations

import json
import subprocess

import pytest

from examples.rv32i import lookup, model, run, trace
from examples.rv32i.lookup import NGRAM, Lookup
from examples.rv32i.trace import Record

ELF_DIR = run.ROOT / "examples" / "rv32i" / "elf"


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


def _ids(recs: list[Record]) -> list[int]:
    return model.VOCAB.encode(trace.text(recs))[1:]  # (encode puts <bos> first)


def test_the_record_last_printed_at_the_same_pc_is_guessed_where_ngrams_know_nothing():
    # the instruction at P 5 writes x1 = 10 and goes on to 6 every time; the record before it
    # (x3, a counter) has a new value every time, so no n-gram ends in it
    recs = []
    for i in range(7):
        recs += [Record(3, i, 5), Record(1, 10, 6)]
    seq = [model.VOCAB.bos_id] + _ids(recs[:-1])
    table = Lookup(seq, run.records(4096))
    assert Lookup(seq).guess(seq, 8) == []
    guess = table.guess(seq, 8)
    # six runs before: odds 5.5 / 6.5 a token, a chain of 4 keeps the product above SURE
    assert len(guess) == 4 and guess == _ids([recs[-1]])[:4]
    # mid-record, from the tokens of the record so far
    assert table.guess(seq + guess[:2], 2) == guess[2:4]


def test_the_state_dump_is_guessed_whole_and_exactly_where_the_model_prints_it():
    """sum.elf in contexts of 2,048 tokens: at the record end where each context's dump
    starts, the guess is the dump the reference's schedule says the model prints (its cells,
    newest first record first, their latest values, the resume pc, RESUME); at every record
    end before it, no dump is guessed."""
    prepared = run.prepare(str(ELF_DIR / "sum.elf"), None, 2048)
    fmt = run.records(prepared.dump_at)
    dumps = 0
    for ctx in prepared.contexts:
        start = next((k for k, r in enumerate(ctx.printed) if r.dump), None)
        if start is None:
            continue
        dumps += 1
        before = model.VOCAB.encode(trace.text(ctx.prompt + ctx.printed[:start]))
        table = Lookup(before, fmt)
        assert table.guess(before, 10 ** 6) == _ids(ctx.printed[start:])
        for end in range(len(ctx.prompt) + 1, len(ctx.prompt) + start):
            seq = model.VOCAB.encode(trace.text((ctx.prompt + ctx.printed)[:end]))
            assert Lookup(seq, fmt)._dump(seq) is None
        # a model that prints something else gets no more of the dump guessed
        wrong = before + [model.VOCAB.eos_id]
        assert table._dump(wrong) is None and table._dump(before) is None
    assert dumps == len(prepared.contexts) - 1 > 2


def test_the_format_travels_to_the_llama_subprocess_as_json():
    fmt = run.records(3728)
    assert lookup.Records.from_json(json.loads(json.dumps(fmt.to_json()))) == fmt


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
               "n": len(want) + 1, "n_ctx": prepared.max_seq_len, "draft": lookup.DRAFT,
               "records": run.records(prepared.dump_at).to_json()}
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
              "    got = d.greedy(llm, r['ids'], r['eos'], r['n'], draft,\n"
              "                   d.Records.from_json(r['records']))\n"
              "    out.append([got, passes[0]])\n"
              "print(json.dumps(out))\n")
    done = subprocess.run([str(run.LLAMA_PY), "-c", script], input=json.dumps(request),
                          capture_output=True, text=True, check=True, timeout=600)
    (plain, plain_passes), (guessed, guessed_passes) = json.loads(done.stdout)
    assert guessed == plain
    assert model.VOCAB.decode(plain) == want
    assert guessed_passes < plain_passes * 0.8, (guessed_passes, plain_passes)
