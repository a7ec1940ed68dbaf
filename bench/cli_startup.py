"""CLI start-up: wall time of the commands that must answer at once, against bare Python.

``advsuite ls``, ``validate`` and ``--help`` import no torch, transformers or datasets (the CLI
defers torch, :mod:`suite.lazy`), so each should take well under the 1.5 s budget. Every command
runs in a fresh process (``python -m suite ...``), best of ``--repeat`` runs; the peers measured
in the same run are a bare interpreter (``python -c pass``) and ``python -c "import torch"``
(what a command that loaded torch would pay at least). The ``torch`` column says whether the
command imported torch (read from ``python -X importtime``).

    python bench/cli_startup.py                 # exits 1 if a command is over --budget
    python bench/cli_startup.py --repeat 5 --budget 1.0

A bench, not a test: timings depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

COMMANDS: tuple[tuple[str, ...], ...] = (
    ("--help",),
    ("evaluate", "--help"),
    ("run", "--help"),
    ("ls", "models"),
    ("ls", "datasets"),
    ("ls", "attacks"),
    ("ls", "recipes"),
    ("validate", "quickstart"),
    ("validate", "ior_text"),
    ("validate", "beta_vs_autoattack"),
    ("validate", "batch_size_study"),
)


def best_wall_time(argv: list[str], repeat: int) -> float:
    """Best wall time of ``argv`` over ``repeat`` fresh processes; a failing command is an error."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
        best = min(best, time.perf_counter() - start)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed (exit {done.returncode}): {done.stderr.strip()[-500:]}")
    return best


def imports_torch(args: tuple[str, ...]) -> bool:
    """Whether ``advsuite ARGS`` imports torch (``-X importtime`` lists every module imported)."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "suite", *args], cwd=REPO,
                          capture_output=True, text=True)
    return any(line.rsplit("|", 1)[-1].strip() == "torch" for line in done.stderr.splitlines())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per command; the best counts (default 3)")
    parser.add_argument("--budget", type=float, default=1.5, help="seconds a command may take (default 1.5)")
    options = parser.parse_args()

    os.environ.setdefault("TQDM_DISABLE", "1")
    python = best_wall_time([sys.executable, "-c", "pass"], options.repeat)
    torch = best_wall_time([sys.executable, "-c", "import torch"], options.repeat)
    rows = []
    for args in COMMANDS:
        seconds = best_wall_time([sys.executable, "-m", "suite", *args], options.repeat)
        rows.append((f"advsuite {' '.join(args)}", seconds, imports_torch(args)))

    width = max(len(name) for name, _, _ in rows)
    print(f"best of {options.repeat}; peers: python -c pass {python:.2f} s, python -c 'import torch' {torch:.2f} s")
    print(f"{'command'.ljust(width)}  {'seconds':>7}  {'x python':>8}  {'x torch':>7}  torch  budget")
    over = []
    for name, seconds, loaded in rows:
        verdict = "ok" if seconds <= options.budget else f"OVER {options.budget:g} s"
        print(f"{name.ljust(width)}  {seconds:7.2f}  {seconds / python:8.1f}  {seconds / torch:7.2f}  "
              f"{'yes' if loaded else 'no':>5}  {verdict}")
        if seconds > options.budget:
            over.append(name)
    if over:
        print(f"\n{len(over)} command(s) over {options.budget:g} s: {', '.join(over)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
