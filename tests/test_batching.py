"""``--batch-size auto`` and out-of-memory errors (suite/evaluation/batching.py).

The CPU has no memory limit to hit, so a model here runs out of memory on purpose: its
``logits`` raise torch's own ``OutOfMemoryError`` above a number of rows, as a GPU would. The
records (what the numbers are made of) must be those of a run at batch size 1.
"""

from __future__ import annotations

import json
import logging

import pytest
import torch

import suite
from suite.attacks import build_attack
from suite.evaluation import batching
from suite.evaluation.batching import CPU_AUTO_BATCH, OutOfMemory, probe_batch_size, run_in_batches
from suite.evaluation.options import RunOptions
from suite.models import load_model

ATTACKS = ["fgm_linf", {"name": "apgd_t", "steps": 3, "targets": 3}]


def _records(directory) -> list[dict]:
    rows = [json.loads(line) for line in (directory / "records.jsonl").read_text().splitlines() if '"kind": "run"' not in line]
    # The file's first line names its run, whose identity holds the batch size where a loss is a mean.
    return sorted((row for row in rows if row["kind"] != "run"), key=lambda row: (row["kind"], row.get("attack", ""), row["id"]))


def _without_timing(rows: list[dict]) -> list[dict]:
    return [{key: value for key, value in row.items() if key != "seconds"} for row in rows]


def _oom(rows: int) -> torch.OutOfMemoryError:
    return torch.OutOfMemoryError(f"CUDA out of memory (test: {rows} rows)")


class MemoryLimit:
    """``model.logits`` that raises an out-of-memory error above ``rows`` rows (``None``: never),
    and once at the ``once_at``-th gradient call (counting from 1) if that call has over 2 rows."""

    def __init__(self, model, rows: int | None = None, once_at: int | None = None) -> None:
        self.inner, self.rows, self.once_at = model.logits, rows, once_at
        self.gradient_calls, self.raised = 0, []

    def __call__(self, batch, *, grad: bool = False):
        if grad:
            self.gradient_calls += 1
            if self.gradient_calls == self.once_at and len(batch) > 2:
                self.raised.append(len(batch))
                raise _oom(len(batch))
        if self.rows is not None and len(batch) > self.rows:
            self.raised.append(len(batch))
            raise _oom(len(batch))
        return self.inner(batch, grad=grad)


def _run(tmp_path, name: str, batch_size, limit=None, attacks=ATTACKS):
    model = load_model("builtin:digits-cnn")
    if limit is not None:
        model.logits = limit(model)
    output = tmp_path / name
    results = suite.evaluate(model, "builtin:digits", attacks=attacks, n=24, eps=0.1, output=output,
                             options=RunOptions(batch_size=batch_size))
    return results, _records(output)


@pytest.fixture(scope="module")
def at_one(tmp_path_factory):
    """The reference: every attack batch holds one example."""
    return _run(tmp_path_factory.mktemp("batching"), "one", 1)


def test_auto_on_the_cpu_is_the_documented_fixed_size_with_the_records_of_batch_size_1(tmp_path, at_one):
    results, records = _run(tmp_path, "auto", "auto")
    assert results.batch_size == "auto"
    assert results.batch_sizes == {"fgm_linf": CPU_AUTO_BATCH, "apgd_t": CPU_AUTO_BATCH}
    assert at_one[0].batch_sizes == {"fgm_linf": 1, "apgd_t": 1}
    assert _without_timing(records) == _without_timing(at_one[1])
    assert results.attacks["apgd_t"].robust_accuracy == at_one[0].attacks["apgd_t"].robust_accuracy


def test_auto_probes_the_largest_batch_that_fits_and_keeps_the_records(tmp_path, monkeypatch, at_one):
    """With probing on (as on CUDA) and a model that holds at most 16 rows, ``auto`` halves from
    the pass's size to 16 examples, the largest power of two that fits; every record is the one
    batch size 1 gives."""
    monkeypatch.setattr("suite.evaluation.runner.probes", lambda model, attack: True)
    results, records = _run(tmp_path, "probed", "auto", limit=lambda model: MemoryLimit(model, rows=16))
    assert results.attacks["fgm_linf"].n_attacked > 16  # the probe starts above the limit
    assert results.batch_sizes == {"fgm_linf": 16, "apgd_t": 16}
    assert _without_timing(records) == _without_timing(at_one[1])


