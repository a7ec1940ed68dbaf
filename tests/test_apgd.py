"""The suite's own APGD (Croce & Hein, ICML 2020, Alg. 1) and the ``auto`` ensembles: the
step-size schedule against the paper's conditions, few-class models, the BETA trap and the
BETA paper's App. D example, and ``auto`` as the default image evaluation."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from suite.attacks import build_attack
from suite.attacks.image.apgd import StepSchedule, checkpoints
from suite.data.base import Example
from suite.models.base import ModelInfo, TorchClassifier

from helpers import CountedReads, MarkedHostCopy, run_judged


class _Linear(TorchClassifier):
    """A hand-built linear classifier on a tiny image."""

    modality = "image"

    def __init__(self, weight, bias, input_size) -> None:
        layer = nn.Linear(len(weight[0]), len(weight))
        with torch.no_grad():
            layer.weight.copy_(torch.tensor(weight))
            layer.bias.copy_(torch.tensor(bias))
        super().__init__(layer, device="cpu")
        self.input_size = input_size
        self.labels = [str(i) for i in range(len(weight))]
        self.info = ModelInfo(spec="test:linear")

    def _forward(self, batch):
        return self.module(batch.flatten(1))


def test_checkpoints_follow_the_paper():
    # p = 0, 0.22, 0.41, 0.57, 0.70, 0.80, 0.87, 0.93, 0.99 (steps shrink by 0.03, at least 0.06)
    assert checkpoints(100) == [22, 41, 57, 70, 80, 87, 93, 99]
    # ⌈p_j·N⌉ exactly: 0.22·50 = 11, not 12 (floating point would round 11.000000000000002 up)
    assert checkpoints(50) == [11, 21, 29, 35, 40, 44, 47]
    # Short runs: coinciding checkpoints count once, none at or beyond the last iteration.
    assert checkpoints(5) == [2, 3, 4]
    assert checkpoints(1) == []


def _paper_halvings(values: list[float], steps: int, rho: float = 0.75) -> list[bool]:
    """Whether the step size halves at each checkpoint for a row whose objective takes ``values``
    at x⁽⁰⁾, x⁽¹⁾, …, written from the paper's Conditions 1 and 2 (Sec. 3.1) directly. After a
    halving the iterate restarts at x_max, so its value is f_max."""
    halved, eta, eta_before, f_max_before = [], 1.0, 1.0, values[0]
    previous = 0
    f_max = values[0]
    effective = list(values)
    for w in checkpoints(steps):
        f_max = max(effective[: w + 1])
        increases = sum(effective[i + 1] > effective[i] for i in range(previous, w))
        condition_1 = increases < rho * (w - previous)
        condition_2 = eta == eta_before and f_max <= f_max_before
        eta_before, f_max_before = eta, f_max
        halve = condition_1 or condition_2
        if halve:
            eta /= 2
            effective[w] = f_max
        halved.append(halve)
        previous = w
    return halved


def _drive(values: torch.Tensor, steps: int) -> tuple[StepSchedule, list[torch.Tensor]]:
    """Feed a schedule R rows of objective values (R×(steps)) at points that encode the step."""
    rows = len(values)
    schedule = StepSchedule(rows, steps, eta=1.0, rho=0.75, device=torch.device("cpu"))
    returned = []
    for k in range(steps):
        points = torch.full((rows, 1, 1, 1), float(k))
        grad = torch.full((rows, 1, 1, 1), float(-k))
        point, _ = schedule.observe(torch.arange(rows), points, grad, values[:, k])
        returned.append(point.flatten())
    return schedule, returned


def test_schedule_halves_exactly_when_the_paper_says():
    steps = 100
    generator = torch.Generator().manual_seed(0)
    increasing = torch.arange(steps, dtype=torch.float32)
    flat = torch.zeros(steps)
    rows = [increasing, flat, torch.randn(steps, generator=generator), torch.randn(steps, generator=generator).cumsum(0)]
    for increases in (17, 16):
        series = torch.zeros(steps)
        up = torch.tensor([1.0] * increases + [-1.0] * (22 - increases))
        series[1:23] = up.cumsum(0)
        series[23:] = series[22] + torch.arange(1, steps - 22)
        rows.append(series)
    # The third window (41, 57] has 16 steps: exactly 12 = 0.75·16 increases keeps η (strict "<").
    moves = torch.ones(steps)
    moves[0] = 0.0
    moves[42 + 12 : 58] = -0.5
    rows.append(moves.cumsum(0))
    values = torch.stack(rows)
    schedule, _ = _drive(values, steps)
    marks = checkpoints(steps)
    observed = [[int(row) in set(halved.tolist()) for halved in (h for _, h in schedule.halvings)] for row in range(len(rows))]
    expected = [_paper_halvings(values[row].tolist(), steps) for row in range(len(rows))]
    assert [k for k, _ in schedule.halvings] == marks
    assert observed == expected
    # The hand-checkable rows: steady progress never halves; no progress halves at every
    # checkpoint; 17 of 22 increases keeps η, 16 halves it.
    assert expected[0] == [False] * len(marks)
    assert expected[1] == [True] * len(marks)
    assert expected[4][0] is False and expected[5][0] is True
    assert expected[6] == [False] * len(marks)
    assert schedule.eta[0] == 1.0 and schedule.eta[1] == 0.5 ** len(marks)


def test_schedule_restarts_from_the_best_point_with_its_gradient():
    steps = 30
    values = torch.zeros(1, steps)
    values[0, 5] = 3.0  # the best point is x⁽⁵⁾; nothing else improves, so w_1 = 7 halves
    schedule, returned = _drive(values, steps)
    first = checkpoints(steps)[0]
    assert first == 7
    assert returned[first].item() == 5.0  # stepped from x_max, not x⁽⁷⁾
    assert returned[first - 1].item() == first - 1
    assert schedule.best_grad[0].item() == -5.0


def test_a_schedule_whose_rows_stop_gives_the_rest_what_they_get_alone():
    """Rows only ever stop: a schedule of 8 rows handed rows 1..6 from step 9 on (0 and 7
    stopped) and then rows 2..5 from step 23 on (a checkpoint) keeps those rows' state only, and
    gives them the points, gradients, step sizes and halvings that a schedule of those rows
    alone gives, bit for bit. It keeps no alias of what it is handed (the caller's tensors are
    overwritten after each call here)."""
    rows, steps = 8, 40
    generator = torch.Generator().manual_seed(3)
    values = torch.randn(rows, steps, generator=generator).cumsum(1)
    points = torch.randn(steps, rows, 2, 1, 1, generator=generator)
    grads = torch.randn(steps, rows, 2, 1, 1, generator=generator)
    shrinking = StepSchedule(rows, steps, eta=1.0, rho=0.75, device=torch.device("cpu"))
    alone = StepSchedule(4, steps, eta=1.0, rho=0.75, device=torch.device("cpu"))
    last = torch.arange(2, 6)  # the rows that never stop
    for k in range(steps):
        handed = torch.arange(rows) if k < 9 else torch.arange(1, 7) if k < 23 else last
        given = points[k][handed].clone(), grads[k][handed].clone(), values[handed, k].clone()
        point, grad = shrinking.observe(handed, *given)
        point, grad = point.clone(), grad.clone()
        for tensor in given:
            tensor.fill_(float("nan"))
        expected_point, expected_grad = alone.observe(torch.arange(4), points[k][last], grads[k][last], values[last, k])
        kept = torch.searchsorted(handed, last)
        assert torch.equal(point[kept], expected_point) and torch.equal(grad[kept], expected_grad), k
        assert len(point) == len(handed)
    assert torch.equal(shrinking.rows, last) and len(shrinking.eta) == 4
    assert torch.equal(shrinking.eta, alone.eta) and torch.equal(shrinking.best_value, alone.best_value)
    assert torch.equal(shrinking.best_point, alone.best_point)
    own = [(k, [row for row in h.tolist() if row in last.tolist()]) for k, h in shrinking.halvings]
    assert own == [(k, (h + 2).tolist()) for k, h in alone.halvings]
    assert any(0 < len(h) < 4 for _, h in alone.halvings)  # some rows restarted and some did not
    assert 23 in checkpoints(steps)  # the second stop is at a checkpoint


def test_apgd_step_with_every_row_gathers_and_scatters_nothing():
    """Between checkpoints, APGD's step over every row of a search indexes no tensor: its
    state is read and replaced whole (on CUDA each gather and scatter is a kernel launch, and
    at batch 64 the host's launches bound a step). Over a part of the rows it indexes."""
    from suite.attacks.image.apgd import apgd_updater

    class Indexing(torch.overrides.TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.count = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            if getattr(func, "__name__", "") in ("__getitem__", "__setitem__") and isinstance(args[1], torch.Tensor):
                self.count += 1
            return func(*args, **(kwargs or {}))

    attack = build_attack("apgd_ce", {"eps": 0.1, "steps": 100})
    generator = torch.Generator().manual_seed(0)
    origin = torch.rand(5, 1, 2, 2, generator=generator)
    counts = {}
    for name, rows in (("every", torch.arange(5)), ("part", torch.tensor([0, 2, 3]))):
        update = apgd_updater(attack, steps=100)(origin, origin.clone())
        points = origin[rows] + 0.01
        handed = [(torch.randn(len(rows), 1, 2, 2, generator=generator), torch.randn(len(rows), generator=generator))
                  for _ in range(checkpoints(100)[0])]  # up to the first checkpoint
        with Indexing() as indexing:
            for grad, values in handed:
                update(rows, points, grad, values)
        counts[name] = indexing.count
    assert counts["every"] == 0
    assert counts["part"] > 0


def test_apgd_step_schedule_on_a_quadratic_matches_the_conditions():
    """Real APGD updates on f(x) = −‖x − c‖² with c inside the ball: the 2ε steps overshoot and
    oscillate, so the schedule must halve; every halving agrees with the paper's conditions."""
    attack = build_attack("apgd_ce", {"norm": "linf", "eps": 0.2, "steps": 60})
    schedules = []
    make_update = attack._updater(attack.steps, schedules)
    origin = torch.full((3, 1, 2, 2), 0.5)
    centre = origin + torch.tensor([0.05, -0.12, 0.0]).view(3, 1, 1, 1)
    point = origin.clone()
    update = make_update(origin, point)
    history = []
    for _ in range(attack.steps):
        point = point.detach().requires_grad_(True)
        value = -((point - centre) ** 2).flatten(1).sum(1)
        (grad,) = torch.autograd.grad(value.sum(), point)
        history.append(value.detach())
        point = update(torch.arange(3), point.detach(), grad, value.detach())
        assert (point - origin).abs().max() <= 0.2 + 1e-6
    values = torch.stack(history, dim=1)
    (schedule,) = schedules
    observed = [[row in set(h.tolist()) for _, h in schedule.halvings] for row in range(3)]
    assert observed == [_paper_halvings(values[row].tolist(), attack.steps) for row in range(3)]
    assert all(any(row) for row in observed)
    # the step size shrank, and the best point approaches the maximiser
    assert (schedule.eta < 0.4).all()
    assert torch.allclose(schedule.best_point, centre, atol=0.02)


def _trap_model() -> _Linear:
    # tests/test_beta.py's trap: cross-entropy ascent walks into the unreachable class 1
    return _Linear([[0.0], [-2.0], [1.0]], [0.0, 1.0 - 0.25, -0.5 - 0.099], (1, 1, 1))


def _appendix_model() -> _Linear:
    """Robey et al. (ICLR 2024), App. D: f(u) = [[0, −1], [−1, 0], [1, 0]]·u at u = (0, −1),
    class 0, L2 ε = 0.8. The cross-entropy maximiser u = (0, −0.2) is still class 0, yet
    u = (0.566, −0.434) is class 2. In pixels: u = 2(x − (0.5, 1)), so x = (0.5, 0.5) and
    ε = 0.4 (the ball stays inside [0, 1]²)."""
    return _Linear([[0.0, -2.0], [-2.0, 0.0], [2.0, 0.0]], [2.0, 1.0, -1.0], (1, 1, 2))


def _copies(value, n=12):
    return [Example(id=f"x{i}", input=value.clone(), label=0) for i in range(n)]


def test_auto_breaks_the_beta_trap_and_the_appendix_model():
    trap = _copies(torch.full((1, 1, 1), 0.5))
    assert not any(o.success for o in run_judged(build_attack("apgd_ce", {"eps": 0.1, "steps": 20}), _trap_model(), trap[:4], 0))
    auto = run_judged(build_attack("auto", {"eps": 0.1}), _trap_model(), trap, seed=0)
    assert all(o.success and o.prediction == 2 and o.perturbation <= 0.1 + 1e-6 for o in auto)

    model = _appendix_model()
    examples = _copies(torch.full((1, 1, 2), 0.5))
    logits = model.logits(torch.stack([ex.input for ex in examples[:1]]))
    assert torch.allclose(logits, torch.tensor([[1.0, 0.0, 0.0]]))  # f(0, −1) = (1, 0, 0)
    auto = run_judged(build_attack("auto", {"norm": "l2", "eps": 0.4}), model, examples, seed=0)
    assert all(o.success and o.perturbation <= 0.4 + 1e-6 for o in auto)


@pytest.mark.parametrize("classes", [2, 3])
@pytest.mark.parametrize("name", ["apgd_dlr", "apgd_t", "auto", "auto_plus"])
def test_few_class_models_get_the_margin(name, classes):
    # A 2- or 3-class linear model: DLR is undefined, the attack falls back to the margin.
    weight = [[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]][:classes]
    model = _Linear(weight, [0.1] + [0.0] * (classes - 1), (1, 1, 2))
    examples = _copies(torch.full((1, 1, 2), 0.5), 4)
    attack = build_attack(name, {"eps": 0.2, "steps": 10})
    budget = attack.budget(classes)
    parts = budget["components"] if "components" in budget else [{"attack": name, **budget}]
    expected = {"apgd_ce": "ce", "apgd_t": "margin", "apgd_dlr": "dlr" if classes == 3 else "margin"}
    assert [part["loss"] for part in parts] == [expected[part["attack"]] for part in parts]
    outputs = run_judged(attack, model, examples, seed=0)
    # f_1 − f_0 = x_2 − x_1 − 0.1 > 0 is reachable with ε = 0.2 (0.5 → 0.3 and 0.7)
    assert all(o.success and o.perturbation <= 0.2 + 1e-6 for o in outputs)


def test_own_apgd_matches_torchattacks_on_the_standard_model(digits_model, digits_examples):
    pytest.importorskip("torchattacks")
    examples = [ex for ex in digits_examples[:60] if int(digits_model.predict(ex.input[None])[0]) == ex.label][:40]
    ours = run_judged(build_attack("apgd_ce", {"eps": 0.01, "steps": 20}), digits_model, examples, seed=0)
    theirs = run_judged(build_attack("ta_apgd_ce", {"eps": 0.01, "steps": 20}), digits_model, examples, seed=0)
    rate = sum(o.success for o in ours) / len(ours)
    assert 0.2 < rate < 1.0  # a budget where the number means something
    assert abs(sum(o.success for o in ours) - sum(o.success for o in theirs)) <= 3


def test_evaluate_without_attacks_runs_auto_on_images(tmp_path):
    import suite

    results = suite.evaluate("builtin:digits-cnn", "builtin:digits", n=8, output=tmp_path / "run")
    assert list(results.attacks) == ["auto"]
    entry = results.attacks["auto"]
    assert [part["attack"] for part in entry.budget["components"]] == ["apgd_ce", "apgd_t"]
    assert entry.budget["components"][1]["best_target_steps"] == 100  # the closest target's last search
    assert entry.robust_accuracy < results.clean_accuracy  # ε = 8/255 breaks the standard CNN


@pytest.mark.parametrize("norm,eps", [("linf", 0.3), ("l2", 0.4)])
def test_square_runs_on_tiny_inputs(norm, eps):
    # torchattacks' L2 Square divided by zero on images under 5×5; it now works on a padded
    # canvas the classifier never sees.
    pytest.importorskip("torchattacks")
    examples = _copies(torch.full((1, 1, 2), 0.5), 4)
    outputs = run_judged(build_attack("square", {"norm": norm, "eps": eps, "queries": 100}), _appendix_model(), examples, 0)
    assert all(o.adversarial.shape == (1, 1, 2) and o.perturbation <= eps + 1e-6 for o in outputs)
    if norm == "linf":
        assert any(o.success for o in outputs)  # (0.8, 0.2) is class 2: a corner the search finds


def test_deterministic_option_sets_kernels_and_restores_them():
    import suite
    from suite.seeding import deterministic_kernels

    before = (torch.are_deterministic_algorithms_enabled(), torch.backends.cuda.matmul.allow_tf32,
              torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark)
    with deterministic_kernels():
        assert torch.are_deterministic_algorithms_enabled()
        assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
        assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    assert (torch.are_deterministic_algorithms_enabled(), torch.backends.cuda.matmul.allow_tf32,
            torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark) == before
    # On the CPU the kernels were deterministic already: the same numbers either way.
    runs = [suite.evaluate("builtin:digits-cnn", "builtin:digits", attacks=[{"name": "auto", "steps": 10, "target_steps": 5, "best_target_steps": 5}], eps=0.01,
                           n=16, options=suite.RunOptions(deterministic=flag)) for flag in (False, True)]
    assert runs[0].attacks["auto"].robust_accuracy == runs[1].attacks["auto"].robust_accuracy
    assert 0 < runs[0].attacks["auto"].robust_accuracy < runs[0].clean_accuracy


def test_beta_under_l2_uses_apgd_steps_and_refuses_a_learning_rate_there(digits_model, digits_examples):
    from suite.errors import ConfigError

    assert build_attack("beta", {"norm": "l2"}).budget(10)["optimizer"] == "APGD"
    assert build_attack("beta").budget(10)["optimizer"] == "RMSprop"
    with pytest.raises(ConfigError, match="lr does not apply to optimizer APGD"):
        build_attack("beta", {"norm": "l2", "lr": 0.1})
    examples = [ex for ex in digits_examples[:40] if int(digits_model.predict(ex.input[None])[0]) == ex.label][:24]
    apgd = run_judged(build_attack("beta", {"norm": "l2", "eps": 0.2, "steps": 20, "targets": 3}), digits_model, examples, 0)
    sgd = run_judged(build_attack("beta", {"norm": "l2", "eps": 0.2, "steps": 20, "targets": 3, "optimizer": "SGD"}),
                     digits_model, examples, 0)
    assert all(o.perturbation <= 0.2 + 1e-5 for o in apgd)
    assert sum(o.success for o in apgd) >= sum(o.success for o in sgd) > 0


def test_linear_ranking_targets_the_nearest_boundary_not_the_likeliest_class():
    # At x = (0.5, 0.5): z = (2, 1.55, 1). Class 1 is likelier, but its boundary is 0.45/0.1 = 4.5
    # away in L∞ (dual L1), class 2's 1/10 = 0.1 (L2: 0.45/0.1 and 1/7.07).
    from suite.attacks.image.apgd import linear_targets
    from suite.attacks.image.driver import top_targets

    model = _Linear([[0.0, 0.0], [-0.1, 0.0], [5.0, 5.0]], [2.0, 1.6, -4.0], (1, 1, 2))
    x, y = torch.full((3, 1, 1, 2), 0.5), torch.zeros(3, dtype=torch.long)
    assert top_targets(model, x, y, 2).tolist() == [[1, 2]] * 3
    assert linear_targets(model, x, y, 2, dual=1).tolist() == [[2, 1]] * 3
    assert linear_targets(model, x, y, 1, dual=2).tolist() == [[2]] * 3
    assert linear_targets(model, x[:1], y[:1], 2, dual=1).tolist() == [[2, 1]]  # per example
    # One target and an L∞ budget of 0.12, which reaches class 2's boundary (0.1 away) and not
    # class 1's (4.5): the linear ranking breaks every example; the logit ranking pushes x₁ down
    # towards class 1, away from class 2, and breaks none.
    examples = _copies(torch.full((1, 1, 2), 0.5), 4)
    for ranking, breaks in (("linear", True), ("logit", False)):
        attack = build_attack("apgd_t", {"eps": 0.12, "steps": 10, "targets": 1, "ranking": ranking})
        assert attack.budget(3)["ranking"] == ranking
        assert all(o.success == breaks for o in run_judged(attack, model, examples, seed=0))


def test_apgd_t_gives_the_target_that_came_closest_its_last_search(digits_model, digits_examples, monkeypatch):
    """``best_target_steps``: after the sweep over the targets, each example still unbroken gets
    one more search, of that many steps, towards the target whose search reached the highest
    targeted DLR value; broken examples get none, and the budget counts it."""
    from suite.attacks.image.apgd import APGDT

    examples = [ex for ex in digits_examples[:40] if int(digits_model.predict(ex.input[None])[0]) == ex.label][:24]
    attack = build_attack("apgd_t", {"eps": 0.006, "steps": 5, "targets": 4, "best_target_steps": 7})
    assert attack.budget(10)["max_queries"] == (5 + 1) * 4 + 1 + (7 + 1)
    calls, original = [], APGDT._restart_search

    def spy(self, model, x, y, generators, **kwargs):
        result = original(self, model, x, y, generators, **kwargs)
        calls.append({"examples": [owner[id(g)] for g in generators], "steps": kwargs["steps"],
                      "targets": kwargs["targets"][:, 0].tolist(), "values": result.values.tolist(),
                      "broken": (result.predictions != y).tolist()})
        return result

    owner: dict[int, int] = {}
    import suite.attacks.image.driver as driver

    make = driver.example_generator

    def generator(seed, name, example_id):
        made = make(seed, name, example_id)
        owner[id(made)] = next(i for i, ex in enumerate(examples) if ex.id == example_id)
        return made

    monkeypatch.setattr(driver, "example_generator", generator)
    monkeypatch.setattr(APGDT, "_restart_search", spy)
    outputs = run_judged(attack, digits_model, examples, seed=0)
    assert [call["steps"] for call in calls] == [5, 5, 5, 5, 7]
    *sweep, last = calls
    broken = {i for call in sweep for i, hit in zip(call["examples"], call["broken"]) if hit}
    assert broken and set(last["examples"]) == set(range(len(examples))) - broken  # both kinds occur here
    for example, target in zip(last["examples"], last["targets"]):
        reached = [(value, aim) for call in sweep for i, value, aim in zip(call["examples"], call["values"],
                                                                          call["targets"]) if i == example]
        assert target == max(reached, key=lambda pair: pair[0])[1]
    assert {i for i, out in enumerate(outputs) if out.success} >= broken


def test_auto_last_search_only_adds_to_what_the_earlier_stages_break(digits_model, digits_examples):
    """``auto``'s last search runs after its earlier stages, on the generators they leave: every
    example they break is broken with the same adversarial input, whatever the last search."""
    examples = [ex for ex in digits_examples[:80] if int(digits_model.predict(ex.input[None])[0]) == ex.label][:48]
    quick = {"eps": 0.008, "steps": 10, "target_steps": 5, "targets": 9}
    before = run_judged(build_attack("auto", {**quick, "best_target_steps": 0}), digits_model, examples, seed=0)
    after = run_judged(build_attack("auto", {**quick, "best_target_steps": 30}), digits_model, examples, seed=0)
    broken_before = {i for i, out in enumerate(before) if out.success}
    broken_after = {i for i, out in enumerate(after) if out.success}
    assert broken_before < broken_after  # strictly: the last search breaks some here
    assert all(torch.equal(before[i].adversarial, after[i].adversarial) for i in broken_before)


@pytest.mark.parametrize("training", [False, True])
def test_search_steps_read_the_device_only_through_host_copies(training, monkeypatch):
    """The search loop and APGD's schedule write by masks, not boolean indexing (each boolean
    index reads its row count back from the device, ``aten::nonzero``), and the rows that stop
    are read from a copy of ``done`` taken after the forward pass (HostCopy: on CUDA waiting
    for it leaves the backward pass queued, so the device does not idle). What is left reading
    the device itself is each search's start, its restarts and its checkpoints. With boolean
    indexing it was 633 reads in evaluation and 551 in training (about 15 and 13 a step); with
    the live rows and the moving rows read from the device, 107 and 26. Since the live rows are
    compacted when rows stop, the host reads its copy once a step (twice before)."""
    from suite.attacks.image import loop
    from suite.attacks.image.search import TRAINING

    monkeypatch.setattr(loop, "HostCopy", MarkedHostCopy)
    torch.manual_seed(0)
    model = _Linear(torch.randn(10, 48).tolist(), [0.0] * 10, (3, 4, 4))
    x = torch.rand(6, 3, 4, 4)
    y = model.logits(x).argmax(dim=1)  # every example correct; 1e-5 breaks none
    steps = 40
    attack = build_attack("apgd_ce", {"eps": 1e-5, "steps": steps})
    generators = [torch.Generator().manual_seed(i) for i in range(len(x))]
    with CountedReads() as reads:
        if training:
            attack.perturb(model, x, y, generators, TRAINING)
        else:
            attack._perturb(model, x, y, generators)
    checkpoint_reads = 3 * len(checkpoints(steps))  # a checkpoint's halving rows, at most 3 reads each
    assert reads.device <= checkpoint_reads + 8, reads.device
    # The rows that move on, once a step with a gradient, from the host's copy.
    assert reads.host == (0 if training else steps), reads.host


@pytest.mark.parametrize("name", ["apgd_ce", "pgd_linf"])
def test_a_search_indexes_its_images_only_when_rows_stop(name, digits_model, digits_examples, monkeypatch):
    """The search keeps its live rows compacted: a pass with as many rows as the pass before is
    reached with no gather or scatter of the images (on a GPU each is a pass over them), in the
    driver and in the updates (APGD's schedule, PGD's origins) alike. Before, every step after the first stop gathered and
    scattered the iterate, the kept iterate, x_max and its gradient, and the last iterate."""

    class Indexing(torch.overrides.TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.passes: list[list[int]] = []  # per forward pass: its rows, then the images indexed before the next

        def __torch_function__(self, func, types, args=(), kwargs=None):
            if (getattr(func, "__name__", "") in ("__getitem__", "__setitem__") and isinstance(args[1], torch.Tensor)
                    and args[0].dim() == 4 and self.passes):
                self.passes[-1][1] += 1
            return func(*args, **(kwargs or {}))

    counting = Indexing()
    logits = digits_model.logits

    def counted(batch, **kwargs):
        counting.passes.append([len(batch), 0])
        return logits(batch, **kwargs)

    monkeypatch.setattr(digits_model, "logits", counted)
    x = torch.stack([example.input for example in digits_examples[:32]])
    y = torch.tensor([example.label for example in digits_examples[:32]])
    attack = build_attack(name, {"eps": 0.01, "steps": 60})
    with counting:
        attack._perturb(digits_model, x, y, [torch.Generator().manual_seed(i) for i in range(len(x))])
    sizes = [rows for rows, _ in counting.passes]
    assert len(sizes) == 61 and len(set(sizes)) >= 8  # examples stopped at many steps, and some never did
    for (rows, indexed), (next_rows, _) in zip(counting.passes, counting.passes[1:]):
        if next_rows == rows:
            assert indexed == 0, (rows, indexed)
        else:
            assert indexed > 0
