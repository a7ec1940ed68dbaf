"""Wasserstein distributional attacks (Le et al., WDA and WDA++): the L1 geometry, the budget
allocation against an LP optimum, feasibility of P_adv (the exact W_p by a transport LP), the
radius of WDA's moved points, and flip distances on a linear model whose boundary is known."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.optimize import linprog
from torch import nn

from suite.attacks import InfeasibleError, build_attack
from suite.attacks.image.norms import L1, project_l1
from suite.attacks.image.wda_pp import allocate
from suite.data.base import Example
from suite.models.wrap import from_module


def test_l1_projection_is_the_euclidean_one():
    generator = torch.Generator().manual_seed(0)
    delta = torch.randn(6, 1, 3, 3, generator=generator)
    for eps in (0.1, 1.0, 4.0, 1e3):
        projected = project_l1(delta, eps)
        for point, original in zip(projected.flatten(1), delta.flatten(1)):
            if float(original.abs().sum()) <= eps:
                assert torch.equal(point, original)
                continue
            assert float(point.abs().sum()) == pytest.approx(eps, rel=1e-5)
            # KKT: point = sign(v)·max(|v| − θ, 0) for one θ ≥ 0.
            theta = (original.abs() - point.abs())[point != 0]
            assert float(theta.max() - theta.min()) < 1e-5
            assert bool((original.abs()[point == 0] <= theta.mean() + 1e-5).all())


def test_l1_step_is_a_signed_one_hot_of_the_requested_length():
    grad = torch.tensor([[[[0.1, -0.5], [0.3, 0.2]]]])
    assert L1.step(grad, 2.0).flatten().tolist() == [0.0, -2.0, 0.0, 0.0]
    assert float(L1.measure(L1.step(grad, 2.0))) == 2.0


def _knapsack(distances, eps, p):
    """max Σ a_i s.t. Σ a_i d_i^p / N ≤ ε^p, 0 ≤ a_i ≤ 1 (a_i = 0 where d_i = ∞), by linprog."""
    n = len(distances)
    finite = [d for d in distances if not math.isinf(d)]
    costs = [d ** p / n for d in finite]
    result = linprog(-np.ones(len(finite)), A_ub=[costs], b_ub=[eps ** p], bounds=[(0, 1)] * len(finite),
                     method="highs")
    return -result.fun


@pytest.mark.parametrize("seed", range(6))
def test_allocation_is_the_fractional_knapsack_optimum(seed):
    rng = np.random.default_rng(seed)
    n = 30
    distances = rng.exponential(0.3, n).tolist()
    distances[:3] = [0.0, math.inf, 0.0]  # misclassified points cost nothing; no flip found: never moves
    for eps in (0.0, 0.01, 0.1, 0.4, 10.0):
        for p in (1, 2):
            masses = allocate(distances, eps, p)
            assert all(0 <= mass <= 1 for mass in masses)
            assert masses[0] == masses[2] == 1.0 and masses[1] == 0.0
            spent = sum(m * d ** p for m, d in zip(masses, distances) if m > 0) / n
            assert spent <= eps ** p * (1 + 1e-12) + 1e-15
            assert sum(masses) == pytest.approx(_knapsack(distances, eps, p), abs=1e-9)


class Linear(nn.Module):
    """Logits (0, wᵀ(u − c) + b) on 1×4×4 images: class 1 iff wᵀ(u − c) + b > 0."""

    def __init__(self, w: torch.Tensor, b: torch.Tensor) -> None:
        super().__init__()
        self.w, self.b = nn.Parameter(w.flatten()), nn.Parameter(b)

    def forward(self, x):
        score = (x.flatten(1) - 0.5) @ self.w + self.b
        return torch.stack([torch.zeros_like(score), score], dim=1)


def _linear_case(count: int = 12):
    generator = torch.Generator().manual_seed(1)
    w = torch.randn(16, generator=generator)
    model = from_module(Linear(w, torch.tensor(0.0)), input_size=(1, 4, 4), labels=["0", "1"])
    inputs = (0.5 + 0.05 * torch.randn(count, 1, 4, 4, generator=generator)).clamp(0, 1)
    scores = model.logits(inputs)[:, 1]
    examples = [Example(i, x, int(s > 0)) for i, (x, s) in enumerate(zip(inputs, scores))]
    return model, examples, w, scores


def _records(model, attack, examples):
    outputs = attack.run(model, examples, seed=0)
    clean = [{"id": e.id, "correct": float(model.correctness(e.input[None], torch.tensor([e.label]))[0])}
             for e in examples]
    records = [{"id": e.id, "robust": float(model.correctness(o.adversarial[None], torch.tensor([e.label]))[0]),
                "perturbation": o.perturbation, "extras": dict(o.extras)} for e, o in zip(examples, outputs)]
    return outputs, clean, records


@pytest.mark.parametrize("norm", ["l2", "linf", "l1"])
def test_wda_pp_finds_the_boundary_of_a_linear_model(norm):
    model, examples, w, scores = _linear_case()
    attack = build_attack("wda_pp", {"norm": norm, "eps": 0.05, "alpha": 0.01, "maxiter": 200, "search_steps": 20})
    outputs, clean, records = _records(model, attack, examples)
    # The r-distance to the hyperplane is |f(x)| / ‖w‖_s (s the dual norm); WDA++ steps along the
    # dual-norm maximiser, so for r = 2 and ∞ it reaches the nearest boundary point (up to the
    # bisection); for r = 1 its one-coordinate steps do too. Box clamping never binds here.
    dual = {"l2": 2, "linf": 1, "l1": math.inf}[norm]
    nearest = scores.abs() / torch.linalg.vector_norm(w, ord=dual)
    for output, distance in zip(outputs, nearest.tolist()):
        assert output.extras["distance"] == pytest.approx(distance, rel=0.02, abs=1e-4)
    details = attack.aggregate(clean, records)
    assert details["transport_cost"] <= 0.05 * (1 + 1e-6)
    assert details["accuracy"] <= sum(r["correct"] for r in clean) / len(clean)


def _exact_wasserstein(examples, outputs, masses, norm: str, p: int) -> float:
    """W_p(P_adv, P_N) by a transport LP: atoms (X_i, 1 − a_i) and (X̃_i, a_i) against (X_i, 1/N),
    cost ‖·‖_r^p within a label, forbidden across labels."""
    n = len(examples)
    sources = [(e.input, e.label, (1 - m) / n) for e, m in zip(examples, masses)]
    sources += [(o.adversarial, e.label, m / n) for e, o, m in zip(examples, outputs, masses)]
    order = {"l2": 2, "linf": math.inf, "l1": 1}[norm]
    cost = np.full((len(sources), n), 1e9)
    for i, (x, label, _) in enumerate(sources):
        for j, target in enumerate(examples):
            if label == target.label:
                cost[i, j] = float(torch.linalg.vector_norm((x - target.input).flatten(), ord=order)) ** p
    equalities, rhs = [], []
    for i, (_, _, mass) in enumerate(sources):
        row = np.zeros(cost.shape)
        row[i, :] = 1
        equalities.append(row.ravel())
        rhs.append(mass)
    for j in range(n):
        row = np.zeros(cost.shape)
        row[:, j] = 1
        equalities.append(row.ravel())
        rhs.append(1 / n)
    result = linprog(cost.ravel(), A_eq=np.array(equalities), b_eq=rhs, bounds=(0, None), method="highs")
    return result.fun ** (1 / p)


@pytest.mark.parametrize("norm,p", [("l2", 1), ("l2", 2), ("linf", 1), ("l1", 2)])
def test_wda_pp_distribution_is_inside_the_wasserstein_ball(norm, p, digits_model, digits_examples):
    examples = digits_examples[:16]
    eps = {"l2": 0.5, "linf": 0.03, "l1": 4.0}[norm]
    attack = build_attack("wda_pp", {"norm": norm, "eps": eps, "p": p})
    outputs, clean, records = _records(digits_model, attack, examples)
    correct = {r["id"] for r in clean if r["correct"] > 0}
    kept = [r for r in records if r["id"] in correct]
    details = attack.aggregate(clean, kept)
    masses = {item["id"]: item["mass"] for item in details["transport"]}
    mass_list = [masses.get(e.id, 0.0) for e in examples]
    assert details["transport_cost"] <= eps ** p * (1 + 1e-6)
    assert _exact_wasserstein(examples, outputs, mass_list, norm, p) <= eps * (1 + 1e-5)
    assert details["accuracy"] <= details["clean_accuracy"] + 1e-12
    assert details["moved_mass"] > 0  # the budget bought some flips
    assert details["moved_mass"] == pytest.approx(sum(mass_list) / len(examples))


@pytest.mark.parametrize("norm", ["linf", "l2", "l1"])
@pytest.mark.parametrize("kappa,p", [(1.0, 1), (2.0, 1), (2.0, 2), (3.0, 2)])
def test_wda_moves_points_within_kappa_radius_and_box(norm, kappa, p, digits_model, digits_examples):
    examples = digits_examples[:12]
    eps = {"linf": 0.03, "l2": 0.4, "l1": 3.0}[norm]
    attack = build_attack("wda", {"norm": norm, "eps": eps, "kappa": kappa, "p": p, "maxiter": 6, "probe": 3})
    outputs, clean, records = _records(digits_model, attack, examples)
    radius = kappa ** (1 / p) * eps
    assert attack.radius == pytest.approx(radius)
    for example, output in zip(examples, outputs):
        order = {"linf": math.inf, "l2": 2, "l1": 1}[norm]
        size = float(torch.linalg.vector_norm((output.adversarial - example.input).flatten(), ord=order))
        assert size <= radius * (1 + 1e-6)
        assert 0 <= float(output.adversarial.min()) and float(output.adversarial.max()) <= 1
    correct = {r["id"] for r in clean if r["correct"] > 0}
    details = attack.aggregate(clean, [r for r in records if r["id"] in correct])
    assert details["transport_cost"] <= eps ** p * (1 + 1e-6)
    expected = (1 - 1 / kappa) * details["clean_accuracy"] + details["adversarial_accuracy"] / kappa
    assert details["accuracy"] == pytest.approx(expected)
    assert details["accuracy"] <= details["clean_accuracy"]


def test_wda_breaks_the_standard_cnn_at_least_as_often_as_pgd(digits_model, digits_examples):
    examples = [e for e in digits_examples[:40]
                if int(digits_model.logits(e.input[None]).argmax()) == e.label]
    wda = build_attack("wda", {"eps": 0.03})
    pgd = build_attack("pgd_linf", {"eps": 0.03})
    broken = {}
    for name, attack in (("wda", wda), ("pgd", pgd)):
        outputs = attack.run(digits_model, examples, seed=0)
        broken[name] = sum(int(digits_model.logits(o.adversarial[None]).argmax()) != e.label
                           for o, e in zip(outputs, examples))
    assert broken["wda"] >= broken["pgd"] > 0


class TwoRivals(nn.Module):
    """Two pixels at 0.5, label 0 (logit 0). Rival 1 reads pixel 0: margin −0.2, rate 1, so it
    gains most from one step but stays below 0 in the L∞ ball of 0.1. Rival 2 reads pixel 1:
    margin −0.55, rate 6, so one step leaves it behind, and the ball's corner flips it (+0.05)."""

    def forward(self, x):
        flat = x.flatten(1)
        return torch.stack([torch.zeros(len(x)), flat[:, 0] - 0.7, 6 * flat[:, 1] - 3.55], dim=1)