def test_probe_counts_the_rows_of_every_target():
    """A search over 3 targets at once takes 3 rows per example: a model that holds 24 rows
    fits 8 examples, not 16 (BETA searches every target's row in one pass)."""
    model = load_model("builtin:digits-cnn")
    model.logits = MemoryLimit(model, rows=24)
    beta = suite.attacks.build_attack("beta", {"targets": 3, "steps": 2})
    fgm = suite.attacks.build_attack("fgm_linf", {})
    sample = torch.zeros(model.input_size)
    assert beta.rows_per_example(10) == 3
    assert probe_batch_size(model, beta, sample, 100) == 8
    assert probe_batch_size(model, fgm, sample, 100) == 16
    assert probe_batch_size(model, fgm, sample, 30) == 16  # 30 does not fit: down to a power of two
    assert probe_batch_size(model, fgm, sample, 3) == 3


def test_an_out_of_memory_error_on_the_third_batch_halves_it_and_loses_nothing(tmp_path, caplog, at_one):
    """FGM takes one gradient per batch: the third gradient call is the third batch. It runs out
    of memory once; that batch is retried at half the size, the rest of the pass keeps it, one
    line is logged, and the records are those of batch size 1."""
    limits = []

    def limit(model):
        limits.append(MemoryLimit(model, once_at=3))
        return limits[-1]

    with caplog.at_level(logging.WARNING, logger="suite.evaluation.batching"):
        results, records = _run(tmp_path, "oom", 4, limit=limit, attacks=["fgm_linf"])
    assert limits[0].raised == [4]
    lines = [record.getMessage() for record in caplog.records if "out of memory" in record.getMessage()]
    assert lines == ["evaluate: fgm_linf: out of memory at batch size 4; retrying that batch at 2"]
    assert results.batch_sizes == {"fgm_linf": 2}
    reference = [row for row in at_one[1] if row.get("attack") in (None, "fgm_linf")]
    assert _without_timing(records) == _without_timing(reference)


def test_a_mean_loss_is_refused_rather_than_retried_smaller(tmp_path):
    """Halving would change the numbers of an attack that averages its loss over the batch: one
    line, and the records already finished stay."""
    with pytest.raises(OutOfMemory, match="its loss is a mean over the batch"):
        _run(tmp_path, "mean", 8, limit=lambda model: MemoryLimit(model, rows=4),
             attacks=[{"name": "fgm_linf", "reduction": "mean"}])
    kept = _records(tmp_path / "mean")
    assert {row["kind"] for row in kept} == {"clean"}


