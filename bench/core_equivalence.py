"""Evaluation core v2 against v1: the shipped recipes give the same records and the same numbers.

Runs each check twice, once with the suite at ``--before`` (a git revision, extracted with
``git archive`` into a temporary directory and put first on ``PYTHONPATH``) and once with this
checkout, in fresh output directories and one shared model cache:

- ``advsuite run quickstart``;
- ``advsuite run beta_vs_autoattack --limit 20``;
- ``advsuite run ior_text --limit 10``;
- a 2-process ``accelerate launch`` of a text + vision recipe (cal and opt adversaries).

It then compares every record (wall time aside) and every metric of every ``results.json``.
Version 1 records hold ``correct: bool`` and ``success: bool``; version 2 holds ``correct`` and
``robust`` in [0, 1]. A v1 record is translated (``robust = 0.0 if success else 1.0``) before
the comparison. Fields that only v2 has (the served confidence of image records, the typed
threat) are listed as additions, never as differences. The exit status is 1 on any
difference.

    python bench/core_equivalence.py --before d60183e
"""

from __future__ import annotations

import argparse
import json
import os

import subprocess
import sys
from pathlib import Path

from launch import suite_command  # bench/launch.py (scripts run as python bench/NAME.py)

ROOT = Path(__file__).resolve().parents[1]
DISTRIBUTED_RECIPE = """
name: dist
seed: 0
batch_size: 4
tasks:
  - name: text
    model: builtin:sentiment-tiny
    dataset: {spec: builtin:sentiment, split: test, n: 24}
    attacks: [deepwordbug]
    adversary: {kinds: [none, cal, opt], split: validation, n: 40, opt_n: 10, maxiter: 3}
  - name: vision
    model: builtin:digits-cnn
    dataset: {spec: builtin:digits, split: test, n: 48}
    attacks: [{name: pgd_linf, eps: 0.03, steps: 10}]
"""
#: Per-attack metrics both versions report.
ATTACK_METRICS = ("robust_accuracy", "success_rate", "n_attacked", "mean_queries", "mean_perturbation",
                  "mean_confidence", "params", "budget", "adversary", "base_attack", "adversary_temperature")
TOP_METRICS = ("clean_accuracy", "worst_case_robust_accuracy", "broken_only_by", "calibration", "seed", "batch_size")

