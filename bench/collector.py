"""The garbage collector around a run: what keeping long-lived objects out of its scans saves.

A process that has imported torch, transformers and TextAttack holds about 600,000 objects that
live as long as it does. CPython's collector scans them all at each full collection and at
interpreter exit. ``suite.evaluate`` freezes what is alive when a run starts and gives it back
after (``suite.collector.long_lived_frozen``), and the ``advsuite`` console script freezes
everything before the process ends (``suite.collector.before_exit``). For a text run and an
image run, each in fresh processes, alternating, three ways:

- ``shipped``: ``suite.evaluate`` as it is, then the process exits as any script's does;
- ``untouched``: the same with the run's freeze replaced by a no-op (the code before it);
- ``console exit``: ``shipped`` plus ``before_exit()`` at the end, as the console script does.

It reports per way the median wall time from process start to exit, the run's own seconds
(``suite.evaluate``), the collector's full collections and seconds during the run (read with
``gc.callbacks``), and the seconds from the end of the script to the process's exit (the
interpreter's shutdown).

    python bench/collector.py --repeats 3
    python bench/collector.py --text-model hf:/tmp/text-speed/bert-2layer \\
        --text-dataset hf:/tmp/text-speed/dwb240.jsonl --text-split train --text-n 240

A bench, not a test: timings depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WAYS = ("shipped", "untouched", "console exit")


def child(way: str, case: dict, out: Path) -> None:
    """One run in this fresh process; writes what it measured to ``out`` (the parent adds the exit)."""
    import gc

    collections = {0: [0, 0.0], 1: [0, 0.0], 2: [0, 0.0]}
    started: list[float] = []
    measuring = [False]

    def watch(phase: str, info: dict) -> None:
        if not measuring[0]:
            return
        if phase == "start":
            started[:] = [time.perf_counter()]
        elif started:
            entry = collections[info["generation"]]
            entry[0] += 1
            entry[1] += time.perf_counter() - started[0]

    gc.callbacks.append(watch)
    import suite
    from suite.models import load_model

    if way == "untouched":
        from contextlib import nullcontext

        from suite.evaluation import runner

        runner.long_lived_frozen = nullcontext  # the run as it was before the freeze
    model = load_model(case["model"])  # loaded before the run, as the text bench's suite side does
    measuring[0] = True
    start = time.perf_counter()
    suite.evaluate(model, case["dataset"], split=case["split"], n=case["n"], attacks=[case["attack"]],
                   **({"adversary": ["none"]} if case["modality"] == "text" else {"eps": 0.006}))
    seconds = time.perf_counter() - start
    measuring[0] = False
    report = {"run": seconds, "full_collections": collections[2][0], "full_seconds": collections[2][1],
              "young_seconds": collections[0][1] + collections[1][1]}
    if way == "console exit":
        from suite.collector import before_exit

        before_exit()
    report["end"] = time.time()
    out.write_text(json.dumps(report))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs of each way per case (default 3)")
    parser.add_argument("--text-model", default="builtin:sentiment-tiny")
    parser.add_argument("--text-dataset", default="builtin:sentiment")
    parser.add_argument("--text-split", default="test")
    parser.add_argument("--text-n", type=int, default=240)
    parser.add_argument("--image-n", type=int, default=300, help="digits attacked by auto at L∞ 0.006 (default 300)")
    parser.add_argument("--cases", default="text,image")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats takes 1 or more")
    cases = {
        "text": {"modality": "text", "model": args.text_model, "dataset": args.text_dataset, "split": args.text_split,
                 "n": args.text_n, "attack": "deepwordbug"},
        "image": {"modality": "image", "model": "builtin:digits-cnn", "dataset": "builtin:digits", "split": "test",
                  "n": args.image_n, "attack": "auto"},
    }
    if args.child:
        child(args.child, json.loads(args.case), args.out)
        return
    chosen = args.cases.split(",")
    unknown = sorted(set(chosen) - set(cases))
    if unknown:
        parser.error(f"unknown case {', '.join(unknown)}; available: {', '.join(cases)}")
    report = {"repeats": args.repeats, "cases": {}}
    out = Path(tempfile.gettempdir()) / f"advsuite-collector-{time.time_ns()}.json"
    for name in chosen:
        case = cases[name]
        runs: dict[str, list[dict]] = {way: [] for way in WAYS}
        for _ in range(args.repeats):
            for way in WAYS:  # alternating, so a slow spell of the machine touches every way
                begin = time.time()
                command = [sys.executable, __file__, "--child", way, "--case", json.dumps(case), "--out", str(out)]
                subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
                ended = time.time()
                measured = json.loads(out.read_text())
                runs[way].append({**measured, "wall": ended - begin, "exit": ended - measured.pop("end")})
        out.unlink(missing_ok=True)
        summary = {way: {key: statistics.median(run[key] for run in found)
                         for key in ("wall", "run", "full_collections", "full_seconds", "young_seconds", "exit")}
                   for way, found in runs.items()}
        report["cases"][name] = {"case": case, "median": summary, "runs": runs}
        print(f"\n## {name}: {case['attack']} on {case['model']}, n={case['n']} (median of {args.repeats})\n")
        print("| way | wall to exit (s) | the run (s) | full collections in the run | their seconds | "
              "younger collections' seconds | shutdown (s) |")
        print("|---|---|---|---|---|---|---|")
        for way, values in summary.items():
            print(f"| {way} | {values['wall']:.2f} | {values['run']:.2f} | {values['full_collections']:.0f} | "
                  f"{values['full_seconds']:.2f} | {values['young_seconds']:.2f} | {values['exit']:.2f} |", flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
