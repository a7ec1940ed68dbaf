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
  Only zero padding (``padding_mode="zeros"``; reflected, replicated or circular padding is
  another operator), numeric or ``"same"``/``"valid"`` padding.
- ``BatchNorm2d`` (eval): max |γ| / √(σ² + eps). Activations ReLU, LeakyReLU (max(1, |slope|)),
  ELU (max(1, α)), GELU (1.13, either form), SiLU (1.1), Tanh, Sigmoid (1/4), Softplus, Identity,
  Dropout, Flatten: their Lipschitz constants.
- Pooling: ``MaxPool2d`` √Π⌈k/(s/gcd(s, d))⌉ over the two axes (with dilation d, a pixel sits in at
  most ⌈k/(s/gcd(s, d))⌉ windows per axis, and each output is 1-Lipschitz in its window; padding
  and ``ceil_mode`` add no window to any pixel's count). ``AvgPool2d`` √(Π⌈k/s⌉)/k when every
  divisor is k² (no ``ceil_mode``, no ``divisor_override``, no padding or padding counted);
  otherwise (partial windows averaged over fewer cells) Schur's test √(max row sum · max column
  sum) of its matrix, computed on the recorded input size. Global average pooling 1/√(H·W).
- A module is taken for one of these only when it runs that class's own ``forward``: a subclass
  that overrides it (timm's ``BatchNormAct2d``, ``Conv2dSame``, ``AvgPool2dSame``) computes
  something else and is refused.
- Residual blocks (timm's ``BasicBlock`` and ``Bottleneck``): Lip(branch) + Lip(shortcut), then
  the final activation.
- Pre-LN Transformers (timm's ``VisionTransformer``): Le et al.'s Cor. 3.4,
  Λ = L_head·L_emb·Π (1 + L_LN·L_MHA)(1 + L_LN′·L_FFN), with LayerNorm at max|γ|/√ε_LN and
  attention bounded on the ball its LayerNorm's outputs lie in (:func:`attention_bound`; derived
  here, not Castin et al.'s constant). Astronomically loose (ε_LN = 1e-6 gives 10³ per
  LayerNorm), as the paper says such products are, but a bound.
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
                nn.Sigmoid: 0.25, nn.GELU: 1.1290, nn.SiLU: 1.0999, nn.Softplus: 1.0}
#: GELU's tanh form peaks at 1.12899 (its exact form at 1.12890); ELU's slope is α·eˣ below 0, so
#: its constant is max(1, α) (:func:`module_bound`), not 1.


class Unsupported(Exception):
    """A module this bound does not know; its message names it."""


def conv_norm(conv: nn.Conv2d, height: int, width: int) -> float:
    """An upper bound on ‖conv‖₂ for inputs of ``height``×``width`` (see the module notes)."""
    if conv.groups != 1 or conv.dilation != (1, 1):
        raise Unsupported(f"Conv2d with groups={conv.groups}, dilation={conv.dilation}")
    if conv.padding_mode != "zeros":  # reflected or replicated pixels count twice; circular is another grid
        raise Unsupported(f"Conv2d with padding_mode={conv.padding_mode!r}")
    weight = conv.weight.detach().double().cpu()
    kh, kw = weight.shape[-2:]
    if conv.padding == "valid":
        total = (0, 0)
    elif conv.padding == "same":  # k − 1 zeros in all per axis (dilation 1), split either side
        total = (kh - 1, kw - 1)
    else:
        total = (2 * conv.padding[0], 2 * conv.padding[1])
    grid_h = max(height + total[0], kh)
    grid_w = max(width + total[1], kw)
    spectrum = torch.fft.fft2(weight, s=(grid_h, grid_w))  # C_out × C_in × H × W
    matrices = spectrum.permute(2, 3, 0, 1).reshape(-1, weight.shape[0], weight.shape[1])
    return float(torch.linalg.matrix_norm(matrices, ord=2).max())


def _batchnorm(norm: nn.BatchNorm2d) -> float:
    if norm.running_var is None:
        raise Unsupported("BatchNorm2d without running statistics (it normalises each batch by its own)")
    scale = torch.ones_like(norm.running_var) if norm.weight is None else norm.weight.detach().abs()
    return float((scale / torch.sqrt(norm.running_var + norm.eps)).max())


def _pair(value) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else tuple(value)


def _pool_windows(kernel, stride, dilation=1) -> tuple[int, int]:
    """The most windows one pixel sits in (over both axes), and the cells of a window. Window i
    of an axis covers i·s + j·d for j < k: a pixel p is in it for each j with p ≡ j·d (mod s),
    at most ⌈k/(s/gcd(s, d))⌉ of the k."""
    kernel = _pair(kernel)
    stride = kernel if stride is None else _pair(stride)
    dilation = _pair(dilation)
    return (math.prod(math.ceil(k / (s // math.gcd(s, d))) for k, s, d in zip(kernel, stride, dilation)),
            math.prod(kernel))


def _avg_pool(pool: nn.AvgPool2d, shape: tuple[int, ...] | None) -> float:
    """An upper bound on ‖pool‖₂ (see the module notes)."""
    windows, size = _pool_windows(pool.kernel_size, pool.stride)
    if not pool.ceil_mode and pool.divisor_override is None and (pool.count_include_pad or pool.padding in (0, (0, 0))):
        return math.sqrt(windows / size)  # every divisor is k²: each output averages k² cells
    if shape is None:
        raise Unsupported("an AvgPool2d with partial windows the forward pass did not reach")
    # Schur's test: ‖A‖₂ ≤ √(‖A‖₁·‖A‖∞); the weights all have one sign, so the row sums are the
    # pool of ones and the column sums its adjoint applied to ones (a gradient), in float64.
    ones = torch.ones(1, 1, *shape[-2:], dtype=torch.float64, requires_grad=True)
    with torch.enable_grad():
        pooled = nn.functional.avg_pool2d(ones, pool.kernel_size, pool.stride, pool.padding, pool.ceil_mode,
                                          pool.count_include_pad, pool.divisor_override)
        (columns,) = torch.autograd.grad(pooled.sum(), ones)
    return math.sqrt(float(pooled.detach().abs().max()) * float(columns.abs().max()))


#: Subclasses whose own forward computes what the base class's does (timm's LayerNorm calls
#: ``F.layer_norm``, or a fused kernel of the same function).
_SAME_FORWARD = {"timm.layers.norm.LayerNorm"}


def _plain(module: nn.Module, kind: type[nn.Module]) -> bool:
    """``module`` is a ``kind`` that runs ``kind``'s own forward (or one known to be the same)."""
    if not isinstance(module, kind):
        return False
    own = type(module)
    return own.forward is kind.forward or f"{own.__module__}.{own.__qualname__}" in _SAME_FORWARD


def module_bound(module: nn.Module, shapes: dict[nn.Module, tuple[int, ...]]) -> float:
    """An upper bound on the L2 Lipschitz constant of ``module`` (``shapes``: each module's input
    shape, recorded by a forward pass). Raises :class:`Unsupported`."""
    kind = type(module)
    if kind in _ACTIVATIONS:  # these exact classes only (a subclass may compute anything)
        return _ACTIVATIONS[kind]
    if _plain(module, nn.LeakyReLU):
        return max(1.0, abs(module.negative_slope))
    if _plain(module, nn.ELU):
        return max(1.0, abs(module.alpha))
    if _plain(module, nn.Linear):
        return float(torch.linalg.matrix_norm(module.weight.detach().double().cpu(), ord=2))
    if _plain(module, nn.Conv2d):
        shape = shapes.get(module)
        if shape is None:  # its input size is unknown: no bound rather than a guess
            raise Unsupported("a Conv2d the forward pass did not reach")
        return conv_norm(module, shape[-2], shape[-1])
    if _plain(module, nn.BatchNorm2d):
        return _batchnorm(module)
    if _plain(module, nn.LayerNorm):
        return layer_norm_bound(module)
    if _plain(module, nn.MaxPool2d):
        windows, _ = _pool_windows(module.kernel_size, module.stride, module.dilation)
        return math.sqrt(windows)
    if _plain(module, nn.AvgPool2d):
        return _avg_pool(module, shapes.get(module))
    if _plain(module, nn.Sequential):
        return math.prod(module_bound(child, shapes) for child in module)
    name = kind.__name__
    if not kind.__module__.startswith("timm."):  # the names below are timm's classes, not a namesake's
        raise Unsupported(name)
    if name == "SelectAdaptivePool2d":  # timm's global pooling (+ flatten)
        if getattr(module, "pool_type", "avg") not in ("avg", "fast"):
            raise Unsupported(f"global {module.pool_type} pooling")
        if getattr(module.pool, "output_size", 1) not in (1, (1, 1)):  # 2×2 windows: 1/√(HW/4), not 1/√(HW)
            raise Unsupported(f"SelectAdaptivePool2d to {module.pool.output_size} outputs (not global pooling)")
        shape = shapes.get(module)
        return 1.0 if shape is None else 1.0 / math.sqrt(shape[-2] * shape[-1])
    if name in ("BasicBlock", "Bottleneck"):  # timm's residual blocks
        return _residual(module, shapes)
    if name == "VisionTransformer":  # timm's Pre-LN ViT: Le et al., Cor. 3.4
        return _vision_transformer(module, shapes)
    if name == "ResNet":
        names = ["conv1", "bn1", "act1", "maxpool", "layer1", "layer2", "layer3", "layer4", "global_pool",
                 "head_drop", "fc"]
        _only_children(module, names)
        return math.prod(module_bound(getattr(module, part), shapes) for part in names if hasattr(module, part))
    raise Unsupported(name)


def layer_norm_bound(norm: nn.LayerNorm) -> float:
    """LayerNorm with ε_LN > 0, per token: max|γ|/√ε_LN bounds its Jacobian ((x − μ)/√(σ² + ε)
    is steepest at σ = 0, where its slope is 1/√ε)."""
    if norm.eps <= 0:
        raise Unsupported("LayerNorm with eps = 0 (not Lipschitz)")
    scale = 1.0 if norm.weight is None else float(norm.weight.detach().abs().max())
    return scale / math.sqrt(norm.eps)


def layer_norm_radius(norm: nn.LayerNorm) -> float:
    """An upper bound on ‖LN(x)‖₂ for one token, whatever x: √d·max|γ| + ‖β‖₂ (the normalised
    vector has norm ≤ √d). Attention after a LayerNorm sees tokens in this ball."""
    width = norm.normalized_shape[-1]
    scale = 1.0 if norm.weight is None else float(norm.weight.detach().abs().max())
    shift = 0.0 if norm.bias is None else float(norm.bias.detach().norm())
    return math.sqrt(width) * scale + shift


def attention_bound(attention: nn.Module, tokens: int, radius: float) -> float:
    """An upper bound on the L2 (Frobenius) Lipschitz constant of timm's multi-head ``Attention``
    on n = ``tokens`` tokens of norm ≤ ``radius`` (self-attention is not globally Lipschitz).

    Derived here, per head, with Q, K, V its projections and s_ij = c·(Qy_i + b_q)ᵀ(Ky_j + b_k):
    f_i = Σ_j P_ij (V y_j + b_v), so df = P·dY·Vᵀ + Σ_j dP_ij v_j. The first term is at most
    ‖P‖₂‖V‖ ≤ √n·‖V‖ (rows of P sum to 1, columns to ≤ n). For the second, Σ_j dP_ij v_j =
    Σ_j P_ij (v_j − v̄_i) ds_ij with ‖v_j − v̄_i‖ ≤ 2‖V‖R and Σ_j P_ij |ds_ij| ≤ a‖dy_i‖ + b‖dY‖,
    a = c‖Q‖(‖K‖R + ‖b_k‖), b = c‖K‖(‖Q‖R + ‖b_q‖); over the tokens, 2‖V‖R(a + √n·b). So a head
    is at most ‖V‖(√n + 2R(a + √n·b)), and the heads, concatenated and projected, ‖W_O‖·√(Σ L_h²).
    """
    for part in ("q_norm", "k_norm", "norm"):
        if not isinstance(getattr(attention, part, nn.Identity()), nn.Identity):
            raise Unsupported(f"Attention.{part}")
    if getattr(attention, "gate", None) is not None:
        raise Unsupported("gated Attention")
    heads = attention.num_heads
    weight = attention.qkv.weight.detach().double().cpu()
    bias = attention.qkv.bias.detach().double().cpu() if attention.qkv.bias is not None else torch.zeros(len(weight))
    width = weight.shape[0] // 3
    size = width // heads
    scale = float(attention.scale)
    root = math.sqrt(tokens)
    total = 0.0
    for head in range(heads):
        rows = [slice(part * width + head * size, part * width + (head + 1) * size) for part in range(3)]
        q, k, v = (torch.linalg.matrix_norm(weight[r], ord=2).item() for r in rows)
        bq, bk = (float(bias[r].norm()) for r in rows[:2])
        a = scale * q * (k * radius + bk)
        b = scale * k * (q * radius + bq)
        total += (v * (root + 2 * radius * (a + root * b))) ** 2
    return float(torch.linalg.matrix_norm(attention.proj.weight.detach().double().cpu(), ord=2)) * math.sqrt(total)


def _vision_transformer(model: nn.Module, shapes) -> float:
    """Cor. 3.4's Λ_θ = L_head·L_emb·Π_h (1 + L_LN·L_MHA)(1 + L_LN′·L_FFN) for timm's Pre-LN
    ``VisionTransformer``: patch embedding (a convolution; class token and positional embedding
    add constants), blocks x + attn(LN(x)) and x + mlp(LN(x)), the final LayerNorm, class-token or
    mean pooling (≤ 1) and the head. Every LayerNorm needs ε_LN > 0, and attention is bounded on
    the LayerNorm's output ball (:func:`attention_bound`)."""
    if getattr(model, "attn_pool", None) is not None or model.global_pool not in ("token", "avg", "avgmax", ""):
        raise Unsupported(f"VisionTransformer pooling {model.global_pool!r}")
    first = model.blocks[0] if len(model.blocks) else None
    tokens = shapes.get(first, (0, 0, 0))[1] if first is not None else 0
    bound = module_bound(model.patch_embed.proj, shapes) * module_bound(model.patch_embed.norm, shapes)
    for part in (model.patch_drop, model.norm_pre, getattr(model, "pos_drop", nn.Identity())):
        bound *= module_bound(part, shapes)
    _only_children(model, ["patch_embed", "pos_drop", "patch_drop", "norm_pre", "blocks", "norm", "fc_norm",
                           "head_drop", "head"])
    for block in model.blocks:
        # timm's Block, Mlp and Attention exactly: ResPostBlock (post-norm), ParallelScalingBlock,
        # GluMlp (x1·act(x2), with Mlp's child names) and SwiGLU compute otherwise.
        for part, kind in ((block, "Block"), (block.attn, "Attention"), (getattr(block, "mlp", None), "Mlp")):
            if type(part).__name__ != kind or not type(part).__module__.startswith("timm."):
                raise Unsupported(f"{type(part).__name__} in a VisionTransformer (timm's {kind} only)")
        _only_children(block, ["norm1", "attn", "ls1", "drop_path1", "norm2", "mlp", "ls2", "drop_path2"])
        _only_children(block.mlp, ["fc1", "act", "drop1", "norm", "fc2", "drop2"])
        for part in ("ls1", "ls2", "drop_path1", "drop_path2"):
            if not isinstance(getattr(block, part), (nn.Identity, nn.Dropout)):
                raise Unsupported(f"Block.{part}")
        mlp = block.mlp
        feed = module_bound(mlp.fc1, shapes) * module_bound(mlp.act, shapes) * module_bound(mlp.norm, shapes) \
            * module_bound(mlp.fc2, shapes)
        attention = attention_bound(block.attn, tokens, layer_norm_radius(block.norm1))
        bound *= (1 + layer_norm_bound(block.norm1) * attention) * (1 + layer_norm_bound(block.norm2) * feed)
    return bound * module_bound(model.norm, shapes) * module_bound(model.fc_norm, shapes) \
        * module_bound(model.head, shapes)


def _residual(block: nn.Module, shapes) -> float:
    names = (["conv1", "bn1", "drop_block", "act1", "aa", "conv2", "bn2"] if type(block).__name__ == "BasicBlock"
             else ["conv1", "bn1", "act1", "conv2", "bn2", "drop_block", "act2", "aa", "conv3", "bn3"])
    for name in ("se", "drop_path"):
        if getattr(block, name, None) is not None and not isinstance(getattr(block, name), nn.Identity):
            raise Unsupported(f"{type(block).__name__}.{name}")
    _only_children(block, [*names, "se", "drop_path", "downsample", "act2", "act3"])
    branch = math.prod(module_bound(getattr(block, name), shapes) for name in names if hasattr(block, name))
    shortcut = 1.0 if block.downsample is None else module_bound(block.downsample, shapes)
    last = block.act2 if type(block).__name__ == "BasicBlock" else block.act3
    return (branch + shortcut) * module_bound(last, shapes)


def _only_children(module: nn.Module, names: list[str]) -> None:
    """Refuse a timm block or network with a child the bound does not multiply in (an attention
    or extra layer added by a newer timm, or by a subclass): it would be left out silently."""
    for name, child in module.named_children():
        if name not in names and not isinstance(child, nn.Identity):
            raise Unsupported(f"{type(module).__name__}.{name} ({type(child).__name__})")


def network_bound(module: nn.Module, input_size: tuple[int, int, int], std) -> tuple[float | None, str]:
    """The certified L2 Lipschitz bound of pixels ↦ logits, with the normalisation's 1/min(std);
    ``(None, reason)`` when some part has no bound here."""
    from torch.nn.modules import module as torch_module

    # A hook, or a forward set on the instance, computes what no class here says (a hook that
    # scaled a layer's output by 1000 was bounded as the layer: 0.98 for a model steeper than 980).
    if torch_module._global_forward_hooks or torch_module._global_forward_pre_hooks:
        return None, "no certified bound for a model run under global forward hooks"
    for child in module.modules():
        if child._forward_hooks or child._forward_pre_hooks or "forward" in vars(child):
            return None, (f"no certified bound for {type(child).__name__} with a forward hook or a forward of its "
                          "own (not its class's)")
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
    if type(module).__name__ == "VisionTransformer":
        return bound / float(min(std)), ("Cor. 3.4 product for a Pre-LN Transformer (certified; assumes LayerNorm "
                                         "eps > 0 and bounds attention on its LayerNorm's output ball)")
    return bound / float(min(std)), "product of layer operator norms (certified)"



#: Layers an MLP's activation cell is computed through (Dropout in eval mode is the identity).
MLP_LAYERS = (nn.Flatten, nn.Linear, nn.ReLU, nn.Identity, nn.Dropout)


def mlp_layers(module: nn.Module) -> list[nn.Module]:
    """The layers of a ReLU MLP in order, nested ``nn.Sequential`` s flattened
    (``Sequential(Flatten, Sequential(Linear, ReLU, Linear))`` is the same MLP as the flat one).

    Raises:
        Unsupported: ``module`` is not one, naming the first layer that is not in
            :data:`MLP_LAYERS` (or the module itself when it is no ``nn.Sequential``).
    """
    if not isinstance(module, nn.Sequential):
        raise Unsupported(f"{type(module).__name__} is not an nn.Sequential of "
                          f"{', '.join(kind.__name__ for kind in MLP_LAYERS)} layers")
    layers: list[nn.Module] = []
    for layer in module:
        if isinstance(layer, nn.Sequential):
            layers += mlp_layers(layer)
        elif any(_plain(layer, kind) for kind in MLP_LAYERS):  # a subclass may compute anything
            layers.append(layer)
        else:
            raise Unsupported(f"layer {type(layer).__name__} is not one of "
                              f"{', '.join(kind.__name__ for kind in MLP_LAYERS)}")
    return layers


def cell_support(module: nn.Module) -> str | None:
    """Why :func:`relu_cell` gives no cone for ``module`` (``None``: it gives one)."""
    try:
        mlp_layers(module)
    except Unsupported as error:
        return (f"activation cells are computed for ReLU MLPs only, and {error} (for convolutional networks "
                "the cone is usually {0} and its constraint matrix too large to be useful)")
    return None


def relu_cell(module: nn.Module, x: torch.Tensor, mean, std) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The activation cell of a ReLU MLP at ``x`` (one C×H×W input of [0, 1] pixels), as the
    matrix A of its recession cone rec(C) = {u : A·u ≥ 0} over pixel directions (Le et al.,
    eq. 7/9): one row s_h·∇a_h per hidden ReLU unit h, with a_h its pre-activation (affine in
    the cell) and s_h = +1 if the unit is active at x, −1 if not. Along any u in the cone no unit
    changes state, so the logits are affine along x + t·u for every t ≥ 0. Returned with J, the
    logits' Jacobian in the cell (K×n), both in float64 from the weights: a float32 autograd
    Jacobian loses the difference of two nearly equal rows (J_k − J_y, the cone rate's vector),
    and a rate from it came out above the supremum it bounds.

    ``None`` unless ``module`` is a ReLU MLP (:func:`mlp_layers`; :func:`cell_support` says why not).
    """
    try:
        layers = mlp_layers(module)
    except Unsupported:
        return None
    channels = x.shape[0]
    per_channel = x.numel() // channels
    shift = torch.tensor([float(v) for v in mean], dtype=torch.float64).repeat_interleave(per_channel)
    scale = torch.tensor([float(v) for v in std], dtype=torch.float64).repeat_interleave(per_channel)
    value = (x.detach().double().cpu().flatten() - shift) / scale  # the normalised input
    gradient = torch.diag(1.0 / scale)  # its derivative with respect to the pixels
    rows = []
    for layer in layers:
        if isinstance(layer, nn.Linear):
            weight = layer.weight.detach().double().cpu()
            value = weight @ value + (layer.bias.detach().double().cpu() if layer.bias is not None else 0.0)
            gradient = weight @ gradient
        elif isinstance(layer, nn.ReLU):
            active = value > 0
            rows.append(torch.where(active, 1.0, -1.0).double().view(-1, 1) * gradient)
            value = value * active
            gradient = active.double().view(-1, 1) * gradient
    return (torch.cat(rows) if rows else torch.zeros(0, x.numel(), dtype=torch.float64)), gradient