def test_wda_probes_each_rival_on_its_own_where_one_trajectory_is_led_astray():
    """Alg. 1 as written (one trajectory taking the best candidate at each probing step) takes
    rival 1, which wins the first step, keeps it, and never flips the point; probing each rival
    on its own from X_i (the official code's reading, the default) finds rival 2's boundary.
    On the built-in digits CNN the shared trajectory left 22 % of 100 digits unbroken at L∞ 0.01,
    the separate probes 16 % (the official code: 18 %)."""
    model = from_module(TwoRivals(), input_size=(1, 1, 2))
    example = [Example("0", torch.full((1, 1, 2), 0.5), 0)]
    found = {}
    for probing in ("shared", "separate"):
        (output,) = build_attack("wda", {"eps": 0.1, "probing": probing}).run(model, example, 0)
        assert float((output.adversarial - example[0].input).abs().max()) <= 0.1 + 1e-7
        found[probing] = int(model.logits(output.adversarial[None]).argmax())
    assert found == {"shared": 0, "separate": 2}


def test_wda_is_batch_size_independent(digits_model, digits_examples):
    examples = digits_examples[:10]
    for attack in (build_attack("wda", {"eps": 0.03, "maxiter": 5, "probe": 2}),
                   build_attack("wda", {"eps": 0.03, "maxiter": 5, "probe": 2, "probing": "shared"}),
                   build_attack("wda_pp", {"eps": 0.03, "maxiter": 8})):
        together = attack.run(digits_model, examples, 0)
        alone = [attack.run(digits_model, [example], 0)[0] for example in examples]
        for a, b in zip(together, alone):
            torch.testing.assert_close(a.adversarial, b.adversarial, atol=2e-3, rtol=0)
            assert (a.extras.get("distance") is None) == (b.extras.get("distance") is None)


