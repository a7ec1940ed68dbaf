"""Image-attack benchmark: ``auto`` vs AutoAttack and peers, BETA vs AutoAttack, the cost of a
step, and the batch-size effect.

Everything is measured in one run, on the same models, examples and seed:

0. ``auto`` and ``auto_plus`` against the AutoAttack standard ensemble (official budgets), adv-lib's
   APGD-T (ranked first on L∞ by AttackBench) and ART's APGD, on ``builtin:digits-cnn`` and the
   robust built-ins, L∞ and L2: robust accuracy, forward and gradient passes (rows, counted by one
   wrapper around the model for every attack) and wall time. The peers are optional bench
   dependencies: ``pip install adversarial-robustness-toolbox`` and ``pip install --no-deps adv-lib``
   (its ``visdom`` dependency is only for a logger; this script stubs it).

1. Robust accuracy and wall time of BETA against the AutoAttack standard ensemble (official
   budgets, built from torchattacks' components), APGD-CE, and ``torchattacks.AutoAttack`` as
   shipped (10 iterations per component), under L∞ and L2. Ratios, not absolute times, are the
   result: they transfer across machines.
2. The cost of one PGD step and one BETA step divided by one bare forward+backward pass of the
   same rows.
3. PGD success rate at several batch sizes, with the loss summed or averaged, in fp32 and fp16,
   on the built-in model served at temperature 0.5 (a confident model).

    python bench/image_attacks.py --sections peers --peer-n 100
    python bench/image_attacks.py --sections beta,step,batch --n 40   # about 10 minutes on 2 CPU cores
    python bench/image_attacks.py --n 200 --shipped --json bench-image.json
    python bench/image_attacks.py --sections beta --n 100 --beta-models builtin:digits-cnn-at,builtin:digits-cnn-beta-at
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from suite.attacks import build_attack
from suite.attacks.image.torchattacks_driver import import_torchattacks
from suite.attacks.image.query_counting import QueryCountingModule
from suite.losses import cross_entropy
from suite.data.config import DatasetConfig
from suite.data.load import load_eval_set
from suite.models import load_model
from suite.models.temperature import TemperatureScaled
from suite.evaluation.scoring import score_outputs
from suite.seeding import global_rng_seeded

EPS = {"linf": 0.006, "l2": 0.2}


def _examples(model, n: int, seed: int):
    eval_set = load_eval_set(DatasetConfig(spec="builtin:digits", n=n), model, seed)
    images = torch.stack([ex.input for ex in eval_set.examples])
    predictions = model.predict(images)
    correct = [ex for ex, p in zip(eval_set.examples, predictions) if int(p) == ex.label]
    return eval_set.examples, correct


def _timed(attack, model, examples, seed: int, batch_size: int):
    start = time.perf_counter()
    outputs = []
    for begin in range(0, len(examples), batch_size):
        outputs += attack.run(model, examples[begin : begin + batch_size], seed)
    return outputs, time.perf_counter() - start


def _torchattacks_shipped(model, examples, norm: str, eps: float, batch_size: int, seed: int):
    """torchattacks.AutoAttack exactly as shipped (its components at their 10-step defaults)."""
    torchattacks = import_torchattacks()
    start = time.perf_counter()
    broken = []
    for begin in range(0, len(examples), batch_size):
        batch = examples[begin : begin + batch_size]
        x = torch.stack([ex.input for ex in batch]).to(model.device)
        y = torch.tensor([ex.label for ex in batch], device=model.device)
        with global_rng_seeded(seed):
            attack = torchattacks.AutoAttack(QueryCountingModule(model, x), norm={"linf": "Linf", "l2": "L2"}[norm],
                                             eps=eps, version="standard", n_classes=len(model.labels), seed=seed)
            adversarial = attack(x, y)
        broken += (model.logits(adversarial).argmax(dim=1) != y).tolist()
    return broken, time.perf_counter() - start



def _broken(model, examples, outputs) -> list[bool]:
    """Whether the served model misclassifies each adversarial input (the suite's scoring)."""
    return [score["robust"] < 1.0 for score in score_outputs(model, examples, outputs)]


def beta_vs_autoattack(model, n: int, seed: int, batch_size: int, shipped: bool, radii: dict | None = None,
                       norms=tuple(EPS)) -> list[dict]:
    """BETA (30 steps, every rival) against APGD-CE, APGD-T (9 targets × 100 steps) and the
    AutoAttack standard ensemble on the same examples: the paper's Table 2 (Robey et al., ICLR
    2024, §5: BETA-30 within 0.17 pp of AutoAttack on adversarially trained CIFAR-10 models),
    with the examples each misses that AutoAttack breaks."""
    everything, correct = _examples(model, n, seed)
    rows = []
    for norm in norms:
        eps = (radii or EPS)[norm]
        contenders = {
            "beta": build_attack("beta", {"norm": norm, "eps": eps}),
            "apgd_ce": build_attack("apgd_ce", {"norm": norm, "eps": eps}),
            "apgd_t": build_attack("apgd_t", {"norm": norm, "eps": eps}),
            "ta_apgd_ce": build_attack("ta_apgd_ce", {"norm": norm, "eps": eps}),
            "autoattack": build_attack("autoattack", {"norm": norm, "eps": eps}),
        }
        results = {}
        for name, attack in contenders.items():
            outputs, seconds = _timed(attack, model, correct, seed, batch_size)
            broken = _broken(model, correct, outputs)
            results[name] = (broken, seconds)
            print(f"  {norm} {name}: {sum(broken)}/{len(correct)} broken in {seconds:.1f}s", flush=True)
        if shipped:
            results["torchattacks.AutoAttack (as shipped)"] = _torchattacks_shipped(model, correct, norm, eps, batch_size, seed)
        auto_broken, auto_seconds = results["autoattack"]
        for name, (broken, seconds) in results.items():
            robust = (len(correct) - sum(broken)) / len(everything)
            rows.append({
                "model": model.info.spec,
                "norm": norm,
                "eps": eps,
                "attack": name,
                "robust_accuracy": robust,
                "seconds": seconds,
                "time_vs_autoattack": seconds / auto_seconds,
                "pp_vs_autoattack": 100 * (robust - (len(correct) - sum(auto_broken)) / len(everything)),
                "broken_only_by_it_vs_autoattack": sum(b and not a for a, b in zip(auto_broken, broken)),
                "missed_vs_autoattack": sum(a and not b for a, b in zip(auto_broken, broken)),
            })
    return rows


# -- auto against AutoAttack and the peers -----------------------------------------------------

#: Per model: the radii of the comparison (mid-range robust accuracy on the robust models).
PEER_CASES = {
    "builtin:digits-cnn": {"linf": 0.006, "l2": 0.2},
    "builtin:digits-cnn-at": {"linf": 0.15, "l2": 1.5},
    "builtin:digits-cnn-beta-at": {"linf": 0.15, "l2": 1.5},
}


class CountingModule(torch.nn.Module):
    """The served classifier as an ``nn.Module`` that counts the rows it sees: every attack,
    ours and the peers', runs on one of these, so forward and gradient passes are counted the
    same way (a row seen with gradients enabled counts as a forward+backward pass)."""

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model
        self.anchor = torch.nn.Parameter(torch.empty(0), requires_grad=False)  # peers read the device from it
        self.forward_rows = 0
        self.gradient_rows = 0

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        self.forward_rows += len(inputs)
        grad = torch.is_grad_enabled() and inputs.requires_grad
        self.gradient_rows += len(inputs) if grad else 0
        return self.model.logits(inputs, grad=torch.is_grad_enabled())


def _peer_runners(norm: str, eps: float, num_classes: int) -> dict:
    """name → run(module, x, y) returning adversarial inputs, for the peers that are installed."""
    runners = {}
    try:
        import sys
        import types

        sys.modules.setdefault("visdom", types.ModuleType("visdom"))  # adv-lib imports it for a logger only
        from adv_lib.attacks.auto_pgd import apgd_targeted

        order = {"linf": float("inf"), "l2": 2.0}[norm]
        runners["adv-lib apgd_t (9 targets)"] = lambda module, x, y: apgd_targeted(
            module, x, y, eps=eps, norm=order, n_iter=100, num_targets=min(9, num_classes - 1))
    except ImportError:
        print("  (adv-lib not installed: pip install --no-deps adv-lib)")
    try:
        import numpy as np
        from art.attacks.evasion import AutoProjectedGradientDescent
        from art.estimators.classification import PyTorchClassifier

        def art(loss_type):
            def run(module, x, y):
                classifier = PyTorchClassifier(model=module, loss=torch.nn.CrossEntropyLoss(), input_shape=tuple(x.shape[1:]),
                                               nb_classes=num_classes, clip_values=(0.0, 1.0), device_type="cpu")
                attack = AutoProjectedGradientDescent(classifier, norm=np.inf if norm == "linf" else 2, eps=eps,
                                                      eps_step=2 * eps, max_iter=100, nb_random_init=1,
                                                      batch_size=len(x), loss_type=loss_type, verbose=False)
                return torch.from_numpy(attack.generate(x.numpy(), y=y.numpy()))
            return run

        runners["ART apgd (ce)"] = art("cross_entropy")
        runners["ART apgd (dlr)"] = art("difference_logits_ratio")
    except ImportError:
        print("  (ART not installed: pip install adversarial-robustness-toolbox)")
    return runners


def _project(norm: str, eps: float, x: torch.Tensor, adversarial: torch.Tensor) -> torch.Tensor:
    from suite.attacks.image.norms import NORMS

    return (x + NORMS[norm].project(adversarial - x, eps)).clamp(0.0, 1.0)


def auto_vs_peers(n: int, seed: int, batch_size: int, models=tuple(PEER_CASES), ours=("auto", "auto_plus")) -> list[dict]:
    """Robust accuracy, passes and wall time of ``auto`` against AutoAttack and the peers: same
    examples, seed and counting, one run. Peers' outputs are projected onto the ε-ball ∩ box
    (as the suite does with torchattacks') and scored by the served model."""
    from suite.models.wrap import from_module

    rows = []
    for spec in models:
        served = load_model(spec)
        everything, correct = _examples(served, n, seed)
        x_all = torch.stack([ex.input for ex in correct])
        y_all = torch.tensor([ex.label for ex in correct])
        for norm, eps in PEER_CASES[spec].items():
            results = {}
            for name in (*ours, "autoattack"):
                counting = CountingModule(served)
                model = from_module(counting, input_size=tuple(x_all.shape[1:]), labels=served.labels,
                                    device=served.device)
                outputs, seconds = _timed(build_attack(name, {"norm": norm, "eps": eps}), model, correct, seed, batch_size)
                results[name] = (_broken(served, correct, outputs), seconds, counting)
            for name, run in _peer_runners(norm, eps, len(served.labels)).items():
                counting = CountingModule(served)
                start = time.perf_counter()
                broken = []
                with global_rng_seeded(seed):
                    for begin in range(0, len(correct), batch_size):
                        x, y = x_all[begin : begin + batch_size], y_all[begin : begin + batch_size]
                        adversarial = _project(norm, eps, x, run(counting, x, y).detach())
                        broken += (served.logits(adversarial).argmax(dim=1) != y).tolist()
                results[name] = (broken, time.perf_counter() - start, counting)
            reference_broken, reference_seconds, reference = results["autoattack"]
            reference_robust = (len(correct) - sum(reference_broken)) / len(everything)
            for name, (broken, seconds, counting) in results.items():
                robust = (len(correct) - sum(broken)) / len(everything)
                rows.append({
                    "model": spec.removeprefix("builtin:"), "norm": norm, "eps": eps, "attack": name,
                    "robust_accuracy": robust, "pp_vs_autoattack": 100 * (robust - reference_robust),
                    "missed_vs_autoattack": sum(a and not b for a, b in zip(reference_broken, broken)),
                    "forward_rows": counting.forward_rows, "gradient_rows": counting.gradient_rows,
                    "seconds": seconds, "time_vs_autoattack": seconds / reference_seconds,
                    "passes_vs_autoattack": counting.forward_rows / max(1, reference.forward_rows),
                })
                print(f"  {spec} {norm} {name}: robust {robust:.3f} in {seconds:.1f}s, "
                      f"{counting.forward_rows} rows ({counting.gradient_rows} with gradients)", flush=True)
    return rows


def _median_seconds(function, repeats: int = 5) -> float:
    function()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def step_cost(model, seed: int, batch: int = 64) -> list[dict]:
    """Seconds of one attack step / seconds of one bare forward+backward of the same rows."""
    _, correct = _examples(model, 2 * batch, seed)
    examples = correct[:batch]
    x = torch.stack([ex.input for ex in examples]).to(model.device)
    y = torch.tensor([ex.label for ex in examples], device=model.device)

    def bare(rows: int):
        inputs = x.repeat(rows // len(x), 1, 1, 1).requires_grad_(True)
        labels = y.repeat(rows // len(y))

        def run():
            torch.autograd.grad(cross_entropy(model.logits(inputs, grad=True), labels).sum(), inputs)

        return _median_seconds(run)

    def per_step(name: str, params: dict) -> float:
        # ε = 0 never succeeds, so every step runs; the difference of two step counts removes
        # the fixed costs (target ranking, start, scoring).
        def run(steps):
            return lambda: build_attack(name, {**params, "eps": 0.0, "steps": steps}).run(model, examples, seed)

        return (_median_seconds(run(20), 3) - _median_seconds(run(10), 3)) / 10

    targets = len(model.labels) - 1
    fb_rows, fb_targets = bare(len(x)), bare(len(x) * targets)
    return [
        {"attack": "pgd_linf", "rows": len(x), "step_seconds": (s := per_step("pgd_linf", {})), "bare_fwd_bwd_seconds": fb_rows,
         "ratio": s / fb_rows},
        {"attack": "apgd_ce", "rows": len(x), "step_seconds": (s := per_step("apgd_ce", {})),
         "bare_fwd_bwd_seconds": fb_rows, "ratio": s / fb_rows},
        {"attack": "beta", "rows": len(x) * targets, "step_seconds": (s := per_step("beta", {})),
         "bare_fwd_bwd_seconds": fb_targets, "ratio": s / fb_targets},
    ]


def batch_size_effect(model, seed: int, sizes=(1, 16, 128), n: int = 128) -> list[dict]:
    confident = TemperatureScaled(model, 0.5)
    _, correct = _examples(confident, n + 32, seed)
    examples = correct[:n]
    rows = []
    for precision in ("fp32", "fp16"):
        for reduction in ("sum", "mean"):
            attack = build_attack("pgd_linf", {"eps": 0.02, "steps": 10, "precision": precision, "reduction": reduction})
            rates = {}
            for size in sizes:
                outputs, _ = _timed(attack, confident, examples, seed, size)
                rates[size] = sum(_broken(confident, examples, outputs)) / len(outputs)
            rows.append({"precision": precision, "reduction": reduction, **{f"bs{size}": rate for size, rate in rates.items()},
                         "spread_pp": 100 * (max(rates.values()) - min(rates.values()))})
    return rows


def _print(title: str, rows: list[dict]) -> None:
    print(f"\n## {title}\n")
    if not rows:
        return
    keys = list(rows[0])
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for row in rows:
        cells = [f"{value:.4g}" if isinstance(value, float) else str(value) for value in row.values()]
        print("| " + " | ".join(cells) + " |")


SECTIONS = ("peers", "beta", "step", "batch")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=200, help="examples for BETA vs AutoAttack (default 200)")
    parser.add_argument("--peer-n", type=int, default=100, help="examples per model for auto vs the peers (default 100)")
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sections", default=",".join(SECTIONS), help=f"which parts to run (default: {','.join(SECTIONS)})")
    parser.add_argument("--json", help="also write the numbers to this file")
    parser.add_argument("--beta-models", default="builtin:digits-cnn",
                        help="models for BETA vs AutoAttack, comma-separated (the robust built-ins at their mid-range "
                             f"radii: {', '.join(f'{k} {v}' for k, v in PEER_CASES.items())})")
    parser.add_argument("--beta-norms", default="linf,l2", help="norms for BETA vs AutoAttack (default linf,l2)")
    parser.add_argument("--shipped", action="store_true",
                        help="also time torchattacks.AutoAttack as shipped (10 iterations per component)")
    args = parser.parse_args()
    sections = set(args.sections.split(","))
    torch.set_num_threads(max(1, torch.get_num_threads()))
    model = load_model("builtin:digits-cnn")
    print(f"device {model.device}, torch threads {torch.get_num_threads()}")
    report = {}
    if "peers" in sections:
        report["auto_vs_peers"] = auto_vs_peers(args.peer_n, args.seed, args.batch_size)
        _print(f"auto vs AutoAttack and peers (n={args.peer_n} per model, batch {args.batch_size})", report["auto_vs_peers"])
    if "beta" in sections:
        report["beta_vs_autoattack"] = []
        for spec in args.beta_models.split(","):
            served = model if spec == "builtin:digits-cnn" else load_model(spec)
            rows = beta_vs_autoattack(served, args.n, args.seed, args.batch_size, args.shipped, PEER_CASES.get(spec),
                                      args.beta_norms.split(","))
            report["beta_vs_autoattack"] += rows
            _print(f"BETA vs AutoAttack ({spec}, n={args.n}, batch {args.batch_size})", rows)
    if "step" in sections:
        report["step_cost"] = step_cost(model, args.seed)
        _print("Cost of one attack step / one bare forward+backward of the same rows", report["step_cost"])
    if "batch" in sections:
        report["batch_size_effect"] = batch_size_effect(model, args.seed)
        _print("PGD-L∞ success rate by batch size (digits-cnn at T=0.5, ε=0.02, 10 steps)", report["batch_size_effect"])
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(report, handle, indent=2)


if __name__ == "__main__":
    main()
