"""Text-attack benchmark on real data: the illusion of robustness, and the suite vs plain TextAttack.

On Rotten Tomatoes (``../shared/data/rotten_tomatoes``, the Pang & Lee sentence-polarity data;
skipped with a message when absent), in one run:

1. Train a small classifier (one-layer BERT, word-level vocabulary) on the train split.
2. Serve it as is, overconfident (T = 0.005) and underconfident (T = 2e6), and attack each with
   DeepWordBug and PWWS run out of the box (none), by the calibrated adversary (cal) and by the
   Q(T)-optimal adversary (opt), exactly as ``advsuite run`` does (validation split for T).
3. Run the same recipe on the same model and examples through a plain TextAttack ``Attacker``
   (``HuggingFaceModelWrapper``), check the adversarial texts are identical to the suite's, and
   report the throughput ratio. PWWS is deterministic, so its texts must match exactly;
   DeepWordBug draws random characters, and the suite seeds every example on its own while an
   ``Attacker`` seeds once per run, so its texts are compared for information only.

    python bench/text_attacks.py --n 100           # about 10 minutes on 2 CPU cores
    python bench/text_attacks.py --n 200 --json bench-text.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "rotten_tomatoes"


def _read(path: Path) -> tuple[list[str], list[int]]:
    import csv

    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    return [row["text"] for row in rows], [int(row["label"]) for row in rows]


def train(data: Path, directory: Path, epochs: int, lr: float) -> float:
    import torch

    from suite.models.builtin import train_word_bert

    texts, labels = _read(data / "train.csv")
    start = time.perf_counter()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        train_word_bert(directory, texts, labels, ["negative", "positive"], epochs=epochs, hidden_size=128,
                        lr=lr)
    return time.perf_counter() - start


def illusion(model_dir: Path, data: Path, n: int, opt_n: int, output: Path) -> list:
    from suite.evaluation.options import RunOptions
    from suite.evaluation.recipe import parse_recipe
    from suite.evaluation.tasks import run_tasks
    from suite.report.table import adversary_table, results_table

    def task(name: str, temperature: float) -> dict:
        return {
            "name": name,
            "model": {"spec": f"hf:{model_dir}", "temperature": temperature},
            "dataset": {"spec": str(data), "split": "test", "n": n},
            "attacks": ["deepwordbug", "pwws"],
            "adversary": {"kinds": ["none", "cal", "opt"], "split": "validation", "n": 200, "opt_n": opt_n},
        }

    recipe = parse_recipe({"name": "bench-text", "tasks": [task("base", 1.0), task("upconf", 0.005),
                                                          task("downconf", 2e6)]})
    options = RunOptions(seed=recipe.seed, batch_size=recipe.batch_size, output=output, subdirs=True, overwrite=True)
    results = run_tasks(recipe.tasks, options)
    print(results_table(results))
    print(adversary_table(results))
    return results


def versus_textattack(model_dir: Path, data: Path, n: int, recipe: str) -> dict:
    """The suite's attack and a plain TextAttack Attacker on the same model and examples."""
    from suite.attacks import build_attack
    from suite.attacks.text.offline import import_textattack
    from suite.data.base import Example
    from suite.evaluation.scoring import score_outputs
    from suite.models import load_model

    textattack = import_textattack()
    from textattack.attack_results import SkippedAttackResult, SuccessfulAttackResult
    from textattack.models.wrappers import HuggingFaceModelWrapper

    model = load_model(f"hf:{model_dir}")
    texts, labels = _read(data / "test.csv")
    predictions = model.predict(texts[: 4 * n]).tolist()
    chosen = [i for i, (p, y) in enumerate(zip(predictions, labels)) if p == y][:n]
    sample_accuracy = sum(p == y for p, y in zip(predictions, labels)) / len(predictions)
    if sample_accuracy < 0.6:
        raise SystemExit(f"the trained model is near chance ({sample_accuracy:.1%} on {len(predictions)} test "
                         "sentences): try another --lr or --epochs")
    examples = [Example(str(i), texts[i], labels[i]) for i in chosen]

    attack = build_attack(recipe)
    attack.run(model, examples[:1], 0)  # build once (PWWS loads WordNet) outside the timing
    start = time.perf_counter()
    ours = attack.run(model, examples, 0)
    ours_seconds = time.perf_counter() - start

    from textattack import attack_recipes

    builders = {"pwws": attack_recipes.PWWSRen2019, "deepwordbug": attack_recipes.DeepWordBugGao2018}
    wrapper = HuggingFaceModelWrapper(model.module, model.tokenizer)
    plain = builders[recipe].build(wrapper)
    dataset = textattack.datasets.Dataset([(ex.input, ex.label) for ex in examples])
    args = textattack.AttackArgs(num_examples=len(examples), random_seed=0, disable_stdout=True, silent=True,
                                 query_budget=None)
    attacker = textattack.Attacker(plain, dataset, args)
    start = time.perf_counter()
    results = attacker.attack_dataset()
    plain_seconds = time.perf_counter() - start
    theirs = [result.perturbed_result.attacked_text.text for result in results]
    skipped = sum(isinstance(result, SkippedAttackResult) for result in results)
    same = sum(a.adversarial == b for a, b in zip(ours, theirs))
    theirs_broken = sum(isinstance(result, SuccessfulAttackResult) for result in results)
    return {
        "recipe": recipe,
        "examples": len(examples),
        "model_accuracy_sample": sample_accuracy,
        "identical_texts": same,
        "plain_skipped": skipped,
        "suite_successes": sum(score["robust"] < 1.0 for score in score_outputs(model, examples, ours)),
        "textattack_successes": theirs_broken,
        "suite_seconds": ours_seconds,
        "textattack_seconds": plain_seconds,
        "throughput_ratio": plain_seconds / ours_seconds,
        "suite_queries_per_example": sum(o.queries for o in ours) / len(ours),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--n", type=int, default=100, help="test examples per task")
    parser.add_argument("--opt-n", type=int, default=40, help="validation examples per Q(T) evaluation")
    parser.add_argument("--epochs", type=int, default=3)
    # 2e-3 (the built-in model's rate) collapses this larger model to one class on Rotten Tomatoes.
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--versus-n", type=int, default=100, help="examples for the suite vs TextAttack comparison")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if not (args.data / "train.csv").exists():
        print(f"skipped: Rotten Tomatoes not found at {args.data} (see bench/README or --data)")
        return 0
    workdir = Path(tempfile.mkdtemp(prefix="bench-text-"))
    model_dir = workdir / "model"
    print(f"training on {args.data / 'train.csv'} ...", flush=True)
    train_seconds = train(args.data, model_dir, args.epochs, args.lr)
    print(f"trained in {train_seconds:.0f} s", flush=True)
    report: dict = {"train_seconds": train_seconds, "n": args.n, "opt_n": args.opt_n}
    for recipe in ("pwws", "deepwordbug"):
        comparison = versus_textattack(model_dir, args.data, args.versus_n, recipe)
        report[f"versus_{recipe}"] = comparison
        print(f"{recipe}: suite {comparison['suite_seconds']:.1f} s vs TextAttack Attacker "
              f"{comparison['textattack_seconds']:.1f} s (x{comparison['throughput_ratio']:.2f} throughput); "
              f"identical adversarial texts {comparison['identical_texts']}/{comparison['examples']} "
              f"(successes: suite {comparison['suite_successes']}, TextAttack {comparison['textattack_successes']})",
              flush=True)
    results = illusion(model_dir, args.data, args.n, args.opt_n, workdir / "runs")
    report["illusion"] = {
        result.task: {
            "clean_accuracy": result.clean_accuracy,
            "ece": result.calibration["ece"],
            "robust_accuracy": {key: entry.robust_accuracy for key, entry in result.attacks.items()},
            "adversary_temperature": {key: entry.adversary_temperature for key, entry in result.attacks.items()},
            "illusion_max_drop": result.illusion.max_drop,
        }
        for result in results
    }
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