def _run(source: Path, args: list[str], env: dict[str, str], processes: int = 1) -> None:
    env = {**env, "PYTHONPATH": os.pathsep.join([str(source), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    command = suite_command(["-q", *args], processes)
    completed = subprocess.run(command, env=env, capture_output=True, text=True, cwd=source)
    if completed.returncode != 0:
        raise SystemExit(f"failed in {source}: {' '.join(args)}\n{completed.stderr[-3000:]}")

def _v2_record(record: dict) -> dict:
    """A record in the v2 form, wall time removed."""
    record = {key: value for key, value in record.items() if key != "seconds"}
    if record["kind"] == "clean" and isinstance(record.get("correct"), bool):
        record["correct"] = float(record["correct"])
    if record["kind"] == "attack" and "success" in record:
        record["robust"] = 0.0 if record.pop("success") else 1.0
    return record

def _records(directory: Path) -> dict[tuple, dict]:
    rows = [_v2_record(json.loads(line)) for line in (directory / "records.jsonl").read_text().splitlines()]
    return {(row["kind"], row.get("attack", ""), row["id"]): row for row in rows}

def compare_records(old_dir: Path, new_dir: Path) -> tuple[list[str], set[str], int]:
    """Differences, fields only v2 has, and the number of records compared."""
    old, new = _records(old_dir), _records(new_dir)
    problems, added = [], set()
    if set(old) != set(new):
        problems.append(f"record keys differ: {len(set(old) - set(new))} only before, {len(set(new) - set(old))} only after")
    for key in sorted(set(old) & set(new)):
        a, b = old[key], new[key]
        added |= set(b) - set(a)
        for field in set(a) | set(b):
            if field in a and a.get(field) != b.get(field):
                problems.append(f"{key}: {field} {a.get(field)!r} -> {b.get(field)!r}")
    return problems, added, len(old)

def compare_results(old_dir: Path, new_dir: Path) -> tuple[list[str], list[str]]:
    """Differences and additions between the two results.json files."""
    old = json.loads((old_dir / "results.json").read_text())
    new = json.loads((new_dir / "results.json").read_text())
    problems, added = [], []
    for name in TOP_METRICS:
        if old.get(name) != new.get(name):
            problems.append(f"{name}: {old.get(name)!r} -> {new.get(name)!r}")
    if set(old["attacks"]) != set(new["attacks"]):
        problems.append(f"attacks: {sorted(old['attacks'])} -> {sorted(new['attacks'])}")
    for key in sorted(set(old["attacks"]) & set(new["attacks"])):
        for metric in ATTACK_METRICS:
            a, b = old["attacks"][key].get(metric), new["attacks"][key].get(metric)
            if a is None and b is not None and metric == "mean_confidence":
                added.append(f"{key}.{metric} = {b:.4g}")
            elif a != b:
                problems.append(f"attacks.{key}.{metric}: {a!r} -> {b!r}")
    for part in ("cal", "opt"):
        a, b = (old.get("adversary") or {}).get(part), (new.get("adversary") or {}).get(part)
        if a != b:
            problems.append(f"adversary.{part}: {a!r} -> {b!r}")
    old_illusion, new_illusion = old.get("illusion") or {}, new.get("illusion") or {}
    for field in ("flagged", "max_drop", "findings"):
        if old_illusion.get(field) != new_illusion.get(field):
            problems.append(f"illusion.{field}: {old_illusion.get(field)!r} -> {new_illusion.get(field)!r}")
    if old.get("warnings") != new.get("warnings"):
        problems.append(f"warnings: {old.get('warnings')!r} -> {new.get('warnings')!r}")
    return problems, added

CHECKS = {
    "quickstart": (["run", "quickstart"], 1),
    "beta_vs_autoattack --limit 20": (["run", "beta_vs_autoattack", "--limit", "20"], 1),
    "ior_text --limit 10": (["run", "ior_text", "--limit", "10"], 1),
    "2 processes (text + vision)": (["run", "{recipe}"], 2),
}

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # No default: each side trains its own built-ins, so any revision before a built-in's new
    # version (d60183e, the v1 core, is one: docs/architecture.md) differs for that reason alone.
    parser.add_argument("--before", required=True,
                        help="git revision to compare with (d60183e: the v1 core; 9950f41: before the training refactor)")
    parser.add_argument("--only", nargs="*", choices=list(CHECKS), help="run only these checks")
    # Not under /tmp: NLTK refuses data below a directory other accounts can write to.
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "core-equivalence",
                        help="where the runs go (default: runs/core-equivalence); existing runs are reused")
    parser.add_argument("--after", type=Path, default=ROOT, help="source tree of the new core (default: this checkout)")
    parser.add_argument("--before-only", action="store_true", help="only run the --before side (record a baseline)")
    args = parser.parse_args()
    work = args.work.resolve()
    old_source = work / "before"
    if not (old_source / "suite").is_dir():
        old_source.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "-c", "tar.umask=0022", "archive", args.before], capture_output=True, check=True)
        # NLTK refuses data in group- or world-writable directories: extract with umask 022.
        subprocess.run(["tar", "-x", "-C", str(old_source)], input=archive.stdout, check=True)
    recipe = work / "dist.yaml"
    recipe.write_text(DISTRIBUTED_RECIPE)
    env = {**os.environ, "TQDM_DISABLE": "1", "ADVSUITE_CACHE": str(work / "cache"), "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "ADVSUITE_OFFLINE": "1",
           "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", "MASTER_ADDR": "127.0.0.1"}
    failed = False
    for label, (command, processes) in CHECKS.items():
        if args.only and label not in args.only:
            continue
        command = [part.format(recipe=recipe) for part in command]
        dirs = {}
        sides = (("before", old_source),) if args.before_only else (("before", old_source), ("after", args.after))
        for side, source in sides:
            dirs[side] = work / side / label.split()[0]
            if not dirs[side].exists():
                _run(source, [*command, "--output", str(dirs[side])], env, processes)
        if args.before_only:
            continue
        tasks = sorted(path.parent.name for path in dirs["before"].glob("*/results.json"))
        for task in tasks:
            record_problems, record_added, count = compare_records(dirs["before"] / task, dirs["after"] / task)
            result_problems, result_added = compare_results(dirs["before"] / task, dirs["after"] / task)
            problems = record_problems + result_problems
            failed |= bool(problems)
            verdict = "identical" if not problems else f"{len(problems)} DIFFERENCES"
            print(f"{label} / {task}: {count} records, results: {verdict}")
            for problem in problems[:20]:
                print(f"    {problem}")
            if record_added:
                print(f"    added in v2 records: {', '.join(sorted(record_added))}")
            for addition in result_added:
                print(f"    added in v2 results: {addition}")
    print(f"\nrun directories: {work}")
    sys.exit(1 if failed else 0)

if __name__ == "__main__":
    main()
