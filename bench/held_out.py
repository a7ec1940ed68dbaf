"""``auto`` on models it was not tuned on, against the official AutoAttack code.

``auto`` (APGD-CE 100 steps, then APGD-T on 9 targets × 30 steps) was tuned on the three
built-in digits models. This bench trains other small digits models here (plain torch, fixed
seeds: PGD-AT with other seeds, another radius, another architecture), then on each one runs,
on the same clean-correct test digits:

- the official AutoAttack code (github.com/fra31/auto-attack, ``version='standard'``), read
  from a checkout given by ``--autoattack-src`` or ``$AUTOATTACK_SRC`` (never vendored; the
  peer is skipped with a message when absent). Each of its components' ``perturb`` is wrapped
  to record which component broke which example;
- the suite's ``auto`` (and, unless ``--quick``, the variant ``target_steps: 100``);
- on what ``auto`` left unbroken, candidate last stages (APGD-T top-1 × 100 steps, APGD-T
  9 × 100, an APGD-CE restart with another seed, APGD-DLR, and unless ``--quick`` FAB-T and
  Square): which of ``auto``'s misses each finds and what it costs.

Weights are cached as safetensors under ``--cache`` (default /tmp/advsuite-held-out), not in
the repository. Robust accuracy is over all n test digits; "missed" counts examples official
AutoAttack breaks and the row's attack does not, "extra" the reverse (indices are positions in
the test subset). Times are wall seconds on this machine; the ratios are the result.

    python bench/held_out.py --autoattack-src /tmp/autoattack-src --n 300 --json /tmp/held_out.json
    python bench/held_out.py --quick                         # 60 digits, two models, no FAB/Square
    python bench/held_out.py --models cnn-at0.1-s1 --l2 cnn-at0.1-s1 --no-linf  # only its L2 1.0 case
    python bench/held_out.py --table /tmp/a.json /tmp/b.json  # print the table of earlier runs

With ``--seeds``, the spread over seeds instead (one case per model and threat, every seed on
the same digits): official AutoAttack and ``auto`` (and the variants in ``--spread-variants``)
at each seed, then per attack the mean robust accuracy and, against official AutoAttack at every
*other* seed, how many of its broken examples the attack's run missed. AutoAttack against
itself at another seed is the noise floor of "missed": an example on the decision boundary is
broken by some random starts and not others. Runs with disjoint seeds can go to separate
``--json`` files (two processes) and be merged with ``--table``:

    python bench/held_out.py --autoattack-src /tmp/autoattack-src --models builtin:digits-cnn --seeds 0 1 2 --json /tmp/spread.json

With ``--boundary-from`` (earlier ``--seeds`` files), the examples on the boundary instead: those
some run broke and another did not. Each attack runs on them alone with each of
``--boundary-seeds`` seeds (from 1000 up, unused by the spread), giving every example's break
frequency per attack; their sums are each attack's expected number broken on the boundary (the
other examples are broken by every run or by none):

    python bench/held_out.py --autoattack-src /tmp/autoattack-src --models builtin:digits-cnn --boundary-from /tmp/spread.json --boundary-seeds 20 --json /tmp/boundary.json

With ``--trace-targets`` as well, those examples' targets instead: APGD-T towards each of the 9
most likely wrong classes alone, at 30 and at 100 steps, per seed; the table gives the breaks
per target rank and how often a 100-step break is towards the target whose 30-step search came
closest (what ``auto``'s last search, ``best_target_steps``, aims at):

    python bench/held_out.py --models builtin:digits-cnn --boundary-from /tmp/spread.json --boundary-seeds 20 --trace-targets --json /tmp/trace.json

``--spread-variants`` also adds its variants of ``auto`` beside it in a plain run, and
``--no-last-stages`` skips the candidate last stages there.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
from torch import nn

from suite.attacks import build_attack
from suite.data.builtin import digits
from suite.data.config import DatasetConfig
from suite.data.load import load_eval_set
from suite.evaluation.scoring import score_outputs
from suite.models.wrap import from_module

#: name → (architecture, training L∞ radius, training seed). None of them is a built-in.
MODELS = {
    "cnn-at0.1-s1": ("test_resnet", 0.1, 1),
    "cnn-at0.1-s2": ("test_resnet", 0.1, 2),
    "cnn-at0.05-s1": ("test_resnet", 0.05, 1),
    "mlp-at0.1-s1": ("mlp", 0.1, 1),
}
MEAN, STD = 0.3, 0.4


class Normalized(nn.Module):
    """Takes [0, 1] pixels (as AutoAttack and the suite's wrapper expect), normalises inside."""

    def __init__(self, body: nn.Module, mean=MEAN, std=STD) -> None:
        super().__init__()
        self.body = body
        self.mean, self.std = (torch.as_tensor(v, dtype=torch.float32).reshape(1, -1, 1, 1) for v in (mean, std))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body((x - self.mean) / self.std)


def _architecture(arch: str) -> nn.Module:
    if arch == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(32 * 32, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                             nn.Linear(256, 10))
    import timm

    return timm.create_model(arch, num_classes=10, in_chans=1)


def _pgd(model: nn.Module, x: torch.Tensor, y: torch.Tensor, eps: float, steps: int, generator) -> torch.Tensor:
    alpha = eps / 4
    delta = (torch.rand(x.shape, generator=generator) * 2 - 1) * eps
    for _ in range(steps):
        delta.requires_grad_(True)
        loss = nn.functional.cross_entropy(model((x + delta).clamp(0, 1)), y)
        (grad,) = torch.autograd.grad(loss, delta)
        delta = (delta.detach() + alpha * grad.sign()).clamp(-eps, eps)
    return (x + delta).clamp(0, 1).detach()


BUILTIN = "builtin:digits-cnn"


def builtin_pixels_module() -> nn.Module:
    """``builtin:digits-cnn`` as a module taking [0, 1] pixels (its normalisation inside), the
    form the official AutoAttack code takes; checked to compute the built-in's logits."""
    from suite.models import load_model
    from suite.models.builtin import DIGITS_MEAN, DIGITS_STD

    classifier = load_model(BUILTIN)
    module = Normalized(classifier.module, DIGITS_MEAN, DIGITS_STD).eval()
    probe = torch.rand(4, 1, 32, 32)
    with torch.no_grad():
        assert torch.allclose(module(probe), classifier.logits(probe), atol=1e-5)
    return module


def train_model(name: str, cache: Path) -> tuple[nn.Module, dict]:
    """PGD-AT as for ``builtin:digits-cnn-at`` (10-step PGD, α = ε/4; 6 epochs of SGD lr 0.05,
    momentum 0.9, weight decay 5e-4, batch 32, lr × 0.1 after epoch 3 and × 0.01 after 4), in
    plain torch with the model's own seed; cached as safetensors."""
    from safetensors.torch import load_file, save_file

    arch, eps, seed = MODELS[name]
    torch.manual_seed(seed)
    model = Normalized(_architecture(arch))
    path = cache / f"{name}.safetensors"
    info = {"model": name, "architecture": arch, "train_eps": eps, "seed": seed}
    if path.exists():
        model.load_state_dict(load_file(str(path)))
        info["train_seconds"] = json.loads(path.with_suffix(".json").read_text())["train_seconds"]
    else:
        train = digits("train")
        images, labels = torch.stack(train.inputs), torch.tensor(train.labels)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
        generator = torch.Generator().manual_seed(seed)
        start = time.perf_counter()
        for epoch in range(6):
            for group in optimizer.param_groups:
                group["lr"] = 0.05 * (1 if epoch < 3 else 0.1 if epoch < 4 else 0.01)
            order = torch.randperm(len(labels), generator=generator)
            for begin in range(0, len(order), 32):
                rows = order[begin : begin + 32]
                model.eval()
                adversarial = _pgd(model, images[rows], labels[rows], eps, 10, generator)
                model.train()
                loss = nn.functional.cross_entropy(model(adversarial), labels[rows])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        info["train_seconds"] = time.perf_counter() - start
        cache.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
        path.with_suffix(".json").write_text(json.dumps(info))
    model.eval()
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    return model, info


def _broken(served, examples, outputs) -> list[bool]:
    return [score["robust"] < 1.0 for score in score_outputs(served, examples, outputs)]


def run_suite(served, examples, name: str, params: dict, seed: int, batch_size: int) -> tuple[list[bool], float]:
    attack = build_attack(name, params)
    start = time.perf_counter()
    outputs = []
    for begin in range(0, len(examples), batch_size):
        outputs += attack.run(served, examples[begin : begin + batch_size], seed)
    return _broken(served, examples, outputs), time.perf_counter() - start


def run_official(module: nn.Module, x: torch.Tensor, y: torch.Tensor, norm: str, eps: float, seed: int,
                 batch_size: int):
    """Official AutoAttack standard; returns broken flags, seconds, the component that broke each
    example (or None) and the class each adversarial input reached."""
    from autoattack import AutoAttack

    adversary = AutoAttack(module, norm={"linf": "Linf", "l2": "L2"}[norm], eps=eps, version="standard", seed=seed,
                           verbose=False, device="cpu")
    index = {row.numpy().tobytes(): i for i, row in enumerate(x)}
    broke_by: list[str | None] = [None] * len(x)

    def wrap(owner, label):
        perturb = owner.perturb

        def recorded(xs, ys, *args, **kwargs):
            adversarial = perturb(xs, ys, *args, **kwargs)
            with torch.no_grad():
                broken = module(adversarial).argmax(1) != ys
            for row, hit in zip(xs, broken.tolist()):
                i = index[row.numpy().tobytes()]
                if hit and broke_by[i] is None:
                    broke_by[i] = label
            return adversarial

        owner.perturb = recorded

    wrap(adversary.apgd, "apgd-ce")
    wrap(adversary.apgd_targeted, "apgd-t")
    wrap(adversary.fab, "fab-t")
    wrap(adversary.square, "square")
    start = time.perf_counter()
    adversarial, reached = adversary.run_standard_evaluation(x, y, bs=batch_size, return_labels=True)
    seconds = time.perf_counter() - start
    broken = (reached != y).tolist()
    return broken, seconds, broke_by, reached.tolist()


def _autoattack_path(flag: str | None) -> str | None:
    path = flag or os.environ.get("AUTOATTACK_SRC")
    if path and (Path(path) / "autoattack" / "autoattack.py").exists():
        return path
    return None


def _digits(module: nn.Module, model_name: str, n: int, seed: int):
    """The served model, the n test digits, their tensors, and the positions it classifies correctly."""
    served = from_module(module, input_size=(1, 32, 32), labels=[str(d) for d in range(10)], name=model_name,
                         device="cpu")
    everything = load_eval_set(DatasetConfig(spec="builtin:digits", n=n), served, seed).examples
    x_all = torch.stack([ex.input for ex in everything])
    y_all = torch.tensor([ex.label for ex in everything])
    with torch.no_grad():
        clean = (module(x_all).argmax(1) == y_all)
    return served, everything, x_all, y_all, clean.nonzero().squeeze(1).tolist()


def evaluate_case(model_name: str, module: nn.Module, norm: str, eps: float, n: int, seed: int, batch_size: int,
                  quick: bool, official: bool, slow_stages: bool = True, variant: bool = True,
                  more_variants: tuple[str, ...] = (), last_stages: bool = True) -> dict:
    served, everything, x_all, y_all, positions = _digits(module, model_name, n, seed)
    correct = [everything[i] for i in positions]
    x, y = x_all[positions], y_all[positions]
    case = {"model": model_name, "norm": norm, "eps": eps, "n": len(everything), "clean_accuracy": len(correct) / n,
            "attacks": {}}
    common = {"norm": norm, "eps": eps}

    def record(name, broken, seconds, **extra):
        case["attacks"][name] = {"robust_accuracy": (len(correct) - sum(broken)) / len(everything),
                                 "broken": [positions[i] for i, b in enumerate(broken) if b], "seconds": seconds,
                                 **extra}
        print(f"  {model_name} {norm} {eps} {name}: robust {case['attacks'][name]['robust_accuracy']:.4f} "
              f"in {seconds:.1f}s", flush=True)

    if official:
        broken, seconds, broke_by, reached = run_official(module, x, y, norm, eps, seed, batch_size)
        record("autoattack (official)", broken, seconds,
               broke_by={positions[i]: c for i, c in enumerate(broke_by) if broken[i]},
               reached={positions[i]: r for i, r in enumerate(reached) if broken[i]})
    variants = {"auto": {}}
    if variant and not quick:
        variants["auto target_steps=100"] = {"target_steps": 100}
    variants.update({label: SPREAD_VARIANTS[label][1] for label in more_variants})
    for label, params in variants.items():
        broken, seconds = run_suite(served, correct, "auto", {**common, **params}, seed, batch_size)
        record(label, broken, seconds)

    # Candidate last stages, on what auto left unbroken.
    auto_broken = set(case["attacks"]["auto"]["broken"])
    residual = [i for i in positions if i not in auto_broken]
    residual_examples = [everything[i] for i in residual]
    stages = {
        "apgd_t top-1 x 100": ("apgd_t", {"targets": 1, "steps": 100}, seed),
        "apgd_t 9 x 100": ("apgd_t", {"targets": 9, "steps": 100}, seed),
        "apgd_ce restart (seed+1)": ("apgd_ce", {"steps": 100}, seed + 1),
        "apgd_dlr 100": ("apgd_dlr", {"steps": 100}, seed),
    }
    if slow_stages and not quick:
        stages["fab_t"] = ("fab_t", {}, seed)
        stages["square 5000"] = ("square", {}, seed)
    if not last_stages:
        stages = {}
    case["last_stages"] = {}
    for label, (name, params, stage_seed) in stages.items():
        if not residual_examples:
            break
        broken, seconds = run_suite(served, residual_examples, name, {**common, **params}, stage_seed, batch_size)
        found = [residual[i] for i, b in enumerate(broken) if b]
        case["last_stages"][label] = {"found": found, "seconds": seconds, "on": len(residual)}
        print(f"  {model_name} last stage {label}: breaks {found} of {len(residual)} left, {seconds:.1f}s", flush=True)

    if official:
        reference = set(case["attacks"]["autoattack (official)"]["broken"])
        for row in case["attacks"].values():
            mine = set(row["broken"])
            row["missed"] = sorted(reference - mine)
            row["extra"] = sorted(mine - reference)
        # For each example auto misses: the rank (by clean logit) of the class AutoAttack reached.
        with torch.no_grad():
            logits = module(x_all)
        ranks = {}
        for i in case["attacks"]["auto"]["missed"]:
            order = logits[i].argsort(descending=True).tolist()
            order.remove(int(y_all[i]))
            ranks[i] = order.index(case["attacks"]["autoattack (official)"]["reached"][i]) + 1
        case["auto_missed_target_rank"] = ranks
    return case


#: ``--spread-variants``: label → (attack, parameters) run at every seed beside ``auto``.
SPREAD_VARIANTS = {
    # auto before its last search towards the closest target (best_target_steps) was added.
    "auto best_target_steps=0": ("auto", {"best_target_steps": 0}),
    "auto target_steps=100": ("auto", {"target_steps": 100}),
    "auto target_steps=50": ("auto", {"target_steps": 50}),
    "auto target_steps=60": ("auto", {"target_steps": 60}),
}


def spread_case(model_name: str, module: nn.Module, norm: str, eps: float, n: int, seeds: list[int], batch_size: int,
                official: bool, variants: list[str]) -> dict:
    """Every seed's broken set (indices into the n test digits) per attack, on the same digits."""
    served, everything, x_all, y_all, positions = _digits(module, model_name, n, 0)
    correct = [everything[i] for i in positions]
    case = {"model": model_name, "norm": norm, "eps": eps, "n": n, "clean": len(correct), "spread": {}}
    common = {"norm": norm, "eps": eps}
    attacks = {"auto": ("auto", {}), **{label: SPREAD_VARIANTS[label] for label in variants}}
    for seed in seeds:
        runs = {}
        if official:
            broken, seconds, _, _ = run_official(module, x_all[positions], y_all[positions], norm, eps, seed,
                                                 batch_size)
            runs["autoattack (official)"] = (broken, seconds)
        for label, (name, params) in attacks.items():
            runs[label] = run_suite(served, correct, name, {**common, **params}, seed, batch_size)
        for label, (broken, seconds) in runs.items():
            case["spread"].setdefault(label, {})[str(seed)] = {
                "broken": [positions[i] for i, b in enumerate(broken) if b], "seconds": seconds}
            print(f"  {model_name} {norm} {eps} seed {seed} {label}: robust {(len(correct) - sum(broken)) / n:.4f} "
                  f"in {seconds:.1f}s", flush=True)
    return case


def _chosen(module: nn.Module, model_name: str, n: int, indices: list[int]):
    """The served model, and the examples at ``indices`` of the n test digits with their tensors."""
    served, everything, _, _, _ = _digits(module, model_name, n, 0)
    chosen = [everything[i] for i in indices]
    return served, chosen, torch.stack([ex.input for ex in chosen]), torch.tensor([ex.label for ex in chosen])


def boundary_indices(cases: list[dict]) -> list[int]:
    """Examples some run of some attack broke and another run did not."""
    runs = [set(run["broken"]) for case in cases for seeds in case["spread"].values() for run in seeds.values()]
    return sorted(set().union(*runs) - set.intersection(*runs)) if runs else []


def boundary_case(model_name: str, module: nn.Module, norm: str, eps: float, n: int, indices: list[int],
                  seeds: list[int], batch_size: int, official: bool, variants: list[str]) -> dict:
    """How many of ``seeds`` break each of ``indices`` (positions in the n test digits), per attack."""
    served, chosen, x, y = _chosen(module, model_name, n, indices)
    case = {"model": model_name, "norm": norm, "eps": eps, "n": n, "indices": indices, "seeds": seeds,
            "hits": {}, "seconds": {}}
    attacks = {"auto": ("auto", {}), **{label: SPREAD_VARIANTS[label] for label in variants}}
    labels = (["autoattack (official)"] if official else []) + list(attacks)
    for label in labels:
        hits, seconds = [0] * len(indices), 0.0
        for seed in seeds:
            if label == "autoattack (official)":
                broken, took, _, _ = run_official(module, x, y, norm, eps, seed, batch_size)
            else:
                name, params = attacks[label]
                broken, took = run_suite(served, chosen, name, {"norm": norm, "eps": eps, **params}, seed, batch_size)
            hits = [h + int(b) for h, b in zip(hits, broken)]
            seconds += took
        case["hits"][label], case["seconds"][label] = hits, seconds
        print(f"  {model_name} boundary {label}: {dict(zip(indices, hits))} of {len(seeds)} seeds", flush=True)
    return case


def trace_targets(model_name: str, module: nn.Module, norm: str, eps: float, n: int, indices: list[int],
                  seeds: list[int], steps: tuple[int, int] = (30, 100)) -> dict:
    """Per boundary example, seed and target rank: does APGD-T towards that target alone break it
    at ``steps[0]`` and at ``steps[1]`` steps, and how close did the short search come (its
    targeted DLR value)? A white-box trace of one attack's searches, so it reads APGD-T's
    per-target search (``_restart_search``), which the attack API does not expose."""
    from suite.attacks.image.apgd import APGDT
    from suite.attacks.image.driver import top_targets
    from suite.attacks.image.search import EVALUATION
    from suite.seeding import example_generator

    served, chosen, x, y = _chosen(module, model_name, n, indices)
    targets = top_targets(served, x, y, 9)
    trace = {"model": model_name, "norm": norm, "eps": eps, "n": n, "indices": indices, "seeds": seeds,
             "steps": list(steps), "targets": targets.tolist(), "runs": []}
    for seed in seeds:
        run = {}
        for count in steps:
            attack = APGDT(norm=norm, eps=eps, steps=count, targets=9)
            hits, values = [], []
            for rank in range(targets.shape[1]):
                generators = [example_generator(seed, f"trace-{rank}-{count}", ex.id) for ex in chosen]
                found = attack._restart_search(served, x, y, generators, steps=count, restarts=1,
                                               loss=attack.loss_for(len(served.labels)),
                                               make_update=attack._updater(count),
                                               targets=targets[:, rank : rank + 1], mode=EVALUATION)
                hits.append((found.predictions != y).tolist())
                values.append(found.values.tolist())
            run[f"hits_{count}"], run[f"values_{count}"] = hits, values
        trace["runs"].append(run)
    return trace


def trace_table(trace: dict) -> str:
    """Per boundary example: breaks per target rank at each step count over the seeds, and how
    often the short searches' closest target is one the long search breaks towards."""
    short, long = trace["steps"]
    lines = [f"| test digit | breaks by rank 1–9 at {short} steps | at {long} steps | runs broken at {long} steps "
             f"| of those, towards the target closest at {short} steps |", "|---|---|---|---|---|"]
    for i, index in enumerate(trace["indices"]):
        runs = trace["runs"]
        at = {count: [sum(run[f"hits_{count}"][rank][i] for run in runs) for rank in range(9)] for count in (short, long)}
        broken = closest = 0
        for run in runs:
            nearest = max(range(9), key=lambda rank: (run[f"values_{short}"][rank][i], -rank))
            if any(run[f"hits_{long}"][rank][i] for rank in range(9)):
                broken += 1
                closest += int(run[f"hits_{long}"][nearest][i])
        lines.append(f"| {index} | {at[short]} | {at[long]} | {broken}/{len(runs)} | {closest}/{broken} |")
    return "\n".join(lines)


def boundary_table(case: dict) -> str:
    """Per boundary example, each attack's break frequency; the sums are expected counts broken."""
    labels = list(case["hits"])
    k = len(case["seeds"])
    lines = ["| test digit | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
    for row, index in enumerate(case["indices"]):
        lines.append(f"| {index} | " + " | ".join(f"{case['hits'][label][row]}/{k}" for label in labels) + " |")
    lines.append("| expected broken (of these) | " + " | ".join(
        f"{sum(case['hits'][label]) / k:.2f}" for label in labels) + " |")
    return "\n".join(lines)


def spread_table(cases: list[dict]) -> str:
    """Per attack: robust accuracy per seed and its mean, and examples missed against official
    AutoAttack at every other seed (AutoAttack against itself: the noise floor)."""
    merged: dict[tuple, dict] = {}
    for case in cases:
        key = (case["model"], case["norm"], case["eps"], case["n"])
        into = merged.setdefault(key, {"clean": case["clean"], "spread": {}})
        for label, seeds in case["spread"].items():
            into["spread"].setdefault(label, {}).update(seeds)
    lines = ["| model | threat | attack | robust % per seed | mean | missed vs AA's runs (mean, max) | "
             "extra (mean) | mean seconds |", "|---|---|---|---|---|---|---|---|"]
    for (model, norm, eps, n), case in merged.items():
        reference = case["spread"].get("autoattack (official)", {})
        first = True
        for label, seeds in case["spread"].items():
            robust = [100 * (case["clean"] - len(seeds[s]["broken"])) / n for s in sorted(seeds, key=int)]
            missed, extra = [], []
            for seed, run in seeds.items():
                for other, ref in reference.items():
                    if other != seed or label != "autoattack (official)":  # AA: against its other seeds
                        missed.append(len(set(ref["broken"]) - set(run["broken"])))
                        extra.append(len(set(run["broken"]) - set(ref["broken"])))
            seconds = sum(run["seconds"] for run in seeds.values()) / len(seeds)
            threat = f"{'L∞' if norm == 'linf' else 'L2'} {eps:g}"
            versus = f"{sum(missed) / len(missed):.2f}, {max(missed)}" if missed else "–"
            beyond = f"{sum(extra) / len(extra):.2f}" if extra else "–"
            lines.append(f"| {model if first else ''} | {threat if first else ''} | {label} | "
                         f"{', '.join(f'{r:.2f}' for r in robust)} | {sum(robust) / len(robust):.2f} | {versus} | "
                         f"{beyond} | {seconds:.1f} |")
            first = False
        every = {label: [set(run["broken"]) for run in seeds.values()] for label, seeds in case["spread"].items()}
        if "autoattack (official)" in every and "auto" in every:
            ever_aa = set().union(*every["autoattack (official)"])
            ever_auto = set().union(*every["auto"])
            lines.append(f"| | | broken by AA at some seed, by auto at none: {sorted(ever_aa - ever_auto) or 'none'}; "
                         f"the reverse: {sorted(ever_auto - ever_aa) or 'none'} | | | | | |")
    return "\n".join(lines)


def table(cases: list[dict]) -> str:
    lines = ["| model | threat | clean % | attack | robust % | missed | extra | seconds | time AA / this |",
             "|---|---|---|---|---|---|---|---|---|"]
    for case in cases:
        reference = case["attacks"].get("autoattack (official)")
        threat = f"{'L∞' if case['norm'] == 'linf' else 'L2'} {case['eps']:g}"
        first = True
        for name, row in case["attacks"].items():
            ratio = f"{reference['seconds'] / row['seconds']:.1f}" if reference else "–"
            missed = ", ".join(map(str, row["missed"])) if "missed" in row else "–"
            extra = ", ".join(map(str, row["extra"])) if "extra" in row else "–"
            if name.startswith("autoattack"):
                missed = extra = "–"
            lines.append(f"| {case['model'] if first else ''} | {threat if first else ''} | "
                         f"{100 * case['clean_accuracy']:.1f} | {name} | {100 * row['robust_accuracy']:.2f} | "
                         f"{missed or 0} | {extra or 0} | {row['seconds']:.1f} | {ratio} |")
            first = False
    lines.append("")
    lines.append("| model | threat | auto missed (AA component, target rank) | last stage on auto's residual: breaks (seconds) |")
    lines.append("|---|---|---|---|")
    for case in cases:
        threat = f"{'L∞' if case['norm'] == 'linf' else 'L2'} {case['eps']:g}"
        reference = case["attacks"].get("autoattack (official)")
        missed = case["attacks"]["auto"].get("missed", [])
        described = ", ".join(f"{i} ({reference['broke_by'].get(i, reference['broke_by'].get(str(i)))}, "
                              f"{case['auto_missed_target_rank'].get(i, case['auto_missed_target_rank'].get(str(i)))})"
                              for i in missed) if reference else "–"
        stages = "; ".join(f"{label}: {stage['found'] or 'none'} ({stage['seconds']:.1f} s on {stage['on']})"
                           for label, stage in case.get("last_stages", {}).items())
        lines.append(f"| {case['model']} | {threat} | {described or 'none'} | {stages} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=300, help="test digits per model (default 300)")
    parser.add_argument("--models", default=",".join(MODELS),
                        help=f"comma-separated, of {', '.join(MODELS)}, and {BUILTIN} (at --builtin-eps)")
    parser.add_argument("--builtin-eps", type=float, default=0.006, help=f"L-inf radius for {BUILTIN}")
    parser.add_argument("--l2", default="cnn-at0.1-s1", help="also run L2 1.0 on these models (comma-separated; '' for none)")
    parser.add_argument("--autoattack-src", help="a checkout of github.com/fra31/auto-attack (or $AUTOATTACK_SRC)")
    parser.add_argument("--cache", default="/tmp/advsuite-held-out", help="where trained weights are cached")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's)")
    parser.add_argument("--quick", action="store_true", help="60 digits, two models, no L2, no FAB-T/Square, no variant")
    parser.add_argument("--no-slow-stages", action="store_true",
                        help="skip the FAB-T and Square last stages (each costs about what AutoAttack's own does)")
    parser.add_argument("--no-variant", action="store_true", help="skip the variant target_steps: 100 of auto")
    parser.add_argument("--no-linf", action="store_true", help="trained models: only the L2 cases of --l2")
    parser.add_argument("--seeds", type=int, nargs="+", help="the spread over these seeds instead (see above)")
    parser.add_argument("--spread-variants", nargs="*", default=[], choices=list(SPREAD_VARIANTS),
                        help="variants of auto run beside it (with --seeds, at every seed)")
    parser.add_argument("--no-last-stages", action="store_true",
                        help="skip the candidate last stages on what auto leaves unbroken")
    parser.add_argument("--boundary-from", nargs="+", help="the boundary examples of these --seeds files (see above)")
    parser.add_argument("--boundary-seeds", type=int, default=20, help="--boundary-from: seeds per attack")
    parser.add_argument("--trace-targets", action="store_true",
                        help="--boundary-from: instead, APGD-T towards each target alone at 30 and 100 steps (see above)")
    parser.add_argument("--json", help="write the numbers here")
    parser.add_argument("--table", nargs="+", help="only print the table of these earlier --json files")
    args = parser.parse_args()
    if args.table:
        cases = [case for path in args.table for case in json.loads(Path(path).read_text())["cases"]]
        spread = [case for case in cases if "spread" in case]
        plain = [case for case in cases if "spread" not in case and "hits" not in case and "runs" not in case]
        if plain:
            print(table(plain))
        if spread:
            print(spread_table(spread))
        for case in cases:
            if "hits" in case:
                print(boundary_table(case))
            if "runs" in case:
                print(trace_table(case))
        return
    if args.threads:
        torch.set_num_threads(args.threads)
    models = args.models.split(",")
    l2 = [m for m in args.l2.split(",") if m]
    if args.quick:
        args.n, models, l2 = 60, models[:2], []
    source = _autoattack_path(args.autoattack_src)
    if source is None:
        print("official AutoAttack not found (give --autoattack-src or $AUTOATTACK_SRC, a checkout of "
              "github.com/fra31/auto-attack): skipping that peer; no missed/extra columns")
    else:
        sys.path.insert(0, source)
    report = {"n": args.n, "seed": args.seed, "threads": torch.get_num_threads(), "models": [], "cases": []}
    for name in models:
        if name == BUILTIN:  # a model auto was tuned on, at a radius and n it was not
            module, info = builtin_pixels_module(), {"model": name}
            threats = [("linf", args.builtin_eps)]
        else:
            module, info = train_model(name, Path(args.cache))
            print(f"{name}: trained in {info['train_seconds']:.0f}s", flush=True)
            threats = ([] if args.no_linf else [("linf", MODELS[name][1])]) + ([("l2", 1.0)] if name in l2 else [])
        report["models"].append(info)
        for norm, eps in threats:
            if args.boundary_from:
                spread = [case for path in args.boundary_from for case in json.loads(Path(path).read_text())["cases"]
                          if case["model"] == name and case["norm"] == norm and case["eps"] == eps]
                indices = boundary_indices(spread)
                if not indices:
                    print(f"{name} {norm} {eps}: no such spread case, or every run broke the same examples")
                    continue
                seeds = list(range(1000, 1000 + args.boundary_seeds))
                if args.trace_targets:
                    case = trace_targets(name, module, norm, eps, spread[0]["n"], indices, seeds)
                    print(trace_table(case))
                else:
                    case = boundary_case(name, module, norm, eps, spread[0]["n"], indices, seeds, args.batch_size,
                                         source is not None, args.spread_variants)
                    print(boundary_table(case))
            elif args.seeds:
                case = spread_case(name, module, norm, eps, args.n, args.seeds, args.batch_size, source is not None,
                                   args.spread_variants)
            else:
                case = evaluate_case(name, module, norm, eps, args.n, args.seed, args.batch_size, args.quick,
                                     source is not None, not args.no_slow_stages, not args.no_variant,
                                     tuple(args.spread_variants), not args.no_last_stages)
            report["cases"].append(case)
            if args.json:
                Path(args.json).write_text(json.dumps(report, indent=2))
    print()
    if not args.boundary_from:
        print(spread_table(report["cases"]) if args.seeds else table(report["cases"]))


if __name__ == "__main__":
    main()