def test_an_infeasible_distribution_raises():
    attack = build_attack("wda", {"eps": 0.1, "kappa": 2.0})
    clean = [{"id": i, "correct": 1.0} for i in range(4)]
    records = [{"id": i, "robust": 0.0, "perturbation": 0.1} for i in range(4)]
    records[0]["perturbation"] = 0.25  # > κ·ε = 0.2
    with pytest.raises(InfeasibleError, match="moved"):
        attack.aggregate(clean, records)
    # A budget that covers every flip moves every point, and spends only what the flips cost.
    records = [{"id": i, "robust": 0.0, "perturbation": 0.05, "extras": {"distance": 0.05}} for i in range(4)]
    details = build_attack("wda_pp", {"eps": 0.1}).aggregate(clean, records)
    assert details["moved_mass"] == 1.0 and details["accuracy"] == 0.0
    assert details["transport_cost"] == pytest.approx(0.05)


def test_wda_pp_moved_mass_leaves_out_points_that_stay_put():
    # N = 4, ε^p = 0.1 (p = 1): example 0 is misclassified (d = 0: 1/κ = 1, but X_adv = X_0),
    # 1 flips at 0.2 (cost 0.05: all its mass moves), 2 at 0.4 (half: the 0.05 left), 3 never flips.
    clean = [{"id": 0, "correct": 0.0}] + [{"id": i, "correct": 1.0} for i in (1, 2, 3)]
    records = [{"id": 1, "robust": 0.0, "perturbation": 0.2, "extras": {"distance": 0.2}},
               {"id": 2, "robust": 0.0, "perturbation": 0.4, "extras": {"distance": 0.4}},
               {"id": 3, "robust": 1.0, "perturbation": 0.0, "extras": {"distance": None}}]
    details = build_attack("wda_pp", {"eps": 0.1}).aggregate(clean, records)
    assert [item["id"] for item in details["transport"]] == [1, 2]
    assert [item["mass"] for item in details["transport"]] == pytest.approx([1.0, 0.5])
    assert details["moved_mass"] == pytest.approx(1.5 / 4)  # Σ 1/κ_i / N would be 2.5 / 4
    assert details["accuracy"] == pytest.approx(1.5 / 4) and details["transport_cost"] == pytest.approx(0.1)
    assert details["unflipped"] == 1


