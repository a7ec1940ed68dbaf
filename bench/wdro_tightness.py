"""Le et al.'s Fig. 1 as a table: how tight the W_1 certificate's rates are on a ReLU network with
n = K = 2 and one hidden layer of 8, when every reachable activation mask is known.

A 2-D input and one hidden layer make the masks finite and enumerable: the cells are those of
the arrangement of 8 lines, and every cell touches a vertex of the arrangement (no two lines are
parallel) or reaches past a large circle, so points at each vertex in every direction, and on
that circle, meet every cell. For each mask D, J_D = W2·diag(D)·W1 and its recession cone
rec(C_D) = {u : (2D − 1)·W1·u ≥ 0} give the exact rates of Thm 3.1:

- L = 2^(1/r)·max_D ‖J_D‖_{r→s} (eq. 6), the tight Lipschitz rate the upper bound needs;
- l = max over D and k' ≠ k of the rival rate inside rec(C_D) (eq. 7), here cumulated over the
  masks as more are considered: first the cells of the data points (Cor. 3.2's l_N, what
  ``advsuite certify`` computes as ``cone_rate_bound``), then the rest by decreasing ‖J_D‖.

Beside them, what ``suite.certify`` reports on the same data: the certified product rate
(``upper_rate_bound``), l_N and the cone-free estimate. Two networks: seeded random weights,
and the same first layer with an antisymmetric head (logit 2 = −logit 1), and a monotone network
(nonnegative first layer, head rows ±(one nonnegative row)): the class on which the paper says
its bounds match, and where its sufficient condition for l = L holds.

    python bench/wdro_tightness.py --seed 0 --n 20 --norm l2

Cost norm ``--norm`` (l2, linf or l1; s its dual). Seconds: well under a minute on one core.
"""

from __future__ import annotations

import argparse
import itertools
import math

import torch
from torch import nn

import suite
from suite.models.wrap import from_module
from suite.wdro.bounds import DUAL, ORDER, cone_rate, operator_norms


def reachable_masks(first: nn.Linear, probes: int = 64) -> list[tuple[int, ...]]:
    """Every activation pattern of ``first``'s 8 ReLUs on R², found at the arrangement's
    vertices (probed at a small radius in ``probes`` directions) and on a circle past them."""
    w, b = first.weight.detach().double(), first.bias.detach().double()
    vertices = []
    for i, j in itertools.combinations(range(len(w)), 2):
        system = torch.stack([w[i], w[j]])
        if abs(float(torch.linalg.det(system))) > 1e-12:
            vertices.append(torch.linalg.solve(system, -torch.stack([b[i], b[j]])))
    vertices = torch.stack(vertices)
    angles = torch.linspace(0, 2 * math.pi, probes + 1, dtype=torch.float64)[:-1]
    ring = torch.stack([angles.cos(), angles.sin()], dim=1)
    gaps = torch.cdist(vertices, vertices) + torch.eye(len(vertices), dtype=torch.float64) * 1e9
    radius = 1e-3 * min(1.0, float(gaps.min()))
    far = 10 * (1 + float(vertices.norm(dim=1).max()))
    points = torch.cat([(vertices.unsqueeze(1) + radius * ring).reshape(-1, 2),
                        far * torch.stack([torch.linspace(0, 2 * math.pi, 4096, dtype=torch.float64).cos(),
                                           torch.linspace(0, 2 * math.pi, 4096, dtype=torch.float64).sin()], 1)])
    patterns = (points @ w.T + b > 0).int()
    return sorted({tuple(row.tolist()) for row in patterns})


def mask_rates(first: nn.Linear, head: nn.Linear, mask: tuple[int, ...], norm: str) -> tuple[float, float]:
    """‖J_D‖_{r→s}, and the largest rival rate inside rec(C_D) over ordered class pairs."""
    w1, w2 = first.weight.detach().double(), head.weight.detach().double()
    d = torch.tensor(mask, dtype=torch.float64)
    jacobian = w2 @ (d.unsqueeze(1) * w1)
    size = float(operator_norms(jacobian.unsqueeze(0), norm)[0][0])
    constraints = (2 * d - 1).unsqueeze(1) * w1
    rate = max(cone_rate(jacobian[k] - jacobian[j], constraints, norm)[0]
               for k in range(len(jacobian)) for j in range(len(jacobian)) if k != j)
    return size, rate


