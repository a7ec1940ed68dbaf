"""Throughput at real size: ``auto`` and ``autoattack`` on timm ResNet-50 at 224² (1,000 classes),
and a text attack on a BERT-base-shaped classifier, against the model's bare passes.

Random weights: speed does not depend on them. Every example is labelled with the model's own
clean prediction, so every example is attacked. Each configuration runs in a fresh process
(its peak memory is its own) through the public API, ``suite.evaluate``, and reports:

- rows: the rows of the network's forward passes, and of the backward passes that ran through
  it, counted by a wrapper around the network (everything the run did: clean pass, checks,
  attack, scoring);
- the attack's own seconds (``results.attacks[...].seconds``) and the whole run's wall time;
- the physical limit beside them, measured in the same process at the same batch: the bare
  forward+backward (and forward-only) throughput of the network on random inputs, in rows/s;
- **step efficiency**: the time the bare passes of the attack's rows would take, divided by the
  attack's own time (1.0: the attack costs nothing beyond its passes). Goal ≥ 0.9;
- **end-to-end efficiency**: the same bare time of every row the run sent, divided by the whole
  run's wall time (loading, clean pass, checks, scoring and writing included);
- peak memory: the process's peak RSS (CPU), or ``torch.cuda.max_memory_allocated`` (CUDA).

A radius of 1e-4 (L∞) keeps the random network's examples unbroken, so the searches run
every step: the steady state of a search. On the CPU the step counts are cut (``--cpu-steps``:
per-step throughput does not depend on them); on CUDA the default budgets run.

    python bench/scale.py --n 4 --batch-size 4                    # CPU: about 15 minutes on 2 cores
    python bench/scale.py --n 64 --sections image --json scale.json   # a GPU
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMAGE_ATTACKS = ("auto", "autoattack")


class Counting:
    """Wraps an ``nn.Module``: counts the rows of its forward passes, and of the backward passes
    that actually ran through it (a hook on its output's gradient)."""

    def __init__(self, module) -> None:
        import torch

        class Counted(torch.nn.Module):
            def __init__(self, inner) -> None:
                super().__init__()
                self.inner = inner
                self.rows = {"forward": 0, "backward": 0}

            def forward(self, x):
                self.rows["forward"] += len(x)
                out = self.inner(x)
                if out.requires_grad:
                    out.register_hook(lambda grad, rows=len(x): self.rows.__setitem__("backward",
                                                                                     self.rows["backward"] + rows))
                return out

        self.module = Counted(module)


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def bare_rates(module, shape, batch: int, device, repeats: int = 3) -> dict[str, float]:
    """Rows/s of the bare network at ``batch``: forward+backward (input gradient) and forward only."""
    import torch

    x = torch.rand((batch, *shape), device=device)
    rates = {}
    for kind in ("gradient", "forward"):
        for attempt in range(repeats + 1):  # the first is a warm-up
            start = time.perf_counter()
            if kind == "gradient":
                inputs = x.clone().requires_grad_(True)
                (grad,) = torch.autograd.grad(module(inputs).float().logsumexp(dim=1).sum(), inputs)
            else:
                with torch.no_grad():
                    module(x)
            _sync(device)
            seconds = time.perf_counter() - start
            if attempt == 1 or (attempt > 1 and seconds < best):
                best = seconds
        rates[kind] = batch / best
    return rates


def image_child(args) -> dict:
    import timm
    import torch

    import suite
    from suite.evaluation.options import RunOptions
    from suite.models.wrap import from_module

    torch.manual_seed(0)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    network = timm.create_model(args.arch, pretrained=False, num_classes=1000).eval().to(device)
    counting = Counting(network)
    model = from_module(counting.module, input_size=(3, 224, 224), mean=(0.485, 0.456, 0.406),
                        std=(0.229, 0.224, 0.225), device=device)
    generator = torch.Generator().manual_seed(1)
    images = torch.rand((args.n, 3, 224, 224), generator=generator)
    labels = [int(p) for p in model.predict(images.to(device), batch_size=args.batch_size)]
    normalised = lambda x: counting.module.inner((x - model.mean) / model.std)  # noqa: E731
    bare = bare_rates(normalised, (3, 224, 224), args.batch_size, device)
    counting.module.rows = {"forward": 0, "backward": 0}
    attack = {"name": args.attack}
    if device.type == "cpu" and args.cpu_steps:
        if args.attack == "auto":
            # auto's proportions: 100 CE steps, 30 per target, 100 for the closest target.
            attack.update(steps=args.cpu_steps, target_steps=max(1, args.cpu_steps // 3),
                          best_target_steps=args.cpu_steps)
        elif args.attack == "autoattack":
            attack.update(steps=args.cpu_steps, queries=args.cpu_steps * 10)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    profiler = _profiler(device) if args.profile else contextlib.nullcontext()
    if args.profile:
        # The profiler's window moves on at every forward pass of the network, so it records
        # PROFILE_WINDOW passes of the attack's search (its steps), not the whole run: on an H100
        # a whole `auto` run at n = 32 under the profiler did not end within 170 s.
        counting.module.register_forward_hook(lambda *_: profiler.step())
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as out, profiler:
        results = suite.evaluate(model, (images, labels), attacks=[attack], eps=args.eps, output=out,
                                 options=RunOptions(batch_size=args.batch_size))
    wall = time.perf_counter() - start
    if args.profile:
        Path(args.profile).write_text(_profile_summary(profiler, device))
    entry = results.attacks[args.attack]
    rows = dict(counting.module.rows)
    profiled = ", profiled: its times include the profiler's" if args.profile else ""
    return {"section": "image", "model": f"timm:{args.arch} 224² (random weights){profiled}", "attack": args.attack,
            "params": entry.params, "n": args.n, "batch_size": args.batch_size, "device": str(device),
            "robust_accuracy": entry.robust_accuracy, "attack_seconds": entry.seconds, "wall_seconds": wall,
            "rows": rows, "bare_rows_per_second": bare, "peak_memory_mb": _peak(device)}


def _profiler(device):
    import torch

    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    wait, warmup, active = PROFILE_WINDOW
    return torch.profiler.profile(activities=activities,
                                  schedule=torch.profiler.schedule(wait=wait, warmup=warmup, active=active, repeat=1))


#: The forward passes the profiler skips, warms up on, and records (see image_child).
PROFILE_WINDOW = (12, 3, 20)


#: What may make the host wait for the device, by the profiler's event names: the waits
#: themselves (``cudaStreamSynchronize``, ``cudaDeviceSynchronize``: each drains the GPU's queue)
#: and what can cause them: copies (``cudaMemcpyAsync``: those into pinned memory, as
#: ``HostCopy``'s, do not wait), reads of a scalar and boolean indexing (its nonzero; the search's
#: own nonzero calls run on host copies, which wait for nothing).
SYNC_EVENTS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaMemcpyAsync", "aten::_local_scalar_dense",
               "aten::item", "aten::nonzero", "aten::is_nonzero")


def _profile_summary(profiler, device) -> str:
    """Where a profiled run's time went: the ops by their own host time and, on CUDA, by their
    own device time; and how often the host waited for the device."""
    averages = profiler.key_averages()
    counts = {event.key: event.count for event in averages if event.key in SYNC_EVENTS}
    parts = [f"recorded: {PROFILE_WINDOW[2]} forward passes (steps) of the search, after {sum(PROFILE_WINDOW[:2])}",
             f"host-device waits and what may cause them (calls): {json.dumps(counts)}",
             averages.table(sort_by="self_cpu_time_total", row_limit=30)]
    if device.type == "cuda":
        parts.append(averages.table(sort_by="self_device_time_total", row_limit=30))
    return "\n\n".join(parts) + "\n"


def text_child(args) -> dict:
    import torch
    import transformers

    import suite
    from suite.data.builtin import sentiment
    from suite.evaluation.options import RunOptions

    torch.manual_seed(0)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    split = sentiment("test")
    texts = list(split.inputs)[: args.n]
    with tempfile.TemporaryDirectory() as vocab_dir:
        words = sorted({word for text in split.inputs for word in text.lower().replace(".", " ").split()})
        vocab = Path(vocab_dir) / "vocab.txt"
        vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
        tokenizer = transformers.BertTokenizerFast(vocab_file=str(vocab))
    config = transformers.BertConfig(vocab_size=tokenizer.vocab_size, num_labels=2)  # BERT-base: 12 layers, 768
    network = transformers.BertForSequenceClassification(config).eval().to(device)
    counting = {"forward": 0}
    inner_forward = network.forward

    def counted(*a, **k):
        ids = k.get("input_ids", a[0] if a else None)
        counting["forward"] += len(ids)
        return inner_forward(*a, **k)

    network.forward = counted
    with torch.no_grad():
        encoded = tokenizer(texts, padding=True, return_tensors="pt").to(device)
        labels = network(**encoded).logits.argmax(dim=1).tolist()
    batch = tokenizer(texts * (args.batch_size // len(texts) + 1), padding=True, truncation=True,
                      return_tensors="pt").to(device)
    batch = {key: value[: args.batch_size] for key, value in batch.items()}
    best = None
    for attempt in range(4):
        start = time.perf_counter()
        with torch.no_grad():
            network(**batch)
        _sync(device)
        seconds = time.perf_counter() - start
        if attempt and (best is None or seconds < best):
            best = seconds
    counting["forward"] = 0
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        results = suite.evaluate((network, tokenizer), (texts, labels), attacks=[args.attack], adversary=["none"],
                                 output=out, options=RunOptions(batch_size=args.batch_size))
    wall = time.perf_counter() - start
    entry = results.attacks[args.attack]
    return {"section": "text", "model": "BERT-base-shaped (random weights)", "attack": args.attack,
            "params": entry.params, "n": args.n, "batch_size": args.batch_size, "device": str(device),
            "robust_accuracy": entry.robust_accuracy, "attack_seconds": entry.seconds, "wall_seconds": wall,
            "rows": {"forward": counting["forward"], "backward": 0},
            "bare_rows_per_second": {"forward": args.batch_size / best, "gradient": None},
            "peak_memory_mb": _peak(device)}


def _peak(device) -> float:
    import torch

    if device.type == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def efficiency(row: dict) -> tuple[float, float]:
    """(step, end-to-end): the bare seconds of the rows the run sent, over the attack's own
    seconds and over the whole run's wall time.

    The counter cannot tell the attack's rows from the run's other passes (clean pass, checks,
    scoring: a few rows per example against the attack's hundreds), so the step figure charges
    all of them to the attack: it can only read high by those few rows."""
    rates, rows = row["bare_rows_per_second"], row["rows"]
    bare = rows["forward"] / rates["forward"]
    if rows["backward"]:  # a backward costs what a forward+backward costs beyond its forward
        bare += rows["backward"] * (1 / rates["gradient"] - 1 / rates["forward"])
    return bare / row["attack_seconds"], bare / row["wall_seconds"]


def table(rows: list[dict]) -> str:
    lines = ["| model | attack | device | n | batch | rows fwd / bwd | bare fwd+bwd rows/s | attack s | "
             "wall s | step efficiency | end-to-end efficiency | peak MB |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        step, whole = efficiency(row)
        rates = row["bare_rows_per_second"]
        bare = f"{rates['gradient']:.2f}" if rates.get("gradient") else f"{rates['forward']:.2f} (fwd)"
        lines.append(f"| {row['model']} | {row['attack']} | {row['device']} | {row['n']} | {row['batch_size']} | "
                     f"{row['rows']['forward']} / {row['rows']['backward']} | {bare} | {row['attack_seconds']:.1f} | "
                     f"{row['wall_seconds']:.1f} | {step:.2f} | {whole:.2f} | {row['peak_memory_mb']:.0f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sections", default="image,text",
                        help="comma-separated, run in this order: image (auto and autoattack), image:ATTACK, text, "
                        "text:RECIPE, profile:ATTACK (the image run under torch.profiler: profile-ATTACK.txt beside --json)")
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--arch", default="resnet50")
    parser.add_argument("--eps", type=float, default=1e-4)
    parser.add_argument("--cpu-steps", type=int, default=6, help="APGD steps on the CPU (0: the defaults)")
    parser.add_argument("--text-attack", default="deepwordbug")
    parser.add_argument("--device")
    parser.add_argument("--json")
    parser.add_argument("--child", choices=("image", "text"), help=argparse.SUPPRESS)
    parser.add_argument("--attack", help=argparse.SUPPRESS)
    parser.add_argument("--profile", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        result = (image_child if args.child == "image" else text_child)(args)
        print("RESULT " + json.dumps(result))
        return
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    rows = []
    jobs = []  # in the order --sections gives ("image:auto,text,image:autoattack": the cheap ones first)
    for token in args.sections.split(","):
        section, _, attack = token.strip().partition(":")
        if section not in ("image", "text", "profile"):
            parser.error(f"unknown section {token!r}: image, image:ATTACK, text, text:RECIPE or profile:ATTACK")
        default = {"image": IMAGE_ATTACKS, "text": [args.text_attack], "profile": ["auto"]}[section]
        jobs += [(section, a) for a in ([attack] if attack else default)]
    for section, attack in jobs:
        # profile: the image run under torch.profiler, its summary beside the JSON (or in the
        # working directory): what the attack's steps spend beyond the model's passes.
        profile = Path(args.json or "scale.json").with_name(f"profile-{attack}.txt") if section == "profile" else None
        command = [sys.executable, __file__, "--child", "image" if profile else section, "--attack", attack,
                   "--n", str(args.n), "--batch-size", str(args.batch_size), "--arch", args.arch, "--eps", str(args.eps),
                   "--cpu-steps", str(args.cpu_steps), *(["--device", args.device] if args.device else []),
                   *(["--profile", str(profile)] if profile else [])]
        path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))  # the caller's path kept
        done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": path})
        lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
        if done.returncode or not lines:
            print(f"{section} {attack} failed:\n{done.stderr[-3000:]}", file=sys.stderr)
            continue
        rows.append(json.loads(lines[-1][len("RESULT "):]))
        print(table(rows[-1:]).splitlines()[-1], flush=True)
        if args.json:  # after every configuration: a run cut short keeps what it measured
            Path(args.json).write_text(json.dumps(rows, indent=2))
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
