"""Attack contracts, driven by the registry: ε-ball, [0, 1] box, per-example seeding,
batch-size invariance, and success on known-vulnerable models."""

from __future__ import annotations

import pytest
import torch

from suite.attacks import ATTACKS, build_attack
from suite.attacks.image.driver import GradientAttack
from suite.errors import ConfigError

from helpers import run_judged

#: Point-wise attacks that run on any image model. The attacks on randomized ensembles
#: (test_ensemble.py) and the distributional ones (test_wda.py) have their own contract tests.
IMAGE_ATTACKS = [name for name in ATTACKS.names() if ATTACKS.get(name).modality == "image"
                 and ATTACKS.get(name).requires is None and ATTACKS.get(name).metric == "pointwise"]
#: Our own gradient attacks (seeded per example); the rest are torchattacks baselines.
OWN_ATTACKS = [name for name in IMAGE_ATTACKS if issubclass(ATTACKS.get(name), GradientAttack)]
BASELINES = [name for name in IMAGE_ATTACKS if name not in OWN_ATTACKS]
EPS = {"linf": 0.05, "l2": 0.8}
#: Small budgets so the registry-wide checks stay fast (the real budgets run in bench/).
QUICK = {
    "apgd_ce": {"steps": 10},
    "apgd_dlr": {"steps": 10},
    "apgd_t": {"steps": 10, "targets": 3},
    "auto": {"steps": 10, "target_steps": 5, "targets": 3, "best_target_steps": 5},
    "auto_plus": {"steps": 10, "targets": 3, "restarts": 2},
    "ta_apgd_ce": {"steps": 10},
    "ta_apgd_t": {"steps": 10, "targets": 3},
    "fab_t": {"steps": 10, "targets": 3},
    "square": {"queries": 300},
    "autoattack": {"steps": 10, "targets": 3, "queries": 300},
    "beta": {"steps": 10},
}


def _correct(model, examples, n):
    images = torch.stack([ex.input for ex in examples])
    predictions = model.predict(images)
    return [ex for ex, p in zip(examples, predictions) if int(p) == ex.label][:n]


@pytest.mark.parametrize("norm", ["linf", "l2"])
@pytest.mark.parametrize("name", IMAGE_ATTACKS)
def test_image_attack_respects_ball_and_box(name, norm, digits_model, digits_examples):
    cls = ATTACKS.get(name)
    params = dict(QUICK.get(name, {}))
    if "norm" in cls.model_fields or any(f.alias == "norm" for f in cls.model_fields.values()):
        params["norm"] = norm
    elif build_attack(name).threat.norm != norm:
        pytest.skip(f"{name} has no {norm} variant")
    examples = _correct(digits_model, digits_examples, 48 if name in OWN_ATTACKS else 16)
    attack = build_attack(name, {**params, "eps": EPS[norm]})
    assert attack.threat.norm == norm
    outputs = run_judged(attack, digits_model, examples, seed=0)
    assert len(outputs) == len(examples)
    for example, output in zip(examples, outputs):
        delta = output.adversarial - example.input
        norm = delta.abs().max() if attack.threat.norm == "linf" else delta.norm()
        assert norm <= attack.eps + 1e-5
        assert abs(norm - output.perturbation) < 1e-5
        assert output.adversarial.min() >= 0 and output.adversarial.max() <= 1
        # success is judged by the served model on the returned input
        prediction = int(digits_model.logits(output.adversarial[None]).argmax())
        assert output.prediction == prediction and output.success == (prediction != example.label)
        assert output.queries >= 1
    # the built-in CNN is not adversarially trained: white-box attacks break most examples; a
    # black-box one with a few hundred queries breaks some
    rate = sum(o.success for o in outputs) / len(outputs)
    assert rate > (0.5 if cls.access == "white-box" else 0.0)


