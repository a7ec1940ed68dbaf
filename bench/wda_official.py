"""``wda`` and ``wda_pp`` side by side with the official WDA code (github.com/OLab-Repo/WDA).

On the same clean-correct test digits (the first ``--n`` of ``builtin:digits`` test, kept where
the model is right), the same cost norm r, budget ε, Wasserstein order p, step α and number of
steps, this runs

- the official ``run_wda`` (point-wise, κ = 1) and ``run_wda_pp`` (WDA++), imported at run time
  from a checkout given by ``--wda-src`` or ``$WDA_SRC`` (never vendored; without one the official
  rows are skipped with a message). It is called as its ``run_wda_attack.py`` calls it: 10 probe
  steps per rival, ``select_metric: logit_raw``, ``topk`` 9 (its default; every rival of the 10
  digit classes), ``srchiter`` 10; ``step_size`` is the same α the suite uses (the official script
  passes an absolute 0.02, which is the paper's 0.6375·ε at ε = 8/255). Its model is the built-in
  as an ``nn.Module`` on [0, 1] pixels (the normalisation inside), on the classifier's device;
- the official WDA++ with ``select_metric: logit`` (the margin θ_j − θ_y, the suite's rule), to
  tell the documented deviation "margin vs raw logit" apart from other differences;
- the suite's ``wda`` (κ = 1, p = 1, ``probe`` 10, ``maxiter`` 20; its default ``probing:
  separate``, and ``probing: shared``, Alg. 1's one trajectory) and ``wda_pp`` at its default
  ``top_k`` 5 and at ``top_k`` 9 (the official default); the latter is the suite's configuration
  closest to the official code, to be compared with the official margin row.

Everything is scored here, the same way for both sides, from the points and masses each returns
(never from either side's own report): the accuracy of P_adv, (1/N) Σ (1 − a_i) + a_i·correct(X̃_i)
over the N clean-correct digits (a_i = 1 for WDA; WDA++'s a_i are each side's own allocation of
its own flip distances, the official ``_allocate_budget`` or the suite's ``allocate``), correct
meaning the label's logit is strictly the largest; the transport cost (1/N) Σ a_i ‖X̃_i − X_i‖_r^p
in float64, against ε^p (relative slack 1e-6); for WDA each point's ‖δ_i‖_r against ε; and
points outside the [0, 1] box. WDA++ runs its flip search once per side and variant; the
allocation is then made for each p in ``--p``. "only here" counts points this row breaks (a_i > 0
and X̃_i misclassified) that its reference row does not, "only ref." the reverse; "flips" counts
the points whose X̃_i is misclassified whatever their mass (WDA++: the flips found), and
"med. d" is the median r-distance of those flips. Times are wall seconds on this machine (torch's
default threads); the suite's own reported accuracy is kept in the JSON beside the bench's.

    python bench/wda_official.py --wda-src /tmp/wda-src --n 100 --json /tmp/wda-bench/wda.json
    python bench/wda_official.py --wda-src /tmp/wda-src --cases builtin:digits-cnn-at:linf:0.1 --n 40
    python bench/wda_official.py --table /tmp/wda-bench/wda.json   # print the table of an earlier run

A case is ``model:norm:eps`` (norm linf, l2 or l1; the official code names them Linf, L2, L1).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import statistics
import time
from pathlib import Path

import torch
from torch import nn

from suite.attacks import InfeasibleError, build_attack
from suite.attacks.image.wda import STEP_FRACTION
from suite.attacks.image.wda_pp import allocate
from suite.data.base import Example
from suite.data.builtin import digits
from suite.models import load_model

#: Radii where 20-step PGD leaves each model between 0% and 90% (the standard CNN is at 0% from L∞
#: 0.02 and L2 0.3; L1 only on it: one-hot L1 steps barely move the PGD-trained one).
DEFAULT_CASES = ("builtin:digits-cnn:linf:0.01,builtin:digits-cnn:l2:0.2,builtin:digits-cnn:l1:2.0,"
                 "builtin:digits-cnn-at:linf:0.1,builtin:digits-cnn-at:linf:0.15,builtin:digits-cnn-at:l2:1.5")
OFFICIAL_NORM = {"linf": "Linf", "l2": "L2", "l1": "L1"}
TOLERANCE = 1e-6  # as the suite's BUDGET_TOLERANCE: a float32 L∞ step at 0.06 lands at 0.0600000024


class Pixels(nn.Module):
    """A built-in classifier as a module on [0, 1] pixels (its normalisation inside), the form the
    official code takes; checked to compute the classifier's logits."""

    def __init__(self, classifier) -> None:
        super().__init__()
        self.net = classifier.module
        self.register_buffer("mean", classifier.mean.detach().clone())
        self.register_buffer("std", classifier.std.detach().clone())
        self.eval()
        probe = torch.rand(4, 1, 32, 32, device=classifier.device)
        with torch.no_grad():
            assert torch.allclose(self(probe), classifier.logits(probe), atol=1e-5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net((x - self.mean) / self.std)


def official_module(source: str | None):
    """The official ``wda.py`` of the checkout ``source`` (or ``$WDA_SRC``), imported as a module
    of its own name; None when there is none."""
    path = source or os.environ.get("WDA_SRC")
    if not path or not (Path(path) / "wda.py").exists():
        return None
    spec = importlib.util.spec_from_file_location("official_wda", Path(path) / "wda.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name in ("run_wda", "run_wda_pp", "_allocate_budget"):
        if not hasattr(module, name):
            raise SystemExit(f"{path}/wda.py has no {name}: not the OLab-Repo/WDA code this bench knows")
    return module


def test_digits(classifier, module: nn.Module, n: int):
    """The first n test digits, and those the model classifies correctly (tensors and Examples)."""
    split = digits("test")
    x_all = torch.stack(list(split.inputs[:n])).to(classifier.device, torch.float32)
    y_all = torch.tensor(split.labels[:n], device=classifier.device)
    with torch.no_grad():
        keep = _correct(module(x_all), y_all)
    index = keep.nonzero().squeeze(1)
    examples = [Example(split.ids[i], x_all[i].cpu(), int(y_all[i])) for i in index.tolist()]
    return x_all[index], y_all[index], examples, len(x_all)


def _correct(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The label's logit strictly above every other (a tie is not correct)."""
    others = logits.scatter(1, y.view(-1, 1), float("-inf"))
    return logits.gather(1, y.view(-1, 1)).squeeze(1) > others.amax(dim=1)


def _measure(delta: torch.Tensor, norm: str) -> torch.Tensor:
    flat = delta.flatten(1).double()
    return {"linf": lambda: flat.abs().amax(dim=1), "l2": lambda: flat.norm(dim=1),
            "l1": lambda: flat.abs().sum(dim=1)}[norm]()


def score(module: nn.Module, x: torch.Tensor, y: torch.Tensor, x_tilde: torch.Tensor, masses, norm: str,
          eps: float, p: int, radius: float | None) -> dict:
    """The bench's own numbers for P_adv = (1/N) Σ (1 − a_i) δ_X_i + a_i δ_X̃_i (X_i all correct)."""
    x_tilde = x_tilde.to(x.device, torch.float32)
    masses = torch.as_tensor(masses, dtype=torch.float64).flatten().cpu()
    if len(masses) != len(x) or len(x_tilde) != len(x):
        raise ValueError(f"{len(x_tilde)} points and {len(masses)} masses for {len(x)} examples")
    distance = _measure(x_tilde - x, norm).cpu()
    with torch.no_grad():
        wrong = ~_correct(module(x_tilde), y).cpu()
    n = len(x)
    accuracy = float(((1 - masses) + masses * (~wrong).double()).sum()) / n
    cost = float((masses * distance.pow(p)).sum()) / n
    budget = eps ** p
    outside = ((x_tilde.flatten(1) < 0) | (x_tilde.flatten(1) > 1)).any(dim=1).cpu()
    flipped = wrong & (distance > 0)
    broken = wrong & (masses > 0)
    problems = []
    if cost > budget * (1 + TOLERANCE) + 1e-15:
        problems.append(f"cost {cost:.6g} > eps^p {budget:.6g}")
    if bool(outside.any()):
        problems.append(f"{int(outside.sum())} points outside [0,1]")
    if radius is not None and bool((distance > radius * (1 + TOLERANCE) + 1e-12).any()):
        over = distance > radius * (1 + TOLERANCE) + 1e-12
        problems.append(f"{int(over.sum())} points beyond eps (max {float(distance.max()):.6g})")
    if bool((masses < 0).any() or (masses > 1).any()):
        problems.append("a mass outside [0, 1]")
    return {"accuracy": accuracy, "cost": cost, "budget": budget, "cost_fraction": cost / budget if budget else 0.0,
            "moved_mass": float(masses[distance > 0].sum()) / n, "broken": broken.nonzero().squeeze(1).tolist(),
            "flips": int(flipped.sum()),
            "median_flip_distance": float(distance[flipped].median()) if bool(flipped.any()) else None,
            "problems": problems, "distances": distance.tolist(), "masses": masses.tolist()}


def _timed(call):
    start = time.perf_counter()
    result = call()
    return result, time.perf_counter() - start


def run_case(classifier, module: nn.Module, official, model_name: str, norm: str, eps: float, n: int,
             ps: list[int], maxiter: int, probe: int, search_steps: int, batch_size: int, seed: int) -> dict:
    x, y, examples, total = test_digits(classifier, module, n)
    alpha = STEP_FRACTION[norm] * eps
    device = classifier.device
    case = {"model": model_name, "norm": norm, "eps": eps, "n": total, "clean_correct": len(x), "alpha": alpha,
            "maxiter": maxiter, "probe": probe, "search_steps": search_steps, "rows": []}
    print(f"{model_name} {norm} eps={eps}: {len(x)}/{total} clean-correct, alpha={alpha:.5g}", flush=True)

    def record(attack, side, p, points, masses, seconds, ref, radius=None, **extra):
        row = {"attack": attack, "side": side, "p": p, "seconds": seconds, "ref": ref,
               **score(module, x, y, points, masses, norm, eps, p, radius), **extra}
        case["rows"].append(row)
        print(f"  {attack} p={p} {side}: acc {row['accuracy']:.4f} cost {row['cost']:.4g}/{row['budget']:.4g} "
              f"flips {row['flips']} {seconds:.1f}s {'; '.join(row['problems'])}", flush=True)

    def suite_records(attack, outputs, adversarial):
        with torch.no_grad():
            wrong = ~_correct(module(adversarial.to(device)), y).cpu()
        clean = [{"id": e.id, "correct": 1.0} for e in examples]
        records = [{"id": e.id, "robust": 0.0 if w else 1.0, "perturbation": o.perturbation, "extras": dict(o.extras)}
                   for e, o, w in zip(examples, outputs, wrong.tolist())]
        try:
            return attack.aggregate(clean, records)["accuracy"]
        except InfeasibleError as error:
            return f"InfeasibleError: {error}"

    # WDA, kappa = 1 (the official code has no kappa): a point-wise attack in the eps-ball.
    if official is not None:
        (adv, _, j_star), seconds = _timed(lambda: official.run_wda(
            module, x, y, eps=eps, norm=OFFICIAL_NORM[norm], steps=maxiter, bs=batch_size, topk=None,
            probe_steps=probe, step_size=alpha, device=device, verbose=False, return_history=False,
            select_metric="logit_raw"))
        record("wda", "official", 1, adv, torch.ones(len(x)), seconds, None, radius=eps, j_star=j_star.tolist())
    # The suite's default (each rival probed on its own from X_i), then Alg. 1's one shared trajectory.
    for side, probing in (("suite", "separate"), ("suite shared", "shared")):
        attack = build_attack("wda", {"norm": norm, "eps": eps, "alpha": alpha, "maxiter": maxiter, "probe": probe,
                                      "kappa": 1.0, "p": 1, "probing": probing})
        outputs, seconds = _timed(lambda: attack.run(classifier, examples, seed))
        adv = torch.stack([o.adversarial for o in outputs])
        record("wda", side, 1, adv, torch.ones(len(x)), seconds, "official" if official else None, radius=eps,
               suite_reported=suite_records(attack, outputs, adv))

    # WDA++: one flip search per side and variant, then each side's own allocation for every p.
    if official is not None:
        for side, metric in (("official", "logit_raw"), ("official margin", "logit")):
            (adv, _, aux), seconds = _timed(lambda: official.run_wda_pp(
                module, x, y, eps=eps, norm=OFFICIAL_NORM[norm], wasserstein_p=1, steps=maxiter, bs=batch_size,
                topk=None, srchiter=search_steps, step_size=alpha, device=device, verbose=False,
                return_history=False, select_metric=metric))
            for p in ps:
                masses = aux["alpha"] if p == 1 else official._allocate_budget(aux["distances"], eps, p=float(p))
                record("wda_pp", side, p, adv, masses, seconds, None if side == "official" else "official",
                       official_reported=aux["mixture_robust"] if p == 1 else None)
    for side, top_k, ref in (("suite top_k=5", 5, "official"), ("suite top_k=9", 9, "official margin")):
        attack = build_attack("wda_pp", {"norm": norm, "eps": eps, "alpha": alpha, "maxiter": maxiter,
                                         "top_k": top_k, "search_steps": search_steps, "p": 1})
        outputs, seconds = _timed(lambda: attack.run(classifier, examples, seed))
        adv = torch.stack([o.adversarial for o in outputs])
        distances = [math.inf if o.extras.get("distance") is None else float(o.extras["distance"]) for o in outputs]
        for p in ps:
            attack_p = build_attack("wda_pp", {"norm": norm, "eps": eps, "alpha": alpha, "maxiter": maxiter,
                                               "top_k": top_k, "search_steps": search_steps, "p": p})
            record("wda_pp", side, p, adv, allocate(distances, eps, p), seconds, ref if official else None,
                   suite_reported=suite_records(attack_p, outputs, adv))

    # "only here" / "only ref.": points broken by one row and not by its reference row.
    by_key = {(row["attack"], row["side"], row["p"]): row for row in case["rows"]}
    for row in case["rows"]:
        reference = by_key.get((row["attack"], row["ref"], row["p"])) if row["ref"] else None
        if reference is not None:
            mine, theirs = set(row["broken"]), set(reference["broken"])
            row["only_here"], row["only_ref"] = sorted(mine - theirs), sorted(theirs - mine)
            both = [(a, b) for a, b in zip(row["distances"], reference["distances"]) if a > 0 and b > 0]
            row["median_distance_ratio"] = statistics.median(a / b for a, b in both) if both else None
    return case


def table(cases: list[dict]) -> str:
    lines = ["| model | r | ε | attack | p | side | accuracy (%) | cost / ε^p | flips | med. d | only here | only ref. "
             "| ref. | s | problems |", "|" + "---|" * 15]
    for case in cases:
        for row in case["rows"]:
            median = row["median_flip_distance"]
            lines.append(
                f"| {case['model'].removeprefix('builtin:')} | {case['norm']} | {case['eps']:g} | {row['attack']} "
                f"| {row['p']} | {row['side']} | {100 * row['accuracy']:.1f} | {row['cost_fraction']:.3f} "
                f"| {row['flips']}/{case['clean_correct']} | {'-' if median is None else f'{median:.4g}'} "
                f"| {len(row['only_here']) if 'only_here' in row else '-'} "
                f"| {len(row['only_ref']) if 'only_ref' in row else '-'} | {row['ref'] or '-'} "
                f"| {row['seconds']:.1f} | {'; '.join(row['problems']) or 'ok'} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wda-src", help="a checkout of github.com/OLab-Repo/WDA (or $WDA_SRC)")
    parser.add_argument("--cases", default=DEFAULT_CASES, help=f"comma-separated model:norm:eps (default {DEFAULT_CASES})")
    parser.add_argument("--n", type=int, default=100, help="first n test digits, clean-correct ones kept (default 100)")
    parser.add_argument("--p", type=int, nargs="+", default=[1, 2], choices=[1, 2], help="WDA++ Wasserstein orders")
    parser.add_argument("--maxiter", type=int, default=20, help="attack steps (paper and official script: 20)")
    parser.add_argument("--probe", type=int, default=10, help="WDA probe steps (paper and official script: 10)")
    parser.add_argument("--search-steps", type=int, default=10, help="WDA++ bisections (srchiter, 10)")
    parser.add_argument("--batch-size", type=int, default=128, help="official code's bs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's)")
    parser.add_argument("--json", help="write the numbers here")
    parser.add_argument("--table", nargs="+", help="only print the table of these earlier --json files")
    args = parser.parse_args()
    if args.table:
        print(table([case for path in args.table for case in json.loads(Path(path).read_text())["cases"]]))
        return
    if args.threads:
        torch.set_num_threads(args.threads)
    official = official_module(args.wda_src)
    if official is None:
        print("official WDA not found (give --wda-src or $WDA_SRC, a checkout of github.com/OLab-Repo/WDA with "
              "wda.py): skipping that peer; suite rows only, no only-here/only-ref. columns")
    report = {"n": args.n, "threads": torch.get_num_threads(), "wda_src": args.wda_src or os.environ.get("WDA_SRC"),
              "official": official is not None, "cases": []}
    modules = {}
    start = time.perf_counter()
    for spec in args.cases.split(","):
        model_name, norm, eps = spec.rsplit(":", 2)
        if model_name not in modules:
            classifier = load_model(model_name)
            modules[model_name] = (classifier, Pixels(classifier))
        classifier, module = modules[model_name]
        report["cases"].append(run_case(classifier, module, official, model_name, norm, float(eps), args.n, args.p,
                                        args.maxiter, args.probe, args.search_steps, args.batch_size, args.seed))
        report["seconds"] = time.perf_counter() - start
        if args.json:
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps(report, indent=2))
    print(f"\ntotal {time.perf_counter() - start:.0f}s\n")
    print(table(report["cases"]))


if __name__ == "__main__":
    main()