def test_a_mean_loss_keeps_its_batches_across_resumes_processes_and_refuses_another_size(tmp_path, monkeypatch):
    """An attack that averages its loss over the batch has numbers that depend on which examples
    share a batch. Its batches are the attacked examples in blocks of the batch size, whatever
    happens: a resume after a kill that cut a batch's records short attacks that block whole
    again (and keeps the records it had), two processes take whole blocks in turn (not every
    other example, which made other batches), and a rerun at another size is refused instead
    of mixing two sizes' records."""
    from types import SimpleNamespace

    from suite.attacks.image.fgm import FGMLinf
    from suite.errors import ConfigError
    from suite.evaluation.distributed import Processes
    from suite.evaluation.runner import _mean_batches

    batches, run = [], FGMLinf.run

    def spy(self, model, examples, seed):
        batches.append([example.id for example in examples])
        return run(self, model, examples, seed)

    monkeypatch.setattr(FGMLinf, "run", spy)
    mean = [{"name": "fgm_linf", "reduction": "mean"}]
    results, reference = _run(tmp_path, "mean", 4, attacks=mean)
    first = list(batches)
    attacked = [ex for block in first for ex in block]
    assert results.attacks["fgm_linf"].n_attacked == len(attacked) > 8
    assert [len(block) for block in first[:-1]] == [4] * (len(first) - 1)
    # A kill that cut the second batch's records short: that batch runs whole again, once.
    path = tmp_path / "mean" / "records.jsonl"
    cut = set(first[1][2:])
    path.write_text("".join(line + "\n" for line in path.read_text().splitlines()
                            if not (json.loads(line).get("attack") == "fgm_linf" and json.loads(line)["id"] in cut)))
    batches.clear()
    assert _without_timing(_run(tmp_path, "mean", 4, attacks=mean)[1]) == _without_timing(reference)
    assert batches == [first[1]]
    with pytest.raises(ConfigError, match="holds another run: batch_size: 4 then, 2 now"):
        _run(tmp_path, "mean", 2, attacks=mean)
    # Two processes: whole blocks in turn, which fall into the same batches of 4 again.
    examples = {example_id: SimpleNamespace(id=example_id) for example_id in attacked}
    for rank in (0, 1):
        store = SimpleNamespace(processes=Processes(rank=rank, world=2), has=lambda *key: False)
        prepared = SimpleNamespace(store=store, attacked=lambda: [examples[i] for i in attacked])
        mine = [ex.id for ex in _mean_batches(prepared, "fgm_linf", 4)]
        assert [mine[start:start + 4] for start in range(0, len(mine), 4)] == first[rank::2]


def test_a_baseline_seeded_per_batch_keeps_its_batches_halves_nothing_and_refuses_another_size(tmp_path):
    """torchattacks draws from one generator per batch, so its baselines' records depend on which
    examples share a batch (square broke 6 of 48 digits in one batch, 7 one at a time): they run
    in the fixed batches of a mean loss, and their batch size is part of the run's identity."""
    pytest.importorskip("torchattacks", reason="the square baseline runs through torchattacks (pip install torchattacks)")
    from suite.errors import ConfigError

    square = [{"name": "square", "queries": 30}]
    assert build_attack("square").batch_dependent and not build_attack("square", {"sampled": True}).batch_dependent
    results, reference = _run(tmp_path, "square", 4, attacks=square)
    attacked = [row["id"] for row in reference if row["kind"] == "attack"]
    assert results.attacks["square"].n_attacked == len(attacked) > 8
    path = tmp_path / "square" / "records.jsonl"
    order = [json.loads(line)["id"] for line in path.read_text().splitlines() if '"attack": "square"' in line]
    cut = set(order[5:7])  # a kill that cut the second batch of 4 short
    path.write_text("".join(line + "\n" for line in path.read_text().splitlines()
                            if not ('"attack": "square"' in line and json.loads(line)["id"] in cut)))
    assert _without_timing(_run(tmp_path, "square", 4, attacks=square)[1]) == _without_timing(reference)
    with pytest.raises(ConfigError, match="holds another run: batch_size: 4 then, 2 now"):
        _run(tmp_path, "square", 2, attacks=square)
    with pytest.raises(OutOfMemory, match="or its draws are seeded per batch"):
        _run(tmp_path, "square-oom", 8, limit=lambda model: MemoryLimit(model, rows=4), attacks=square)


def test_one_example_that_does_not_fit_is_one_line():
    def run(batch):
        raise _oom(len(batch))

    with pytest.raises(OutOfMemory, match="out of memory with a single example") as caught:
        run_in_batches(list(range(5)), 4, run, what="t: fgm_linf")
    assert caught.value.exit_code == 1


def test_other_errors_are_not_taken_for_out_of_memory():
    def run(batch):
        raise RuntimeError("shape mismatch")

    with pytest.raises(RuntimeError, match="shape mismatch"):
        run_in_batches([1, 2], 2, run, what="t")
    assert batching.is_out_of_memory(RuntimeError("MPS backend out of memory"))
    assert not batching.is_out_of_memory(ValueError("out of memory"))


