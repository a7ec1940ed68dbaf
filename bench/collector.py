"""The garbage collector around a run: what keeping long-lived objects out of its scans saves.

A process that has imported torch, transformers and TextAttack holds about 600,000 objects that
live as long as it does. CPython's collector scans them all at each full collection and at
interpreter exit. ``suite.evaluate`` freezes what is alive when a run starts and gives it back
after (``suite.collector.long_lived_frozen``); the ``advsuite`` console script also starts each
command with rare collections (``quick_start``, over when the run begins) and freezes everything
before the process ends (``before_exit``). For a text run and an image run, each in fresh
processes, alternating, three ways:

- ``untouched``: ``suite.evaluate`` with the run's freezes replaced by no-ops (the code before);
- ``run frozen``: the run's freeze only, not the second one a text recipe's searches make of
  what the run made before them (the recipe, WordNet's index, earlier batches' memo);
- ``shipped``: ``suite.evaluate`` as it is, then the process exits as any script's does;
- ``console script``: what the console script does: the model loaded and the run under
  ``quick_start``, then ``before_exit()``.

It reports per way the medians of: the wall time from process start to exit; the start (imports
and loading the model, from the child's first line) and the run (``suite.evaluate``), each with
the collector's full collections, their seconds and the younger collections' seconds (read with
``gc.callbacks``); and the seconds from the end of the script to the process's exit (the
interpreter's shutdown).

    python bench/collector.py --repeats 3
    python bench/collector.py --text-model hf:/tmp/text-speed/bert-2layer \\
        --text-dataset hf:/tmp/text-speed/dwb240.jsonl --text-split train --text-n 240
    python bench/collector.py --cases text --text-attack pwws --ways "run frozen,shipped" \\
        --text-model hf:/tmp/text-speed/bert-2layer --text-dataset hf:/tmp/text-speed/examples-960.jsonl \\
        --text-split train --text-n 960

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

WAYS = ("untouched", "run frozen", "shipped", "console script")


def child(way: str, case: dict, out: Path) -> None:
    """One run in this fresh process; writes what it measured to ``out`` (the parent adds the exit)."""
    import gc

    began = time.perf_counter()
    phases = {phase: {"full": 0, "full_seconds": 0.0, "young_seconds": 0.0} for phase in ("start", "run")}
    phase = ["start"]
    started: list[float] = []

    def watch(moment: str, info: dict) -> None:
        if moment == "start":
            started[:] = [time.perf_counter()]
        elif started and phase[0] in phases:
            entry = phases[phase[0]]
            seconds = time.perf_counter() - started[0]
            if info["generation"] == 2:
                entry["full"] += 1
                entry["full_seconds"] += seconds
            else:
                entry["young_seconds"] += seconds

    gc.callbacks.append(watch)
    from contextlib import nullcontext

    import suite
    from suite.collector import before_exit, quick_start

    # The console script starts its command under quick_start (its run ends it), as here.
    with quick_start() if way == "console script" else nullcontext():
        from suite.models import load_model  # torch, and transformers with the model

        if way in ("untouched", "run frozen"):
            from suite.attacks.text import recipe_base
            from suite.evaluation import runner

            recipe_base.long_lived_frozen = nullcontext  # no second freeze around a recipe's searches
            recipe_base.hold_made_since = lambda: None  # nor during them
            if way == "untouched":
                runner.long_lived_frozen = nullcontext  # the run as it was before the freeze
        model = load_model(case["model"])  # loaded before the run, as the text bench's suite side does
        start_seconds = time.perf_counter() - began
        phase[0] = "run"
        start = time.perf_counter()
        suite.evaluate(model, case["dataset"], split=case["split"], n=case["n"], attacks=[case["attack"]],
                       **({"adversary": ["none"]} if case["modality"] == "text" else {"eps": 0.006}))
        seconds = time.perf_counter() - start
    phase[0] = "done"
    report = {"start": start_seconds, "run": seconds, **{f"{name}_{key}": value for name, found in phases.items()
                                                          for key, value in found.items()}}
    if way == "console script":
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
    parser.add_argument("--text-attack", default="deepwordbug")
    parser.add_argument("--image-n", type=int, default=300, help="digits attacked by auto at L∞ 0.006 (default 300)")
    parser.add_argument("--cases", default="text,image")
    parser.add_argument("--ways", default=",".join(WAYS), help=f"some of: {', '.join(WAYS)} (default all)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats takes 1 or more")
    cases = {
        "text": {"modality": "text", "model": args.text_model, "dataset": args.text_dataset, "split": args.text_split,
                 "n": args.text_n, "attack": args.text_attack},
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
    ways = args.ways.split(",")
    if sorted(set(ways) - set(WAYS)):
        parser.error(f"unknown way {', '.join(sorted(set(ways) - set(WAYS)))}; available: {', '.join(WAYS)}")
    report = {"repeats": args.repeats, "cases": {}}
    out = Path(tempfile.gettempdir()) / f"advsuite-collector-{time.time_ns()}.json"
    for name in chosen:
        case = cases[name]
        runs: dict[str, list[dict]] = {way: [] for way in ways}
        for _ in range(args.repeats):
            for way in ways:  # alternating, so a slow spell of the machine touches every way
                begin = time.time()
                command = [sys.executable, __file__, "--child", way, "--case", json.dumps(case), "--out", str(out)]
                subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
                ended = time.time()
                measured = json.loads(out.read_text())
                runs[way].append({**measured, "wall": ended - begin, "exit": ended - measured.pop("end")})
        out.unlink(missing_ok=True)
        keys = ("wall", "start", "start_full", "start_full_seconds", "start_young_seconds", "run", "run_full",
                "run_full_seconds", "run_young_seconds", "exit")
        summary = {way: {key: statistics.median(run[key] for run in found) for key in keys}
                   for way, found in runs.items()}
        report["cases"][name] = {"case": case, "median": summary, "runs": runs}
        print(f"\n## {name}: {case['attack']} on {case['model']}, n={case['n']} (median of {args.repeats})\n")
        print("| way | wall to exit (s) | start: imports, loading (s) | its collections: full (s), younger (s) | "
              "the run (s) | its collections: full (s), younger (s) | shutdown (s) |")
        print("|---|---|---|---|---|---|---|")
        for way, v in summary.items():
            print(f"| {way} | {v['wall']:.2f} | {v['start']:.2f} | {v['start_full']:.0f}: {v['start_full_seconds']:.2f}, "
                  f"{v['start_young_seconds']:.2f} | {v['run']:.2f} | {v['run_full']:.0f}: {v['run_full_seconds']:.2f}, "
                  f"{v['run_young_seconds']:.2f} | {v['exit']:.2f} |", flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
