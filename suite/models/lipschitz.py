"""A certified global upper bound on the L2 Lipschitz constant of an image model's logits, as a
function of its [0, 1] pixels: the product of its layers' operator norms (Virmaux & Scaman,
"Lipschitz regularity of deep neural networks", NeurIPS 2018, the "AutoLip" product), with each
factor an upper bound, never an estimate:

- ``Linear``: its largest singular value (exact).
- ``Conv2d``: the largest singular value over the frequencies of its kernel's DFT on a grid as
  large as the padded input (Sedghi, Gupta & Long, "The Singular Values of Convolutional Layers",
  ICLR 2019). That is the exact norm of the circular convolution on that grid; the zero-padded,
  strided convolution is that circular one between an isometric embedding and a selection of
  outputs, so its norm is at most this.
- ``BatchNorm2d`` (eval): max |γ| / √(σ² + eps). Activations ReLU, LeakyReLU (slope ≤ 1), GELU
  (1.13), SiLU (1.1), Tanh, Sigmoid (1/4), Identity, Dropout, Flatten: their Lipschitz constants.
- Pooling: ``MaxPool2d`` ⌈k/s⌉ (a pixel sits in at most ⌈k/s⌉² windows, each output is
  1-Lipschitz in its window); ``AvgPool2d`` ⌈k/s⌉/k; global average pooling 1/√(H·W).
- Residual blocks (timm's ``BasicBlock`` and ``Bottleneck``): Lip(branch) + Lip(shortcut), then
  the final activation.
- The wrapper's normalisation (x − mean)/std: 1/min(std).

Anything else (attention, LayerNorm, unknown modules) gives ``None`` with the reason: no bound is
better than a wrong one.
"""

from __future__ import annotations

import math

import torch
from torch import nn

#: Lipschitz constants of elementwise activations (max |f′|): GELU's is 1.1289, SiLU's 1.0998.
_ACTIVATIONS = {nn.ReLU: 1.0, nn.ReLU6: 1.0, nn.Identity: 1.0, nn.Dropout: 1.0, nn.Flatten: 1.0, nn.Tanh: 1.0,
                nn.Sigmoid: 0.25, nn.GELU: 1.1290, nn.SiLU: 1.0999, nn.Softplus: 1.0, nn.ELU: 1.0}


class Unsupported(Exception):
    """A module this bound does not know; its message names it."""


def conv_norm(conv: nn.Conv2d, height: int, width: int) -> float:
    """An upper bound on ‖conv‖₂ for inputs of ``height``×``width`` (see the module notes)."""
    if conv.groups != 1 or conv.dilation != (1, 1):
        raise Unsupported(f"Conv2d with groups={conv.groups}, dilation={conv.dilation}")
    weight = conv.weight.detach().double().cpu()
    kh, kw = weight.shape[-2:]
    grid_h = max(height + 2 * conv.padding[0], kh)
    grid_w = max(width + 2 * conv.padding[1], kw)
    spectrum = torch.fft.fft2(weight, s=(grid_h, grid_w))  # C_out × C_in × H × W
    matrices = spectrum.permute(2, 3, 0, 1).reshape(-1, weight.shape[0], weight.shape[1])
    return float(torch.linalg.matrix_norm(matrices, ord=2).max())


def _batchnorm(norm: nn.BatchNorm2d) -> float:
    scale = torch.ones_like(norm.running_var) if norm.weight is None else norm.weight.detach().abs()
    return float((scale / torch.sqrt(norm.running_var + norm.eps)).max())


def _pool_windows(kernel, stride) -> tuple[int, int]:
    kernel = (kernel, kernel) if isinstance(kernel, int) else tuple(kernel)
    stride = kernel if stride is None else (stride, stride) if isinstance(stride, int) else tuple(stride)
    return math.prod(math.ceil(k / s) for k, s in zip(kernel, stride)), math.prod(kernel)


def module_bound(module: nn.Module, shapes: dict[nn.Module, tuple[int, ...]]) -> float:
    """An upper bound on the L2 Lipschitz constant of ``module`` (``shapes``: each module's input
    shape, recorded by a forward pass). Raises :class:`Unsupported`."""
    kind = type(module)
    if kind in _ACTIVATIONS:
        return _ACTIVATIONS[kind]
    if isinstance(module, nn.LeakyReLU):
        return max(1.0, abs(module.negative_slope))
    if isinstance(module, nn.Linear):
        return float(torch.linalg.matrix_norm(module.weight.detach().double().cpu(), ord=2))
    if isinstance(module, nn.Conv2d):
        shape = shapes.get(module)
        if shape is None:
            return 0.0  # never reached by the forward pass
        return conv_norm(module, shape[-2], shape[-1])
    if isinstance(module, nn.BatchNorm2d):
        return _batchnorm(module)
    if isinstance(module, nn.MaxPool2d):
        windows, _ = _pool_windows(module.kernel_size, module.stride)
        return math.sqrt(windows)
    if isinstance(module, nn.AvgPool2d):
        windows, size = _pool_windows(module.kernel_size, module.stride)
        return math.sqrt(windows / size)
    if isinstance(module, nn.Sequential):
        return math.prod(module_bound(child, shapes) for child in module)
    name = kind.__name__
    if name == "SelectAdaptivePool2d":  # timm's global pooling (+ flatten)
        if getattr(module, "pool_type", "avg") not in ("avg", "fast"):
            raise Unsupported(f"global {module.pool_type} pooling")
        shape = shapes.get(module)
        return 1.0 if shape is None else 1.0 / math.sqrt(shape[-2] * shape[-1])
    if name in ("BasicBlock", "Bottleneck"):  # timm's residual blocks
        return _residual(module, shapes)
    if name == "ResNet":
        parts = [module.conv1, module.bn1, module.act1, module.maxpool, module.layer1, module.layer2, module.layer3,
                 module.layer4, module.global_pool, getattr(module, "head_drop", nn.Identity()), module.fc]
        return math.prod(module_bound(part, shapes) for part in parts)
    raise Unsupported(name)