def test_batched_scoring_gives_the_verdicts_of_scoring_alone_and_rescores_near_ties(monkeypatch):
    """A batch of adversarial inputs is scored in one pass; an input whose two largest logits are
    within TIE_MARGIN is scored again alone, and every verdict is the one-at-a-time verdict."""
    from suite.attacks.base import AttackOutput
    from suite.data.base import Example
    from suite.evaluation import scoring
    from suite.models.wrap import from_module

    linear = torch.nn.Linear(2, 3, bias=False)
    with torch.no_grad():
        linear.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]]))
    model = from_module(torch.nn.Sequential(torch.nn.Flatten(), linear), input_size=(2, 1, 1), device="cpu")
    points = [(0.9, 0.1), (0.5, 0.5), (0.2, 0.8), (0.5, 0.5 + 1e-5), (0.3, 0.3)]  # ties at rows 1, 3 and 4
    examples = [Example(str(i), torch.tensor(p).view(2, 1, 1), i % 2) for i, p in enumerate(points)]
    outputs = [AttackOutput(adversarial=ex.input, perturbation=0.0, queries=1, seconds=0.0) for ex in examples]
    alone = []
    real = scoring.score_output
    monkeypatch.setattr(scoring, "score_output", lambda *a: alone.append(a[1].id) or real(*a))
    batched = scoring.score_batch(model, examples, outputs, [1.0] * len(examples))
    assert alone == ["1", "3", "4"]
    alone.clear()
    expected = [real(model, ex, out, 1.0) for ex, out in zip(examples, outputs)]
    assert [(s["robust"], s["prediction"]) for s in batched] == [(s["robust"], s["prediction"]) for s in expected]


def test_batched_text_scoring_is_the_verdict_of_each_text_alone(sentiment_model, monkeypatch):
    """A text model's batch is scored through its pooled rows: each record's prediction and
    robust value are those of scoring the text alone, its confidence agrees to float rounding,
    and a text's value is bit for bit the same whichever texts share its batch."""
    from suite.attacks.base import AttackOutput
    from suite.data.base import Example
    from suite.evaluation import scoring

    texts = ["a gripping , funny film", "dull and lifeless", "not bad at all , really",
             "the worst movie of the year , truly awful and boring", "fine", "i loved every minute",
             "an utter mess", "quietly moving and sharp"]
    examples = [Example(str(i), text, i % 2) for i, text in enumerate(texts)]
    outputs = [AttackOutput(adversarial=None if i % 3 else text.upper(), perturbation=0.0, queries=1, seconds=0.0)
               for i, text in enumerate(texts)]
    alone = []
    real = scoring.score_output
    monkeypatch.setattr(scoring, "score_output", lambda *a: alone.append(a[1].id) or real(*a))
    batched = scoring.score_batch(sentiment_model, examples, outputs, [1.0, 0.0] * 4)
    assert alone == []  # nothing rescored on the CPU
    expected = [real(sentiment_model, ex, out, c) for ex, out, c in zip(examples, outputs, [1.0, 0.0] * 4)]
    assert [(s["robust"], s["prediction"]) for s in batched] == [(s["robust"], s["prediction"]) for s in expected]
    assert [s["confidence"] for s in batched] == pytest.approx([s["confidence"] for s in expected], abs=1e-5)
    assert {s["robust"] for s in batched} == {0.0, 1.0}
    halves = (scoring.score_batch(sentiment_model, examples[:3], outputs[:3], [1.0, 0.0, 1.0])
              + scoring.score_batch(sentiment_model, examples[3:], outputs[3:], [0.0, 1.0, 0.0, 1.0, 0.0]))
    assert halves == batched
    # one text at a time too (a streamed text attack records each search as it finishes)
    singles = [scoring.score_batch(sentiment_model, [ex], [out], [c])[0]
               for ex, out, c in zip(examples, outputs, [1.0, 0.0] * 4)]
    assert singles == batched


def _text_task(sentiment_model):
    from suite.data.builtin import sentiment

    texts = list(sentiment("test").inputs[:16])
    return texts, sentiment_model.predict(texts).tolist()  # every example attacked


class TextFault:
    """``text_rows`` that raises ``error`` once, at its ``at``-th call (the first is the clean pass)."""

    def __init__(self, model, error: BaseException, at: int) -> None:
        self.inner, self.error, self.at, self.calls = model.text_rows, error, at, 0

    def __call__(self, texts):
        self.calls += 1
        if self.calls == self.at:
            raise self.error
        return self.inner(texts)


