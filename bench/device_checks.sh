#!/usr/bin/env bash
# The GPU measurements of issues 35 and 36, as one prepared command for a lent GPU machine.
#
# On the machine with PyPI (here): `bash bench/device_kit.sh` fills .device/ (gitignored):
# the wheels the GPU machine's image lacks, WordNet, Rotten Tomatoes and the built-in digits-cnn.
# Then, with the `device` tool, from the repository root, most wanted first, the second call at
# once while the machine is warm (a lent machine gives 15 minutes in all, its start included;
# a start took about 33 s; the machine is released after 30 s idle, so the second call must
# follow the first at once or it pays a fresh start and installation):
#
#   run(command="bash bench/device_checks.sh scale:230 text:320", carry=[".device"], timeout_s=590)
#   run(command="bash bench/device_checks.sh cuda:160", carry=[".device"], timeout_s=200)
#
# What was left after the second H200 (docs/attacks/measured.md), run on the third: `auto` at a
# batch where the GPU, not the host, bounds its step, and DeepWordBug at 960 sentences, in one call:
#
#   run(command="SCALE_N=256 SCALE_SECTIONS=image:auto,profile:auto TEXT_NS=960 TEXT_RECIPES=deepwordbug
#                TEXT_SIDES=command bash bench/device_checks.sh scale:200 host:40 text:320", carry=[".device"],
#       timeout_s=580)
#
# What is left after the third H200: DeepWordBug on every held-out sentence the model classifies
# correctly (about 1,600), where the end-to-end ratio should near the loop's, then `auto` again.
# Since then, text searches are streamed 256 at a time (at 960 on the CPU, 43 pooled queries
# where blocks of 128 made 191), and on a GPU they run in two lanes, one half's pass beside the
# other half's turns (the H200's loop was the host's turns plus the passes, one after the other);
# `one-lane` is the same suite.evaluate with the passes after the turns, the A/B of the lanes:
#
#   run(command="SCALE_N=256 SCALE_SECTIONS=image:auto,profile:auto TEXT_NS=1600 TEXT_RECIPES=deepwordbug
#                TEXT_SIDES='suite one-lane command' bash bench/device_checks.sh text:420 scale:130",
#       carry=[".device"], timeout_s=590)
#
# (the plain loop at 1,600 is about 130 s, each suite side about 45 s, the model's training 50 s;
# the scale part takes what is left: `auto` alone is about 45 s of it.)
#
# Parts (what each measures: the docstrings of the scripts it runs; times from one H200):
#   text   bench/text_attacks.py --speed --size base: a BERT-base shape trained on Rotten
#          Tomatoes on the GPU (4 epochs: 53 s on an H100, 75.5 %; 8 more when it stays under
#          60 %), DeepWordBug and PWWS at 240 sentences, the suite against a plain TextAttack
#          loop, both on the GPU, with each side's time in model calls (H100: DeepWordBug's two
#          processes 73 s, PWWS's 141 s; the part 274 s)
#   cuda   bench/cuda_checks.py --n 30 (CUDA_N) --deterministic on (CUDA_DETERMINISTIC): batch
#          size 1 vs the probe's choice with deterministic kernels (batch size 1: about 75 s at
#          30 digits), a deterministic run twice, then bf16's speed on ResNet-50 224² and its
#          outcome on digits-cnn (35 s)
#   scale  bench/scale.py --n 64 (SCALE_N): auto (its step efficiency with the search loop that
#          no longer waits on boolean indexing: 0.74 before it, on an H100), auto under
#          torch.profiler, 20 passes of its search (profile-auto.txt: where its steps' time goes,
#          and how often the host waits for the GPU), then autoattack, each against the bare
#          forward+backward throughput (auto at n = 64 on an H100: 15.7 s, the part's first
#          section about 45 s)
#   host   bench/host_ops.py --device cuda: the attacks' own operations and host time per pass
#          beyond a bare pass, on a model whose passes cost nothing (on this CPU: 5 s)
#   env    only the installation check (imports, versions, the GPU; installing: about 30 s)
# Everything a part writes lands in $OUT (the device tool's folder; ./device-out elsewhere):
# its JSON and its log.
set -uo pipefail
# Several parts may run in one call, in the order given, each as PART or PART:SECONDS (its time
# limit; defaults below): `bash bench/device_checks.sh text:400 cuda:160` spends one machine start.
# SCALE_N and SCALE_SECTIONS set the scale part's --n (and batch size) and --sections; TEXT_NS,
# TEXT_RECIPES and TEXT_SIDES the text part's --ns, --recipes and --sides; CUDA_N and
# CUDA_DETERMINISTIC the cuda part's --n and --deterministic (its non-deterministic batch check
# and its precision section ran on an H200 already: docs/attacks/measured.md).
parts=("${@:-env}")
for spec in "${parts[@]}"; do
    case "${spec%%:*}" in
    env | cuda | text | scale | host) ;;
    *) echo "device_checks: unknown part '${spec%%:*}' (env, cuda, text, scale, host)" >&2; exit 2 ;;
    esac
    limit=${spec#*:}
    if [ "$limit" != "$spec" ] && ! [[ "$limit" =~ ^[0-9]+$ ]]; then
        echo "device_checks: '$spec': the time limit after ':' is whole seconds" >&2; exit 2
    fi
done
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=${OUT:-$root/device-out}
mkdir -p "$out"
kit=$root/.device
if [ ! -d "$kit/whl" ]; then
    echo "device_checks: $kit/whl is missing: run bash bench/device_kit.sh here first, and carry .device" >&2
    exit 2
fi
python=${PYTHON:-python3}
# The carried wheels go first on the path: they shadow the image's transformers 5 (flair, which
# textattack imports, needs transformers < 5) and what goes with it (tokenizers, huggingface_hub).
site=/tmp/advsuite-site
if [ ! -f "$site/.installed" ]; then
    $python -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
        "$kit"/whl/*.whl || { echo "device_checks: installing the carried wheels failed" >&2; exit 1; }
    touch "$site/.installed"
fi
# bench/device_stubs stands in for jieba and boto3/botocore (imported, never called here).
export PYTHONPATH="$site:$root/bench/device_stubs:$root" PYTHONUNBUFFERED=1
# The built-in digits-cnn and WordNet (zipped), carried; NLTK data: the suite's own and this.
export ADVSUITE_CACHE=$kit/cache HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 ADVSUITE_OFFLINE=1
data=$kit/data/rotten_tomatoes

$python - <<'EOF' 2>&1 | tee "$out/env.log"
import importlib, sys
import torch
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
from suite.attacks.text.offline import import_textattack  # TextAttack with the suite's offline NLTK set-up

for name in ("transformers", "tokenizers", "huggingface_hub", "timm", "textattack", "flair", "nltk", "datasets",
             "pydantic", "suite"):
    try:
        module = import_textattack() if name == "textattack" else importlib.import_module(name)
        print(name, getattr(module, "__version__", "?"), module.__file__)
    except Exception as error:
        print(name, "FAILED:", type(error).__name__, error)
EOF

for spec in "${parts[@]}"; do
    part=${spec%%:*}
    limit=${spec#*:}
    [ "$limit" = "$spec" ] && limit=""
    start=$SECONDS
    case "$part" in
    env) ;;
    cuda)
        timeout "${limit:-420}" $python bench/cuda_checks.py --n "${CUDA_N:-30}" --deterministic "${CUDA_DETERMINISTIC:-on}" \
            --json "$out/cuda-checks.json" 2>&1 | tee "$out/cuda.log" ;;
    text)
        # shellcheck disable=SC2086  # TEXT_NS and TEXT_RECIPES are lists
        timeout "${limit:-540}" $python bench/text_attacks.py --speed --size base --ns ${TEXT_NS:-240} \
            --recipes ${TEXT_RECIPES:-deepwordbug pwws} --sides ${TEXT_SIDES:-suite command} --data "$data" \
            --workdir /tmp/text-speed-gpu --json "$out/text-gpu.json" 2>&1 | tee "$out/text.log" ;;
    host)
        timeout "${limit:-60}" $python bench/host_ops.py --device cuda --repeats 3 --json "$out/host-ops.json" 2>&1 |
            tee "$out/host.log" ;;
    scale)
        timeout "${limit:-540}" $python bench/scale.py --n "${SCALE_N:-64}" --batch-size "${SCALE_N:-64}" \
            --sections "${SCALE_SECTIONS:-image:auto,profile:auto,image:autoattack}" --json "$out/scale-gpu.json" 2>&1 |
            tee "$out/scale.log" ;;
    esac
    echo "device_checks: part $part ended (exit ${PIPESTATUS[0]}) after $((SECONDS - start)) s" | tee -a "$out/parts.log"
done
# The device tool brings back at most 8 files from $OUT (a call with every part writes more):
# there, everything goes back as one archive, device-out.tgz.
if [ -n "${OUT:-}" ] && [ "$(find "$out" -type f | wc -l)" -gt 8 ]; then
    tar czf /tmp/device-out.tgz -C "$out" . && find "$out" -mindepth 1 -delete && mv /tmp/device-out.tgz "$out/"
fi