def test_wda_pp_moved_mass_on_a_linear_model_with_a_misclassified_point():
    model, examples, _, _ = _linear_case()
    examples[0] = Example(examples[0].id, examples[0].input, 1 - examples[0].label)
    attack = build_attack("wda_pp", {"norm": "l2", "eps": 1.0, "alpha": 0.01, "maxiter": 200, "search_steps": 20})
    outputs, clean, records = _records(model, attack, examples)
    assert clean[0]["correct"] == 0.0 and torch.equal(outputs[0].adversarial, examples[0].input)
    # As the runner does: misclassified examples are not attacked (no record).
    details = attack.aggregate(clean, [record for record in records if record["id"] != 0])
    # ε^p = 1 pays for every flip (each about 0.05 away): the 11 correct points move all their
    # mass and the misclassified one none, so 11/12 moved (12/12 counted it too).
    assert [item["id"] for item in details["transport"]] == list(range(1, 12))
    assert all(item["mass"] == 1.0 for item in details["transport"])
    assert details["moved_mass"] == pytest.approx(11 / 12) and details["accuracy"] == 0.0


def test_wda_moved_mass_leaves_out_the_misclassified():
    clean = [{"id": 0, "correct": 0.0}] + [{"id": i, "correct": 1.0} for i in (1, 2, 3)]
    records = [{"id": i, "robust": 0.0, "perturbation": 0.1} for i in (1, 2, 3)]
    details = build_attack("wda", {"eps": 0.1, "kappa": 2.0}).aggregate(clean, records)
    assert details["moved_mass"] == pytest.approx(0.5 * 3 / 4)  # 1/κ of the three attacked points
    assert details["accuracy"] == pytest.approx(0.5 * 3 / 4)  # (1 − 1/κ)·clean + (1/κ)·0


