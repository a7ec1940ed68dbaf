"""WDRO certificates (Le et al., Sec. 3): closed forms on linear models, the eq. 17 construction,
the certified global bound against every attack's loss, and the paper's statements that fail as
written (kept as counterexamples: what the report calls a bound must be one)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch import nn

from suite.wdro import certify, jacobians, jacobians_loop, operator_norms
from suite.data.base import Example
from suite.evaluation.certification import certification_report
from suite.models.wrap import from_module


def _linear(classes: int = 4, inputs: int = 6, seed: int = 0):
    torch.manual_seed(seed)
    layer = nn.Linear(inputs, classes)
    model = from_module(nn.Sequential(nn.Flatten(), layer), input_size=(1, 1, inputs))
    points = torch.rand(10, 1, 1, inputs)
    labels = model.logits(points).argmax(dim=1)
    labels[::3] = (labels[::3] + 1) % classes  # some misclassified points too
    examples = [Example(i, x, int(label)) for i, (x, label) in enumerate(zip(points, labels))]
    return model, layer.weight.detach().double(), examples


def test_batched_jacobians_equal_the_per_example_loop(digits_model, digits_examples):
    x = torch.stack([example.input for example in digits_examples[:5]])
    torch.testing.assert_close(jacobians(digits_model, x), jacobians_loop(digits_model, x), atol=1e-5, rtol=1e-5)


def test_operator_norms_match_their_closed_forms():
    _, weight, _ = _linear()
    jacobian = weight.unsqueeze(0)
    assert float(operator_norms(jacobian, "l2")[0][0]) == pytest.approx(float(torch.linalg.matrix_norm(weight, ord=2)))
    assert float(operator_norms(jacobian, "l1")[0][0]) == pytest.approx(float(weight.abs().max()))
    brute = max(float((weight @ torch.tensor(u, dtype=torch.float64)).abs().sum())
                for u in itertools.product([-1.0, 1.0], repeat=weight.shape[1]))  # vertices of the L∞ ball
    value, exact = operator_norms(jacobian, "linf")
    assert exact and float(value[0]) == pytest.approx(brute)


@pytest.mark.parametrize("norm", ["l2", "linf", "l1"])
def test_linear_model_rates_and_bounds(norm):
    model, weight, examples = _linear()
    certificate = certify(model, examples, norm=norm, eps=[0.0, 0.5, 2.0], boxed=False)
    dual = {"l2": 2, "linf": 1, "l1": math.inf}[norm]
    r = {"l2": 2, "linf": math.inf, "l1": 1}[norm]
    rates = [max(float(torch.linalg.vector_norm(weight[k] - weight[e.label], ord=dual))
                 for k in range(len(weight)) if k != e.label) for e in examples]
    assert certificate.rival_rate_estimate == pytest.approx(max(rates))
    data_rate = 2 ** (1 / r) * float(operator_norms(weight.unsqueeze(0), norm)[0][0])
    assert certificate.upper_rate_estimate == pytest.approx(data_rate)
    # The certified rate is ‖W‖₂ times the Hölder factor: equal to the data rate for r = 2.
    if norm == "l2":
        assert certificate.upper_rate_bound == pytest.approx(certificate.upper_rate_estimate)
    assert certificate.upper_rate_bound >= certificate.upper_rate_estimate * (1 - 1e-9)
    for row in certificate.rows:
        assert row["lower_bound"] >= row["lower_estimate"] - 1e-6  # eq. 17: a CE ray rate ≥ l_N
        assert row["lower_estimate"] <= row["upper_bound"] + 1e-9
        assert row["lower_bound"] <= row["upper_bound"] + 1e-6


@pytest.mark.parametrize("norm", ["l2", "linf"])
def test_eq17_reaches_the_lower_limit_on_a_binary_linear_model(norm):
    model, _, examples = _linear(classes=2)
    for row in certify(model, examples, norm=norm, eps=[0.1, 1.0], boxed=False).rows:
        assert row["lower_bound"] == pytest.approx(row["lower_estimate"], abs=1e-6)


@pytest.mark.parametrize("norm", ["l2", "linf"])
def test_the_lower_bound_is_never_below_the_datas_own_loss(digits_model, norm):
    """The margin loss can fall along eq. 17's ray (the moved point's margin drops, not rises):
    on the digits CNN unboxed (`advsuite certify --n 10 --unboxed --loss margin`), the ray's loss
    was -7.62 then -9.27 against E = -7.43. The data's own distribution is in every ball, so the
    bound is at least E."""
    from suite.data.config import DatasetConfig
    from suite.data.load import load_eval_set

    examples = load_eval_set(DatasetConfig(spec="builtin:digits", n=10), digits_model.input_spec, 0).examples
    certificate = certify(digits_model, examples, norm=norm, eps=[0.0, 0.1, 1.0], boxed=False, loss="margin")
    for row in certificate.rows:
        assert row["lower_bound"] is not None and row["lower_bound"] >= row["empirical"]
        assert row["lower_bound"] <= row["upper_estimate"] + 1e-6


def test_attack_losses_never_exceed_the_certified_upper_bound(digits_model, digits_examples):
    # At ε = 1e-20 the bound is E to 1e-12: the attacks' losses were the float32 model's, 2e-9
    # (relative) above it; they are scored in float64 as E is.
    tiny = certification_report(digits_model, digits_examples[:6], norm="l2", eps=[1e-20], loss="margin")
    assert all(result["loss"] <= tiny["rows"][0]["upper_bound"] for result in tiny["rows"][0]["attacks"].values())
    report = certification_report(digits_model, digits_examples[:12], norm="l2", eps=[0.3])
    (row,) = report["rows"]
    assert row["lower_bound"] is None and any("no lower_bound" in note for note in report["notes"])
    assert row["upper_bound"] is not None and set(row["attacks"]) == {"wda", "wda_k2", "wda_pp"}
    for result in row["attacks"].values():
        assert row["empirical"] - 1e-9 <= result["loss"] <= row["upper_bound"]
        assert result["transport_cost"] <= 0.3 * (1 + 1e-6)
    # On the standard CNN the attacks raise the loss: the distribution moved.
    assert max(result["loss"] for result in row["attacks"].values()) > row["empirical"]


def test_attack_losses_below_the_bound_on_a_linear_model():
    model, _, examples = _linear(inputs=16)
    examples = [Example(e.id, (0.5 + 0.1 * (e.input - 0.5)), e.label) for e in examples]  # room in the box
    report = certification_report(model, examples, norm="l2", eps=[0.05, 0.2], boxed=False)
    for row in report["rows"]:
        for result in row["attacks"].values():
            assert result["loss"] <= row["upper_bound"] + 1e-9


def _scalar(first: nn.Module, second: nn.Module) -> nn.Sequential:
    """A 1-pixel model (1×1×1 input): second(relu(first(x))), 2 logits."""
    return nn.Sequential(nn.Flatten(), first, nn.ReLU(), second)


def _layer(weight, bias) -> nn.Linear:
    layer = nn.Linear(len(weight[0]), len(weight))
    layer.weight.data = torch.tensor(weight, dtype=torch.float32)
    layer.bias.data = torch.tensor(bias, dtype=torch.float32)
    return layer


def test_the_data_point_rate_is_not_an_upper_bound():
    # θ = (0, 10·relu(x − 5)), data at x = 0 (label 0): every data-point Jacobian is 0, so
    # E + L_N·ε = E; but moving ε/t of the mass to x = t reaches E + 10ε(t − 5)/t.
    model = from_module(_scalar(_layer([[1.0]], [-5.0]), _layer([[0.0], [10.0]], [0.0, 0.0])), input_size=(1, 1, 1))
    examples = [Example(0, torch.zeros(1, 1, 1), 0)]
    eps = 0.1
    (row,) = certify(model, examples, norm="l2", eps=[eps], boxed=False).rows
    assert row["upper_estimate"] == pytest.approx(row["empirical"])
    far = 1e4
    logits = model.logits(torch.full((1, 1, 1, 1), far))
    reached = row["empirical"] + eps / far * (float(torch.nn.functional.cross_entropy(logits, torch.tensor([0])))
                                               - row["empirical"])
    assert reached == pytest.approx(row["empirical"] + 9.995 * eps, rel=1e-4)
    assert reached > row["upper_estimate"]  # so the report never calls it a bound...
    assert reached <= row["upper_bound"]  # ...and the certified one holds (L = √2·10)


def test_the_cone_free_rate_is_not_a_lower_bound():
    # θ = (ramp, −ramp), ramp(x) = relu(x) − relu(x − 1), data at x = 0.5 with label 1: l_N = 2,
    # but the loss softplus(2·ramp) never exceeds softplus(2), whatever the transport.
    first = _layer([[1.0], [1.0]], [0.0, -1.0])
    second = _layer([[1.0, -1.0], [-1.0, 1.0]], [0.0, 0.0])
    model = from_module(_scalar(first, second), input_size=(1, 1, 1))
    examples = [Example(0, torch.full((1, 1, 1), 0.5), 1)]
    certificate = certify(model, examples, norm="l2", eps=[10.0], boxed=False)
    (row,) = certificate.rows
    ceiling = math.log1p(math.exp(2.0))
    assert certificate.rival_rate_estimate == pytest.approx(2.0)
    assert row["lower_estimate"] > ceiling  # E + l_N·ε is above every reachable loss: an estimate
    assert row["lower_bound"] <= ceiling + 1e-9  # eq. 17's actual loss is reachable, so a bound
    assert any("estimate" in note for note in certificate.notes)


def test_theorem_3_3s_lower_rate_fails_on_a_smooth_network():
    # Thm 3.3 (smooth networks) states E + l·ε ≤ sup for every ε > 0, with l the steepest rival
    # rate sup_x ‖Jᵀ(e_k′ − e_k)‖_s. θ = (tanh(x), −tanh(x)) with data at x = 0, label 1: l = 2
    # (at x = 0), but the loss softplus(2·tanh(x)) never exceeds softplus(2), so at ε = 10 the
    # stated lower bound is 10 times too high. The report calls E + l_N·ε an estimate; eq. 17's
    # actual distribution stays below every reachable loss, and the upper bound holds.
    net = nn.Sequential(nn.Flatten(), _layer([[1.0]], [0.0]), nn.Tanh(), _layer([[1.0], [-1.0]], [0.0, 0.0]))
    model = from_module(net, input_size=(1, 1, 1))
    certificate = certify(model, [Example(0, torch.zeros(1, 1, 1), 1)], norm="l2", eps=[10.0], boxed=False)
    (row,) = certificate.rows
    ceiling = math.log1p(math.exp(2.0))
    assert certificate.rival_rate_estimate == pytest.approx(2.0)
    assert row["empirical"] == pytest.approx(math.log(2.0))
    assert row["lower_estimate"] == pytest.approx(math.log(2.0) + 20.0, rel=1e-6) and row["lower_estimate"] > 9 * ceiling
    assert row["lower_bound"] <= ceiling + 1e-9
    assert row["lower_cone_bound"] is None  # no activation cells: not a ReLU network
    assert row["upper_bound"] >= ceiling  # the certified rate (2 here) holds
    assert any("estimate" in note for note in certificate.notes)


def test_certify_command_writes_its_report(tmp_path, capsys):
    import json

    from suite.cli.main import main

    with pytest.raises(SystemExit) as exit_:
        main(["certify", "--model", "builtin:digits-cnn", "--n", "6", "--eps", "0.1,0.3", "--output", str(tmp_path)])
    assert exit_.value.code in (0, None)
    out = capsys.readouterr().out
    assert "upper bound" in out and "wda_pp loss" in out and "not a bound" in out
    report = json.loads((tmp_path / "certificate.json").read_text())
    assert [row["eps"] for row in report["rows"]] == [0.1, 0.3]
    assert report["dataset"]["n"] == 6 and report["model"] == "builtin:digits-cnn"
    assert report["weights"].startswith("sha256-")  # a model retrained in place keeps its name, not its hash
    assert (tmp_path / "certificate.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("stride,padding", [(1, 1), (2, 1), (1, 0)])
def test_conv_bound_is_at_least_the_exact_operator_norm(stride, padding):
    from suite.models.lipschitz import conv_norm

    torch.manual_seed(stride + 3 * padding)
    conv = nn.Conv2d(2, 3, 3, stride=stride, padding=padding, bias=False)
    basis = torch.eye(2 * 5 * 5).view(-1, 2, 5, 5)
    with torch.no_grad():
        matrix = conv(basis).flatten(1).T  # the layer as a dense matrix (columns: basis images)
    exact = float(torch.linalg.matrix_norm(matrix.double(), ord=2))
    bound = conv_norm(conv, 5, 5)
    assert exact <= bound * (1 + 1e-9)
    assert bound <= 2.5 * exact  # the circular-grid norm is not far above the zero-padded one


@pytest.mark.parametrize("activation", [nn.GELU, nn.SiLU, nn.ReLU])
def test_smooth_and_relu_networks_bound_their_data_jacobians_and_attacks(activation):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(16, 12), activation(), nn.Linear(12, 3))
    model = from_module(net, input_size=(1, 4, 4))
    points = torch.rand(12, 1, 4, 4)
    examples = [Example(i, x, int(label)) for i, (x, label) in enumerate(zip(points, model.logits(points).argmax(1)))]
    report = certification_report(model, examples, norm="l2", eps=[0.2])
    (row,) = report["rows"]
    assert report["upper_rate_bound"] >= report["upper_rate_estimate"]  # the certified rate covers every data point
    for result in row["attacks"].values():
        assert result["loss"] <= row["upper_bound"]


@pytest.mark.parametrize("norm", ["l2", "linf", "l1"])
def test_cone_rate_is_the_best_direction_inside_the_cone(norm):
    from suite.wdro.bounds import cone_rate

    generator = torch.Generator().manual_seed(4)
    constraints = torch.randn(5, 6, generator=generator, dtype=torch.float64)
    vector = torch.randn(6, generator=generator, dtype=torch.float64)
    rate, direction = cone_rate(vector, constraints, norm)
    order = {"l2": 2, "linf": math.inf, "l1": 1}[norm]
    assert bool((constraints @ direction >= -1e-8).all())
    assert float(torch.linalg.vector_norm(direction, ord=order)) <= 1 + 1e-8
    assert float(vector @ direction) == pytest.approx(rate, abs=1e-8)
    samples = torch.randn(20000, 6, generator=generator, dtype=torch.float64)
    samples = samples / torch.linalg.vector_norm(samples, ord=order, dim=1, keepdim=True)
    feasible = samples[(samples @ constraints.T >= 0).all(dim=1)]
    assert len(feasible) and float((feasible @ vector).max()) <= rate + 1e-9
    unconstrained, _ = cone_rate(vector, constraints[:0], norm)
    assert rate <= unconstrained + 1e-9


def test_cone_lower_bound_on_a_relu_mlp_is_reached_and_below_the_upper_bound():
    torch.manual_seed(3)
    net = nn.Sequential(nn.Flatten(), nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    model = from_module(net, input_size=(1, 1, 6))
    points = torch.rand(8, 1, 1, 6)
    examples = [Example(i, x, int(k)) for i, (x, k) in enumerate(zip(points, model.logits(points).argmax(1)))]
    certificate = certify(model, examples, norm="l2", eps=[0.1, 1.0], boxed=False)
    assert certificate.cone_rate_bound is not None and certificate.cone_rate_bound <= certificate.rival_rate_estimate + 1e-9
    for row in certificate.rows:
        assert row["lower_cone_bound"] <= row["lower_bound"] + 1e-5  # eq. 17 along the cone reaches it (CE rate ≥ l)
        assert row["lower_bound"] <= row["upper_bound"]


@pytest.mark.parametrize("norm", ["l2", "linf"])
def test_the_bounds_match_on_a_monotone_relu_network(norm):
    # Thm 3.1's tight case: nonnegative first layer, head rows ±(one nonnegative row). Every unit
    # on raises ‖J_D‖, so the all-on cell has the largest (L), and its steepest rival direction
    # lies in that cell's recession cone: l = L there (bench/wdro_tightness.py enumerates every
    # mask of such a net and finds the same).
    torch.manual_seed(0)
    first, head = nn.Linear(2, 8), nn.Linear(8, 2)
    with torch.no_grad():
        first.weight.abs_()
        row = head.weight[0].abs()
        head.weight.copy_(torch.stack([row, -row]))
    model = from_module(nn.Sequential(nn.Flatten(), first, nn.ReLU(), head), input_size=(1, 1, 2))
    point = torch.full((1, 1, 2), 10.0)  # every pre-activation positive: the all-on cell
    assert bool((first(point.view(1, 2)) > 0).all())
    # Label 1: the rival 0 gains along +W1ᵀw, inside the cone {u : W1·u ≥ 0}. (Label 0's rival
    # gains along −W1ᵀw, outside it: eq. 7 takes both pairs, eq. 9 the label's.)
    certificate = certify(model, [Example(0, point, 1)], norm=norm, eps=[1.0], boxed=False)
    exact = (2.0 ** (0.5 if norm == "l2" else 0.0)) * float(operator_norms(
        (head.weight @ first.weight).detach().double().unsqueeze(0), norm)[0][0])
    assert certificate.upper_rate_estimate == pytest.approx(exact, rel=1e-5)
    assert certificate.cone_rate_bound == pytest.approx(exact, rel=1e-5)  # l = L
    assert certificate.upper_rate_bound >= exact


def test_the_ramp_has_no_cone_rate():
    first = _layer([[1.0], [1.0]], [0.0, -1.0])
    second = _layer([[1.0, -1.0], [-1.0, 1.0]], [0.0, 0.0])
    model = from_module(_scalar(first, second), input_size=(1, 1, 1))
    certificate = certify(model, [Example(0, torch.full((1, 1, 1), 0.5), 1)], norm="l2", eps=[10.0], boxed=False)
    (row,) = certificate.rows
    assert certificate.cone_rate_bound == pytest.approx(0.0, abs=1e-12)  # the cell at 0.5 is bounded: rec(C) = {0}
    assert row["lower_cone_bound"] == pytest.approx(row["empirical"])


def test_attention_bound_covers_the_exact_jacobian_on_its_ball():
    from timm.models.vision_transformer import Attention

    from suite.models.lipschitz import attention_bound

    torch.manual_seed(5)
    attention = Attention(8, num_heads=2, qkv_bias=True).eval()
    tokens, radius = 3, 2.0
    bound = attention_bound(attention, tokens, radius)
    worst = 0.0
    for trial in range(40):
        points = torch.randn(1, tokens, 8)
        points = points / points.norm(dim=2, keepdim=True) * radius * (0.2 + 0.8 * torch.rand(1, tokens, 1))
        jacobian = torch.autograd.functional.jacobian(lambda y: attention(y.view(1, tokens, 8)).flatten(),
                                                      points.flatten())
        worst = max(worst, float(torch.linalg.matrix_norm(jacobian, ord=2)))
    assert worst <= bound
    assert worst > 0


def test_a_pre_ln_vision_transformer_has_a_certified_bound():
    import timm

    torch.manual_seed(0)
    vit = timm.create_model("test_vit", num_classes=3, in_chans=1, img_size=32).eval()
    model = from_module(vit, input_size=(1, 32, 32))
    bound, how = model.lipschitz_bound()
    assert bound is not None and "certified" in how
    points = torch.rand(4, 1, 32, 32)
    examples = [Example(i, x, int(k)) for i, (x, k) in enumerate(zip(points, model.logits(points).argmax(1)))]
    certificate = certify(model, examples, norm="l2", eps=[0.1])
    assert certificate.upper_rate_bound >= certificate.upper_rate_estimate


def _supremum(weight, bias, examples, loss, norm, eps) -> float:
    """sup over the W_1 ball of E_P[ℓ] for a linear model on R^n, in float64 from its weights:
    E_PN[ℓ] + ε·max_i max_{k≠y_i} ‖w_k − w_{y_i}‖_s (both losses grow at that rate along the
    steepest ray; the margin reaches it, cross-entropy only in the limit)."""
    from suite.wdro.bounds import loss_of

    x = torch.stack([e.input.flatten() for e in examples]).double()
    y = torch.tensor([e.label for e in examples])
    empirical = float(loss_of(loss, x @ weight.T + bias, y).mean())
    dual = {"l2": 2, "linf": 1, "l1": math.inf}[norm]
    rate = max(float(torch.linalg.vector_norm(weight[k] - weight[e.label], ord=dual))
               for e in examples for k in range(len(weight)) if k != e.label)
    return empirical + eps * rate


@pytest.mark.parametrize("classes", [2, 4])
@pytest.mark.parametrize("loss", ["ce", "margin"])
@pytest.mark.parametrize("norm", ["l2", "linf", "l1"])
def test_lower_bounds_never_exceed_the_closed_form_supremum_of_a_linear_model(norm, loss, classes):
    # Computed in float32 at eq. 17's far point (1e8·max(1, Nε) away), the lower bound came out
    # above this supremum (binary linear model, r = ∞, margin, ε = 0.5: 1.50849528 > 1.50849522).
    model, weight, examples = _linear(classes=classes, inputs=16, seed=classes)
    bias = model.module[1].bias.detach().double()
    certificate = certify(model, examples, norm=norm, loss=loss, eps=[0.0, 1e-3, 0.05, 0.5, 3.0, 40.0], boxed=False)
    assert certificate.precision == "float64"
    for row in certificate.rows:
        supremum = _supremum(weight, bias, examples, loss, norm, row["eps"])
        for key in ("lower_bound", "lower_cone_bound"):
            assert row[key] <= supremum, (key, row["eps"], row[key] - supremum)
            assert row[key] >= supremum - 1e-5 * abs(supremum)  # and tight: a linear model's rays are straight
    assert any("lowered by" in note for note in certificate.notes)


def test_a_nested_mlp_gets_the_cone_bound_of_the_flat_one():
    torch.manual_seed(7)
    first, second = nn.Linear(6, 8), nn.Linear(8, 3)
    flat = from_module(nn.Sequential(nn.Flatten(), first, nn.ReLU(), second), input_size=(1, 1, 6))
    nested = from_module(nn.Sequential(nn.Flatten(), nn.Sequential(first, nn.ReLU(), second)), input_size=(1, 1, 6))
    points = torch.rand(6, 1, 1, 6)
    examples = [Example(i, x, int(k)) for i, (x, k) in enumerate(zip(points, flat.logits(points).argmax(1)))]
    results = [certify(model, examples, norm="l2", eps=[0.5], boxed=False) for model in (flat, nested)]
    assert results[0].cone_rate_bound is not None and results[0].cone_rate_bound > 0
    assert results[1].cone_rate_bound == results[0].cone_rate_bound
    assert results[1].rows == results[0].rows


def test_every_missing_bound_is_named_with_its_reason():
    torch.manual_seed(1)
    conv = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(2 * 16, 3))
    model = from_module(conv, input_size=(1, 4, 4))
    examples = [Example(i, x, 0) for i, x in enumerate(torch.rand(3, 1, 4, 4))]
    certificate = certify(model, examples, norm="l2", eps=[0.1], boxed=False)
    (row,) = certificate.rows
    assert certificate.cone_rate_bound is None and row["lower_cone_bound"] is None and row["lower_bound"] is not None
    assert any(note.startswith("no lower_cone_bound:") and "layer Conv2d is not one of" in note
               for note in certificate.notes), certificate.notes
    boxed = certify(model, examples, norm="l2", eps=[0.1])
    assert boxed.rows[0]["lower_bound"] is None and boxed.rows[0]["lower_cone_bound"] is None
    assert any(note.startswith("no lower_bound and no lower_cone_bound:") for note in boxed.notes)


def test_printed_bounds_are_rounded_outward():
    from suite.report.certificates import _number

    assert _number(1.50859, "down") == "1.508" and _number(1.50841, "up") == "1.509"
    assert _number(-2.34567, "down") == "-2.346" and _number(1.50859) == "1.509"
    assert float(_number(0.00012345, "up")) >= 0.00012345 and _number(None, "down") == "-"