@pytest.mark.parametrize("name", OWN_ATTACKS)
def test_image_attack_is_batch_size_invariant_and_seeded(name, digits_model, digits_examples):
    examples = _correct(digits_model, digits_examples, 24)
    attack = build_attack(name, {**QUICK.get(name, {}), "eps": 0.02 if build_attack(name).threat.norm == "linf" else 0.3})
    together = run_judged(attack, digits_model, examples, seed=1)
    alone = [run_judged(attack, digits_model, [ex], seed=1)[0] for ex in examples]
    assert [o.success for o in together] == [o.success for o in alone]
    assert [o.queries for o in together] == [o.queries for o in alone]
    assert [o.prediction for o in together] == [o.prediction for o in alone]
    # Batched conv kernels round differently from single-example ones; after 20 normalised L2
    # steps that float noise reaches ~1e-3 per pixel. Decisions above are identical.
    for a, b in zip(together, alone):
        torch.testing.assert_close(a.adversarial, b.adversarial, atol=2e-3, rtol=0)
    again = run_judged(attack, digits_model, examples[::-1], seed=1)[::-1]
    assert [o.success for o in again] == [o.success for o in together]
    for a, b in zip(together, again):
        torch.testing.assert_close(a.adversarial, b.adversarial, atol=2e-3, rtol=0)


@pytest.mark.parametrize("name", BASELINES)
def test_baseline_is_reproducible_and_leaves_global_rng_alone(name, digits_model, digits_examples):
    # torchattacks draws from the global RNG for the whole batch: reproducible for a given
    # batch (we seed it from the example ids), and the caller's RNG state is restored.
    examples = _correct(digits_model, digits_examples, 8)
    attack = build_attack(name, {**QUICK[name], "eps": 0.02})
    torch.manual_seed(123)
    state = torch.random.get_rng_state()
    first = run_judged(attack, digits_model, examples, seed=3)
    assert torch.equal(torch.random.get_rng_state(), state)
    second = run_judged(attack, digits_model, examples, seed=3)
    assert [o.success for o in first] == [o.success for o in second]
    assert [o.queries for o in first] == [o.queries for o in second]
    for a, b in zip(first, second):
        assert torch.equal(a.adversarial, b.adversarial)


def test_torchattacks_apgd_t_under_l2_gives_each_example_its_own_step_size(digits_model, digits_examples):
    """torchattacks' APGD-T steps a whole batch with the first example's step size under L2
    (``step_size[0]``; the official code fixed it in 2021), so each example's search depended on
    which example came first. ``ta_apgd_t`` (and ``autoattack``) run it one example at a time
    there: the same outputs in any order and at any batch size. This torchattacks version still
    has the bug: run batched, some example differs from its run alone."""
    import torchattacks

    examples = _correct(digits_model, digits_examples, 6)
    attack = build_attack("ta_apgd_t", {"norm": "l2", "eps": 0.5, "steps": 12, "targets": 2})
    together = run_judged(attack, digits_model, examples, seed=2)
    reversed_ = run_judged(attack, digits_model, examples[::-1], seed=2)[::-1]
    alone = [run_judged(attack, digits_model, [example], seed=2)[0] for example in examples]
    for a, b, c in zip(together, reversed_, alone):
        assert torch.equal(a.adversarial, b.adversarial) and torch.equal(a.adversarial, c.adversarial)
    from suite.attacks.image.query_counting import QueryCountingModule

    x = torch.stack([example.input for example in examples])
    module = QueryCountingModule(digits_model, x)
    y = torch.tensor([example.label for example in examples])
    batched = torchattacks.APGDT(module, norm="L2", eps=0.5, steps=12, n_classes=3, seed=0)(x, y)
    single = torch.cat([torchattacks.APGDT(module, norm="L2", eps=0.5, steps=12, n_classes=3, seed=0)(x[i:i + 1],
                                                                                                       y[i:i + 1])
                        for i in range(len(examples))])
    assert not torch.equal(batched, single)


def test_pgd_beats_fgm_and_zero_eps_does_nothing(digits_model, digits_examples):
    examples = _correct(digits_model, digits_examples, 64)
    fgm = run_judged(build_attack("fgm_linf", {"eps": 0.02}), digits_model, examples, seed=0)
    pgd = run_judged(build_attack("pgd_linf", {"eps": 0.02, "steps": 20}), digits_model, examples, seed=0)
    assert sum(o.success for o in pgd) >= sum(o.success for o in fgm)
    zero = run_judged(build_attack("pgd_linf", {"eps": 0.0}), digits_model, examples[:8], seed=0)
    assert not any(o.success for o in zero)
    assert all(torch.equal(o.adversarial, ex.input) for o, ex in zip(zero, examples[:8]))


