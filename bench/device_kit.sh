#!/usr/bin/env bash
# Fill .device/ (gitignored) with what bench/device_checks.sh needs on a lent GPU machine, which
# reaches no network: run here, where PyPI is reachable, from the repository root.
#
#   .device/whl/        the wheels the machine's image lacks (bench/device_wheels.txt: its
#                       Python 3.12, manylinux x86-64; those PyPI has no wheel of, built here)
#   .device/cache/      ADVSUITE_CACHE there: WordNet (zipped; NLTK reads corpora/wordnet.zip)
#                       from Debian's wordnet-base, and the built-in digits-cnn, trained here
#   .device/data/       Rotten Tomatoes (../shared/data/rotten_tomatoes, or the folder given as
#                       the first argument)
#
# The device tool carries at most 64 MiB with the working tree; the script prints the total.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
data=${1:-$root/../shared/data/rotten_tomatoes}
python=${PYTHON:-$root/.venv/bin/python}
kit=$root/.device
mkdir -p "$kit/whl" "$kit/cache" "$kit/data"

platforms=""
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 \
         manylinux1_x86_64 manylinux_2_24_x86_64 manylinux_2_31_x86_64 manylinux_2_34_x86_64 manylinux_2_35_x86_64; do
    platforms="$platforms --platform $p"
done
grep -v '^\s*#' bench/device_wheels.txt | grep -v '^\s*$' | while read -r requirement; do
    if ! $python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
            $platforms -d "$kit/whl" "$requirement" 2>/dev/null; then
        # No wheel on PyPI (an sdist only): build one here; it must be pure Python to install there.
        $python -m pip wheel -q --no-deps -w "$kit/whl" "$requirement"
    fi
done
if ls "$kit"/whl/*.whl | grep -v -E -- '-(py3|py2\.py3|py312|cp312|cp3[0-9]+-abi3)-[^/]*\.whl$'; then
    echo "device_kit: the wheels above cannot install on the machine's Python 3.12" >&2
    exit 1
fi

# WordNet from Debian's wordnet-base, the suite's own installer, then zipped.
if [ ! -f "$kit/cache/nltk_data/corpora/wordnet.zip" ]; then
    ADVSUITE_CACHE=$kit/cache "$python" -c "from suite.attacks.text.resources import install_wordnet; install_wordnet()"
    (cd "$kit/cache/nltk_data/corpora" && rm -f wordnet.zip && zip -qr wordnet.zip wordnet && rm -rf wordnet)
fi
# The built-in digits-cnn (bench/cuda_checks.py), trained as any first use trains it.
ADVSUITE_CACHE=$kit/cache "$python" -c "from suite.models import load_model; load_model('builtin:digits-cnn')"
rm -rf "$kit/data/rotten_tomatoes"
cp -r "$data" "$kit/data/rotten_tomatoes"
du -sh "$kit" "$kit"/*
