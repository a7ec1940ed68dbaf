#!/usr/bin/env bash
# `make test`'s optional system packages, best effort: Debian's wordnet-base (WordNet for PWWS,
# TextFooler and ASCC; docs/offline.md) and chromium (the leaderboard page test). Installed only
# where apt-get runs as root; elsewhere, or when the install fails, the tests that need them skip
# and say why. Never fails the build.
set -u
want=()
[ -f /usr/share/wordnet/data.noun ] || want+=(wordnet-base)
command -v chromium >/dev/null 2>&1 || want+=(chromium)
[ ${#want[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "make test: not installing ${want[*]} (needs apt-get as root); the tests that need them will skip"
  exit 0
fi
for package in "${want[@]}"; do
  apt-get install -y -qq --no-install-recommends "$package" >/dev/null 2>&1 \
    || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq --no-install-recommends "$package" >/dev/null 2>&1; } \
    || echo "make test: could not install $package; the tests that need it will skip"
done
exit 0