@pytest.mark.parametrize("name", ["wda", "wda_pp"])
def test_a_nan_input_gradient_never_makes_a_nan_point(name):
    """Where the model's input gradient is NaN (here on one pixel), the L2 step (which divides by
    the gradient's norm) moves along its finite part, as the shared image search does: every
    point stays finite and in the box."""

    class NaNGradient(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(4, 3)

        def forward(self, x):
            flat = x.flatten(1)
            return self.linear(flat) + (flat[:, :1] - flat[:, :1].detach()).sqrt() * 0

    torch.manual_seed(0)
    model = from_module(NaNGradient(), input_size=(1, 2, 2))
    x = torch.rand(6, 1, 2, 2, generator=torch.Generator().manual_seed(1))
    labels = model.logits(x).argmax(dim=1)
    examples = [Example(str(i), x[i], int(labels[i])) for i in range(6)]
    params = {"norm": "l2", "eps": 0.2, **({"maxiter": 4, "probe": 2} if name == "wda" else {"maxiter": 20})}
    for output in build_attack(name, params).run(model, examples, seed=0):
        assert torch.isfinite(output.adversarial).all()
        assert 0 <= float(output.adversarial.min()) and float(output.adversarial.max()) <= 1


@pytest.mark.parametrize("classes,rivals", [(3, 2), (10, 5), (11, 10), (100, 10), (101, 20), (1000, 20)])
def test_wda_pp_top_k_follows_the_papers_choice_by_the_number_of_classes(classes, rivals):
    # App. E: topK 5 on CIFAR-10, 10 on CIFAR-100, 20 on ImageNet (at most K − 1 rivals).
    attack = build_attack("wda_pp", {"eps": 0.1})
    assert attack.rivals(classes) == rivals
    assert attack.budget(classes)["top_k"] == rivals
    assert build_attack("wda_pp", {"eps": 0.1, "topK": 3}).rivals(classes) == min(3, classes - 1)
    assert build_attack("wda_pp", {"eps": 0.1, "top_k": None}).rivals(classes) == classes - 1
