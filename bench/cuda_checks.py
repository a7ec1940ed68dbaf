"""What holds on CUDA: batch size, the batch-size probe, determinism and bf16.

Meant for a lent GPU (``bench/device_checks.sh cuda``); on the CPU it runs too, smaller, as a
check of this script. Every run goes through the public API, ``suite.evaluate``, and each
measurement is printed as one JSON line (``--json`` collects them):

1. **batch size** (``builtin:digits-cnn``, ``auto`` at L∞ ``--digits-eps``, the first ``--n``
   test digits): the records at batch size 1 against those at ``--batch-size auto`` (the probe's
   choice), with and without ``deterministic``: how many decisions (robust or broken) and how
   many records (prediction, perturbation norm, queries) differ, and the batch size the probe
   chose. On the CPU both must be 0; on CUDA the suite claims only that a decision never
   depends on the batch for the input it is made on, while the inputs may differ
   (docs/attacks/index.md, "On CUDA").
2. **determinism**: the same run twice with ``deterministic`` at the probe's batch size: the
   records must be identical.
3. **precision** (timm ``--arch`` at 224², 1,000 classes, random weights, ``auto`` at L∞ 1e-4 so
   that every search runs all its steps): the attack's seconds in fp32 and under
   ``precision="bf16"`` (autocast; channels-last is not part of it), the batch size the probe chose
   for each, and peak memory. Then ``builtin:digits-cnn`` in fp32 and bf16 at ``--digits-eps``:
   the robust accuracy of each and the examples whose decision or record differs.

    python bench/cuda_checks.py --json cuda-checks.json                 # a GPU: about 3 minutes
    python bench/cuda_checks.py --n 20 --image-n 2 --cpu-steps 2        # the CPU: a check of the script
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path


def _records(directory: Path, attack: str) -> dict[str, dict]:
    lines = (directory / "records.jsonl").read_text().splitlines()
    return {r["id"]: r for r in map(json.loads, lines) if r.get("kind") == "attack" and r.get("attack") == attack}


def _run(model, data, attack, *, batch_size, deterministic=False, precision=None, eps=None, n=None):
    import suite
    from suite.evaluation.options import RunOptions

    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        results = suite.evaluate(model, data, attacks=[attack], eps=eps, precision=precision, n=n, output=out,
                                 options=RunOptions(batch_size=batch_size, deterministic=deterministic))
        seconds = time.perf_counter() - start
        name = attack if isinstance(attack, str) else attack["name"]
        entry = results.attacks[name]
        return {"records": _records(Path(out), name), "robust_accuracy": entry.robust_accuracy,
                "attack_seconds": entry.seconds, "wall_seconds": seconds, "batch_sizes": dict(results.batch_sizes)}


def _differences(a: dict, b: dict) -> dict:
    """Examples whose decision (robust or broken) differs, and whose record differs at all (the
    prediction, the perturbation's norm, the queries: a different adversarial input); the
    records' wall seconds aside."""
    ids = sorted(set(a) | set(b))
    decisions = sum(a.get(i, {}).get("robust") != b.get(i, {}).get("robust") for i in ids)
    outcome = lambda record: {k: v for k, v in (record or {}).items() if k != "seconds"}  # noqa: E731
    return {"examples": len(ids), "decisions_differ": decisions,
            "records_differ": sum(outcome(a.get(i)) != outcome(b.get(i)) for i in ids)}


def emit(rows: list, row: dict) -> None:
    rows.append(row)
    print(json.dumps(row), flush=True)


def _auto(args) -> dict:
    """``auto``, its steps cut on the CPU (``--cpu-steps``: a check of this script, not a measurement)."""
    attack = {"name": "auto"}
    if args.device_type == "cpu" and args.cpu_steps:
        attack.update(steps=args.cpu_steps, target_steps=max(1, args.cpu_steps // 3), best_target_steps=args.cpu_steps)
    return attack


def _digits(args, batch_size="auto", deterministic=False, precision="fp32") -> dict:
    """``auto`` on the first ``--n`` test digits at ``--digits-eps``, each configuration run once
    (fp32 is every attack's default precision: the batch section's run at ``auto`` is the
    precision section's fp32 run)."""
    key = (batch_size, deterministic, precision)
    if key not in args.digit_runs:
        args.digit_runs[key] = _run("builtin:digits-cnn", "builtin:digits", _auto(args), batch_size=batch_size,
                                    deterministic=deterministic, precision=precision, n=args.n, eps=args.digits_eps)
    return args.digit_runs[key]


def batch_section(args, rows: list) -> None:
    for deterministic in {"both": (False, True), "off": (False,), "on": (True,)}[args.deterministic]:
        one, auto = _digits(args, 1, deterministic), _digits(args, "auto", deterministic)
        emit(rows, {"check": "batch size 1 vs auto", "model": "builtin:digits-cnn", "attack": "auto",
                    "deterministic": deterministic, "auto_batch_sizes": auto["batch_sizes"],
                    "robust_accuracy": {"1": one["robust_accuracy"], "auto": auto["robust_accuracy"]},
                    "attack_seconds": {"1": one["attack_seconds"], "auto": auto["attack_seconds"]},
                    **_differences(one["records"], auto["records"])})
    if args.deterministic == "off":
        return
    again = _run("builtin:digits-cnn", "builtin:digits", _auto(args), batch_size="auto", deterministic=True, n=args.n,
                 eps=args.digits_eps)
    emit(rows, {"check": "deterministic, the same run twice", "model": "builtin:digits-cnn", "attack": "auto",
                **_differences(_digits(args, "auto", True)["records"], again["records"])})


def precision_section(args, rows: list) -> None:
    import timm
    import torch

    from suite.models.wrap import from_module

    device = torch.device(args.device_type)
    torch.manual_seed(0)
    network = timm.create_model(args.arch, pretrained=False, num_classes=1000).eval().to(device)
    model = from_module(network, input_size=(3, 224, 224), mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225),
                        device=device)
    images = torch.rand((args.image_n, 3, 224, 224), generator=torch.Generator().manual_seed(1))
    labels = [int(p) for p in model.predict(images.to(device), batch_size=8)]
    timings = {}
    for precision in ("fp32", "bf16"):
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        run = _run(model, (images, labels), _auto(args), batch_size="auto", precision=precision, eps=1e-4)
        timings[precision] = {"attack_seconds": run["attack_seconds"], "wall_seconds": run["wall_seconds"],
                              "batch_sizes": run["batch_sizes"],
                              "peak_memory_mb": torch.cuda.max_memory_allocated() / 2**20
                              if device.type == "cuda" else None}
    emit(rows, {"check": "precision speed", "model": f"timm:{args.arch} 224² (random weights)", "attack": "auto",
                "n": args.image_n, "eps": 1e-4, **timings,
                "bf16_speed_up": timings["fp32"]["attack_seconds"] / timings["bf16"]["attack_seconds"]})
    fp32, bf16 = _digits(args, precision="fp32"), _digits(args, precision="bf16")
    emit(rows, {"check": "precision outcome", "model": "builtin:digits-cnn", "attack": "auto",
                "robust_accuracy": {"fp32": fp32["robust_accuracy"], "bf16": bf16["robust_accuracy"]},
                "attack_seconds": {"fp32": fp32["attack_seconds"], "bf16": bf16["attack_seconds"]},
                **_differences(fp32["records"], bf16["records"])})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sections", default="batch,precision", help="comma-separated: batch, precision")
    parser.add_argument("--n", type=int, default=60, help="test digits for the digits-cnn runs")
    parser.add_argument("--digits-eps", type=float, default=0.006,
                        help="L-inf radius of the digits-cnn runs (0.006: about 80 %% robust, many near the boundary)")
    parser.add_argument("--deterministic", choices=("both", "on", "off"), default="both",
                        help="batch section: compare batch sizes with deterministic kernels on, off, or both")
    parser.add_argument("--image-n", type=int, default=64, help="random 224² images for the precision speed run")
    parser.add_argument("--arch", default="resnet50")
    parser.add_argument("--cpu-steps", type=int, default=6, help="on the CPU: auto's steps, cut (0: the defaults)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    import torch

    args.device_type = "cuda" if torch.cuda.is_available() else "cpu"
    args.digit_runs = {}
    info = {"check": "machine", "device": args.device_type, "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name(0) if args.device_type == "cuda" else None}
    rows: list[dict] = []
    emit(rows, info)
    sections = {"batch": batch_section, "precision": precision_section}
    for name in args.sections.split(","):
        if name not in sections:
            parser.error(f"unknown section {name!r}; choose from {', '.join(sections)}")
        try:
            sections[name](args, rows)
        except Exception as error:  # the other sections still run; the error is in the report
            emit(rows, {"check": name, "error": f"{type(error).__name__}: {error}"})
        if args.json:
            args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
