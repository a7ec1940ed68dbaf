"""The image attacks' own work per search step, beside the model's: what the host issues.

On a GPU at batch 64, ResNet-50's forward and backward take about as long on the host (Python,
the dispatcher, kernel launches) as on the device, so every operation an attack adds around
the network lengthens the step (docs/attacks/measured.md, the second H200). This measures that
work where it can be measured without a GPU: a 48-input linear model, whose passes cost almost
nothing, attacked at a radius (1e-5) at which no example breaks, so every search runs every step.

For each attack, through ``Attack.run`` (the attack as an evaluation runs it):

- ``own_ops_per_pass``: the operations the attack issues per forward pass of the model, beyond
  a bare forward+backward at the same batch (PyTorch's dispatcher, counted with a
  ``TorchDispatchMode``; views and detaches, which launch no kernel, are left out). On CUDA each
  is a kernel launch or a copy.
- ``own_us_per_pass``: the attack's wall time per pass beyond the bare pass, best of
  ``--repeats`` (on this model nearly all of it is the host's work).

    python bench/host_ops.py --repeats 5 --json /tmp/host-ops.json
"""

from __future__ import annotations

import argparse
import collections
import json
import time

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from suite.attacks import build_attack
from suite.data.base import Example
from suite.models.wrap import from_module

#: Operations that launch no kernel (they make views or read metadata).
VIEWS = frozenset({"detach", "view", "t", "expand", "select", "squeeze", "unsqueeze", "alias", "lift_fresh",
                   "_unsafe_view", "slice", "permute", "as_strided", "_reshape_alias"})
ATTACKS = {"apgd_ce": {"eps": 1e-5}, "apgd_t": {"eps": 1e-5, "steps": 30}, "auto": {"eps": 1e-5}}


class Ops(TorchDispatchMode):
    """Counts the operations that reach the dispatcher, by name."""

    def __init__(self):
        super().__init__()
        self.counts: collections.Counter = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counts[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))

    def kernels(self) -> int:
        return sum(count for name, count in self.counts.items() if name not in VIEWS)


def bare_pass(model, x: torch.Tensor) -> None:
    inputs = x.clone().requires_grad_(True)
    (gradient,) = torch.autograd.grad(model.logits(inputs, grad=True).sum(), inputs)


def measure(name: str, params: dict, n: int, repeats: int, device: str) -> dict:
    torch.manual_seed(0)
    module = nn.Sequential(nn.Flatten(), nn.Linear(48, 10))
    model = from_module(module, input_size=(3, 4, 4), device=device)
    x = torch.rand(n, 3, 4, 4, generator=torch.Generator().manual_seed(0)).to(model.device)
    labels = model.logits(x).argmax(dim=1).cpu()
    examples = [Example(str(i), x[i].cpu(), int(labels[i])) for i in range(n)]
    passes = [0]
    module.register_forward_hook(lambda *_: passes.__setitem__(0, passes[0] + 1))
    attack = build_attack(name, params)

    with Ops() as bare_ops:
        bare_pass(model, x)
    bare_seconds = float("inf")
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        for _ in range(100):
            bare_pass(model, x)
        _sync(device)
        bare_seconds = min(bare_seconds, (time.perf_counter() - start) / 100)

    passes[0] = 0
    with Ops() as ops:
        outputs = attack.run(model, examples, 0)
    counted = passes[0]
    assert not any(output.adversarial is None for output in outputs)
    seconds = float("inf")
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        attack.run(model, examples, 0)
        _sync(device)
        seconds = min(seconds, time.perf_counter() - start)
    return {
        "attack": name, "n": n, "passes": counted,
        "own_ops_per_pass": round(ops.kernels() / counted - bare_ops.kernels(), 1),
        "bare_ops": bare_ops.kernels(),
        "own_us_per_pass": round((seconds - counted * bare_seconds) / counted * 1e6, 1),
        "bare_us": round(bare_seconds * 1e6, 1),
        "most_common": ops.counts.most_common(12),
    }


def _sync(device: str) -> None:
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attacks", nargs="+", default=list(ATTACKS), choices=list(ATTACKS))
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: the host's work alone)")
    parser.add_argument("--json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = [measure(name, dict(ATTACKS[name]), args.n, args.repeats, args.device) for name in args.attacks]
    print("| attack | n | passes | own ops / pass | own µs / pass | bare ops | bare µs |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print(f"| `{row['attack']}` | {row['n']} | {row['passes']} | {row['own_ops_per_pass']} | "
              f"{row['own_us_per_pass']} | {row['bare_ops']} | {row['bare_us']} |")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"device": args.device, "threads": args.threads, "torch": torch.__version__, "rows": rows},
                      handle, indent=2)


if __name__ == "__main__":
    main()
