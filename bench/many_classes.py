"""Many classes: does ``auto`` (APGD-CE, then APGD-T on 9 targets) find on a 100-class model what
AutoAttack's 9 targets find, with the targets ranked by logit (the default) or by the
linearised distance to each boundary (``ranking: linear``)?

The task, "digit pairs": sklearn's 8×8 digits (split 80/20 by the same fixed permutation as
``builtin:digits``), each upsampled bilinearly to 16×16; an image is two digits side by side,
1×16×32 grey pixels in [0, 1], and its class is the two-digit number they read, "00" … "99"
(100 classes). Training pairs are drawn afresh each step from the training digits; the n test
pairs (class i mod 100 for the i-th, so the classes are balanced) only from the held-out digits.

The models: timm's ``test_resnet`` (0.38 M parameters, one input channel, 100 outputs), trained
here with a fixed seed on one CPU thread: ``plain`` (cross-entropy) and ``fgsm-at`` (FGSM
adversarial training with a random start, Wong et al., "Fast is better than free", ICLR 2020,
at ``--train-eps``). The weights are cached as safetensors under
``$ADVSUITE_CACHE/bench/many_classes`` (keyed by the training settings), so a second run
evaluates the same models.

On the same test pairs, seed and batch size, each model is evaluated with ``suite.evaluate``
under L∞ by the suite's ``autoattack`` (the standard ensemble from torchattacks' components,
9 targets as the official code) and ``auto`` with each ranking and target count. One wrapper
around the network counts the rows every configuration makes it see (rows seen with
gradients enabled are forward+backward passes). Per configuration: robust accuracy, examples
``autoattack`` breaks that it misses, examples it breaks that ``autoattack`` misses (by example
id in each run's ``records.jsonl``), wall seconds, gradient rows, backward rows and forward rows.

    python bench/many_classes.py --json bench-many-classes.json   # ~17 min on 2 CPU cores (+5 to train)
    python bench/many_classes.py --targets 9 --target-steps 100 --rankings logit   # AutoAttack's steps per target
    python bench/many_classes.py --quick                           # a smoke run: about 3 minutes
    python bench/many_classes.py --targets 9 --rankings logit --attack-seeds 0,1  # AA against itself

With several ``--attack-seeds`` (the same models and test pairs; only the attacks' random draws
change), every configuration runs at each, is compared with ``autoattack`` at the same seed as
above, and a second table compares every run with ``autoattack`` at every other seed: what
``autoattack`` misses against itself is the yardstick for what ``auto`` misses against it.

One run's "missed" is a draw: an example near the decision boundary is broken by some random
starts and not others. With ``--boundary-from`` (earlier ``--attack-seeds`` reports of the same
``--seed``), the examples whose outcome differed between those runs are attacked again, alone,
by every configuration at ``--boundary-seeds`` fresh attack seeds (1000 up). Each example's
break frequency per configuration gives the expected number broken and the expected number
missed against an independent ``autoattack`` run (``autoattack`` against itself included):
what a single run's counts only sample. ``--table`` prints the table of such reports again:

    python bench/many_classes.py --seed 0 --targets 9 --rankings logit --boundary-from /tmp/seed0.json --json /tmp/boundary0.json
    python bench/many_classes.py --table /tmp/boundary0.json /tmp/boundary1.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

import suite
from suite.models.wrap import from_module
from suite.paths import cache_dir

ARCH = "test_resnet"
CLASSES = [f"{number:02d}" for number in range(100)]
DIGIT_SIZE = 16
MEAN, STD = (0.3,), (0.4,)  # of the pairs' pixels, rounded (as builtin:digits-cnn)
TEST_FRACTION = 0.2  # builtin:digits' split
WEIGHTS_VERSION = "v1"  # bump when the task or the training recipe changes
METHODS = ("plain", "fgsm-at")


# -- the task ------------------------------------------------------------------------------------

def digits(split: str) -> tuple[torch.Tensor, torch.Tensor]:
    """sklearn's digits as 1×16×16 images in [0, 1] and their labels, split as builtin:digits."""
    from sklearn.datasets import load_digits

    data = load_digits()
    images = torch.tensor(data.images, dtype=torch.float32).unsqueeze(1) / 16.0
    images = nn.functional.interpolate(images, size=(DIGIT_SIZE, DIGIT_SIZE), mode="bilinear", align_corners=False)
    order = np.random.default_rng(0).permutation(len(data.target))
    n_test = int(round(len(data.target) * TEST_FRACTION))
    rows = sorted(order[:n_test] if split == "test" else order[n_test:])
    return images[rows].clamp(0.0, 1.0), torch.tensor(data.target[rows], dtype=torch.long)


