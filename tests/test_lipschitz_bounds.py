"""The certified Lipschitz bound (suite.models.lipschitz) against each layer's true constant:
the layers whose settings once gave a factor below it (partial average-pooling windows, dilated
max pooling, ELU with α > 1) and the modules it must refuse rather than misread."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from suite.models.lipschitz import Unsupported, module_bound, network_bound


def _shapes(module: nn.Module, size: tuple[int, ...]) -> dict[nn.Module, tuple[int, ...]]:
    return {module: (1, *size)}


def _dense(layer: nn.Module, size: tuple[int, ...]) -> torch.Tensor:
    """A linear layer as a dense float64 matrix (columns: its responses to the basis images)."""
    count = int(torch.tensor(size).prod())
    with torch.no_grad():
        return layer(torch.eye(count, dtype=torch.float64).view(-1, *size)).flatten(1).T


def _jacobian_norm(layer: nn.Module, point: torch.Tensor) -> float:
    jacobian = torch.autograd.functional.jacobian(lambda x: layer(x.view_as(point)).flatten(), point.flatten())
    return float(torch.linalg.matrix_norm(jacobian.double(), ord=2))


@pytest.mark.parametrize("pool", [
    nn.AvgPool2d(2, 2, ceil_mode=True, count_include_pad=False),  # timm's avg-down shortcut: was 0.5
    nn.AvgPool2d(2, 1, padding=1, count_include_pad=False),  # was 1.0; its norm is 1.35
    nn.AvgPool2d(3, 2, padding=1, ceil_mode=True),
    nn.AvgPool2d(2, 2, divisor_override=1),
    nn.AvgPool2d(3, 2),
], ids=["ceil-no-pad-count", "pad-not-counted", "ceil-pad-counted", "divisor-override", "plain"])
def test_average_pooling_bounds_its_exact_norm(pool):
    size = (1, 5, 5)  # odd: the ceil-mode windows at the edge are partial
    exact = float(torch.linalg.matrix_norm(_dense(pool, size), ord=2))
    bound = module_bound(pool, _shapes(pool, size))
    assert exact <= bound * (1 + 1e-12)
    assert bound <= 1.6 * exact  # Schur's test is not far above it


def test_average_pooling_with_partial_windows_needs_its_input_size():
    with pytest.raises(Unsupported, match="partial windows"):
        module_bound(nn.AvgPool2d(2, 2, ceil_mode=True, count_include_pad=False), {})


@pytest.mark.parametrize("pool,spike", [(nn.MaxPool2d(3, 2, dilation=2), 4), (nn.MaxPool2d(3, 2), 2),
                                        (nn.MaxPool2d(3, 1, padding=1, ceil_mode=True), 2)])
def test_max_pooling_bounds_its_steepest_jacobian(pool, spike):
    # A pixel far above the rest is the maximum of every window it sits in: the Jacobian has one
    # 1 per such window in its column, whose norm is √(windows). With dilation 2 and stride 2 that
    # is 3 per axis (the old ⌈k/s⌉ counted 2): 3 > the old bound of 2.
    point = torch.rand(1, 1, 9, 9, dtype=torch.float64)
    point[0, 0, spike, spike] = 10.0
    steepest = _jacobian_norm(pool, point)
    assert steepest <= module_bound(pool, _shapes(pool, (1, 9, 9))) * (1 + 1e-12)
    if pool.dilation == 2:
        assert steepest == pytest.approx(3.0)


@pytest.mark.parametrize("alpha", [0.5, 1.0, 2.0])
def test_elu_bounds_its_slope(alpha):
    elu = nn.ELU(alpha=alpha)
    below = _jacobian_norm(elu, torch.full((1, 4), -1e-9, dtype=torch.float64))  # α·e^x just below 0
    above = _jacobian_norm(elu, torch.full((1, 4), 1e-9, dtype=torch.float64))
    assert below == pytest.approx(alpha, rel=1e-6) and above == pytest.approx(1.0)
    assert module_bound(elu, {}) == pytest.approx(max(below, above), rel=1e-6)


@pytest.mark.parametrize("padding", ["same", "valid", 2])
def test_convolution_string_padding_bounds_its_exact_norm(padding):
    torch.manual_seed(1)
    conv = nn.Conv2d(2, 3, 3, padding=padding, bias=False).double()
    size = (2, 6, 6)
    exact = float(torch.linalg.matrix_norm(_dense(conv, size), ord=2))
    assert exact <= module_bound(conv, _shapes(conv, size)) * (1 + 1e-9)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_convolution_with_padding_that_is_not_zeros_is_refused(mode):
    conv = nn.Conv2d(1, 1, 3, padding=1, padding_mode=mode)
    with pytest.raises(Unsupported, match=mode):
        module_bound(conv, _shapes(conv, (1, 6, 6)))


class _Doubled(nn.ReLU):
    def forward(self, x):
        return 2 * super().forward(x)


class _ScaledNorm(nn.BatchNorm2d):  # as timm's BatchNormAct2d: a subclass that does more
    def forward(self, x):
        return 5 * super().forward(x)


class _Wider(nn.Sequential):
    def forward(self, x):
        return torch.cat([super().forward(x)] * 3, dim=1)


@pytest.mark.parametrize("module", [_Doubled(), _ScaledNorm(1), _Wider(nn.Identity())],
                         ids=["relu", "batchnorm", "sequential"])
def test_a_subclass_with_its_own_forward_is_refused(module):
    net = nn.Sequential(nn.Conv2d(1, 1, 3, padding=1), module, nn.Flatten(), nn.LazyLinear(2)).eval()
    net(torch.zeros(1, 1, 4, 4))
    bound, reason = network_bound(net, (1, 4, 4), [1.0])
    assert bound is None and type(module).__name__ in reason


def test_a_timm_block_with_a_layer_the_bound_does_not_know_is_refused():
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    net = timm.create_model("test_resnet", num_classes=3, in_chans=1).eval()
    assert network_bound(net, (1, 32, 32), [1.0])[0] is not None
    net.layer1[0].extra = nn.Linear(1, 1)  # a child its forward might use: not multiplied in
    bound, reason = network_bound(net, (1, 32, 32), [1.0])
    assert bound is None and "extra" in reason


def test_the_cone_lower_bound_never_exceeds_the_supremum_where_two_rows_nearly_cancel():
    # One pixel, two units both equal to ReLU(x + 1), and a head whose rows differ by 1/8 and 1/4
    # on top of 2^20: the margin loss is 0.375·ReLU(x + 1), so the supremum over the W1 ball
    # around x = 0 is 0.375 + 0.375·ε. From the float32 Jacobian the rival's row difference came
    # out 0.5 (0.875 at ε = 1): a "lower bound" above the supremum.
    from suite.data.base import Example
    from suite.models.wrap import from_module
    from suite.wdro import certify

    first, head = nn.Linear(1, 2), nn.Linear(2, 2, bias=False)
    big = 2.0 ** 20
    with torch.no_grad():
        first.weight.fill_(1.0)
        first.bias.fill_(1.0)
        head.weight.copy_(torch.tensor([[big, big], [big + 0.125, big + 0.25]]))
    model = from_module(nn.Sequential(nn.Flatten(), first, nn.ReLU(), head), input_size=(1, 1, 1))
    certificate = certify(model, [Example(0, torch.zeros(1, 1, 1), 0)], norm="l2", loss="margin",
                          eps=[1.0, 10.0], boxed=False)
    for row in certificate.rows:
        supremum = 0.375 + 0.375 * row["eps"]
        assert row["lower_cone_bound"] <= supremum
        assert row["lower_cone_bound"] == pytest.approx(supremum, rel=1e-5)  # and it is reached
        assert row["lower_bound"] <= supremum


def _tiny_vit(**kwargs):
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    return timm.models.vision_transformer.VisionTransformer(
        img_size=8, patch_size=4, in_chans=1, num_classes=3, embed_dim=8, depth=1, num_heads=2, **kwargs).eval()


def test_a_vit_whose_blocks_compute_otherwise_than_timms_block_is_refused_not_misbounded():
    """GluMlp (x1·act(x2), under Mlp's child names) was bounded as fc1·act·fc2: 1.08e11 for a
    model steeper than 2.7e13 at a data point. ResPostBlock raised AttributeError (a traceback)."""
    from timm.layers import GluMlp
    from timm.models.vision_transformer import ResPostBlock

    assert network_bound(_tiny_vit(), (1, 8, 8), [1.0])[0] is not None
    glu = network_bound(_tiny_vit(mlp_layer=GluMlp, mlp_ratio=2), (1, 8, 8), [1.0])
    post = network_bound(_tiny_vit(block_fn=ResPostBlock), (1, 8, 8), [1.0])
    assert glu[0] is None and "GluMlp" in glu[1]
    assert post[0] is None and "ResPostBlock" in post[1]


def test_partial_adaptive_pooling_hooks_and_batch_statistics_are_refused():
    """SelectAdaptivePool2d to 2×2 was bounded as global pooling (1/8 for 1/4); a forward hook
    that scales a layer's output, or a forward set on the instance, ran unseen; BatchNorm without
    running statistics raised TypeError."""
    timm = pytest.importorskip("timm")
    from timm.layers import SelectAdaptivePool2d

    pooled = nn.Sequential(nn.Conv2d(1, 1, 1), SelectAdaptivePool2d(output_size=2, pool_type="avg", flatten=True),
                           nn.Linear(4, 2)).eval()
    bound, reason = network_bound(pooled, (1, 8, 8), [1.0])
    assert bound is None and "SelectAdaptivePool2d to 2 outputs" in reason
    net = timm.create_model("test_resnet", num_classes=3, in_chans=1).eval()
    assert network_bound(net, (1, 32, 32), [1.0])[0] is not None
    handle = net.fc.register_forward_hook(lambda module, args, output: output * 1000)
    bound, reason = network_bound(net, (1, 32, 32), [1.0])
    assert bound is None and "forward hook" in reason
    handle.remove()
    net.fc.forward = lambda x: nn.functional.linear(x, net.fc.weight, net.fc.bias) * 1000
    assert network_bound(net, (1, 32, 32), [1.0])[0] is None
    batch = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2, track_running_stats=False), nn.Flatten(),
                          nn.Linear(72, 2)).eval()
    bound, reason = network_bound(batch, (1, 8, 8), [1.0])
    assert bound is None and "without running statistics" in reason


def test_a_bound_below_the_rate_at_a_data_point_is_no_bound(monkeypatch):
    """L_N (the rate at a data point) never exceeds the true L: a layer analysis that comes out
    below it has missed something, and certify says so instead of giving the bound."""
    from suite.data.base import Example
    from suite.models.wrap import from_module
    from suite.wdro import certify

    torch.manual_seed(0)
    model = from_module(nn.Sequential(nn.Flatten(), nn.Linear(4, 2)), input_size=(1, 2, 2))
    examples = [Example(str(i), torch.rand(1, 2, 2), 0) for i in range(3)]
    honest = certify(model, examples, norm="l2", eps=[0.5])
    assert honest.upper_rate_bound == pytest.approx(honest.upper_rate_estimate)  # a linear model: L = L_N
    monkeypatch.setattr(type(model), "lipschitz_bound", lambda self: (0.5 * honest.upper_rate_bound, "too small"))
    broken = certify(model, examples, norm="l2", eps=[0.5])
    assert broken.upper_rate_bound is None and broken.rows[0]["upper_bound"] is None
    assert any("is below the rate at a data point" in note for note in broken.notes)


def test_the_cone_bound_keeps_only_directions_exactly_in_the_cone():
    """A 2→3→2 ReLU MLP whose recession cone at x = 0 is {0}: the LP's direction (0, −1) breaks
    one row by 1e-10, and within that tolerance the cone rate was 1, a bound of 11.3 at ε = 10
    over a supremum ≤ softplus(2) = 2.13."""
    from suite.data.base import Example
    from suite.models.wrap import from_module
    from suite.wdro import certify

    net = nn.Sequential(nn.Flatten(), nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 2))
    with torch.no_grad():
        net[1].weight.copy_(torch.tensor([[-1.0, -1e-10], [1.0, -1e-10], [0.0, -1.0]]))
        net[1].bias.copy_(torch.tensor([-1e-10, -1e-10, 1.0]))
        net[3].weight.copy_(torch.tensor([[1e10, 1e10, 0.0], [0.0, 0.0, 1.0]]))
        net[3].bias.zero_()
    model = from_module(net, input_size=(1, 1, 2))
    supremum = float(nn.functional.softplus(torch.tensor(2.0)))
    for norm in ("linf", "l1", "l2"):
        certificate = certify(model, [Example("0", torch.zeros(1, 1, 2), 0)], norm=norm, eps=[10.0], boxed=False)
        row = certificate.rows[0]
        assert row["lower_cone_bound"] is None or row["lower_cone_bound"] <= supremum
        assert row["lower_bound"] <= supremum


def test_a_construction_that_overflows_leaves_the_data_as_the_lower_bound():
    """Logits exp(z) overflow at eq. 17's far point: the lower bound was NaN (max kept it)."""
    from suite.data.base import Example
    from suite.models.wrap import from_module
    from suite.wdro import certify

    class Exponential(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(4, 1)

        def forward(self, x):
            z = self.linear(x.flatten(1))
            return torch.cat([torch.exp(z), torch.exp(z) + z], 1)

    torch.manual_seed(0)
    model = from_module(Exponential(), input_size=(1, 2, 2))
    examples = [Example(str(i), torch.rand(1, 2, 2), 0) for i in range(4)]
    for loss in ("ce", "margin"):
        row = certify(model, examples, norm="l2", loss=loss, eps=[0.1], boxed=False).rows[0]
        assert row["lower_bound"] == row["empirical"]
