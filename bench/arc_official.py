"""The suite's ``arc`` against the official ARC code, side by side, on randomized ensembles of the
built-in digits models.

ARC is Algorithm 2 of Dbouk & Shanbhag, "Adversarial Vulnerability of Randomized Ensembles"
(ICML 2022). The official implementation (github.com/hsndbk4/ARC, ``attack.py``:
``attack_arc``) is imported at run time from a checkout given by ``--arc-src`` or ``$ARC_SRC``
(never vendored; the peer is skipped with a message when absent). It is called as its own
``eval_robustness_bat_sweep.py`` calls it: members as a list of modules, α as a numpy array,
``rand_init`` off (the script's default), G = all (``g = -1``) unless ``--official-g``; the step
η as in its README (L∞: η = ε; L2: η = ε/4, ``--official-l2-step``), K = ``--steps`` (the
README's 20). Small adapters here, not edits of the official files: each member is a module
taking [0, 1] pixels (the suite's wrapper normalises, so ``normalize`` is the identity), the
code's ``.cuda()`` calls are redirected to the models' device while it runs, and
``np.infty`` (gone in NumPy 2) is supplied by a shim in place of the module's ``np``.

On the same first ``--n`` test digits (``digits("test")``), for each ensemble and threat:

- ``official ARC``: the official code;
- ``suite arc``: ``build_attack("arc", {norm, eps, steps: K})``, the suite's defaults otherwise
  (η = ε under L∞; under L2 a pass of η = ε/4 and one of η = ε on what is left; members of equal
  α in both orders; all hyperplanes, δ = 0 start; then the corrected-β pass, ``base_beta``);
- ``suite arc (official settings)``: the suite's ``arc`` with the official run's η and G, one
  order (``tie_orders: false``), the paper's β only (``base_beta: false``), and the members
  reordered so that equal α are visited in the official order (``np.flip(np.argsort(α))``, last
  first, where the suite's first order is member order). What is left between this row and the
  official one are the undocumented differences (and the handling of a step that cancels to
  float noise, docs/ensembles.md).

Every adversarial input, from either side, is scored alone (one example per forward pass, as
the suite's records are) with the ensemble's exact expected accuracy
L(x, y, α) = Σ α_i 1{argmax f_i(x) = y} (``RandomizedEnsemble.correctness``), and an example's
robust value is min(L clean, L adversarial). The official outputs are first checked to lie in
the ε-ball (L∞: ‖δ‖∞ ≤ ε + 1e-6; L2: ‖δ‖₂ ≤ ε(1 + 1e-5)) and the [0, 1] box; any that does not is
counted and reported (and still scored). "better" counts examples where the row's L is strictly
lower than the official one's, "worse" the reverse; the differing example ids follow with
L official → L row. Times are wall seconds of the attack alone on this machine.

    python bench/arc_official.py --arc-src /tmp/arc-bench/ARC --n 100 --json /tmp/arc-bench/arc.json
    python bench/arc_official.py --arc-src /tmp/arc-bench/ARC --n 20 --steps 5 --threats linf:0.15  # quick
    python bench/arc_official.py --ensembles 'ensemble:0.4*builtin:digits-cnn-at,0.3*builtin:digits-cnn,0.3*builtin:digits-cnn-bat'
    python bench/arc_official.py --table /tmp/arc-bench/arc.json   # print the table of an earlier run

``--save DIR`` also writes each case's adversarial inputs (``<case>.pt``) for a closer look.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import json
import os
import subprocess
import time
from pathlib import Path

import numpy
import torch
from torch import nn

from suite.attacks import build_attack
from suite.data.base import Example
from suite.data.builtin import digits
from suite.models import load_model
from suite.models.ensemble import RandomizedEnsemble

ENSEMBLES = (
    "ensemble:0.85*builtin:digits-cnn-at,0.15*builtin:digits-cnn-bat",
    "ensemble:0.5*builtin:digits-cnn,0.5*builtin:digits-cnn-at",
)
THREATS = ("linf:0.15", "l2:1.0")
OFFICIAL = "official ARC"
SUITE = "suite arc"
MATCHED = "suite arc (official settings)"


# --------------------------------------------------------------------------- the official code


def _arc_path(flag: str | None) -> Path | None:
    path = flag or os.environ.get("ARC_SRC")
    if path and (Path(path) / "attack.py").exists():
        return Path(path)
    return None


def load_official(source: Path):
    """The official ``attack.py`` as a module (under a name of its own: ``attack`` is too common),
    with ``np.infty`` supplied (NumPy 2 removed it; the code uses it for its initial ζ = ∞)."""
    spec = importlib.util.spec_from_file_location("arc_official_attack", source / "attack.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    class NumpyCompat:
        infty = numpy.inf

        def __getattr__(self, name):
            return getattr(numpy, name)

    module.np = NumpyCompat()
    return module


def source_identity(source: Path) -> dict:
    """The checkout's commit (when it is a git work tree) and the hash of its ``attack.py``."""
    identity = {"path": str(source),
                "attack_py_sha256": hashlib.sha256((source / "attack.py").read_bytes()).hexdigest()[:16]}
    try:
        identity["commit"] = subprocess.run(["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True,
                                            text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        identity["commit"] = None
    return identity


class Member(nn.Module):
    """One ensemble member as the official code calls it: a module from [0, 1] pixels to logits
    (the suite's wrapper normalises with the member's own mean and std), with its graph."""

    def __init__(self, classifier) -> None:
        super().__init__()
        self.classifier = classifier

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier.logits(x, grad=True)


@contextlib.contextmanager
def on_device(device: torch.device):
    """The official code calls ``.cuda()`` on its tensors: send them to ``device`` instead."""
    original = torch.Tensor.cuda
    torch.Tensor.cuda = lambda self, *args, **kwargs: self.to(device)
    try:
        yield
    finally:
        torch.Tensor.cuda = original


def official_step(norm: str, eps: float, l2_fraction: float) -> float:
    """η of the official README's commands: ε under L∞ (``--eta 8`` at ``--epsilon 8``), ε/4 under
    L2 (``--eta 32`` at ``--epsilon 128``)."""
    return eps if norm == "linf" else l2_fraction * eps


def run_official(official, model: RandomizedEnsemble, x, y, norm: str, eps: float, steps: int, step: float, g: int,
                 seed: int, batch_size: int) -> tuple[torch.Tensor, float]:
    members = [Member(member) for member in model.members]
    alphas = numpy.array(model.alphas)
    torch.manual_seed(seed)
    start = time.perf_counter()
    adversarial = []
    with on_device(model.device):
        for begin in range(0, len(x), batch_size):
            xs, ys = x[begin : begin + batch_size].to(model.device), y[begin : begin + batch_size].to(model.device)
            delta = official.attack_arc(members, xs, ys, eps, alphas, steps, step, {"linf": "l_inf", "l2": "l_2"}[norm],
                                        num_classes=model.num_classes, g=g, normalize=lambda z: z, rand_init=False)
            adversarial.append((xs + delta.detach()).cpu())
    return torch.cat(adversarial), time.perf_counter() - start


# --------------------------------------------------------------------------- the suite's arc


def official_order(model: RandomizedEnsemble) -> RandomizedEnsemble:
    """The same ensemble with its members listed in the official visiting order
    (``np.flip(np.argsort(α))``): the suite's stable sort by decreasing α then visits them in
    that order, ties included (L does not depend on the members' order)."""
    order = [int(i) for i in numpy.flip(numpy.argsort(numpy.array(model.alphas)))]
    return RandomizedEnsemble([model.members[i] for i in order], [model.alphas[i] for i in order])


def run_suite(model, examples, params: dict, seed: int, batch_size: int) -> tuple[torch.Tensor, float]:
    attack = build_attack("arc", params)
    start = time.perf_counter()
    outputs = []
    for begin in range(0, len(examples), batch_size):
        outputs += attack.run(model, examples[begin : begin + batch_size], seed)
    seconds = time.perf_counter() - start
    return torch.stack([output.adversarial.detach().cpu() for output in outputs]), seconds


# --------------------------------------------------------------------------- scoring


def score_alone(model, inputs: torch.Tensor, y: torch.Tensor) -> list[float]:
    """L(x, y, α) of each input, one example per forward pass (as the suite's records)."""
    with torch.no_grad():
        return [float(model.correctness(inputs[i : i + 1], y[i : i + 1])[0]) for i in range(len(inputs))]


def threat_check(x: torch.Tensor, adversarial: torch.Tensor, norm: str, eps: float) -> dict:
    """How many inputs leave the ε-ball or the [0, 1] box, and by how much at most."""
    delta = (adversarial - x).flatten(1).double()
    size = delta.abs().amax(dim=1) if norm == "linf" else delta.norm(dim=1)
    limit = eps + 1e-6 if norm == "linf" else eps * (1 + 1e-5)
    box = torch.maximum((-adversarial).flatten(1).amax(dim=1), (adversarial - 1).flatten(1).amax(dim=1)).double()
    return {"outside_ball": int((size > limit).sum()), "max_norm": float(size.max()),
            "max_ball_excess": max(0.0, float((size - eps).max())),
            "outside_box": int((box > 0).sum()), "max_box_excess": max(0.0, float(box.max()))}


def evaluate_case(spec: str, norm: str, eps: float, args, official) -> dict:
    model = load_model(spec)
    split = digits("test")
    n = min(args.n, len(split.ids))
    examples = [Example(split.ids[i], split.inputs[i], split.labels[i]) for i in range(n)]
    x = torch.stack([example.input for example in examples]).float()
    y = torch.tensor([example.label for example in examples])
    clean = score_alone(model, x, y)
    case = {"ensemble": spec, "alphas": model.alphas, "norm": norm, "eps": eps, "n": n, "steps": args.steps,
            "ids": [example.id for example in examples], "clean_L": clean, "clean_accuracy": sum(clean) / n,
            "rows": {}}
    saved = {"x": x, "y": y}

    def record(label, adversarial, seconds, params):
        values = score_alone(model, adversarial, y)
        robust = [min(a, c) for a, c in zip(values, clean)]
        case["rows"][label] = {"params": params, "seconds": seconds, "L": robust, "robust_accuracy": sum(robust) / n,
                               "threat_check": threat_check(x, adversarial, norm, eps)}
        saved[label] = adversarial
        print(f"  {spec} {norm} {eps:g} {label}: robust {100 * sum(robust) / n:.2f}% in {seconds:.1f}s", flush=True)

    step = official_step(norm, eps, args.official_l2_step)
    if official is not None:
        adversarial, seconds = run_official(official, model, x, y, norm, eps, args.steps, step, args.official_g,
                                            args.seed, args.batch_size)
        record(OFFICIAL, adversarial, seconds, {"step": step, "g": args.official_g, "attack_iters": args.steps,
                                                "rand_init": False})
    params = {"norm": norm, "eps": eps, "steps": args.steps}
    adversarial, seconds = run_suite(model, examples, params, args.seed, args.batch_size)
    record(SUITE, adversarial, seconds, params)
    if not args.no_matched:
        # The paper's line 20 as the official code has it (no corrected-β pass): its points.
        matched = {**params, "step": step, "tie_orders": False, "base_beta": False}
        if args.official_g != -1:
            matched["candidates"] = args.official_g
        reordered = official_order(model)
        adversarial, seconds = run_suite(reordered, examples, matched, args.seed, args.batch_size)
        record(MATCHED, adversarial, seconds,
               {**matched, "member_order": [model.members.index(m) for m in reordered.members]})
    reference = case["rows"].get(OFFICIAL)
    if reference is not None:
        for label, row in case["rows"].items():
            if label == OFFICIAL:
                continue
            pairs = list(zip(reference["L"], row["L"]))
            row["better"] = [case["ids"][i] for i, (o, s) in enumerate(pairs) if s < o - 1e-6]
            row["worse"] = [case["ids"][i] for i, (o, s) in enumerate(pairs) if s > o + 1e-6]
            row["differ"] = {case["ids"][i]: [o, s] for i, (o, s) in enumerate(pairs) if abs(s - o) > 1e-6}
    if args.save:
        Path(args.save).mkdir(parents=True, exist_ok=True)
        name = f"{spec.replace(':', '_').replace('*', 'x').replace(',', '+')}-{norm}-{eps:g}.pt"
        torch.save(saved, Path(args.save) / name)
    return case


# --------------------------------------------------------------------------- report


def _short(spec: str) -> str:
    return spec.removeprefix("ensemble:").replace("builtin:digits-", "")


def table(report: dict, show: int = 8) -> str:
    lines = ["| ensemble | threat | clean % | attack | robust % | better / worse than official | seconds | "
             "outside ball / box | differing ids (L official → L this) |", "|---|---|---|---|---|---|---|---|---|"]
    for case in report["cases"]:
        threat = f"{'L∞' if case['norm'] == 'linf' else 'L2'} {case['eps']:g}"
        first = True
        for label, row in case["rows"].items():
            check = row["threat_check"]
            outside = f"{check['outside_ball']} / {check['outside_box']}"
            if "better" in row:
                versus = f"{len(row['better'])} / {len(row['worse'])}"
                differ = ", ".join(f"{i.removeprefix('digits-')} ({o:.2f}→{s:.2f})"
                                   for i, (o, s) in list(row["differ"].items())[:show])
                if len(row["differ"]) > show:
                    differ += f", … ({len(row['differ'])} in all)"
            else:
                versus, differ = "–", "–"
            seconds = f"{row['seconds']:.1f}" + (" (same run)" if row.get("same_as") else "")
            lines.append(f"| {_short(case['ensemble']) if first else ''} | {threat if first else ''} | "
                         f"{100 * case['clean_accuracy']:.1f} | {label} | "
                         f"{100 * row['robust_accuracy']:.2f} | {versus} | {seconds} | {outside} | {differ or 'none'} |")
            first = False
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arc-src", help="a checkout of github.com/hsndbk4/ARC (or $ARC_SRC)")
    parser.add_argument("--n", type=int, default=100, help="first n test digits (default 100)")
    parser.add_argument("--ensembles", nargs="+", default=list(ENSEMBLES), help="ensemble: specs")
    parser.add_argument("--threats", nargs="+", default=list(THREATS), help="norm:eps, e.g. linf:0.15 l2:1.0")
    parser.add_argument("--steps", type=int, default=20, help="iterations K on both sides (the README's 20)")
    parser.add_argument("--official-l2-step", type=float, default=0.25,
                        help="the official η under L2, as a fraction of ε (README: 32/128)")
    parser.add_argument("--official-g", type=int, default=-1, help="the official g (-1: all hyperplanes)")
    parser.add_argument("--no-matched", action="store_true", help="skip the suite arc with the official settings")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's)")
    parser.add_argument("--show", type=int, default=8, help="differing example ids shown per row in the table")
    parser.add_argument("--save", help="write each case's adversarial inputs here (.pt)")
    parser.add_argument("--json", help="write the numbers here")
    parser.add_argument("--table", nargs="+", help="only print the table of these earlier --json files")
    args = parser.parse_args()
    if args.table:
        cases = [case for path in args.table for case in json.loads(Path(path).read_text())["cases"]]
        print(table({"cases": cases}, args.show))
        return
    if args.threads:
        torch.set_num_threads(args.threads)
    source = _arc_path(args.arc_src)
    official = None
    if source is None:
        print("official ARC not found (give --arc-src or $ARC_SRC, a checkout of github.com/hsndbk4/ARC): "
              "skipping that peer; no better/worse columns")
    else:
        official = load_official(source)
    report = {"n": args.n, "steps": args.steps, "seed": args.seed, "threads": torch.get_num_threads(),
              "official": source_identity(source) if source else None, "cases": []}
    began = time.perf_counter()
    for spec in args.ensembles:
        for threat in args.threats:
            norm, _, eps = threat.partition(":")
            report["cases"].append(evaluate_case(spec, norm, float(eps), args, official))
            report["seconds"] = time.perf_counter() - began
            if args.json:
                Path(args.json).write_text(json.dumps(report, indent=2))
    print()
    if report["official"]:
        print(f"official ARC: {report['official']['path']} at {report['official']['commit']} "
              f"(attack.py sha256 {report['official']['attack_py_sha256']})")
    print(f"{args.n} test digits, K = {args.steps}, torch threads {report['threads']}, "
          f"{report['seconds']:.0f} s in all\n")
    print(table(report, args.show))


if __name__ == "__main__":
    main()
