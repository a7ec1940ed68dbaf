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