def table(name: str, first: nn.Linear, head: nn.Linear, points: torch.Tensor, norm: str) -> list[str]:
    net = nn.Sequential(nn.Flatten(), first, nn.ReLU(), head)
    model = from_module(net, input_size=(1, 1, 2))
    inputs = points.view(-1, 1, 1, 2).float()
    labels = model.logits(inputs).argmax(dim=1)
    report = suite.certify(model, (inputs, labels), norm=norm, eps=[1.0], boxed=False, attacks=False, n=None)
    masks = reachable_masks(first)
    rates = {mask: mask_rates(first, head, mask, norm) for mask in masks}
    data_masks = sorted({tuple((first(points.float()) > 0).int()[i].tolist()) for i in range(len(points))})
    rest = sorted(set(masks) - set(data_masks), key=lambda mask: -rates[mask][0])
    factor = 2 ** (1 / ORDER[norm])
    exact_upper = factor * max(size for size, _ in rates.values())
    lines = [f"**{name}**: {len(masks)} reachable masks, {len(data_masks)} of them at the {len(points)} data points",
             "", "| masks considered | l (cumulative, eq. 7) | l / L |", "|---|---|---|"]
    best = 0.0
    for count, mask in enumerate(data_masks + rest, start=1):
        best = max(best, rates[mask][1])
        if count in (len(data_masks), len(masks)) or count in (1, 2, 4, 8, 16):
            lines.append(f"| {count}{' (the data cells: l_N)' if count == len(data_masks) else ''}"
                         f"{' (all)' if count == len(masks) else ''} | {best:.4f} | {best / exact_upper:.3f} |")
    lines += ["", f"- exact L = 2^(1/r)·max ‖J_D‖ over every mask: {exact_upper:.4f}",
              f"- `suite.certify`: certified rate (products of operator norms) {report['upper_rate_bound']:.4f}, "
              f"data-point estimate L_N {report['upper_rate_estimate']:.4f}, cone rate l_N "
              f"{report['cone_rate_bound']:.4f}, cone-free estimate {report['rival_rate_estimate']:.4f}", ""]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--n", type=int, default=20,
                        help="data points, uniform in [0, 1]^2 (the model is certified on R^2)")
    parser.add_argument("--norm", default="l2", choices=("l2", "linf", "l1"))
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    first, head = nn.Linear(2, 8), nn.Linear(8, 2)
    points = torch.rand(args.n, 2, dtype=torch.float64)
    antisymmetric = nn.Linear(8, 2)
    with torch.no_grad():
        antisymmetric.weight.copy_(torch.stack([head.weight[0], -head.weight[0]]))
        antisymmetric.bias.zero_()
    # Monotone: nonnegative first-layer weights and a head whose rows are ±(the same nonnegative
    # row), so every unit on raises the gap and the steepest direction lies in the all-on cell's cone.
    monotone_first, monotone_head = nn.Linear(2, 8), nn.Linear(8, 2)
    with torch.no_grad():
        monotone_first.weight.copy_(first.weight.abs())
        monotone_first.bias.copy_(first.bias)
        monotone_head.weight.copy_(torch.stack([head.weight[0].abs(), -head.weight[0].abs()]))
        monotone_head.bias.zero_()
    print(f"n = K = 2, hidden 8, seed {args.seed}, {args.n} data points, cost {args.norm} (s = {DUAL[args.norm]:g})\n")
    for name, layer_one, layer_two in (("random weights", first, head), ("antisymmetric head", first, antisymmetric),
                                       ("monotone", monotone_first, monotone_head)):
        print("\n".join(table(name, layer_one, layer_two, points, args.norm)))


if __name__ == "__main__":
    main()