def _residual(block: nn.Module, shapes) -> float:
    names = (["conv1", "bn1", "drop_block", "act1", "aa", "conv2", "bn2"] if type(block).__name__ == "BasicBlock"
             else ["conv1", "bn1", "act1", "conv2", "bn2", "drop_block", "act2", "aa", "conv3", "bn3"])
    for name in ("se", "drop_path"):
        if getattr(block, name, None) is not None and not isinstance(getattr(block, name), nn.Identity):
            raise Unsupported(f"{type(block).__name__}.{name}")
    branch = math.prod(module_bound(getattr(block, name), shapes) for name in names if hasattr(block, name))
    shortcut = 1.0 if block.downsample is None else module_bound(block.downsample, shapes)
    last = block.act2 if type(block).__name__ == "BasicBlock" else block.act3
    return (branch + shortcut) * module_bound(last, shapes)


def network_bound(module: nn.Module, input_size: tuple[int, int, int], std) -> tuple[float | None, str]:
    """The certified L2 Lipschitz bound of pixels ↦ logits, with the normalisation's 1/min(std);
    ``(None, reason)`` when some part has no bound here."""
    shapes: dict[nn.Module, tuple[int, ...]] = {}

    def record(child: nn.Module, args: tuple, output: object) -> None:  # a hook that returns None
        shapes.setdefault(child, tuple(args[0].shape))

    hooks = [child.register_forward_hook(record) for child in module.modules()]
    parameter = next(module.parameters(), None)
    device = parameter.device if parameter is not None else torch.device("cpu")
    try:
        with torch.no_grad():
            module(torch.zeros(1, *input_size, device=device))
    finally:
        for hook in hooks:
            hook.remove()
    try:
        bound = module_bound(module, shapes)
    except Unsupported as error:
        return None, f"no certified bound for {error}"
    return bound / float(min(std)), "product of layer operator norms (certified)"



def relu_cell(module: nn.Module, x: torch.Tensor, mean, std) -> torch.Tensor | None:
    """The activation cell of a ReLU MLP at ``x`` (one C×H×W input of [0, 1] pixels), as the
    matrix A of its recession cone rec(C) = {u : A·u ≥ 0} over pixel directions (Le et al.,
    eq. 7/9): one row s_h·∇a_h per hidden ReLU unit h, with a_h its pre-activation (affine in
    the cell) and s_h = +1 if the unit is active at x, −1 if not. Along any u in the cone no unit
    changes state, so the logits are affine along x + t·u for every t ≥ 0.

    ``None`` unless ``module`` is an ``nn.Sequential`` of ``Flatten``, ``Linear``, ``ReLU``,
    ``Identity`` and ``Dropout`` (eval) layers: for convolutional networks the cone is usually
    {0}, and its constraint matrix is too large to be useful.
    """
    if not isinstance(module, nn.Sequential) or any(
            not isinstance(layer, (nn.Flatten, nn.Linear, nn.ReLU, nn.Identity, nn.Dropout)) for layer in module):
        return None
    channels = x.shape[0]
    per_channel = x.numel() // channels
    shift = torch.tensor([float(v) for v in mean], dtype=torch.float64).repeat_interleave(per_channel)
    scale = torch.tensor([float(v) for v in std], dtype=torch.float64).repeat_interleave(per_channel)
    value = (x.detach().double().cpu().flatten() - shift) / scale  # the normalised input
    gradient = torch.diag(1.0 / scale)  # its derivative with respect to the pixels
    rows = []
    for layer in module:
        if isinstance(layer, nn.Linear):
            weight = layer.weight.detach().double().cpu()
            value = weight @ value + (layer.bias.detach().double().cpu() if layer.bias is not None else 0.0)
            gradient = weight @ gradient
        elif isinstance(layer, nn.ReLU):
            active = value > 0
            rows.append(torch.where(active, 1.0, -1.0).double().view(-1, 1) * gradient)
            value = value * active
            gradient = active.double().view(-1, 1) * gradient
    return torch.cat(rows) if rows else torch.zeros(0, x.numel(), dtype=torch.float64)