def pairs(images: torch.Tensor, labels: torch.Tensor, classes: torch.Tensor,
          generator: torch.Generator) -> torch.Tensor:
    """One image per entry of ``classes``: a random digit of its tens beside one of its units."""
    by_digit = [(labels == digit).nonzero().squeeze(1) for digit in range(10)]

    def draw(wanted: torch.Tensor) -> torch.Tensor:
        picks = torch.empty(len(wanted), dtype=torch.long)
        for digit in range(10):
            rows = (wanted == digit).nonzero().squeeze(1)
            pool = by_digit[digit]
            picks[rows] = pool[torch.randint(len(pool), (len(rows),), generator=generator)]
        return images[picks]

    return torch.cat([draw(classes // 10), draw(classes % 10)], dim=3)


def test_pairs(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """n test pairs from the held-out digits, class i mod 100 for the i-th."""
    images, labels = digits("test")
    classes = torch.arange(n) % len(CLASSES)
    return pairs(images, labels, classes, torch.Generator().manual_seed(seed)), classes


# -- the models ----------------------------------------------------------------------------------

def _normalise(x: torch.Tensor) -> torch.Tensor:
    return (x - MEAN[0]) / STD[0]


def _fgsm_rs(net: nn.Module, x: torch.Tensor, y: torch.Tensor, eps: float, generator: torch.Generator) -> torch.Tensor:
    """FGSM from a uniform random start in the L∞ ball, step 1.25ε (Wong et al. 2020, Alg. 3)."""
    delta = (torch.rand(x.shape, generator=generator) * 2 - 1) * eps
    delta.requires_grad_(True)
    loss = nn.functional.cross_entropy(net(_normalise((x + delta).clamp(0.0, 1.0))), y)
    (grad,) = torch.autograd.grad(loss, delta)
    delta = (delta.detach() + 1.25 * eps * grad.sign()).clamp(-eps, eps)
    return (x + delta).clamp(0.0, 1.0)


def train(method: str, steps: int, train_eps: float, seed: int, batch_size: int = 128) -> nn.Module:
    """timm's ARCH on digit pairs: AdamW with a one-cycle schedule, fresh pairs every step."""
    import timm

    torch.manual_seed(seed)
    images, labels = digits("train")
    net = timm.create_model(ARCH, num_classes=len(CLASSES), in_chans=1)
    optimizer = torch.optim.AdamW(net.parameters(), lr=3e-3, weight_decay=5e-4)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=3e-3, total_steps=steps)
    generator = torch.Generator().manual_seed(seed)
    net.train()
    for _ in range(steps):
        y = torch.randint(len(CLASSES), (batch_size,), generator=generator)
        x = pairs(images, labels, y, generator)
        if method == "fgsm-at":
            x = _fgsm_rs(net, x, y, train_eps, generator)
        loss = nn.functional.cross_entropy(net(_normalise(x)), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
    return net.eval()


def cached_model(method: str, steps: int, train_eps: float, seed: int) -> tuple[nn.Module, Path, float]:
    """The trained network (from the cache when there), its weights file and training seconds."""
    import timm
    from safetensors.torch import load_file, save_file

    settings = json.dumps([WEIGHTS_VERSION, ARCH, method, steps, train_eps if method != "plain" else 0, seed])
    key = hashlib.sha256(settings.encode()).hexdigest()[:12]
    path = cache_dir("bench", "many_classes") / f"{ARCH}-{method}-{key}.safetensors"
    if path.exists():
        net = timm.create_model(ARCH, num_classes=len(CLASSES), in_chans=1)
        net.load_state_dict(load_file(path))
        return net.eval(), path, 0.0
    start = time.perf_counter()
    net = train(method, steps, train_eps, seed)
    seconds = time.perf_counter() - start
    partial = path.with_suffix(".partial")
    save_file({name: tensor.contiguous() for name, tensor in net.state_dict().items()}, partial)
    partial.replace(path)
    return net, path, seconds


class CountingModule(nn.Module):
    """The network, counting the rows it sees: forward rows, rows seen with gradients enabled
    (``gradient_rows``, forward+backward passes as bench/image_attacks.py counts them), and rows
    of every backward pass through it (``backward_rows``: more than ``gradient_rows`` when one
    forward is differentiated several times, as ``ranking: linear`` does once per candidate)."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net
        self.forward_rows = 0
        self.gradient_rows = 0
        self.backward_rows = 0

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        self.forward_rows += len(inputs)
        if torch.is_grad_enabled() and inputs.requires_grad:
            self.gradient_rows += len(inputs)
            inputs.register_hook(self._count_backward)
        return self.net(inputs)

    def _count_backward(self, grad: torch.Tensor) -> None:
        self.backward_rows += len(grad)


# -- the comparison ------------------------------------------------------------------------------

def configurations(targets: Sequence[int], target_steps: Sequence[int], rankings: Sequence[str],
                   best_target_steps: Sequence[int] = (100,)) -> list[dict]:
    """The attacks compared: ``autoattack`` first (the reference), then ``auto`` per target
    count, steps per target, ranking and steps of the last search towards the closest target
    (labelled ``auto-<ranking>-<targets>``, with ``x<steps>`` when the steps per target are not
    auto's 30 and ``-last<steps>`` when the last search's are not its 100)."""
    found = [{"name": "autoattack", "label": "autoattack"}]
    for count in targets:
        for steps in target_steps:
            for ranking in rankings:
                for last in best_target_steps:
                    label = (f"auto-{ranking}-{count}" + ("" if steps == 30 else f"x{steps}")
                             + ("" if last == 100 else f"-last{last}"))
                    found.append({"name": "auto", "ranking": ranking, "targets": count, "target_steps": steps,
                                  "best_target_steps": last, "label": label})
    return found


def _robust_by_id(directory: Path) -> dict[str, tuple[bool, int]]:
    """Per attacked example id in a run's records.jsonl (those classified correctly when clean):
    whether it stayed robust, and its queries."""
    found = {}
    with open(directory / "records.jsonl", encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            if record["kind"] == "attack":
                found[record["id"]] = (record["robust"] >= 1.0, int(record.get("queries") or 0))
    return found


def served(name: str, net: nn.Module, images: torch.Tensor) -> tuple:
    """``net`` behind a row counter, served to ``suite.evaluate``: (the model, its counter)."""
    counting = CountingModule(net)
    return from_module(counting, input_size=tuple(images.shape[1:]), mean=MEAN, std=STD, labels=CLASSES,
                       name=f"many-classes-{name}", device="cpu"), counting


def compare(name: str, net: nn.Module, images: torch.Tensor, labels: torch.Tensor, eps: float, configs: list[dict],
            seed: int, batch_size: int, output: Path) -> list[dict]:
    """One row per configuration, each run by ``suite.evaluate`` (run seed ``seed``) into
    ``output/<model>/<label>``; the first (``autoattack``) is the reference the others' examples
    are compared with. Each row keeps the ids of the examples its attack broke."""
    rows, reference = [], None
    for config in configs:
        model, counting = served(name, net, images)
        directory = output / name / config["label"]
        start = time.perf_counter()
        results = suite.evaluate(model, (images, labels), attacks=[config], eps=eps, output=directory,
                                 options=suite.RunOptions(seed=seed, batch_size=batch_size, overwrite=True))
        seconds = time.perf_counter() - start
        robust = _robust_by_id(directory)
        if reference is None:
            reference = robust
        broken = {key for key, (still, _) in robust.items() if not still}
        reference_broken = {key for key, (still, _) in reference.items() if not still}
        row = {
            "model": name, "eps": eps, "attack": config["label"],
            "clean_accuracy": results.clean_accuracy,
            "robust_accuracy": results.attacks[config["label"]].robust_accuracy,
            "missed_vs_autoattack": len(reference_broken - broken),
            "extra_vs_autoattack": len(broken - reference_broken),
            "seconds": seconds,
            "gradient_rows": counting.gradient_rows,
            "backward_rows": counting.backward_rows,
            "forward_rows": counting.forward_rows,
            "record_queries": sum(queries for _, queries in robust.values()),
            "attack_seed": seed, "broken": sorted(broken),
        }
        rows.append(row)
        print(f"  {name} {config['label']}: robust {row['robust_accuracy']:.3f}, missed {row['missed_vs_autoattack']}, "
              f"extra {row['extra_vs_autoattack']}, {seconds:.1f}s, {counting.gradient_rows} gradient rows", flush=True)
    for row in rows:
        row["time_vs_autoattack"] = row["seconds"] / rows[0]["seconds"]
        row["gradient_rows_vs_autoattack"] = row["gradient_rows"] / max(1, rows[0]["gradient_rows"])
    return rows


def across_seeds(rows: list[dict]) -> list[dict]:
    """Every run against ``autoattack`` at each other attack seed on the same model: examples
    that ``autoattack`` at seed ``t`` breaks and the run at seed ``s`` does not, and the reverse."""
    found = []
    for row in rows:
        for other in rows:
            if (other["model"] == row["model"] and other["attack"] == "autoattack"
                    and other["attack_seed"] != row["attack_seed"]):
                mine, theirs = set(row["broken"]), set(other["broken"])
                found.append({"model": row["model"], "attack": row["attack"], "attack_seed": row["attack_seed"],
                              "autoattack_seed": other["attack_seed"], "missed": len(theirs - mine),
                              "extra": len(mine - theirs)})
    return found


def boundary_ids(rows: list[dict]) -> dict[str, list[str]]:
    """Per model, the examples some run (of any attack, at any attack seed) broke and another
    did not: the only ones whose outcome the attacks' random draws decide."""
    found: dict[str, list[str]] = {}
    for name in dict.fromkeys(row["model"] for row in rows):
        runs = [set(row["broken"]) for row in rows if row["model"] == name]
        found[name] = sorted(set().union(*runs) - set.intersection(*runs), key=int)
    return found


def boundary_case(name: str, net: nn.Module, images: torch.Tensor, labels: torch.Tensor, eps: float, ids: list[str],
                  configs: list[dict], seeds: Sequence[int], batch_size: int, output: Path) -> dict:
    """How many of ``seeds`` break each example of ``ids`` (test pair ids), per configuration:
    each seed is one ``suite.evaluate`` run of every configuration on those pairs alone. The
    sum over the examples of an attack's break frequencies is how many of them it breaks in
    expectation; every other example is broken by every run or by none."""
    chosen = torch.tensor([int(key) for key in ids], dtype=torch.long)
    case = {"model": name, "eps": eps, "ids": ids, "seeds": list(seeds), "hits": {}, "seconds": {}}
    model, _ = served(name, net, images)
    for config in configs:
        hits, seconds = [0] * len(ids), 0.0
        for seed in seeds:
            directory = output / "boundary" / name / config["label"] / f"seed-{seed}"
            start = time.perf_counter()
            suite.evaluate(model, (images[chosen], labels[chosen]), attacks=[config], eps=eps, output=directory,
                           options=suite.RunOptions(seed=seed, batch_size=batch_size, overwrite=True))
            seconds += time.perf_counter() - start
            robust = _robust_by_id(directory)  # ids are positions in the chosen pairs
            hits = [count + int(not robust.get(str(position), (True, 0))[0]) for position, count in enumerate(hits)]
        case["hits"][config["label"]], case["seconds"][config["label"]] = hits, seconds
        print(f"  {name} boundary {config['label']}: {dict(zip(ids, hits))} of {len(seeds)} seeds, "
              f"{seconds:.1f}s", flush=True)
    return case


def boundary_table(cases: list[dict]) -> str:
    """Per model and boundary example, each configuration's break frequency; per model, the
    expected number broken (the frequencies' sum) and, when ``autoattack`` ran, the expected
    number missed against an independent run of it (:func:`expected_missed`)."""
    labels = list(dict.fromkeys(label for case in cases for label in case["hits"]))
    lines = ["| model | test pair | " + " | ".join(f"`{label}`" for label in labels) + " |",
             "|---|---|" + "---|" * len(labels)]
    for case in cases:
        k = len(case["seeds"])
        model = case["model"] if case.get("models_seed") is None else f"{case['model']} (seed {case['models_seed']})"
        for row, key in enumerate(case["ids"]):
            lines.append(f"| {model} | {key} | " + " | ".join(
                f"{case['hits'][label][row]}/{k}" if label in case["hits"] else "–" for label in labels) + " |")
        lines.append(f"| {model} | expected broken | " + " | ".join(
            f"{sum(case['hits'][label]) / k:.2f}" if label in case["hits"] else "–" for label in labels) + " |")
        if "autoattack" in case["hits"]:
            lines.append(f"| {model} | expected missed vs an `autoattack` run | " + " | ".join(
                f"{expected_missed(case, label):.2f}" if label in case["hits"] else "–" for label in labels) + " |")
    return "\n".join(lines)


def expected_missed(case: dict, label: str, reference: str = "autoattack") -> float:
    """How many of the boundary examples a run of ``label`` misses, in expectation, against an
    independent run of ``reference``: the sum of p_ref (1 - p_label) over the examples, with
    each p its break frequency. Against the reference itself the plug-in p (1 - p) is biased
    low by (k - 1)/k over k seeds, so it is scaled back (unbiased)."""
    k = len(case["seeds"])
    ref = [hits / k for hits in case["hits"][reference]]
    mine = [hits / k for hits in case["hits"][label]]
    total = sum(p * (1 - q) for p, q in zip(ref, mine))
    return total * k / (k - 1) if label == reference and k > 1 else total


def _table(rows: list[dict]) -> str:
    lines = ["| model | ε | attack seed | attack | robust acc | missed vs AA | extra vs AA | seconds | time / AA | "
             "gradient rows | rows / AA | backward rows | forward rows |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['model']} | {row['eps']:g} | {row['attack_seed']} | `{row['attack']}` | "
                     f"{100 * row['robust_accuracy']:.1f} % | "
                     f"{row['missed_vs_autoattack']} | {row['extra_vs_autoattack']} | {row['seconds']:.1f} | "
                     f"{row['time_vs_autoattack']:.3f} | {row['gradient_rows']} | "
                     f"{row['gradient_rows_vs_autoattack']:.3f} | {row['backward_rows']} | {row['forward_rows']} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=300, help="test pairs attacked per model (default 300)")
    parser.add_argument("--eps", type=float, default=0.02,
                        help="L∞ radius for the plain model (default 0.02: about 30 %% robust under autoattack)")
    parser.add_argument("--at-eps", type=float, default=0.1,
                        help="L∞ radius for the fgsm-at model (default 0.1: about 45 %% robust under autoattack)")
    parser.add_argument("--train-eps", type=float, default=0.1, help="FGSM-AT training radius (default 0.1)")
    parser.add_argument("--targets", default="9,20", help="auto's target counts, comma-separated (default 9,20)")
    parser.add_argument("--target-steps", default="30", help="auto's steps per target, comma-separated (default 30)")
    parser.add_argument("--rankings", default="logit,linear", help="auto's rankings (default logit,linear)")
    parser.add_argument("--best-target-steps", default="100",
                        help="steps of auto's last search towards the closest target, comma-separated (default 100; "
                             "0: none, auto before it had one)")
    parser.add_argument("--models", default=",".join(METHODS), help="which models (default plain,fgsm-at)")
    parser.add_argument("--steps", type=int, default=1500, help="training steps of 128 pairs (default 1500)")
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0, help="seeds the training, the test pairs and the attacks")
    parser.add_argument("--attack-seeds", help="run seeds of the attacks, comma-separated (default: --seed); "
                                               "the models and test pairs stay --seed's")
    parser.add_argument("--variants", nargs="*", default=[], metavar="KEY=VALUE[,KEY=VALUE]",
                        help="further configurations of auto (9 targets by logit), each given by its parameters, "
                             "e.g. target_steps=100 or steps=200,best_target_steps=0")
    parser.add_argument("--boundary-from", nargs="+", type=Path, metavar="JSON",
                        help="instead: the boundary examples of these earlier --json reports of the same --seed "
                             "(see above), each attacked alone at --boundary-seeds seeds")
    parser.add_argument("--boundary-seeds", type=int, default=20,
                        help="--boundary-from: attack seeds per configuration, from 1000 up (default 20)")
    parser.add_argument("--table", nargs="+", type=Path, metavar="JSON",
                        help="only print the boundary table of these earlier --boundary-from reports")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: 40 pairs, 9 targets, 150 training steps, the plain model")
    parser.add_argument("--output", type=Path, default=Path("runs/many_classes"), help="the runs' directories")
    parser.add_argument("--json", type=Path, help="also write the numbers to this file")
    args = parser.parse_args()
    if args.table:
        reports = [json.loads(path.read_text(encoding="utf-8")) for path in args.table]
        print(boundary_table([{**case, "models_seed": report["seed"]} for report in reports
                              for case in report.get("boundary", [])]))
        return
    if args.quick:
        args.n, args.targets, args.steps, args.models = 40, "9", 150, "plain"
    unknown = sorted(set(args.models.split(",")) - set(METHODS))
    if unknown:
        parser.error(f"unknown model {', '.join(unknown)}; available: {', '.join(METHODS)}")
    torch.set_num_threads(1)  # reproducible weights, comparable seconds (as the built-in models)
    configs = configurations([int(count) for count in args.targets.split(",")],
                             [int(steps) for steps in args.target_steps.split(",")], args.rankings.split(","),
                             [int(steps) for steps in args.best_target_steps.split(",")])
    for variant in args.variants:
        try:
            params = {key: int(value) for key, value in (part.split("=", 1) for part in variant.split(","))}
        except ValueError:
            parser.error(f"--variants takes KEY=VALUE pairs with integer values, not {variant!r}")
        configs.append({"name": "auto", "ranking": "logit", "targets": 9, **params,
                        "label": "auto-" + "-".join(f"{key}{value}" for key, value in params.items())})
    if args.boundary_seeds < 1:
        parser.error("--boundary-seeds must be at least 1")
    try:
        attack_seeds = [int(seed) for seed in (args.attack_seeds or str(args.seed)).split(",")]
    except ValueError:
        parser.error(f"--attack-seeds takes integers separated by commas, not {args.attack_seeds!r}")
    if len(set(attack_seeds)) != len(attack_seeds):
        parser.error("--attack-seeds repeats a seed")
    images, labels = test_pairs(args.n, args.seed)
    report = {"task": "digit pairs (100 classes, 1x16x32)", "arch": ARCH, "n": args.n, "seed": args.seed,
              "batch_size": args.batch_size, "steps": args.steps, "train_eps": args.train_eps, "models": {}, "rows": []}
    boundary = None
    if args.boundary_from:
        earlier = [json.loads(path.read_text(encoding="utf-8")) for path in args.boundary_from]
        same = ("seed", "n", "steps", "train_eps")  # the models and test pairs the ids refer to
        if any(run.get(key) != report[key] for run in earlier for key in same):
            parser.error("--boundary-from: the reports must be of this --seed, --n, --steps and --train-eps")
        boundary = boundary_ids([row for run in earlier for row in run["rows"]])
        report["boundary"] = []
    for method in args.models.split(","):
        net, path, seconds = cached_model(method, args.steps, args.train_eps, args.seed)
        eps = args.eps if method == "plain" else args.at_eps
        print(f"{method}: {path} ({'trained in %.0f s' % seconds if seconds else 'cached'})", flush=True)
        report["models"][method] = {"weights": str(path), "train_seconds": seconds, "eps": eps}
        if boundary is not None:
            if boundary.get(method):
                report["boundary"].append(boundary_case(
                    method, net, images, labels, eps, boundary[method], configs,
                    range(1000, 1000 + args.boundary_seeds), args.batch_size, args.output) | {"models_seed": args.seed})
            continue
        for seed in attack_seeds:
            # One seed, the training seed: the directories of earlier runs; several: one each.
            output = args.output if attack_seeds == [args.seed] else args.output / f"attack-seed-{seed}"
            report["rows"] += compare(method, net, images, labels, eps, configs, seed, args.batch_size, output)
    if boundary is not None:
        print(f"\n## break frequency on the boundary examples ({args.boundary_seeds} seeds each)\n")
        print(boundary_table(report["boundary"]))
        if args.json:
            args.json.write_text(json.dumps(report, indent=2), encoding="utf-8")
        return
    print(f"\n## auto vs autoattack on 100 classes (digit pairs, {ARCH}, n={args.n}, seed {args.seed}, "
          f"batch {args.batch_size})\n")
    print(_table(report["rows"]))
    if len(attack_seeds) > 1:
        report["across_seeds"] = across_seeds(report["rows"])
        print("\n## each run against autoattack at the other attack seeds\n")
        print("| model | attack | attack seed | autoattack's seed | missed | extra |\n|---|---|---|---|---|---|")
        for row in report["across_seeds"]:
            print(f"| {row['model']} | `{row['attack']}` | {row['attack_seed']} | {row['autoattack_seed']} | "
                  f"{row['missed']} | {row['extra']} |")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