@pytest.fixture(scope="module")
def text_at_one(sentiment_model, tmp_path_factory):
    output = tmp_path_factory.mktemp("text-batching") / "one"
    suite.evaluate(sentiment_model, _text_task(sentiment_model), attacks=["deepwordbug"], adversary=["none"],
                   output=output, options=RunOptions(batch_size=1))
    return _records(output)


def _lanes(monkeypatch, lanes: int) -> None:
    """Text streams in ``lanes`` lanes (two: a pass in its own thread beside the other lane's
    turns, as on a GPU), whatever the device."""
    from suite.attacks.text import cooperative

    monkeypatch.setattr(cooperative.Driver, "lane_count", lambda self: max(1, min(lanes, self.concurrent)))


@pytest.mark.parametrize("lanes", [1, 2])
def test_an_out_of_memory_error_in_a_text_stream_halves_the_searches_at_once_and_loses_nothing(
        sentiment_model, tmp_path, caplog, monkeypatch, text_at_one, lanes):
    _lanes(monkeypatch, lanes)
    fault = TextFault(sentiment_model, _oom(100), at=4)
    monkeypatch.setattr(sentiment_model, "text_rows", fault)
    with caplog.at_level(logging.WARNING, logger="suite.evaluation.batching"):
        results = suite.evaluate(sentiment_model, _text_task(sentiment_model), attacks=["deepwordbug"],
                                 adversary=["none"], output=tmp_path / "run", options=RunOptions(batch_size=8))
    assert fault.calls > 4 and results.batch_sizes == {"deepwordbug": 4}
    assert "out of memory with 8 searches at once; going on with 4" in caplog.text
    assert _without_timing(_records(tmp_path / "run")) == _without_timing(text_at_one)


@pytest.mark.parametrize("lanes", [1, 2])
def test_an_interrupted_text_stream_keeps_every_search_that_finished(sentiment_model, tmp_path, monkeypatch,
                                                                     text_at_one, lanes):
    """Each search is recorded as it finishes: Ctrl-C in the middle keeps those, and the rerun
    attacks only the rest, for the records of an uninterrupted run. With two lanes the Ctrl-C
    comes from the pass's own thread, and the rerun also runs in two lanes."""
    _lanes(monkeypatch, lanes)
    monkeypatch.setattr(sentiment_model, "text_rows", TextFault(sentiment_model, KeyboardInterrupt(), at=8))
    task = _text_task(sentiment_model)
    with pytest.raises(KeyboardInterrupt):
        suite.evaluate(sentiment_model, task, attacks=["deepwordbug"], adversary=["none"], output=tmp_path / "run",
                       options=RunOptions(batch_size=8))
    kept = [row for row in _records(tmp_path / "run") if row["kind"] == "attack"]
    assert 0 < len(kept) < 16
    monkeypatch.undo()
    _lanes(monkeypatch, lanes)
    attacked = []
    recipe_stream = type(build_attack("deepwordbug")).stream

    def spy(self, model, examples, seed, window):
        attacked.extend(ex.id for ex in examples)
        yield from recipe_stream(self, model, examples, seed, window)

    monkeypatch.setattr(type(build_attack("deepwordbug")), "stream", spy)
    suite.evaluate(sentiment_model, task, attacks=["deepwordbug"], adversary=["none"], output=tmp_path / "run",
                   options=RunOptions(batch_size=8))
    assert sorted(attacked) == sorted(set(row["id"] for row in text_at_one if row["kind"] == "attack")
                                      - {row["id"] for row in kept})
    assert _without_timing(_records(tmp_path / "run")) == _without_timing(text_at_one)
    # the file itself ends in the examples' order, though searches were recorded as they finished
    rows = [json.loads(line) for line in (tmp_path / "run" / "records.jsonl").read_text().splitlines() if '"kind": "run"' not in line]
    in_file = {kind: [row["id"] for row in rows if row["kind"] == kind] for kind in ("clean", "attack")}
    assert in_file["attack"] == in_file["clean"]