def test_pgd_random_start_depends_on_seed_and_id(digits_model, digits_examples):
    examples = _correct(digits_model, digits_examples, 4)
    attack = build_attack("pgd_linf", {"eps": 0.001, "steps": 1})  # too small to succeed: keeps its start
    a = run_judged(attack, digits_model, examples, seed=0)
    b = run_judged(attack, digits_model, examples, seed=1)
    assert not torch.equal(a[0].adversarial, b[0].adversarial)
    assert not torch.equal(a[0].adversarial - examples[0].input, a[1].adversarial - examples[1].input)


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        ("pgd_linf", {"eps": -0.1}, "eps: Input should be greater than or equal to 0"),
        ("pgd_linf", {"epsilon": 0.1}, "epsilon: unknown parameter"),
        ("pgd_l2", {"steps": 0}, "steps: Input should be greater than or equal to 1"),
        ("deepwordbug", {"query_budget": -3}, "query_budget: Input should be greater than 0"),
    ],
)
def test_bad_hyperparameters_are_one_line_errors(name, params, message):
    with pytest.raises(ConfigError, match=message):
        build_attack(name, params)


def test_attacks_are_frozen():
    attack = build_attack("pgd_linf")
    with pytest.raises(Exception):
        attack.eps = 1.0


@pytest.mark.slow
def test_deepwordbug_breaks_the_tiny_text_model_deterministically(sentiment_model):
    from suite.data.base import Example
    from suite.data.builtin import sentiment

    test = sentiment("test")
    predictions = sentiment_model.predict(test.inputs)
    examples = [Example(i, x, y) for i, x, y, p in zip(test.ids, test.inputs, test.labels, predictions) if int(p) == y][:20]
    attack = build_attack("deepwordbug")
    outputs = run_judged(attack, sentiment_model, examples, seed=0)
    successes = [o for o in outputs if o.success]
    assert len(successes) >= 5  # word-level vocabulary: misspelt sentiment words become [UNK]
    for example, output in zip(examples, outputs):
        assert output.queries >= 1 and 0 <= output.perturbation <= 1
        if output.success:
            assert output.adversarial != example.input
            assert int(sentiment_model.predict([output.adversarial])[0]) != example.label
    again = run_judged(attack, sentiment_model, examples[::-1], seed=0)[::-1]
    assert [o.adversarial for o in outputs] == [o.adversarial for o in again]


@pytest.fixture
def two_threads():
    """Two torch threads for the test (under ``make test``'s ``-n 2`` each worker has one)."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("norm", ["linf", "l2", "l1"])
def test_random_starts_drawn_in_threads_are_those_of_a_loop(norm, monkeypatch, two_threads):
    """Random starts of large images are drawn in threads, one per example's generator; rows of
    one example (its targets) share its generator and draw in their order. The starts, and the
    generators' states after them, are those of a loop over the rows, bit for bit."""
    import threading

    from suite import seeding
    from suite.attacks.image.norms import COST_NORMS, random_starts
    from suite.seeding import example_generator

    geometry, shape = COST_NORMS[norm], torch.Size((3, 80, 80))  # 19,200 values a row: threads
    assert shape.numel() >= seeding.PARALLEL_DRAW and torch.get_num_threads() >= 2
    examples = [str(i) for i in range(9)]
    rows = [example for example in examples for _ in range(3)][:-1]  # three rows each, the last two

    def generators():
        made = {example: example_generator(0, "start", example) for example in examples}
        return [made[example] for example in rows], made

    threaded, after_threads = generators()
    looped, after_loop = generators()
    draw, threads = geometry.random_start, set()

    def recorded(*args):
        threads.add(threading.current_thread().name)
        return draw(*args)

    monkeypatch.setattr(geometry, "random_start", staticmethod(recorded))
    drawn = random_starts(geometry, shape, 0.5, threaded)
    expected = torch.stack([draw(shape, 0.5, generator) for generator in looped])
    assert threads and all(name.startswith("advsuite-draws") for name in threads)
    assert torch.equal(drawn, expected)
    assert all(torch.equal(after_threads[e].get_state(), after_loop[e].get_state()) for e in examples)
