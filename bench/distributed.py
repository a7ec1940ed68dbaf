"""Two processes vs one: ``accelerate launch`` on a text recipe, wall time and identical records.

Runs the same recipe (the built-in text model under DeepWordBug and PWWS, by the out-of-the-box,
the calibrated and the Q(T)-optimal adversary, whose Brent search is sharded too) three ways, each in a fresh output directory:

1. one process, ``python -m suite run`` (PyTorch's default thread count);
2. one process with one thread (what each launched process gets: accelerate sets
   ``OMP_NUM_THREADS=1`` when it starts several);
3. ``accelerate launch --multi_gpu --num_processes 2`` (two gloo processes on a CPU-only machine;
   ``--cpu --num_processes 2`` would start only one).

It reports the wall times, the ratios, and whether results.json metrics and records (sorted
as written, timings removed) are identical to run 1 and to run 2 (the same thread count as each
launched process: the comparison that isolates the process count). Built-in models are trained (and
cached) by a warm-up run first, so no timed run trains anything.

    python bench/distributed.py --n 120 --json bench-distributed.json
"""

from __future__ import annotations

import argparse
import json
import os

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from launch import suite_command  # bench/launch.py (scripts run as python bench/NAME.py)

RECIPE = """
name: bench-distributed
seed: 0
batch_size: 16
tasks:
  - name: text
    model: builtin:sentiment-tiny
    dataset: {{spec: builtin:sentiment, split: test, n: {n}}}
    attacks: [deepwordbug, {{name: pwws, optional: true}}]
    adversary: {{kinds: [none, cal, opt], split: validation, opt_n: {opt_n}}}
"""
VOLATILE = {"seconds", "clean_seconds", "compute_seconds", "created", "provenance"}

def _strip(value):
    if isinstance(value, dict):
        return {key: _strip(item) for key, item in value.items() if key not in VOLATILE}
    if isinstance(value, list):
        return [_strip(item) for item in value]
    return value

def run(recipe: Path, output: Path, processes: int, threads: int | None) -> float:
    env = dict(os.environ, TQDM_DISABLE="1")
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    command = suite_command(["-q", "run", str(recipe), "--output", str(output)], processes)
    start = time.perf_counter()
    completed = subprocess.run(command, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if completed.returncode != 0:
        raise SystemExit(f"run failed ({' '.join(command)}):\n{completed.stderr[-3000:]}")
    return seconds

def outputs(directory: Path) -> tuple[dict, list]:
    results = json.loads((directory / "text" / "results.json").read_text())
    records = [json.loads(line) for line in (directory / "text" / "records.jsonl").read_text().splitlines()]
    return _strip(results), _strip(records)

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=120, help="test examples (the built-in test split has 120)")
    parser.add_argument("--opt-n", type=int, default=40, help="validation examples per Q(T) evaluation")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-dist-"))
    recipe = work / "recipe.yaml"
    recipe.write_text(RECIPE.format(n=args.n, opt_n=args.opt_n))
    os.environ.setdefault("ADVSUITE_CACHE", str(work / "cache"))
    print("warm-up (trains the built-in model into the cache) ...", flush=True)
    run(recipe, work / "warmup", 1, None)
    report: dict = {"n": args.n, "opt_n": args.opt_n, "cpus": os.cpu_count(), "runs": {}}
    # Each run is compared with the first, and with the one-thread run: what each launched
    # process gets, so the comparison that says whether the process count changes anything.
    got_by_label: dict = {}
    for label, processes, threads in (("1 process", 1, None), ("1 process, 1 thread", 1, 1),
                                      ("2 processes (accelerate launch)", 2, None)):
        output = work / label.replace(" ", "_").replace(",", "").replace("(", "").replace(")", "")
        seconds = run(recipe, output, processes, threads)
        got = got_by_label[label] = outputs(output)
        entry = {"seconds": seconds, "records": len(got[1])}
        for name, reference in (("1 process", got_by_label["1 process"]),
                                ("1 thread", got_by_label.get("1 process, 1 thread"))):
            if reference is not None and reference is not got:
                entry[f"results_identical_to_{name}"] = got[0] == reference[0]
                entry[f"records_differing_from_{name}"] = sum(a != b for a, b in zip(got[1], reference[1])) + \
                    abs(len(got[1]) - len(reference[1]))
        report["runs"][label] = entry
        print(f"{label}: {seconds:.1f} s, {entry['records']} records; "
              + "; ".join(f"{key}: {value}" for key, value in entry.items() if "identical" in key or "differing" in key),
              flush=True)
    one, two = report["runs"]["1 process"]["seconds"], report["runs"]["2 processes (accelerate launch)"]["seconds"]
    report["speedup_2_vs_1"] = one / two
    print(f"2 processes vs 1: x{one / two:.2f} wall-time speed-up on {os.cpu_count()} CPUs")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0

if __name__ == "__main__":
    sys.exit(main())
